"""The simulated C library answers exactly what the Python simulator answers, call for call.

Both are driven through the same nvidia-ml-py wrappers: once with ``pynvml.nvmlLib`` set to the
Python simulator (``gpuprov_lab.sim.install``), once with it set to the compiled
``libnvidia-ml.so.1`` loaded by ctypes. Every function the C library serves is called on every
GPU, GPU instance, compute instance and MIG device of each simulated host, plus the handles,
ids, profile numbers and buffer sizes that must fail; the two transcripts must be equal.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest
from gpuprov_lab.sim import admin, install
from gpuprov_lab.sim.libnvml import build
from simulated import carve, edit, isolate_pynvml, new_host
from upstream import upstream_binary

from gpuprov.host.contract import SIM_ENV, SIM_TRACE_ENV

SERVED = re.compile(r"SERVED\((nvml\w+),")
SOURCE = Path(build.__file__).parent


@pytest.fixture(scope="session")
def library() -> Path:
    try:
        return build.library()
    except build.BuildError as e:
        pytest.skip(str(e))


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    isolate_pynvml(monkeypatch)


# -- the transcript --------------------------------------------------------------------------


def plain(value):
    """A comparable form of what a pynvml wrapper returned: handles become their addresses."""
    if isinstance(value, (ctypes._Pointer, ctypes.c_void_p)):
        return ("handle", ctypes.cast(value, ctypes.c_void_p).value)
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return plain(value.value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value


class Transcript:
    """Calls pynvml wrappers and records each answer or NVML error code under a label."""

    def __init__(self):
        self.lines: list[tuple[str, object]] = []

    def __call__(self, label: str, function: Callable[..., object], *args) -> object:
        try:
            result = function(*args)
        except pynvml.NVMLError as e:
            self.lines.append((label, ("error", e.value)))
            return None
        self.lines.append((label, plain(result)))
        return result

    def raw(self, label: str, name: str, *args) -> int:
        """Call C function ``name`` directly; record its return code and the out-parameters."""
        rc = pynvml._nvmlGetFunctionPointer(name)(*args)
        outs = [plain(a._obj) for a in args if isinstance(a, type(ctypes.byref(ctypes.c_int())))]
        self.lines.append((label, (rc, outs)))
        return rc


def survey() -> list[tuple[str, object]]:
    """Every served call against whatever ``pynvml.nvmlLib`` is now."""
    t = Transcript()
    t("init", pynvml.nvmlInit)
    if t.lines[-1][1] is not None:  # an NVML error: nothing else answers
        return t.lines
    t("driver", pynvml.nvmlSystemGetDriverVersion)
    t("nvml", pynvml.nvmlSystemGetNVMLVersion)
    t("cuda", pynvml.nvmlSystemGetCudaDriverVersion)
    t("cuda v2", pynvml.nvmlSystemGetCudaDriverVersion_v2)
    short = ctypes.create_string_buffer(4)
    t.raw("driver short", "nvmlSystemGetDriverVersion", short, ctypes.c_uint(4))
    t.raw("nvml short", "nvmlSystemGetNVMLVersion", short, ctypes.c_uint(4))
    count = t("count", pynvml.nvmlDeviceGetCount) or 0
    t("index past the end", pynvml.nvmlDeviceGetHandleByIndex, count)
    t("unknown uuid", pynvml.nvmlDeviceGetHandleByUUID, "GPU-nope")
    devices = []
    for index in range(count):
        device = t(f"{index} handle", pynvml.nvmlDeviceGetHandleByIndex, index)
        devices.append(device)
        _device(t, f"{index}", device)
        _mig(t, f"{index}", device)
    for i, first in enumerate(devices):
        for j, second in enumerate(devices):
            t(f"{i} {j} common ancestor", pynvml.nvmlDeviceGetTopologyCommonAncestor, first, second)
    t("not a handle", pynvml.nvmlDeviceGetName, pynvml.c_nvmlDevice_t())
    for code in [*range(32), 999, 1000, -1]:
        t(f"error string {code}", pynvml.nvmlErrorString, code)
    t("shutdown", pynvml.nvmlShutdown)
    t("after shutdown", pynvml.nvmlDeviceGetCount)
    return t.lines


def _device(t: Transcript, at: str, device) -> None:
    t(f"{at} name", pynvml.nvmlDeviceGetName, device)
    uuid = t(f"{at} uuid", pynvml.nvmlDeviceGetUUID, device)
    if uuid:
        t(f"{at} by uuid", pynvml.nvmlDeviceGetHandleByUUID, uuid)
    t(f"{at} index", pynvml.nvmlDeviceGetIndex, device)
    t(f"{at} minor", pynvml.nvmlDeviceGetMinorNumber, device)
    t(f"{at} compute capability", pynvml.nvmlDeviceGetCudaComputeCapability, device)
    t(f"{at} pci", pynvml.nvmlDeviceGetPciInfo, device)
    t(f"{at} memory", pynvml.nvmlDeviceGetMemoryInfo, device)
    t(f"{at} memory v2", pynvml.nvmlDeviceGetMemoryInfo, device, pynvml.nvmlMemory_v2)
    stale = pynvml.c_nvmlMemory_v2_t()
    stale.version = 1
    t.raw(
        f"{at} memory v2 wrong version", "nvmlDeviceGetMemoryInfo_v2", device, ctypes.byref(stale)
    )
    name = ctypes.create_string_buffer(8)
    t.raw(f"{at} name short", "nvmlDeviceGetName", device, name, ctypes.c_uint(8))
    t(f"{at} is mig", pynvml.nvmlDeviceIsMigDeviceHandle, device)
    t(f"{at} gi id", pynvml.nvmlDeviceGetGpuInstanceId, device)
    t(f"{at} ci id", pynvml.nvmlDeviceGetComputeInstanceId, device)
    t(f"{at} parent", pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, device)
    t(f"{at} attributes", pynvml.nvmlDeviceGetAttributes, device)
    t(f"{at} mig mode", pynvml.nvmlDeviceGetMigMode, device)
    t(f"{at} max mig", pynvml.nvmlDeviceGetMaxMigDeviceCount, device)
    _health(t, at, device)


def _health(t: Transcript, at: str, device) -> None:
    for kind in range(3):
        for counter in range(3):
            t(
                f"{at} ecc {kind} {counter}",
                pynvml.nvmlDeviceGetTotalEccErrors,
                device,
                kind,
                counter,
            )
    for location in (0, pynvml.NVML_MEMORY_LOCATION_DRAM, pynvml.NVML_MEMORY_LOCATION_COUNT):
        t(
            f"{at} memory errors {location}",
            pynvml.nvmlDeviceGetMemoryErrorCounter,
            device,
            1,
            1,
            location,
        )
    t(f"{at} remapped rows", pynvml.nvmlDeviceGetRemappedRows, device)
    t(f"{at} pages pending", pynvml.nvmlDeviceGetRetiredPagesPendingStatus, device)
    for cause in range(3):
        t(f"{at} retired pages {cause}", pynvml.nvmlDeviceGetRetiredPages, device, cause)
        t(f"{at} retired pages v2 {cause}", pynvml.nvmlDeviceGetRetiredPages_v2, device, cause)
    count = ctypes.c_uint(0)
    t.raw(
        f"{at} retired pages size",
        "nvmlDeviceGetRetiredPages",
        device,
        1,
        ctypes.byref(count),
        None,
    )
    t.raw(
        f"{at} remapped rows to NULL", "nvmlDeviceGetRemappedRows", device, None, None, None, None
    )


def _mig(t: Transcript, at: str, device) -> None:
    for const in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):
        t(f"{at} gip {const}", pynvml.nvmlDeviceGetGpuInstanceProfileInfo, device, const, 1)
        t(f"{at} gip v2 {const}", pynvml.nvmlDeviceGetGpuInstanceProfileInfo, device, const)
    stale = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    stale.version = 1
    t.raw(
        f"{at} gip v2 stale", "nvmlDeviceGetGpuInstanceProfileInfoV", device, 0, ctypes.byref(stale)
    )
    for profile_id in range(0, 48):
        t(
            f"{at} gip id {profile_id}",
            pynvml.nvmlDeviceGetGpuInstanceProfileInfoById,
            device,
            profile_id,
        )
        count = ctypes.c_uint(0)
        t.raw(
            f"{at} placements count {profile_id}",
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
            device,
            profile_id,
            None,
            ctypes.byref(count),
        )
        placements = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
        t.raw(
            f"{at} placements {profile_id}",
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
            device,
            profile_id,
            placements,
            ctypes.byref(count),
        )
        t(f"{at} placements values {profile_id}", list, placements)
        t(
            f"{at} capacity {profile_id}",
            pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity,
            device,
            profile_id,
        )
        handles = (pynvml.c_nvmlGpuInstance_t * 8)()
        t.raw(
            f"{at} gis {profile_id}",
            "nvmlDeviceGetGpuInstances",
            device,
            profile_id,
            handles,
            ctypes.byref(count),
        )
        t(f"{at} gis values {profile_id}", list, handles)
        for handle in list(handles)[: count.value]:
            _gpu_instance(t, f"{at} gi {profile_id}", handle)
    for gi_id in range(16):
        t(f"{at} gi by id {gi_id}", pynvml.nvmlDeviceGetGpuInstanceById, device, gi_id)
    for position in range(9):
        mig = t(
            f"{at} mig {position}", pynvml.nvmlDeviceGetMigDeviceHandleByIndex, device, position
        )
        if mig is not None:
            _device(t, f"{at} mig {position}", mig)
            t(
                f"{at} mig {position} common ancestor",
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                mig,
                device,
            )


def _gpu_instance(t: Transcript, at: str, gi) -> None:
    info = t(f"{at} info", pynvml.nvmlGpuInstanceGetInfo, gi)
    at = f"{at}/{info.id if info else '?'}"
    shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    for const in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT + 1):
        for engine in (shared, shared + 1):
            t(
                f"{at} cip {const} {engine}",
                pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi,
                const,
                engine,
                1,
            )
            t(
                f"{at} cip v2 {const} {engine}",
                pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi,
                const,
                engine,
            )
        count = ctypes.c_uint(0)
        handles = (pynvml.c_nvmlComputeInstance_t * 8)()
        t.raw(
            f"{at} cis {const}",
            "nvmlGpuInstanceGetComputeInstances",
            gi,
            const,
            handles,
            ctypes.byref(count),
        )
        for ci in list(handles)[: count.value]:
            t(f"{at} ci {const} info", pynvml.nvmlComputeInstanceGetInfo, ci)
    for ci_id in range(9):
        ci = t(f"{at} ci by id {ci_id}", pynvml.nvmlGpuInstanceGetComputeInstanceById, gi, ci_id)
        if ci is not None:
            t(f"{at} ci by id {ci_id} info", pynvml.nvmlComputeInstanceGetInfo, ci)


# -- the two libraries -------------------------------------------------------------------------


def _with(lib) -> list[tuple[str, object]]:
    pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache = lib, {}
    try:
        return survey()
    finally:
        pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache = None, {}


def transcripts(path: str, library: Path, monkeypatch) -> tuple[list, list]:
    monkeypatch.setenv(SIM_ENV, path)
    python = _with(install(path))
    c = _with(ctypes.CDLL(str(library)))
    return python, c


def assert_same(python: list, c: list) -> None:
    assert len(python) == len(c), (len(python), len(c))
    differences = [(p, q) for p, q in zip(python, c, strict=True) if p != q]
    assert not differences, differences[:5]


# (model, GPU count, GPUs with MIG on, GI/CI layouts as `carve` takes them)
HOSTS = {
    "a100-mig-off": ("A100-80GB", 2, [], {}),
    "a100-mig-on": (
        "A100-80GB",
        2,
        [0],
        {0: [(9, [2]), (14, [1]), (19, [0]), (20, [0])]},
    ),
    "a100-split-ci": ("A100-80GB", 1, [0], {0: [(9, [0, 0, 0]), (5, [1, 1])]}),
    "h100-mig-off": ("H100-80GB", 2, [], {}),
    "h100-mig-on": ("H100-80GB", 2, [0, 1], {0: [(19, [0])] * 7, 1: [(5, [3]), (9, [2])]}),
    "h200-mig-off": ("H200-141GB", 1, [], {}),
    "h200-mig-on": ("H200-141GB", 2, [0], {0: [(15, [0]), (15, [0]), (9, [2])]}),
    "l40s": ("L40S", 1, [], {}),
}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_c_library_answers_what_the_python_simulator_answers(host, tmp_path, library, monkeypatch):
    model, count, mig, layouts = HOSTS[host]
    path = new_host(tmp_path, model, count, mig=mig)
    carve(path, layouts)
    with edit(path) as state:  # a pending change shows in the MIG mode, not in the devices
        state["gpus"][-1]["mig_pending"] = not state["gpus"][-1]["mig_pending"]
    python, c = transcripts(path, library, monkeypatch)
    assert len(python) > 100
    assert_same(python, c)


# gpuprov-sim commands that put a host's GPUs in a known health state.
HEALTH = [
    ["set-ecc", "--gpu", "0", "--uncorrected", "3", "--corrected", "9"],
    ["remap-pending", "--gpu", "1", "--failure"],
    ["retire-page", "--gpu", "0", "--double-bit", "--pending"],
    ["retire-page", "--gpu", "0"],
    ["retire-page", "--gpu", "1"],
]


@pytest.mark.parametrize("model", ["A100-80GB", "H200-141GB", "L40S", "T4"])
def test_health_counters_answer_alike(model, tmp_path, library, monkeypatch):
    path = new_host(tmp_path, model, 2)
    for command in HEALTH:
        assert admin.main(["--state", path, *command]) == 0
    python, c = transcripts(path, library, monkeypatch)
    assert_same(python, c)
    answers = dict(c)
    if model == "T4":
        assert answers["0 retired pages v2 1"] == [{"address": 4096, "timestamp": 1700000000}]
        assert answers["0 remapped rows"] == ("error", pynvml.NVML_ERROR_NOT_SUPPORTED)
    else:
        assert answers["1 remapped rows"] == [0, 1, 1, 1]
        assert answers["0 pages pending"] == ("error", pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert answers["0 ecc 1 0"] == 3


def test_a_state_file_without_health_reads_healthy_in_both(tmp_path, library, monkeypatch):
    path = new_host(tmp_path, "H100-80GB", 1)
    with edit(path) as state:
        del state["gpus"][0]["health"]
    python, c = transcripts(path, library, monkeypatch)
    assert_same(python, c)
    assert dict(c)["0 remapped rows"] == [0, 0, 0, 0]


def test_the_transcript_sees_every_mig_device(tmp_path, library, monkeypatch):
    path = new_host(tmp_path, "H100-80GB", 1, mig=[0])
    carve(path, {0: [(19, [0])] * 7})
    python, c = transcripts(path, library, monkeypatch)
    names = [answer for label, answer in c if label.endswith(" name") and "mig" in label]
    assert names == ["NVIDIA H100 80GB HBM3 MIG 1g.10gb"] * 7
    assert_same(python, c)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: s["driver"].update(loaded=False), id="driver-unloaded"),
        pytest.param(lambda s: s["driver"].update(version="580.65.06"), id="driver-580"),
        pytest.param(
            lambda s: s["faults"].update(
                fail_after={
                    "function": "nvmlDeviceGetCount_v2",
                    "successes": 0,
                    "error": "NVML_ERROR_GPU_IS_LOST",
                }
            ),
            id="fault-fired",
        ),
    ],
)
def test_driver_states_and_faults_answer_alike(change, tmp_path, library, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    with edit(path) as state:
        change(state)
    assert_same(*transcripts(path, library, monkeypatch))


def test_a_missing_state_file_is_a_missing_library_for_both(tmp_path, library, monkeypatch):
    python, c = transcripts(str(tmp_path / "absent.json"), library, monkeypatch)
    assert python == c == [("init", ("error", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))]


CONCURRENT_READERS = """
import ctypes, sys, threading
from concurrent.futures import ThreadPoolExecutor
from gpuprov_lab.sim import state

