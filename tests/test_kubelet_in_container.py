"""The real kubelet in a lab-style host registers a Ready Node with the lab's real control plane,
and NVIDIA's real device plugin over the simulated C NVML registers with it.

One throwaway host for the module: an overlay on the lab's base rootfs, booted with systemd by
systemd-nspawn in this machine's network namespace (so the kubelet reaches the API server on
127.0.0.1), with ``gpuprov_lab.kubelet_unit`` and ``gpuprov_lab.plugin_service`` installed in it. No
``gpuprov lab up``: the lab is one per machine. Torn down whatever happens: the container, the
overlay mount, the control plane and the directory.

Root only. Without the built Kubernetes binaries the module is skipped with how to build them,
except under CI, where that is a failure. The lab's base rootfs is built if missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuprov_lab import base as lab_base
from gpuprov_lab import kubebuild
from gpuprov_lab import kubelet_unit as kubelet
from gpuprov_lab import plugin_service as device_plugin
from gpuprov_lab.controlplane import ControlPlane, node_identity
from gpuprov_lab.sim import state
from gpuprov_lab.sim.caps import mig_minors
from gpuprov_lab.sim.contract import SIM_STATE_PATH
from gpuprov_lab.sim.libnvml import admin, build
from kube_cluster import control_plane
from simulated import carve
from upstream import upstream_binary

from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_PATH,
    KUBELET_DEVICE_CHECKPOINT,
    KUBELET_DEVICE_PLUGIN_DIR,
    kubelet_drop_in_path,
)
from gpuprov.host.kubelet.checkpoint import registered_devices

NODE = f"gpuprov-kubelet-test-{os.getpid()}"
MAX_PODS = 64
BOOT_TIMEOUT = 60.0
READY_TIMEOUT = 120.0
ADVERTISE_TIMEOUT = 60.0

TIME_SLICING = """version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""
MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"
SINGLE = "version: v1\nflags:\n  migStrategy: single\n"

TIMINGS: dict[str, float] = {}


class Host:
    """A booted lab-style host: systemd in an nspawn container over an overlay of the base."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.root = directory / "root"
        self.nspawn: subprocess.Popen | None = None
        self.leader: int | None = None  # the container's PID 1, as this machine sees it

    def mount(self, base: Path) -> None:
        for name in ("upper", "work", "root"):
            (self.dir / name).mkdir()
        options = f"lowerdir={base},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}"
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)],
            check=True,
            timeout=30,
        )

    def boot(self) -> None:
        # The flags of lab/gpuprov_lab/hosts.py, without --network-namespace-path: the host shares
        # this machine's network namespace (nspawn then withholds CAP_NET_ADMIN from it).
        log = (self.dir / "console.log").open("wb")
        self.nspawn = subprocess.Popen(
            [
                "systemd-nspawn",
                "--quiet",
                f"--directory={self.root}",
                f"--machine={NODE}",
                "--boot",
                "--register=no",
                "--keep-unit",
                "--resolv-conf=off",
                "--console=passive",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            assert self.nspawn.poll() is None, (self.dir / "console.log").read_text()[-2000:]
            children = Path(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children")
            if self.leader is None and children.read_text().split():
                self.leader = int(children.read_text().split()[0])
            if self.leader is not None:
                result = self.run("systemctl", "is-system-running", check=False)
                if result.stdout.strip() in ("running", "degraded"):
                    return
            time.sleep(0.5)
        raise AssertionError(f"{NODE} did not boot in {BOOT_TIMEOUT:.0f} s")

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` inside the host (its mount and PID namespaces)."""
        return subprocess.run(
            ["nsenter", "-t", str(self.leader), "-m", "-p", *argv],
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        )

    def journal(self, unit: str) -> str:
        return self.run("journalctl", "-u", unit, "-n", "40", "--no-pager", check=False).stdout

    def write(self, path: str, text: str) -> None:
        kubelet.put(self.root, path, text.encode())

    def tear_down(self) -> None:
        if self.nspawn is not None:
            # SIGTERM is an orderly poweroff; the leader is killed if nspawn went without it.
            self.nspawn.send_signal(signal.SIGTERM)
            try:
                self.nspawn.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.nspawn.pid, signal.SIGKILL)
                self.nspawn.wait(timeout=10)
        if self.leader is not None and Path(f"/proc/{self.leader}").exists():
            os.kill(self.leader, signal.SIGKILL)  # PID 1 of its namespace: takes all with it
        if self.root.is_mount():
            subprocess.run(["umount", str(self.root)], check=True, timeout=30)


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    if os.geteuid() != 0:
        pytest.skip("boots an nspawn container: root only")
    binary = kubebuild.binaries()["kubelet"]
    if not binary.is_file():
        message = f"no kubelet in {kubebuild.cache_dir()}: build it with kubebuild.ensure()"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    plane = control_plane()
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(plane.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def host(plane: ControlPlane) -> Iterator[Host]:
    """The host booted with the kubelet, and the device plugin time-slicing two A100s 4 ways."""
    base = lab_base.ensure()  # built once per version, as `gpuprov lab up` does (about 30 s)
    library = build.library()
    plugin = upstream_binary("nvidia-device-plugin")
    host = Host(Path(tempfile.mkdtemp(prefix="gpuprov-kubelet-test-")))
    try:
        host.mount(base)
        kubeconfig = plane.kubeconfig(host.dir / "node.kubeconfig", node_identity(NODE))
        kubelet.install(
            host.root,
            NODE,
            kubebuild.binaries()["kubelet"],
            kubeconfig,
            port=_free_port(),
            healthz_port=_free_port(),
        )
        drop_in = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
        host.write(
            kubelet_drop_in_path(kubelet.CONFIG_DIR), json.dumps(drop_in | {"maxPods": MAX_PODS})
        )
        device_plugin.install(host.root, plugin, library, mig_minors(2))
        admin.create(str(host.root / SIM_STATE_PATH.lstrip("/")), "A100-80GB", 2, NODE)
        host.write(DEVICE_PLUGIN_CONFIG_PATH, TIME_SLICING)
        # sshd would bind port 22 of this machine's network namespace.
        (host.root / "etc/systemd/system/multi-user.target.wants/ssh.service").unlink(
            missing_ok=True
        )
        started = time.monotonic()
        host.boot()
        TIMINGS["boot (systemd running)"] = time.monotonic() - started
        TIMINGS["_started"] = started
        yield host
    finally:
        host.tear_down()
        shutil.rmtree(host.dir, ignore_errors=True)
        for name, seconds in TIMINGS.items():
            if not name.startswith("_"):
                print(f"timing: {name}: {seconds:.1f} s")


def test_real_kubelet_in_a_lab_host_registers_a_ready_node_with_the_planned_max_pods(plane, host):
    node = _wait_for(plane, lambda n: _ready(n), READY_TIMEOUT, host, "kubelet.service")
    TIMINGS["boot to Node Ready"] = time.monotonic() - TIMINGS["_started"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{kubebuild.KUBERNETES_VERSION}"
    assert node["status"]["allocatable"]["pods"] == str(MAX_PODS)
    listed = plane.kubectl("get", "nodes", "--no-headers")
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:2] == [NODE, "Ready"] for line in listed.stdout.splitlines())


