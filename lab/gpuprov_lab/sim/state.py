"""The simulated driver's state file (schema ``gpuprov.sim/v1``): what the "hardware" holds.

The simulated ``libnvidia-ml.so.1`` (``gpuprov_lab.sim.libnvml``) makes this file
(``gpuprovSimCreate``, the ``gpuprov-sim init`` program) and reads and changes it with the
driver's rules; this module is its format only, for the lab and the tests that read a host or
change its hardware directly: the reader that checks what it reads, and the same lock as the
library's writers. A change is a read-modify-write under an exclusive ``flock`` on a sidecar
``<state>.lock`` file, and the new text replaces the old with ``os.replace``, so concurrent
processes neither lose updates nor ever see a half-written file.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "gpus.json")
>>> write_new(path, {"schema": SIM_SCHEMA, "driver": {"loaded": True, "version": "535.261.03"},
...     "faults": {"fail_after": None}, "gpus": [{"index": 0, "model": "A100-80GB",
...     "uuid": "GPU-1", "pci_bus_id": "00000000:07:00.0", "mig_current": False,
...     "mig_pending": False, "gpu_instances": [], "busy": False, "held_by": []}]})
>>> with transaction(path) as state:
...     state["gpus"][0]["mig_pending"] = True
>>> load(path)["gpus"][0]["mig_pending"]
True
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from typing import Any

from gpuprov.core import catalog
from gpuprov_lab.sim.contract import SIM_SCHEMA

State = dict[str, Any]
NoneType = type(None)
_DRIVER_VERSION = re.compile(r"\d{2,4}(\.\d{1,4}){1,2}")
_PCI_BUS_ID = re.compile(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_PLACED = {"id": int, "start": int, "size": int}
_GPU_KEYS = {
    "index": int,
    "model": str,
    "uuid": str,
    "pci_bus_id": str,
    "mig_current": bool,
    "mig_pending": bool,
    "gpu_instances": list,
    "busy": bool,
    "held_by": list,
}


class StateError(Exception):
    """The state file is missing, unreadable or not ``gpuprov.sim/v1``."""


# The largest counts NVML's C types hold: ECC counts are unsigned long long, remapped rows
# unsigned int (nvml.h nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRemappedRows).
ECC_COUNT_MAX = 2**64 - 1
ROWS_MAX = 2**32 - 1


def new_health() -> dict[str, Any]:
    """A healthy GPU's memory error state (the optional ``health`` key of a GPU).

    ``ecc``: error counts by type (corrected, uncorrected) and counter (volatile since the driver
    loaded, aggregate over the GPU's life). ``remapped_rows`` answers on row-remapping models,
    ``retired_pages`` (``{"address", "timestamp"}`` entries by cause) on page-retirement ones
    (catalog ``memory_repair``).
    """
    return {
        "ecc": {
            "corrected": {"volatile": 0, "aggregate": 0},
            "uncorrected": {"volatile": 0, "aggregate": 0},
        },
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "retired_pages": {"single_bit": [], "double_bit": [], "pending": False},
    }


def health(gpu: dict[str, Any]) -> dict[str, Any]:
    """``gpu``'s health state; a state file written before health existed reads as healthy."""
    return gpu.get("health") or new_health()


def load(path: str) -> State:
    """The state in ``path`` (a consistent snapshot: writers replace the file atomically)."""
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        raise StateError(f"{path}: no simulated driver state (run `gpuprov-sim init`)") from None
    except (OSError, ValueError) as e:
        raise StateError(f"{path}: cannot read simulated driver state: {e}") from None
    if not isinstance(state, dict) or state.get("schema") != SIM_SCHEMA:
        raise StateError(f"{path}: not a {SIM_SCHEMA} state file")
    problem = _problem(state)
    if problem:
        raise StateError(f"{path}: not a valid {SIM_SCHEMA} state file: {problem}")
    return state


def check(path: str, state: State) -> None:
    """StateError when ``state`` is not one a driver could be in (a count past NVML's type)."""
    problem = _problem(state)
    if problem:
        raise StateError(f"{path}: refused: {problem}")


def _problem(state: State) -> str | None:
    """The first way ``state`` differs from what the simulated driver reads, or None.

    Every call of the simulation reads the file, so a hand edit with a missing key or a wrong
    type must be one clear error here, not a KeyError deep inside a driver call.
    """
    driver = state.get("driver")
    if not _shaped(driver, {"loaded": bool, "version": str}):
        return "driver must be {loaded: true|false, version: text}"
    if not _DRIVER_VERSION.fullmatch(driver["version"]):
        return f"driver.version {driver['version']!r} is not a driver version like 550.127.05"
    faults = state.get("faults")
    if not isinstance(faults, dict) or not isinstance(faults.get("fail_after"), (dict, NoneType)):
        return "faults must be {fail_after: null or {function, successes, ...}}"
    fault = faults["fail_after"]
    if fault is not None and not (
        _shaped(
            fault, {"function": str, "successes": int}, {"succeeded": int, "error": (str, NoneType)}
        )
    ):
        return "faults.fail_after must be {function: text, successes: count, succeeded?, error?}"
    gpus = state.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return "gpus must be a non-empty list"
    for position, gpu in enumerate(gpus):
        problem = _gpu_problem(gpu, position)
        if problem:
            return problem
    return None


def _gpu_problem(gpu: Any, position: int) -> str | None:
    where = f"gpus[{position}]"
    if not _shaped(gpu, _GPU_KEYS):
        keys = ", ".join(f"{k} ({_type_name(t)})" for k, t in _GPU_KEYS.items())
        return f"{where} must have {keys}"
    if gpu["index"] != position:
        return f"{where}.index is {gpu['index']}, expected {position}"
    if catalog.find_model(gpu["model"]) is None:
        return f"{where}.model {gpu['model']!r} is not a catalog model"
    if not _PCI_BUS_ID.fullmatch(gpu["pci_bus_id"]):
        return f"{where}.pci_bus_id {gpu['pci_bus_id']!r} is not like 00000000:07:00.0"
    if not all(isinstance(unit, str) for unit in gpu["held_by"]):
        return f"{where}.held_by must list unit names"
    if "health" in gpu and not _healthy_shape(gpu["health"]):
        return (
            f"{where}.health must be {{ecc: {{corrected, uncorrected}}: {{volatile, aggregate}}, "
            "remapped_rows: {corrected, uncorrected, pending, failure}, retired_pages: "
            "{single_bit, double_bit, pending}} (see gpuprov_lab.sim.state.new_health), ECC "
            f"counts at most {ECC_COUNT_MAX} and row counts at most {ROWS_MAX} (NVML's types)"
        )
    for n, gi in enumerate(gpu["gpu_instances"]):
        if not _shaped(gi, {**_PLACED, "profile_id": int, "compute_instances": list}):
            return (
                f"{where}.gpu_instances[{n}] must have id, profile_id, start, size, "
                "compute_instances"
            )
        for k, ci in enumerate(gi["compute_instances"]):
            if not _shaped(ci, {**_PLACED, "profile_id": int}):
                return (
                    f"{where}.gpu_instances[{n}].compute_instances[{k}] must have id, profile_id, "
                    "start, size"
                )
    return None


def _healthy_shape(value: Any) -> bool:
    """The health shape, every count within the C type NVML returns it in (nvml.h: ECC counts
    ``unsigned long long``, remapped rows ``unsigned int``): a driver cannot report more, so
    neither may the simulated one (a ctypes store would wrap 2**64 to 0)."""
    counters = {"volatile": int, "aggregate": int}
    ecc = value.get("ecc") if isinstance(value, dict) else None
    pages = value.get("retired_pages") if isinstance(value, dict) else None
    rows = value.get("remapped_rows") if isinstance(value, dict) else None
    return (
        _shaped(value, {"ecc": dict, "remapped_rows": dict, "retired_pages": dict})
        and _shaped(ecc, {"corrected": dict, "uncorrected": dict})
        and all(_shaped(ecc[kind], counters) for kind in ("corrected", "uncorrected"))
        and _shaped(
            value["remapped_rows"],
            {"corrected": int, "uncorrected": int, "pending": bool, "failure": bool},
        )
        and _shaped(pages, {"single_bit": list, "double_bit": list, "pending": bool})
        and all(
            _shaped(page, {"address": int, "timestamp": int})
            for cause in ("single_bit", "double_bit")
            for page in pages[cause]
        )
        and all(ecc[k][c] <= ECC_COUNT_MAX for k in ecc for c in counters)
        and rows["corrected"] <= ROWS_MAX
        and rows["uncorrected"] <= ROWS_MAX
    )


def _shaped(value: Any, required: dict[str, Any], optional: dict[str, Any] | None = None) -> bool:
    """A dict with every ``required`` key of its type (bool is not an int) and any ``optional``."""
    if not isinstance(value, dict):
        return False
    wanted = {**required, **(optional or {})}
    for key, kind in wanted.items():
        if key not in value:
            if key in required:
                return False
            continue
        item = value[key]
        if isinstance(item, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            return False
        if not isinstance(item, kind):
            return False
        if isinstance(item, int) and not isinstance(item, bool) and item < 0:
            return False
    return True


def _type_name(kind: Any) -> str:
    return {bool: "true|false", str: "text", int: "count", list: "list"}[kind]


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (its sidecar ``.lock`` file) for the block."""
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def transaction(path: str) -> Iterator[State]:
    """Load ``path`` under the lock, yield it for changes, save it if it changed.

    Nothing is written when the block raises, so a failed change leaves the file as it was.
    """
    with locked(path):
        state = load(path)
        before = copy.deepcopy(state)
        yield state
        if state != before:
            _replace(path, state)


def write_new(path: str, state: State) -> None:
    """Write ``state`` to ``path`` under the lock, replacing any previous state."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with locked(path):
        _replace(path, state)


def _replace(path: str, state: State) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gpuprov-sim-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
