"""Test helpers over the simulated driver, the C ``libnvidia-ml.so.1`` that tests/conftest.py
makes this machine's NVML: a host's GPUs (a state file, made and switched through the
library's gpuprovSim* API) and pynvml pointed at one host, through pynvml's own loader.

>>> path = new_host(tmp_path, "A100-80GB", 2, mig=[0])      # doctest: +SKIP
>>> with nvml(path):                                        # doctest: +SKIP
...     pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(1), 1)
>>> Hardware(path).reset(1)                                 # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pynvml
from gpuprov_lab.sim import state
from gpuprov_lab.sim.contract import SIM_ENV, SIM_KERNEL_LOG_NAME, SIM_TRACE_ENV
from gpuprov_lab.sim.libnvml import admin, build, preload

WHOLE_GPU = 0xFFFFFFFF  # GPUPROV_SIM_WHOLE_GPU: an XID of the GPU, not of a MIG instance


class SimError(Exception):
    """A gpuprovSim* call refused; the message is the library's one line."""


@functools.cache
def library() -> ctypes.CDLL:
    """The built library, loaded so that pynvml's ``CDLL("libnvidia-ml.so.1")`` is it too."""
    lib = ctypes.CDLL(str(preload.preload()))
    lib.gpuprovSimLastError.restype = ctypes.c_char_p
    lib.gpuprovSimStatePath.restype = ctypes.c_char_p
    lib.gpuprovSimInjectXid.argtypes = [
        ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_char_p,
        ctypes.c_uint, ctypes.c_uint,
    ]  # fmt: skip
    lib.gpuprovSimSetFault.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulonglong, ctypes.c_char_p,
    ]  # fmt: skip
    lib.gpuprovSimCreate.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
        ctypes.c_ulonglong,
    ]  # fmt: skip
    return lib


class Hardware:
    """The switches of the simulated host in state file ``path`` (gpuprov_sim.h)."""

    def __init__(self, path: str):
        self.path = path.encode()
        self.lib = library()

    def _call(self, name: str, *args: object) -> int:
        rc = getattr(self.lib, name)(self.path, *args)
        if rc < 0:
            raise SimError(self.lib.gpuprovSimLastError().decode())
        return rc

    def boot(self) -> None:
        self._call("gpuprovSimBoot")

    def reset(self, gpu: int) -> bool:
        """``nvidia-smi -r`` of one GPU: True when reset, False when a client holds it."""
        return self._call("gpuprovSimResetGpu", gpu) == 0

    def driver(self, version: str | None = None, loaded: bool | None = None) -> None:
        self._call(
            "gpuprovSimSetDriver",
            version.encode() if version else None,
            -1 if loaded is None else int(loaded),
        )

    def busy(self, gpu: int, busy: bool = True) -> None:
        self._call("gpuprovSimSetBusy", gpu, int(busy))

    def hold(self, gpu: int, unit: str | None) -> None:
        """``unit`` holds the GPU while active; None: no unit does."""
        self._call("gpuprovSimHold", gpu, unit.encode() if unit else None)

    def fault(self, function: str | None, successes: int = 0, error: str | None = None) -> None:
        self._call(
            "gpuprovSimSetFault",
            function.encode() if function else None,
            successes,
            error.encode() if error else None,
        )

    def xid(self, gpu: int, code: int, gi: int = WHOLE_GPU, ci: int = WHOLE_GPU) -> None:
        self._call("gpuprovSimInjectXid", gpu, code, 0, b"", gi, ci)

    def ecc(
        self, gpu: int, uncorrected: bool, volatile: int | None = None, aggregate: int | None = None
    ) -> None:
        def count(value: int | None):
            return None if value is None else ctypes.byref(ctypes.c_ulonglong(value))

        self._call("gpuprovSimSetEcc", gpu, int(uncorrected), count(volatile), count(aggregate))

    def remap_pending(self, gpu: int, failure: bool = False, clear: bool = False) -> None:
        self._call("gpuprovSimRemapPending", gpu, int(failure), int(clear))

    def retire_page(self, gpu: int, double_bit: bool = False, pending: bool = False) -> None:
        self._call("gpuprovSimRetirePage", gpu, int(double_bit), int(pending))