def test_real_device_plugin_time_slicing_two_gpus_four_ways_advertises_eight_shared(plane, host):
    node = _wait_for(
        plane,
        lambda n: n["status"].get("allocatable", {}).get("nvidia.com/gpu.shared") == "8",
        ADVERTISE_TIMEOUT,
        host,
        "nvidia-device-plugin.service",
    )
    TIMINGS["boot to 8 nvidia.com/gpu.shared allocatable"] = time.monotonic() - TIMINGS["_started"]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]  # renamed: .shared only
    devices = _checkpoint(host)
    gpus = [gpu["uuid"] for gpu in state.load(str(host.root / SIM_STATE_PATH.lstrip("/")))["gpus"]]
    assert devices["nvidia.com/gpu.shared"] == sorted(f"{u}::{r}" for u in gpus for r in range(4))
    sockets = {p.name for p in (host.root / KUBELET_DEVICE_PLUGIN_DIR.lstrip("/")).iterdir()}
    assert "nvidia-gpu.shared.sock" in sockets


def test_real_device_plugin_in_mixed_mig_advertises_each_profile_and_the_whole_gpu(plane, host):
    path = str(host.root / SIM_STATE_PATH.lstrip("/"))
    admin.create(path, "H100-80GB", 2, NODE, mig=[0])
    carve(path, {0: [(9, [2]), (14, [1]), (19, [0]), (19, [0])]})  # 3g + 2g + 2 × 1g
    host.write(DEVICE_PLUGIN_CONFIG_PATH, MIXED)
    changed = time.monotonic()
    host.run("systemctl", "restart", "nvidia-device-plugin.service")
    planned = {
        "nvidia.com/gpu": "1",
        "nvidia.com/mig-3g.40gb": "1",
        "nvidia.com/mig-2g.20gb": "1",
        "nvidia.com/mig-1g.10gb": "2",
    }
    node = _wait_for(
        plane,
        lambda n: all(n["status"].get("allocatable", {}).get(k) == v for k, v in planned.items()),
        ADVERTISE_TIMEOUT,
        host,
        "nvidia-device-plugin.service",
    )
    TIMINGS["plugin restart to MIG resources allocatable"] = time.monotonic() - changed
    # The resource of a replaced config (the time-slicing test's, when it ran first) stays
    # listed, with nothing allocatable, until the kubelet forgets it (endpointStopGracePeriod,
    # 5 min): an extra name, not a missing one.
    assert node["status"]["allocatable"].get("nvidia.com/gpu.shared", "0") == "0"
    devices = _checkpoint(host)
    assert {k: len(devices[k]) for k in planned} == {k: int(v) for k, v in planned.items()}
    assert all(i.startswith("MIG-") for k in planned if "mig-" in k for i in devices[k])


