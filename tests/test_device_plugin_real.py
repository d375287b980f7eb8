"""NVIDIA's real device plugin (v0.20.0) enumerates the simulated GPUs through the C library.

The plugin binary from ../shared/bin runs with ``LD_LIBRARY_PATH`` at the compiled
``libnvidia-ml.so.1`` and registers with a stand-in kubelet (``kubelet_stub.py``, in a process of its own); what it offers
over ListAndWatch is compared with what the Python simulator says the host has. Two paths of the
plugin are fixed, not flags: its own socket directory ``/var/lib/kubelet/device-plugins``
(pluginapi.DevicePluginPath) and ``/proc/driver/nvidia-caps/mig-minors``. So the plugin runs in a
private mount namespace (``unshare``, root) where a tmpfs over ``/var/lib`` holds the test's
socket directory and a tmpfs over ``/proc/driver`` holds the MIG minors a lab host provides.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
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
from gpuprov_lab.sim.contract import SIM_ENV, SIM_MIG_MINORS_PATH
from gpuprov_lab.sim.libnvml import build
from plans import plan_for
from simulated import carve, initialized, new_host, use
from upstream import upstream_binary

from gpuprov.core.hostfiles import device_plugin

STUB = Path(__file__).parent / "kubelet_stub.py"
TIMEOUT = 30

SANDBOX = f"""
set -e
mount -t tmpfs gpuprov-proc-driver /proc/driver
mkdir -p "$(dirname {SIM_MIG_MINORS_PATH})"
cp "$CAPS" {SIM_MIG_MINORS_PATH}
mount -t tmpfs gpuprov-var-lib /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$SOCKETS" /var/lib/kubelet/device-plugins
exec "$PLUGIN" --config-file "$CONFIG" --kubelet-socket "$SOCKETS/kubelet.sock"
"""


@pytest.fixture(scope="session")
def plugin() -> Path:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare: the plugin's socket directory is a fixed path")
    return upstream_binary("nvidia-device-plugin")


@pytest.fixture(scope="session")
def api(tmp_path_factory) -> Path:
    """A directory for the stand-in kubelet's compiled API (grpcio-tools must be installed)."""
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("needs grpcio-tools (the `test` extra)")
    return tmp_path_factory.mktemp("deviceplugin-api")


@pytest.fixture(scope="session")
def library() -> Path:
    try:
        return build.library()
    except build.BuildError as e:
        pytest.skip(str(e))


