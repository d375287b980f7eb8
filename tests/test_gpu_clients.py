"""Who holds the GPUs and what blocks a reset: the pure rules (``gpuprov.host.gpu_clients``) and the
``/proc`` reading on the host (``gpuprov.host.gpu_holders``), the latter on real processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuprov.core.variables import VARIABLES, suggest
from gpuprov.host import gpu_holders
from gpuprov.host.contract import GPU_CLIENT_UNITS
from gpuprov.host.gpu_clients import MAX_NAMED, Holder, blocked_message, blocking, owner, to_stop

CONTAINER = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("cgroup", "unit", "container"),
    [
        # systemd with the unified hierarchy (cgroup v2)
        ("0::/system.slice/gpu-holder.service\n", "gpu-holder.service", None),
        # the hybrid hierarchy (systemd's own v1 tree beside the v2 one) a lab host shows
        (
            "12:devices:/system.slice\n1:name=systemd:/system.slice/gpu-holder.service\n"
            "0::/system.slice/gpu-holder.service\n",
            "gpu-holder.service",
            None,
        ),
        # a pod's container, kubelet with the systemd cgroup driver
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/"
            f"cri-containerd-{CONTAINER}.scope\n",
            f"cri-containerd-{CONTAINER}.scope",
            CONTAINER,
        ),
        # the cgroupfs driver on cgroup v1: a container, no unit
        (f"4:memory:/x\n1:name=systemd:/kubepods/besteffort/pod1/{CONTAINER}\n", None, CONTAINER),
        # Docker
        (f"0::/system.slice/docker-{CONTAINER}.scope\n", f"docker-{CONTAINER}.scope", CONTAINER),
        # a login session
        ("0::/user.slice/user-0.slice/session-3.scope\n", "session-3.scope", None),
        ("", None, None),
    ],
)
def test_the_cgroup_names_the_unit_and_the_container(cgroup, unit, container):
    assert owner(cgroup) == (unit, container)


def test_clients_stop_in_the_listed_order_once_each_and_only_if_running():
    clients = ["kubelet.service", "nvsm.service", "kubelet.service", "dcgm.service"]
    assert to_stop(clients, {"dcgm.service", "kubelet.service"}) == (
        "kubelet.service",
        "dcgm.service",
    )


def test_the_applier_itself_never_blocks_the_reset():
    mine = Holder(10, "python3 agent.pyz apply", None, None, ("/dev/nvidiactl",))
    other = Holder(11, "sleep 300", "gpu-holder.service", None, ("/dev/nvidia0",))
    assert blocking([other, mine], own_pids={10}) == [other]


def test_a_long_list_of_holders_names_the_first_ones_and_counts_the_rest():
    held = [Holder(p, "x", None, None, ("/dev/nvidia0",)) for p in range(MAX_NAMED + 3)]
    message = blocked_message("0-7", held, ("kubelet.service",))
    assert message.startswith("GPU 0-7: not reset, the GPUs are in use after stopping kubelet")
    assert f"pid {MAX_NAMED - 1} (x)" in message and f"pid {MAX_NAMED} (x)" not in message
    assert "and 3 more processes" in message


def test_default_clients_are_mig_parteds_and_the_operators_plus_the_device_plugin():
    default = VARIABLES["gpu_clients"].default
    assert default == list(GPU_CLIENT_UNITS)
    assert {"kubelet.service", "nvidia-dcgm.service", "dcgm-exporter.service"} <= set(default)
    assert {"nv_peer_mem.service", "dcgm.service", "nvsm.service"} <= set(default)
    assert {"nvidia-device-plugin.service", "nvidia-persistenced.service"} <= set(default)


def test_the_old_key_name_points_to_the_new_one():
    assert suggest("mig_gpu_clients") == "gpu_clients"


def test_the_host_scan_finds_a_real_process_holding_a_device_node_with_its_cgroup(tmp_path):
    (tmp_path / "nvidia0").write_text("")
    (tmp_path / "other").write_text("")
    system = gpu_holders.System(devices=str(tmp_path / "nvidia"))
    with open(tmp_path / "nvidia0") as node, open(tmp_path / "other") as unrelated:
        holding = subprocess.Popen(["sleep", "300"], stdin=node)
        bystander = subprocess.Popen(["sleep", "301"], stdin=unrelated)
    try:
        found = gpu_holders.holders(system)
        cgroup = Path(f"/proc/{holding.pid}/cgroup").read_text()
    finally:
        for process in (holding, bystander):
            process.kill()
            process.wait()
    assert [(h.pid, h.command, h.devices) for h in found] == [
        (holding.pid, "sleep 300", (str(tmp_path / "nvidia0"),))
    ]
    assert (found[0].unit, found[0].container) == owner(cgroup)


def test_nvidia_drm_is_seen_in_proc_modules_or_sys_module(tmp_path):
    (tmp_path / "proc").mkdir()
    system = gpu_holders.System(proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))
    (tmp_path / "proc" / "modules").write_text("nvidia_uvm 1 0 - Live 0x0\n")
    assert not gpu_holders.drm_loaded(system)
    (tmp_path / "proc" / "modules").write_text("nvidia_drm 94208 2 - Live 0x0\n")
    assert gpu_holders.drm_loaded(system)
    (tmp_path / "proc" / "modules").write_text("")
    (tmp_path / "sys" / "module" / "nvidia_drm").mkdir(parents=True)
    assert gpu_holders.drm_loaded(system)
