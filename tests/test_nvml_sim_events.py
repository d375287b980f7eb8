"""NVML events of the simulated C driver: XIDs raised by one process reach the event sets other
processes wait on, as the device plugins' health checks need.

NVIDIA's plugin (internal/rm/health.go), HAMi's (nvinternal/rm/health.go) and Volcano's
(pkg/plugin/vgpu/nvidia.go, checkHealth) register XidCriticalError | DoubleBitEccError |
SingleBitEccError masked by nvmlDeviceGetSupportedEventTypes on each GPU, then loop on ``nvmlEventSetWait_v2(set, 5000)``: NVML_ERROR_TIMEOUT means "nothing
happened", any other error marks every device unhealthy, and an XidCriticalError outside their
ignored list marks the GPU whose UUID ``event.device`` has (for MIG devices, the one whose GI and
CI ids the event carries). The last tests run NVIDIA's release binary with its health checks on.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from gpuprov_lab.sim.caps import mig_minors
from gpuprov_lab.sim.contract import SIM_ENV, SIM_TRACE_ENV
from gpuprov_lab.sim.libnvml import preload
from simulated import Hardware, carve, new_host, nvml, programs
from test_device_plugin_real import SANDBOX, _wait_for
from upstream import upstream_binary

XID = pynvml.nvmlEventTypeXidCriticalError
HEALTH_MASK = XID | pynvml.nvmlEventTypeDoubleBitEccError | pynvml.nvmlEventTypeSingleBitEccError
NONE = 0xFFFFFFFF  # nvmlEventData_t's instance ids of an event of the whole GPU
WATCH = Path(__file__).parent / "kubelet_watch.py"


@pytest.fixture
def host(tmp_path):
    """Two H100-80GB, GPU 1 with MIG on, pynvml initialized through the C library."""
    path = new_host(tmp_path, "H100-80GB", 2, mig=[1])
    with nvml(path):
        yield path


def _device(index):
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _watching(*indices, types=XID):
    event_set = pynvml.nvmlEventSetCreate()
    for index in indices:
        pynvml.nvmlDeviceRegisterEvents(_device(index), types, event_set)
    return event_set


def _inject_later(path: str, *argv: str, delay: float = 0.3) -> subprocess.Popen:
    """``gpuprov-sim ARGV`` in another process, ``delay`` seconds from now.

    A process, not a thread: gpuprov.controller.readback monkey-patches threads into greenlets (gevent), and
    a greenlet would not run while this process waits inside the C library."""
    return subprocess.Popen(
        ["sh", "-c", f'sleep {delay}; exec "$0" "$@"', str(programs()["gpuprov-sim"]),
         "--state", path, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_every_gpu_supports_the_events_the_plugins_ask_for(host):
    for index in (0, 1):
        assert pynvml.nvmlDeviceGetSupportedEventTypes(_device(index)) == HEALTH_MASK
    pynvml.nvmlGpuInstanceCreateComputeInstance(
        pynvml.nvmlDeviceCreateGpuInstance(_device(1), 0), 4
    )
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(_device(1), 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # events are per GPU, not per MIG device
        pynvml.nvmlDeviceGetSupportedEventTypes(mig)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.c_nvmlDevice_t())


def test_a_wait_with_nothing_to_report_times_out_after_its_timeout_at_no_cpu_cost(host):
    event_set = _watching(0, 1, types=HEALTH_MASK)
    started, cpu = time.monotonic(), time.process_time()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 1500)
    waited, spent = time.monotonic() - started, time.process_time() - cpu
    assert 1.4 <= waited < 4, waited
    assert spent < 0.1, spent  # it sleeps in poll(2); a busy loop would spend ~1.5 s
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 0)
    pynvml.nvmlEventSetFree(event_set)


def test_an_xid_injected_by_another_process_wakes_the_waiting_set(host):
    event_set = _watching(0, 1)
    started = time.monotonic()
    injector = _inject_later(host, "inject", "xid", "79", "--gpu", "1")
    try:
        event = pynvml.nvmlEventSetWait_v2(event_set, 60000)
    finally:
        waited = time.monotonic() - started
        _, err = injector.communicate(timeout=60)
    assert injector.returncode == 0, err
    assert waited < 30, waited  # woken by the event, long before its 60 s timeout
    assert pynvml.nvmlDeviceGetIndex(event.device) == 1
    assert pynvml.nvmlDeviceGetUUID(event.device) == pynvml.nvmlDeviceGetUUID(_device(1))
    assert (event.eventType, event.eventData) == (XID, 79)
    assert (event.gpuInstanceId, event.computeInstanceId) == (NONE, NONE)
    with pytest.raises(pynvml.NVMLError_Timeout):  # delivered once
        pynvml.nvmlEventSetWait_v2(event_set, 100)
    pynvml.nvmlEventSetFree(event_set)


def test_every_set_of_the_gpu_gets_the_event_and_only_events_after_it_registered(host):
    hardware = Hardware(host)
    first, other_gpu = _watching(0), _watching(1)
    hardware.xid(0, 48)
    late = _watching(0)  # "All events that occurred before this call are not recorded"
    hardware.xid(0, 79)
    hardware.xid(0, 94)
    assert [pynvml.nvmlEventSetWait_v2(first, 1000).eventData for _ in range(3)] == [48, 79, 94]
    assert [pynvml.nvmlEventSetWait_v2(late, 1000).eventData for _ in range(2)] == [79, 94]
    for event_set in (first, late, other_gpu):
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(event_set, 50)
        pynvml.nvmlEventSetFree(event_set)


def test_an_xid_of_a_mig_instance_carries_its_gpu_and_compute_instance_ids(host):
    event_set = _watching(1)
    Hardware(host).xid(1, 94, gi=2, ci=0)
    event = pynvml.nvmlEventSetWait_v2(event_set, 1000)
    assert (event.eventData, event.gpuInstanceId, event.computeInstanceId) == (94, 2, 0)
    pynvml.nvmlEventSetFree(event_set)


def test_ecc_errors_raise_their_events_with_no_data(host):
    hardware = Hardware(host)
    event_set = _watching(0, types=HEALTH_MASK)
    xid_only = _watching(0)
    hardware.ecc(0, uncorrected=True, volatile=2)
    hardware.ecc(0, uncorrected=False, volatile=5)
    hardware.ecc(0, uncorrected=False, volatile=5)  # not more errors: no event
    events = [pynvml.nvmlEventSetWait_v2(event_set, 1000) for _ in range(2)]
    assert [(e.eventType, e.eventData) for e in events] == [
        (pynvml.nvmlEventTypeDoubleBitEccError, 0),
        (pynvml.nvmlEventTypeSingleBitEccError, 0),
    ]
    for waiting in (event_set, xid_only):
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(waiting, 50)


def test_event_types_a_gpu_does_not_support_register_none(host):
    event_set = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(_device(0), XID | pynvml.nvmlEventTypePState, event_set)
    Hardware(host).xid(0, 79)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 100)


class EventDataV1(ctypes.Structure):
    """nvmlEventData_t before the MIG ids: what nvmlEventSetWait (no _v2) fills."""

    _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong),
                ("eventData", ctypes.c_ulonglong), ("guard", ctypes.c_ulonglong)]  # fmt: skip


def test_the_first_wait_writes_the_older_shorter_event(host):
    event_set = _watching(0)
    Hardware(host).xid(0, 79)
    data = EventDataV1(guard=0x5A5A5A5A5A5A5A5A)
    wait = pynvml._nvmlGetFunctionPointer("nvmlEventSetWait")
    assert wait(event_set, ctypes.byref(data), ctypes.c_uint(1000)) == pynvml.NVML_SUCCESS
    assert (data.eventType, data.eventData, data.guard) == (XID, 79, 0x5A5A5A5A5A5A5A5A)


def test_a_fault_on_the_wait_is_what_the_plugins_see_as_a_broken_driver(host):
    event_set = _watching(0)
    Hardware(host).fault("nvmlEventSetWait_v2", 0, "NVML_ERROR_UNKNOWN")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlEventSetWait_v2(event_set, 100)


WAITER = """
import pynvml, sys
pynvml.nvmlInit()
event_set = pynvml.nvmlEventSetCreate()
pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), 8, event_set)
print("registered", flush=True)
event = pynvml.nvmlEventSetWait_v2(event_set, 20000)
print(pynvml.nvmlDeviceGetUUID(event.device), event.eventData, type(pynvml.nvmlLib).__name__)
"""


def test_a_plain_pynvml_process_on_ld_library_path_receives_the_xid(tmp_path):
    path = new_host(tmp_path, "A100-80GB", 1)
    env = preload.environment(base={**os.environ, SIM_ENV: path})
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert waiter.stdout.readline() == "registered\n"
        Hardware(path).xid(0, 79)
        out, _ = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    uuid = json.loads(Path(path).read_text())["gpus"][0]["uuid"]
    assert waiter.returncode == 0
    assert out.split() == [uuid, "79", "CDLL"]


# -- NVIDIA's device plugin with its health checks on ----------------------------------------


@pytest.fixture(scope="session")
def plugin() -> Path:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare: the plugin's socket directory is a fixed path")
    return upstream_binary("nvidia-device-plugin")


@pytest.fixture(scope="session")
def api(tmp_path_factory) -> Path:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("needs grpcio-tools (the `test` extra)")
    return tmp_path_factory.mktemp("deviceplugin-api")


class Lines:
    """The lines a child process prints, read as they come with a timeout, in this thread
    (threads may be greenlets here: gpuprov.controller.readback monkey-patches them)."""

    def __init__(self, process: subprocess.Popen):
        self.fd = process.stdout.fileno()
        self.buffer = b""

    def next(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def empty(self, timeout: float = 0) -> bool:
        """Nothing more within ``timeout`` seconds (what came is kept for ``next``)."""
        if b"\n" not in self.buffer and select.select([self.fd], [], [], timeout)[0]:
            self.buffer += os.read(self.fd, 65536)
        return b"\n" not in self.buffer


@contextlib.contextmanager
def watched_plugin(
    tmp_path: Path, plugin: Path, api: Path, state: str, config: str, resources: int = 1
) -> Iterator[tuple[Lines, Path, Path]]:
    """The plugin with its health checks on, registered with a kubelet that follows
    ListAndWatch for ``resources`` resources; yields its answers (lines), the plugin's log and
    the NVML call trace."""
    sockets, log, trace = tmp_path / "device-plugins", tmp_path / "plugin.log", tmp_path / "trace"
    sockets.mkdir()
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "mig-minors").write_text(mig_minors(8))
    kubelet = subprocess.Popen(
        [sys.executable, str(WATCH), str(sockets), str(resources), "90", str(api)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    answers = Lines(kubelet)
    env = preload.environment(
        base={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            SIM_ENV: state,
            SIM_TRACE_ENV: str(trace),
            "CAPS": str(tmp_path / "mig-minors"),
            "SOCKETS": str(sockets),
            "CONFIG": str(tmp_path / "config.yaml"),
            "PLUGIN": str(plugin),
        }
    )
    running = None
    try:
        _wait_for(sockets / "kubelet.sock", kubelet)
        assert answers.next(30) == "ready"
        with log.open("wb") as out:
            running = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        yield answers, log, trace
    finally:
        for process in (running, kubelet):
            if process is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _next_answer(answers: Lines, log: Path, timeout: float) -> dict[str, str]:
    line = answers.next(timeout)
    if line is None:
        raise AssertionError(f"no ListAndWatch answer; plugin log:\n{log.read_text()[-3000:]}")
    return json.loads(line)["devices"]


def _calls(trace: Path, line: str) -> int:
    return trace.read_text().splitlines().count(line) if trace.exists() else 0


def _until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_device_plugin_stays_healthy_until_a_critical_xid_marks_that_gpus_device(
    tmp_path, plugin, api
):
    state = new_host(tmp_path, "A100-80GB", 2)
    uuids = [gpu["uuid"] for gpu in json.loads(Path(state).read_text())["gpus"]]
    hardware = Hardware(state)
    config = "version: v1\nflags:\n  migStrategy: none\n"
    with watched_plugin(tmp_path, plugin, api, state, config) as (answers, log, trace):
        assert _next_answer(answers, log, 60) == dict.fromkeys(uuids, "Healthy")
        # Its health check waits 5 s at a time; NVML_ERROR_TIMEOUT (10) is "nothing happened".
        assert _until(lambda: _calls(trace, "nvmlEventSetWait_v2 10") >= 2, 20), log.read_text()
        assert answers.empty()
        # XID 13 is an application error the plugin ignores: delivered, and nothing changes.
        hardware.xid(0, 13)
        assert _until(lambda: _calls(trace, "nvmlEventSetWait_v2 0") == 1, 10)
        assert answers.empty(timeout=1)
        hardware.xid(1, 79)
        assert _next_answer(answers, log, 15) == {uuids[0]: "Healthy", uuids[1]: "Unhealthy"}
    text = log.read_text()
    assert "Xid=79" in text or "XidCriticalError" in text, text[-3000:]


def test_a_whole_gpu_xid_on_a_mig_gpu_marks_one_device_of_each_of_its_resources(
    tmp_path, plugin, api
):
    # v0.20.0 keeps one device per parent GPU in each resource's health check (the last one
    # it registers), so of GPU 0's two 1g.10gb instances one stays Healthy; gpuprov's verify
    # names that as a health-disagreement (docs/health.md, "Two views").
    state = new_host(tmp_path, "H100-80GB", 2, mig=[0])
    carve(state, {0: [(9, [2]), (14, [1]), (19, [0]), (19, [0])]})
    config = "version: v1\nflags:\n  migStrategy: mixed\n"
    with watched_plugin(tmp_path, plugin, api, state, config, resources=4) as (answers, log, trace):
        first = {}
        for _ in range(4):
            line = json.loads(answers.next(60) or "{}")
            first[line["resource"]] = line["devices"]
        assert all(set(d.values()) == {"Healthy"} for d in first.values()), first
        assert _until(lambda: _calls(trace, "nvmlEventSetWait_v2 10") >= 2, 30), log.read_text()
        assert answers.empty(timeout=1)  # MIG devices stay healthy through the waits
        Hardware(state).xid(0, 79)
        later = {}
        while (line := answers.next(8)) is not None:
            answer = json.loads(line)
            later[answer["resource"]] = answer["devices"]
    unhealthy = {r: sorted(d.values()).count("Unhealthy") for r, d in later.items()}
    assert unhealthy == {
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-1g.10gb": 1,  # of 2
    }, log.read_text()[-3000:]
    assert "nvidia.com/gpu" not in later  # GPU 1, MIG off, untouched
