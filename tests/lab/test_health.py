"""GPU health on the lab: an XID the simulated driver logs reaches the probe through /dev/kmsg,
as on a real host, and verify fails that host alone, naming GPU and code; a pending row remap is
"reset required"; --health off judges nothing."""

from __future__ import annotations

import json

import pytest
from gpuprov_lab.sim.contract import SIM_KERNEL_LOG_NAME, SIM_STATE_PATH

from gpuprov.host.contract import KERNEL_LOG_PATH

pytestmark = pytest.mark.lab

SIM_KMSG = f"{SIM_STATE_PATH.rsplit('/', 1)[0]}/{SIM_KERNEL_LOG_NAME}"


def host_findings(lab) -> tuple[int, dict[str, list[dict]]]:
    result = lab.verify(None, "--format", "json")
    report = json.loads(result.stdout)
    return result.returncode, {h["name"]: h["findings"] for h in report["hosts"]}


def host_findings_off(lab) -> tuple[int, dict[str, list[dict]]]:
    result = lab.verify(None, "--health", "off", "--format", "json")
    report = json.loads(result.stdout)
    return result.returncode, {h["name"]: h["findings"] for h in report["hosts"]}


def test_dev_kmsg_is_the_simulated_kernel_log(lab, deployed):
    for host in lab.names:
        link = lab.run(host, f"readlink {KERNEL_LOG_PATH}").stdout.strip()
        assert link == SIM_KMSG, host


def test_an_injected_xid_79_fails_verify_for_that_host_naming_gpu_and_code(lab, deployed):
    host = lab.names[0]
    uuid = lab.probe(host)["gpus"][0]["uuid"]
    lab.run(host, "gpuprov-sim inject xid 79 --gpu 0")
    try:
        code, findings = host_findings(lab)
        assert code == 1
        assert all(findings[other] == [] for other in lab.names if other != host), findings
        # With its health checks on, the device plugin marks one of GPU 0's devices unhealthy
        # too, which the on-node check sees as the kubelet's checkpoint (healthy devices only).
        assert {f["check"] for f in findings[host]} <= {"xid", "kubelet-devices"}, findings[host]
        [finding] = [f for f in findings[host] if f["check"] == "xid"]
        assert (finding["host"], finding["gpu"], finding["check"]) == (host, 0, "xid")
        assert finding["found"] == (
            f"{uuid}: XID 79 (GPU has fallen off the bus), 1 time since boot"
        )
        # --health off judges no XID; the kubelet's checkpoint still shows the plugin's view.
        _, unjudged = host_findings_off(lab)
        assert {f["check"] for f in unjudged[host]} <= {"kubelet-devices"}, unjudged[host]
    finally:
        lab.forget_xids(host)  # the log as after a boot, the device plugin's view reset
    assert lab.verify().returncode == 0


def test_a_pending_row_remap_is_reset_required(lab, deployed):
    # A GPU without MIG instances: with instances NVML does not report remapped rows.
    host = next(h.name for h in lab.in_group("whole_card") + lab.in_group("shared"))
    lab.run(host, "gpuprov-sim remap-pending --gpu 0")
    try:
        code, findings = host_findings(lab)
        assert code == 1
        [finding] = findings[host]
        assert (finding["gpu"], finding["check"]) == (0, "row-remapping")
        assert "reset required for row remapping" in finding["found"]
    finally:
        lab.run(host, "gpuprov-sim remap-pending --gpu 0 --clear")
    assert lab.verify().returncode == 0
