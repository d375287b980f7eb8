"""GPU health as NVIDIA's real device plugin sees it, and as `gpuprov verify` does, on the lab.

The plugin's health checks are on (lab/gpuprov_lab/plugin_service.py): it waits on the
simulated NVML's events, so `gpuprov-sim inject xid` on a host reaches it as a driver's XID
event and the kernel log line reaches verify's probe. The plugin's view is read where verify
reads it, the Node through the API server (capacity − allocatable, docs/health.md).

The shared host has 8 A100s time-sliced 4 ways: 32 ``nvidia.com/gpu.shared``, 4 per GPU.
NVIDIA's plugin v0.20.0 keeps one device per parent GPU in its health check, so an XID marks one
of the GPU's 4 shares unhealthy (32 -> 31, measured), and verify names the 3 it still offers as
a disagreement on that GPU (docs/health.md, "Two views"). The source: ``checkHealth`` in
internal/rm/health.go at v0.20.0 fills ``parentToDeviceMap[uuid] = d`` (a
``map[string]*Device`` keyed by the GPU's UUID, the replica's ``::n`` stripped), so the four
replicas overwrite one another and the event's UUID finds one. Not the simulator's doing: it
delivers each XID once per event set. The issue's 28 is what upstream's later code would give
(a list of devices per parent, ``groupByParent``); the test asserts what v0.20.0 does.
"""

from __future__ import annotations

import json
import time

import pytest
from gpuprov_lab.sim.contract import SIM_KERNEL_LOG_NAME, SIM_STATE_PATH

pytestmark = pytest.mark.lab

HOST = "lab-a100-01"  # inventories/lab.py's shared host
SHARED = "nvidia.com/gpu.shared"
GPU = 2
# The kubelet reports node status every 10 s (nodeStatusUpdateFrequency); the plugin takes an
# event within its 5 s wait. Bound: two reports and the plugin's wait.
REPORT_BOUND = 25.0
PLUGIN = "nvidia-device-plugin.service"
SIM_KMSG = f"{SIM_STATE_PATH.rsplit('/', 1)[0]}/{SIM_KERNEL_LOG_NAME}"


def shares(lab) -> str | None:
    return lab.nodes().get(HOST, {}).get("allocatable", {}).get(SHARED)


def wait_shares(lab, want: str, what: str) -> float:
    """Seconds until the Node shows ``want`` shares, bounded by REPORT_BOUND."""
    started = time.monotonic()
    lab.wait_nodes(lambda nodes: nodes[HOST]["allocatable"].get(SHARED) == want, REPORT_BOUND, what)
    return time.monotonic() - started


def verify(lab, *args: str) -> tuple[int, dict[str, list[tuple]]]:
    result = lab.verify(None, "--kubeconfig", str(lab.kubeconfig), "--format", "json", *args)
    report = json.loads(result.stdout)
    findings = {
        h["name"]: sorted((f["check"], f["gpu"]) for f in h["findings"]) for h in report["hosts"]
    }
    return result.returncode, findings


def plugin_logged(lab, since: float, text: str, timeout: float = REPORT_BOUND) -> None:
    deadline = time.monotonic() + timeout
    while True:
        log = lab.run(HOST, f"journalctl -u {PLUGIN} --no-pager -o cat --since @{since:.0f}").stdout
        if text in log:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the plugin never logged {text!r} in {timeout:.0f} s:\n{log}")
        time.sleep(1)


@pytest.fixture
def clean(lab, deployed):
    lab.kube_apply()
    lab.wait_nodes(lambda nodes: nodes[HOST]["allocatable"].get(SHARED) == "32", 60, "32 shares")
    # The kubelet's checkpoint follows a plugin restart a report later than the Node may.
    deadline = time.monotonic() + 60
    while (found := verify(lab))[0] != 0:
        assert time.monotonic() < deadline, f"verify never clean before the test: {found}"
        time.sleep(5)
    yield
    lab.kubectl("uncordon", HOST)
    lab.forget_xids(HOST)


def test_xid_13_is_skipped_by_the_plugin_and_judged_by_nothing(lab, clean):
    since = time.time() - 1
    lab.run(HOST, f"gpuprov-sim inject xid 13 --gpu {GPU}")
    plugin_logged(lab, since, "Skipping event")  # delivered, and skipped
    time.sleep(12)  # one kubelet status report after the plugin's answer
    assert shares(lab) == "32"
    code, findings = verify(lab)
    assert (code, findings[HOST]) == (0, [])


def test_xid_79_on_gpu_2_costs_one_share_and_verify_names_gpu_2_xid_and_disagreement(lab, clean):
    lab.run(HOST, f"gpuprov-sim inject xid 79 --gpu {GPU}")
    took = wait_shares(lab, "31", "one of GPU 2's shares unhealthy")
    print(f"measured: XID 79 to 31 allocatable shares: {took:.1f} s")
    code, findings = verify(lab)
    assert code == 1
    # gpuprov's xid finding on GPU 2, the plugin still offering 3 of its shares, the node that
    # should be cordoned, and on the node the kubelet's checkpoint holding 31 healthy devices.
    assert findings[HOST] == [
        ("health-disagreement", GPU),
        ("kube-cordon", None),
        ("kubelet-devices", None),
        ("xid", GPU),
    ]
    assert all(found == [] for host, found in findings.items() if host != HOST), findings

    code, findings = verify(lab, "--cordon-unhealthy")
    assert code == 1 and ("xid", GPU) in findings[HOST]
    node = json.loads(lab.kubectl("get", "node", HOST, "-o", "json").stdout)
    assert node["spec"].get("unschedulable") is True


def test_the_plugin_keeping_a_gpu_unhealthy_that_gpuprov_finds_healthy_is_a_disagreement(
    lab, clean
):
    lab.run(HOST, f"gpuprov-sim inject xid 79 --gpu {GPU}")
    wait_shares(lab, "31", "one of GPU 2's shares unhealthy")
    # The kernel log as after a boot; the plugin keeps the devices unhealthy until it restarts.
    lab.run(HOST, f": > {SIM_KMSG}")
    code, findings = verify(lab)
    assert (code, findings[HOST]) == (1, [("health-disagreement", None), ("kubelet-devices", None)])


def test_a_gpu_gpuprov_finds_unhealthy_that_the_plugin_offers_again_is_a_disagreement(lab, clean):
    lab.run(HOST, f"gpuprov-sim inject xid 79 --gpu {GPU}")
    wait_shares(lab, "31", "one of GPU 2's shares unhealthy")
    # A restarted plugin forgets the XID (events before it registered are not delivered).
    lab.run(HOST, f"systemctl restart {PLUGIN}")
    wait_shares(lab, "32", "all 32 shares after the plugin restarted")
    code, findings = verify(lab)
    assert code == 1
    assert findings[HOST] == [("health-disagreement", GPU), ("kube-cordon", None), ("xid", GPU)]