def _checkpoint(host: Host) -> dict[str, list[str]]:
    return registered_devices((host.root / KUBELET_DEVICE_CHECKPOINT.lstrip("/")).read_text())


def _changed_since(path: Path, since_ns: int, time_of: str = "ctime") -> bool:
    try:
        return getattr(path.stat(), f"st_{time_of}_ns") >= since_ns
    except FileNotFoundError:  # removed between listing and looking: not (yet) the new one
        return False


def _ready(node: dict) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _wait_for(plane: ControlPlane, condition, timeout: float, host: Host, unit: str) -> dict:
    """The Node once ``condition(node)`` holds; fails with the unit's journal after ``timeout``."""
    deadline, node = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        result = plane.kubectl("get", "node", NODE, "-o", "json")
        if result.returncode == 0:
            node = json.loads(result.stdout)
            if condition(node):
                return node
        time.sleep(0.5)
    status = json.dumps(node.get("status", {}).get("allocatable"), indent=1)
    raise AssertionError(f"after {timeout:.0f} s: {status}\n{unit}:\n{host.journal(unit)}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plugin_registers_again_by_itself_after_the_kubelet_restarts(plane, host):
    # The kubelet removes every socket in the directory when it starts (CleanupPluginDirectory,
    # devicemanager/manager.go); the plugin sees kubelet.sock come back and registers anew: new
    # sockets of its own, and the kubelet rewrites its checkpoint with the devices it got (one
    # resource after the other: the first rewrite may not have them all yet).
    sockets = host.root / KUBELET_DEVICE_PLUGIN_DIR.lstrip("/")
    checkpoint = host.root / KUBELET_DEVICE_CHECKPOINT.lstrip("/")
    names = sorted(p.name for p in sockets.glob("nvidia-*.sock"))
    served = {  # nvidia-mig-1g.10gb.sock serves nvidia.com/mig-1g.10gb
        f"nvidia.com/{n.removeprefix('nvidia-').removesuffix('.sock')}" for n in names
    }
    devices = {k: v for k, v in _checkpoint(host).items() if k in served}
    assert len(devices) == len(names) == 4
    restarted, since = time.monotonic(), time.time_ns()
    host.run("systemctl", "restart", "kubelet.service")

    def registered_again() -> tuple[list[str], dict[str, list[str]]]:
        new = sorted(p.name for p in sockets.glob("nvidia-*.sock") if _changed_since(p, since))
        now = _checkpoint(host) if _changed_since(checkpoint, since, "mtime") else {}
        return new, {k: v for k, v in now.items() if k in served}

    deadline = time.monotonic() + ADVERTISE_TIMEOUT
    while (now := registered_again()) != (names, devices):
        assert time.monotonic() < deadline, f"new sockets and checkpoint: {now}"
        time.sleep(0.2)
    TIMINGS["kubelet restart to the plugin registered again"] = time.monotonic() - restarted
    node = _wait_for(plane, _ready, READY_TIMEOUT, host, "kubelet.service")
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "2"


def test_real_device_plugin_in_single_mig_advertises_every_mig_device_as_a_gpu(plane, host):
    path = str(host.root / SIM_STATE_PATH.lstrip("/"))
    admin.create(path, "H200-141GB", 2, NODE, mig=[0, 1])
    carve(path, {0: [(9, [2]), (9, [2])], 1: [(9, [2]), (9, [2])]})  # 2 × 3g.71gb on each
    host.write(DEVICE_PLUGIN_CONFIG_PATH, SINGLE)
    host.run("systemctl", "restart", "nvidia-device-plugin.service")
    _wait_for(
        plane,
        lambda n: n["status"].get("allocatable", {}).get("nvidia.com/gpu") == "4",
        ADVERTISE_TIMEOUT,
        host,
        "nvidia-device-plugin.service",
    )
    ids = _checkpoint(host)["nvidia.com/gpu"]
    assert len(ids) == 4
    assert all(i.startswith("MIG-") for i in ids)


def test_stopped_plugin_zeroes_allocatable_and_its_socket_but_not_the_checkpoint(plane, host):
    # What verify on the node must know: the kubelet keeps a stopped plugin's devices for
    # endpointStopGracePeriod (5 min, devicemanager/types.go) and does not rewrite the
    # checkpoint, so the checkpoint alone does not show that the plugin still serves.
    before = _checkpoint(host)
    stopped = time.monotonic()
    host.run("systemctl", "stop", "nvidia-device-plugin.service")
    _wait_for(
        plane,
        lambda n: n["status"].get("allocatable", {}).get("nvidia.com/gpu") == "0",
        ADVERTISE_TIMEOUT,
        host,
        "kubelet.service",
    )
    TIMINGS["plugin stop to allocatable 0"] = time.monotonic() - stopped
    assert _checkpoint(host) == before
    sockets = [p.name for p in (host.root / KUBELET_DEVICE_PLUGIN_DIR.lstrip("/")).iterdir()]
    assert sorted(s for s in sockets if s.endswith(".sock")) == ["kubelet.sock"]