def new_host(
    tmp_path: Path,
    model: str = "A100-80GB",
    count: int = 1,
    mig: Iterable[int] = (),
    seed: str = "test-host",
) -> str:
    """A state file for ``count`` GPUs of ``model``; GPUs in ``mig`` booted with MIG on (the
    library's ``gpuprovSimCreate``, through ``gpuprov_lab.sim.libnvml.admin.create``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = str(tmp_path / "gpus.json")
    admin.create(path, model, count, seed, mig)
    return path


@contextlib.contextmanager
def nvml(path: str) -> Iterator[None]:
    """pynvml initialized against the host in ``path`` (``$GPUPROV_NVML_SIM`` while inside)."""
    saved = os.environ.get(SIM_ENV)
    os.environ[SIM_ENV] = path
    pynvml.nvmlInit()
    try:
        yield
    finally:
        pynvml.nvmlShutdown()
        if saved is None:
            os.environ.pop(SIM_ENV, None)
        else:
            os.environ[SIM_ENV] = saved


def edit(path: str) -> contextlib.AbstractContextManager[state.State]:
    """Change the simulated hardware's state file directly (the lab's own file format)."""
    return state.transaction(path)


@contextlib.contextmanager
def initialized() -> Iterator[None]:
    """pynvml initialized against ``$GPUPROV_NVML_SIM`` (the test has set it)."""
    pynvml.nvmlInit()
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


def carve(path: str, layouts: dict[int, list[tuple[int, list[int]]]]) -> None:
    """Create GPU and compute instances through the simulator's own rules, as the applier would.

    ``layouts`` maps a GPU index to ``(GI profile id, [CI profile constants])`` entries; the GPU
    must already have MIG on.
    """
    with nvml(path):
        for index, instances in layouts.items():
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            for profile_id, ci_constants in instances:
                gi = pynvml.nvmlDeviceCreateGpuInstance(device, profile_id)
                for constant in ci_constants:
                    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, constant)


def without_driver(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) as on a machine with no NVIDIA driver: no state file
    named, and the simulated library's directory off ``LD_LIBRARY_PATH``."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != SIM_ENV}
    directory = str(library_path().parent)
    kept = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d and d != directory]
    env.pop("LD_LIBRARY_PATH", None)
    if kept:
        env["LD_LIBRARY_PATH"] = ":".join(kept)
    return env


def library_path() -> Path:
    """The built ``libnvidia-ml.so.1`` (the one tests/conftest.py loads)."""
    return build.library()


def programs() -> dict[str, Path]:
    """The built ``nvidia-smi`` and ``gpuprov-sim``."""
    return build.build().programs


def run_program(name: str, argv: Iterable[str]) -> int:
    """Run the built ``name`` (``nvidia-smi``, ``gpuprov-sim``) with ``argv`` in this process's
    environment; its output goes to this process's stdout and stderr (``capsys`` reads it)."""
    result = subprocess.run(
        [str(programs()[name]), *argv], capture_output=True, text=True, check=False
    )
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


def use(path: str) -> None:
    """Make the host in state file ``path`` the one the simulated library answers for, from the
    next NVML call on (``$GPUPROV_NVML_SIM``; tests/conftest.py puts it back after each test)."""
    os.environ[SIM_ENV] = path


def traced(monkeypatch, path: Path) -> Callable[[], Counter[str]]:
    """Have the library log every NVML call to ``path``; the function returned counts the calls
    logged since it was last called, by function name."""
    monkeypatch.setenv(SIM_TRACE_ENV, str(path))
    path.write_text("")

    def calls() -> Counter[str]:
        lines = path.read_text().splitlines()
        path.write_text("")
        return Counter(line.split()[0] for line in lines)

    return calls


def kernel_log_path(state_path: str) -> str:
    """The simulated ``/dev/kmsg`` of the host in ``state_path`` (the file beside it)."""
    return os.path.join(os.path.dirname(os.path.abspath(state_path)), SIM_KERNEL_LOG_NAME)


def log_kernel_line(state_path: str, message: str) -> None:
    """Append ``message`` as a kmsg record ``PRIORITY,SEQUENCE,USEC,FLAGS;MESSAGE`` at LOG_ERR,
    numbered after the records there (Documentation/ABI/testing/dev-kmsg), under the lock the
    library's writers take: what any other kernel code than the driver's XIDs logs."""
    log = kernel_log_path(state_path)
    with state.locked(log):
        try:
            with open(log, "rb") as f:
                sequence = sum(1 for _ in f)
        except FileNotFoundError:
            sequence = 0
        usec = time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1000
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"3,{sequence},{usec},-;{message}\n")


def clear_kernel_log(state_path: str) -> None:
    """An empty kernel log, as after a boot."""
    log = kernel_log_path(state_path)
    with state.locked(log), open(log, "w", encoding="utf-8"):
        os.chmod(log, 0o644)