library, path = sys.argv[1:]
lib = ctypes.CDLL(library)
assert lib.nvmlInit_v2() == 0

def rewrite():
    for _ in range(200):
        with state.transaction(path) as current:
            current["gpus"][1]["mig_pending"] = not current["gpus"][1]["mig_pending"]

def names(_):
    seen = set()
    for i in range(300):
        handle, name = ctypes.c_void_p(), ctypes.create_string_buffer(96)
        rc = lib.nvmlDeviceGetHandleByIndex_v2(i % 2, ctypes.byref(handle))
        seen.add((rc, lib.nvmlDeviceGetName(handle, name, 96), name.value.decode()))
    return seen

writer = threading.Thread(target=rewrite, daemon=True)
writer.start()
with ThreadPoolExecutor(max_workers=8) as pool:
    answers = set().union(*pool.map(names, range(8)))
writer.join(timeout=60)
print(sorted(answers), lib.nvmlShutdown())
"""


def test_many_threads_read_while_the_state_is_rewritten(library, tmp_path):
    """The device plugin calls from many Go threads while the applier rewrites the state file.

    In a child process with a time limit: a lost wake-up or a crash must fail, not hang.
    """
    path = new_host(tmp_path, "H100-80GB", 2, mig=[0])
    out = subprocess.run(
        [sys.executable, "-c", CONCURRENT_READERS, str(library), path],
        env={**os.environ, SIM_ENV: path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "[(0, 0, 'NVIDIA H100 80GB HBM3')] 0"


# -- what the C library does not serve ---------------------------------------------------------


def _served() -> set[str]:
    return set(SERVED.findall((SOURCE / "nvml_sim.c").read_text())) | {
        "nvmlInit",
        "nvmlInit_v2",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlErrorString",
    }


def _unsupported() -> list[str]:
    return re.findall(r"^UNSUPPORTED\((\w+)\)", (SOURCE / "unsupported.h").read_text(), re.M)


def test_every_unserved_function_answers_not_supported_and_is_traced(
    library, tmp_path, monkeypatch
):
    monkeypatch.setenv(SIM_ENV, new_host(tmp_path))
    monkeypatch.setenv(SIM_TRACE_ENV, str(tmp_path / "trace"))
    lib = ctypes.CDLL(str(library))
    assert lib.nvmlInit_v2() == pynvml.NVML_SUCCESS
    # The calls that change the GPUs are served now (tests/test_nvml_sim_rules.py), not stubs.
    assert not {"nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance"} & set(_unsupported())
    answers = {name: getattr(lib, name)(None, None, None, None) for name in _unsupported()}
    assert set(answers.values()) == {pynvml.NVML_ERROR_NOT_SUPPORTED}
    assert lib.nvmlShutdown() == pynvml.NVML_SUCCESS
    trace = (tmp_path / "trace").read_text().splitlines()
    assert trace == ["nvmlInit_v2 0", *(f"{name} 3" for name in answers), "nvmlShutdown 0"]


def test_the_python_simulator_serves_every_function_the_c_library_serves():
    from gpuprov_lab.sim.nvml import FUNCTIONS

    aliases = {"nvmlInit", "nvmlInit_v2", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex"}
    # The event API is the C library's alone (tests/test_nvml_sim_events.py).
    events = {name for name in _served() if "Event" in name}
    assert _served() - aliases - events <= FUNCTIONS


@pytest.fixture(scope="session")
def plugin_symbols() -> set[str]:
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf")
    binary = upstream_binary("nvidia-device-plugin")
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    fields = (line.split() for line in out.splitlines())
    return {f[7] for f in fields if len(f) > 7 and f[6] == "UND" and f[7].startswith("nvml")}


def test_every_nvml_symbol_the_device_plugin_links_is_defined(library, plugin_symbols):
    lib = ctypes.CDLL(str(library))
    assert len(plugin_symbols) > 400
    assert [name for name in sorted(plugin_symbols) if not hasattr(lib, name)] == []
    assert plugin_symbols == _served() | set(_unsupported())


# -- gpuprov's own processes keep the Python simulator -----------------------------------------

ROUTING = """
import pynvml
from gpuprov.host.agent.probe import init_nvml
init_nvml()
device = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE)
print(type(pynvml.nvmlLib).__name__, pynvml.nvmlDeviceGetMigMode(device))
"""


def test_gpuprov_uses_the_python_simulator_even_with_the_c_library_on_the_path(library, tmp_path):
    path = new_host(tmp_path)
    env = {**os.environ, "LD_LIBRARY_PATH": str(library.parent), SIM_ENV: path}
    out = subprocess.run(
        [sys.executable, "-c", ROUTING], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["SimulatedNvml", "[0,", "1]"]
    # Without the variable pynvml finds the C library, which changes the same GPU state.
    env.pop(SIM_ENV)
    env["GPUPROV_NVML_SIM"] = path  # the C library reads the same variable...
    bare = ROUTING.replace(
        "from gpuprov.host.agent.probe import init_nvml\ninit_nvml()", "pynvml.nvmlInit()"
    )
    out = subprocess.run(
        [sys.executable, "-c", bare], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CDLL", "[0,", "1]"]
