"""An NVML failure in the middle of a MIG apply on the lab: only that host fails, the others
finish their work, and once the fault is gone the next deploy converges with no orphan
instances."""

from __future__ import annotations

import pytest
from gpuprov_lab.testing import observed_instances, planned_instances

pytestmark = pytest.mark.lab

KUBELET_DROP_IN = "/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf"
SUCCESSES = 5  # the sixth call fails: GPU 1, after GPU 0's four instances and one of GPU 1's


@pytest.mark.parametrize(
    "function", ["nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance"]
)
def test_an_nvml_failure_mid_apply_fails_that_host_alone_and_the_next_deploy_converges(
    lab, deployed, function
):
    mig_host = lab.in_group("mig")[0].name
    planned = planned_instances(lab.plan()[mig_host])
    for host in lab.names:  # work for every host: a drop-in to write again
        lab.run(host, f"rm {KUBELET_DROP_IN}")
    lab.run(mig_host, "gpuprov-sim boot")  # what a reboot does: every instance gone
    lab.run(mig_host, f"gpuprov-sim fault --fail-after {function} {SUCCESSES}")
    try:
        failed = lab.deploy(check=False)
        assert failed.returncode != 0, failed.stdout[-4000:]
        assert lab.verify_status() == {
            host: "drift" if host == mig_host else "ok" for host in lab.names
        }
        half_built = lab.probe(mig_host)["gpus"]
        gis = [gi for g in half_built for gi in g["gpu_instances"]]
        with_ci = [gi for gi in gis if gi["compute_instances"]]
        if function == "nvmlDeviceCreateGpuInstanceWithPlacement":
            assert (len(gis), len(with_ci)) == (SUCCESSES, SUCCESSES)
        else:  # the sixth GI was created, its CI was not: an orphan GI
            assert (len(gis), len(with_ci)) == (SUCCESSES + 1, SUCCESSES)
    finally:
        lab.run(mig_host, "gpuprov-sim fault --clear-fail-after")

    lab.deploy()
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr
    probe = lab.probe(mig_host)
    assert observed_instances(probe) == planned
    for gpu in probe["gpus"]:
        for gi in gpu["gpu_instances"]:
            assert len(gi["compute_instances"]) == 1, (gpu["index"], gi)
