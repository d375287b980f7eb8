"""Re-grouping on the lab: a host moved from shared to mig and back is, each time, what its
new group plans, with nothing of the mode it left."""

from __future__ import annotations

import pytest
import yaml
from gpuprov_lab.testing import observed_instances, planned_instances

from gpuprov.host.contract import MIG_LAYOUT_PATH, MIG_UNIT, MIG_UNIT_PATH

pytestmark = pytest.mark.lab

PLUGIN_CONFIG = "/etc/nvidia/device-plugin/config.yaml"


def plugin_config(lab, host: str) -> dict:
    return yaml.safe_load(lab.run(host, f"cat {PLUGIN_CONFIG}").stdout)


def test_a_shared_host_moved_to_mig_and_back_verifies_with_no_leftovers(lab, deployed, tmp_path):
    host = lab.in_group("shared")[0].name  # an A100: MIG-capable
    moved = lab.inventory_copy(
        tmp_path,
        inventory_code=(
            f"\n# {host} moved from shared to mig.\n"
            f"mig = (mig[0] + [h for h in shared[0] if h[0] == {host!r}], mig[1])\n"
            f"shared = ([h for h in shared[0] if h[0] != {host!r}], shared[1])\n"
        ),
    )
    as_mig = lab.plan(moved)[host]
    assert as_mig["mode"] == "mig"
    node = lab.testinfra(host)

    lab.deploy(moved)
    result = lab.verify(moved)
    assert result.returncode == 0, result.stdout + result.stderr
    assert node.file(MIG_LAYOUT_PATH).is_file and node.service(MIG_UNIT).is_enabled
    config = plugin_config(lab, host)
    assert "sharing" not in config and config["flags"]["migStrategy"] == as_mig["mig_strategy"]
    probe = lab.probe(host)
    assert all(g["mig"] == {"current": True, "pending": True} for g in probe["gpus"])
    assert observed_instances(probe) == planned_instances(as_mig)

    lab.deploy()
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr
    assert not node.file(MIG_LAYOUT_PATH).exists and not node.file(MIG_UNIT_PATH).exists
    assert node.check_output(f"systemctl show -P LoadState {MIG_UNIT}") == "not-found"
    probe = lab.probe(host)
    assert all(
        g["mig"] == {"current": False, "pending": False} and g["gpu_instances"] == []
        for g in probe["gpus"]
    )
    replicas = lab.plan()[host]["time_slicing"]["replicas"]
    time_slicing = plugin_config(lab, host)["sharing"]["timeSlicing"]
    assert time_slicing["resources"] == [{"name": "nvidia.com/gpu", "replicas": replicas}]