@contextlib.contextmanager
def running_plugin(
    tmp_path: Path, binary: Path, library: Path, state: str, config: str
) -> Iterator[tuple[Path, subprocess.Popen]]:
    """The plugin running against ``state`` with ``config``; yields its log file and its
    process (``unshare`` and ``sh`` exec it: the same pid), then stops it."""
    sockets = tmp_path / "device-plugins"
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "mig-minors").write_text(mig_minors(8))
    log = tmp_path / "plugin.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_LIBRARY_PATH": str(library.parent),
        SIM_ENV: state,
        "DP_DISABLE_HEALTHCHECKS": "all",
        "CAPS": str(tmp_path / "mig-minors"),
        "SOCKETS": str(sockets),
        "CONFIG": str(tmp_path / "config.yaml"),
        "PLUGIN": str(binary),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log, process
    finally:
        # A plugin that refused its config has exited already (and may have been reaped).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def advertised(tmp_path, plugin, library, api, state: str, config: str, resources: int):
    """What the plugin registers, as the stand-in kubelet (a child process) receives it."""
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    kubelet = subprocess.Popen(
        [sys.executable, str(STUB), str(sockets), str(resources), str(TIMEOUT), str(api)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(sockets / "kubelet.sock", kubelet)
        with running_plugin(tmp_path, plugin, library, state, config) as (log, _):
            try:
                out, err = kubelet.communicate(timeout=TIMEOUT + 30)
            except subprocess.TimeoutExpired:
                out, err = "", "the stand-in kubelet did not finish"
            if kubelet.returncode != 0:
                raise AssertionError(f"{err[-2000:]}\nplugin log:\n{log.read_text()[-4000:]}")
        return json.loads(out.splitlines()[-1])
    finally:
        if kubelet.poll() is None:
            os.killpg(kubelet.pid, signal.SIGKILL)
            kubelet.wait(timeout=10)


def _wait_for(socket: Path, kubelet: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not socket.exists():
        if kubelet.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the stand-in kubelet did not start: {kubelet.stderr.read()}")
        time.sleep(0.05)


def simulated(path: str) -> dict[str, list[str]]:
    """UUIDs of MIG-off GPUs (key "gpu") and of MIG devices by profile, read through pynvml."""
    use(path)
    found: dict[str, list[str]] = {}
    with initialized():
        for index in range(pynvml.nvmlDeviceGetCount()):
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            if not pynvml.nvmlDeviceGetMigMode(device)[0]:
                found.setdefault("gpu", []).append(pynvml.nvmlDeviceGetUUID(device))
            name = pynvml.nvmlDeviceGetName(device)
            for position in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
                with contextlib.suppress(pynvml.NVMLError_NotFound):
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, position)
                    profile = pynvml.nvmlDeviceGetName(mig).removeprefix(f"{name} MIG ")
                    found.setdefault(profile, []).append(pynvml.nvmlDeviceGetUUID(mig))
    return {key: sorted(uuids) for key, uuids in found.items()}


TIME_SLICING = """
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def test_time_slicing_offers_replicas_of_each_gpu_as_the_shared_resource(
    tmp_path, plugin, library, api
):
    state = new_host(tmp_path, "A100-80GB", 2)
    offered = advertised(tmp_path, plugin, library, api, state, TIME_SLICING, resources=1)
    gpus = simulated(state)["gpu"]
    assert offered == {
        "nvidia.com/gpu.shared": sorted(f"{uuid}::{r}" for uuid in gpus for r in range(4))
    }


def test_mixed_offers_each_mig_profile_and_the_whole_gpu_beside_it(tmp_path, plugin, library, api):
    state = new_host(tmp_path, "H100-80GB", 2, mig=[0])
    carve(state, {0: [(9, [2]), (14, [1]), (19, [0]), (19, [0])]})
    config = "version: v1\nflags:\n  migStrategy: mixed\n"
    offered = advertised(tmp_path, plugin, library, api, state, config, resources=4)
    expected = simulated(state)
    assert offered == {
        "nvidia.com/gpu": expected["gpu"],
        "nvidia.com/mig-3g.40gb": expected["3g.40gb"],
        "nvidia.com/mig-2g.20gb": expected["2g.20gb"],
        "nvidia.com/mig-1g.10gb": expected["1g.10gb"],
    }
    assert len(offered["nvidia.com/mig-1g.10gb"]) == 2


def test_single_offers_every_mig_device_as_gpus(tmp_path, plugin, library, api):
    state = new_host(tmp_path, "H200-141GB", 2, mig=[0, 1])
    carve(state, {0: [(9, [2]), (9, [2])], 1: [(9, [2]), (9, [2])]})
    config = "version: v1\nflags:\n  migStrategy: single\n"
    offered = advertised(tmp_path, plugin, library, api, state, config, resources=1)
    assert offered == {"nvidia.com/gpu": simulated(state)["3g.71gb"]}
    assert len(offered["nvidia.com/gpu"]) == 4


# --- MPS: the plugin with the config gpuprov writes for `sharing_strategy: mps`


def mps_config(tmp_path) -> str:
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps")
    return device_plugin.render(plan)


def _log_until(log: Path, text: str, timeout: float = TIMEOUT) -> str:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    return log.read_text()


@pytest.mark.parametrize(
    "control,why",
    [
        (
            None,
            'failed to start NVIDIA MPS command: exec: "nvidia-cuda-mps-control": executable '
            "file not found in $PATH",
        ),
        # What the lab's simulated nvidia-cuda-mps package does: no MPS server answers.
        ("#!/bin/sh\nexit 1\n", "failed to send command to MPS daemon: exit status 1"),
    ],
    ids=["no binary", "no daemon answering"],
)
def test_mps_without_a_control_daemon_waits_and_never_registers(
    tmp_path, plugin, library, monkeypatch, control, why
):
    """The plugin enumerates the GPUs, then asks the MPS control daemon for its health before
    it serves anything (internal/plugin/mps.go waitForDaemon): with no daemon it fails that
    plugin and retries every 30 s, and no resource is ever offered to the kubelet."""
    if control is not None:
        stand_in = tmp_path / "bin" / "nvidia-cuda-mps-control"
        stand_in.parent.mkdir()
        stand_in.write_text(control)
        stand_in.chmod(0o755)
        monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    state = new_host(tmp_path, "A100-80GB", 2)
    (tmp_path / "device-plugins").mkdir()
    with running_plugin(tmp_path, plugin, library, state, mps_config(tmp_path)) as (log, _):
        text = _log_until(log, "Retrying in 30s")
        assert list((tmp_path / "device-plugins").iterdir()) == []
    assert '"mpsRoot": "/run/nvidia/mps"' in text
    assert f"error waiting for MPS daemon: error checking MPS daemon health: {why}" in text
    assert "Starting to serve" not in text


# single: what gpuprov's GPU Operator values give every plugin of a cluster without MIG hosts
# (the operator's MIG_STRATEGY wins over the file); on MIG-off GPUs it is whole GPUs, as none.
@pytest.mark.parametrize("strategy", ["none", "single"])
def test_mps_with_a_daemon_that_answers_offers_the_replicas_and_asks_it_at_mps_root(
    tmp_path, plugin, library, api, monkeypatch, strategy
):
    """A stand-in for NVIDIA's nvidia-cuda-mps-control (the driver's binary, which the chart's
    daemon container gets from the host) that answers the health query: then the plugin offers
    the replicas. It asks through the per-resource pipe under the container's MPS root."""
    calls = tmp_path / "mps-control.calls"
    stand_in = tmp_path / "bin" / "nvidia-cuda-mps-control"
    stand_in.parent.mkdir()
    # The plugin runs it with only the MPS variables in its environment: absolute paths.
    stand_in.write_text(
        f'#!/bin/sh\necho "$CUDA_MPS_PIPE_DIRECTORY $(cat)" >> {calls}\necho 100.0\n'
    )
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    state = new_host(tmp_path, "A100-80GB", 2)
    config = mps_config(tmp_path).replace("migStrategy: none", f"migStrategy: {strategy}")
    offered = advertised(tmp_path, plugin, library, api, state, config, 1)
    gpus = simulated(state)["gpu"]
    assert offered == {
        "nvidia.com/gpu.shared": sorted(f"{uuid}::{r}" for uuid in gpus for r in range(4))
    }
    assert calls.read_text().splitlines()[0] == (
        "/mps/nvidia.com/gpu.shared/pipe get_default_active_thread_percentage"
    )


def test_mps_on_mig_devices_stops_the_plugin_as_the_planner_refuses_it(tmp_path, plugin, library):
    state = new_host(tmp_path, "H200-141GB", 2, mig=[0, 1])
    carve(state, {0: [(9, [2]), (9, [2])], 1: [(9, [2]), (9, [2])]})
    config = (
        "version: v1\nflags:\n  migStrategy: single\n  mpsRoot: /run/nvidia/mps\nsharing:\n"
        "  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 2\n"
    )
    (tmp_path / "device-plugins").mkdir()
    with running_plugin(tmp_path, plugin, library, state, config) as (log, _):
        text = _log_until(log, "error starting plugins")
    assert "sharing using MPS is not supported for MIG devices" in text


def test_sighup_makes_the_plugin_offer_the_mig_devices_of_a_new_layout(
    tmp_path, plugin, library, api
):
    # What the deploy's device_plugin_reload_command does after a MIG change: the plugin does not
    # see the change by itself (NVIDIA/k8s-device-plugin#992); its SIGHUP restart lists again.
    state = new_host(tmp_path, "H100-80GB", 2, mig=[0])
    carve(state, {0: [(9, [2])]})
    config = "version: v1\nflags:\n  migStrategy: mixed\n"
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    kubelet = subprocess.Popen(
        [sys.executable, str(STUB), str(sockets), "2", str(TIMEOUT), str(api), "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(sockets / "kubelet.sock", kubelet)
        with running_plugin(tmp_path, plugin, library, state, config) as (log, process):
            assert kubelet.stdout.readline() == "ready\n"
            before = json.loads(kubelet.stdout.readline() or "{}")
            carve(state, {0: [(19, [0]), (19, [0])]})  # two 1g beside the 3g
            process.send_signal(signal.SIGHUP)
            after = json.loads(kubelet.stdout.readline() or "{}")
            assert after, f"no second registration:\n{log.read_text()[-3000:]}"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the stub ends after its registrations
            os.killpg(kubelet.pid, signal.SIGKILL)
        kubelet.wait(timeout=10)
    expected = simulated(state)
    assert sorted(before) == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]
    assert after == {
        "nvidia.com/gpu": expected["gpu"],
        "nvidia.com/mig-3g.40gb": expected["3g.40gb"],
        "nvidia.com/mig-1g.10gb": expected["1g.10gb"],
    }
    assert len(after["nvidia.com/mig-1g.10gb"]) == 2
