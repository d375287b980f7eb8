"""A `vgpu` host on the lab: deployed and verified, a second deploy changes nothing, and
re-grouping vgpu -> mig -> shared leaves nothing of the mode it left."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from gpuprov_lab import vgpu_plugin_service

from gpuprov.host.contract import MIG_LAYOUT_PATH, MIG_UNIT_PATH, kubelet_drop_in_path

pytestmark = pytest.mark.lab

PLUGIN_CONFIG = "/etc/nvidia/device-plugin/config.yaml"


def moved(lab, tmp_path: Path, host: str, group: str, data: str, host_data: str = "{}") -> Path:
    """The lab inventory with ``host`` taken out of shared and put in ``group`` with ``data``,
    ``host_data`` added to its own (host data wins over every group's)."""
    return lab.inventory_copy(
        tmp_path / group,
        inventory_code=(
            f"\n# {host} moved from shared to {group}.\n"
            f"{group} = ([(h[0], {{**h[1], **{host_data}}}) for h in shared[0] "
            f"if h[0] == {host!r}], {data})\n"
            f"shared = ([h for h in shared[0] if h[0] != {host!r}], shared[1])\n"
        ),
    )


def verified(lab, inventory, host: str) -> None:
    result = lab.verify(inventory, "--limit", host)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_shared_host_moved_to_vgpu_then_mig_then_back_verifies_with_no_leftovers(
    lab, deployed, tmp_path
):
    host = lab.in_group("shared")[0].name  # an A100: MIG-capable
    node = lab.testinfra(host)
    assert node.file(PLUGIN_CONFIG).exists  # time-slicing, from the lab's own plan

    # HAMi's real plugin serves the shares (tests/lab/test_vgpu_plugins.py), so verify's
    # on-node check of the kubelet's devices stays on.
    as_vgpu = moved(lab, tmp_path, host, "vgpu", "{'vgpu_flavour': 'hami'}")
    plan = lab.plan(as_vgpu)[host]
    assert plan["vgpu"]["advertised"]["nvidia.com/gpu"] == plan["gpu_count"] * 10
    lab.deploy(as_vgpu, "--limit", host)
    lab.kube_apply(as_vgpu)
    vgpu_plugin_service.start(lab, host, "hami", lab.kube_render(as_vgpu, tmp_path / "rendered"))
    lab.wait_nodes(
        lambda n: n[host]["allocatable"].get("nvidia.com/gpu") == str(plan["gpu_count"] * 10),
        timeout=90,
        what=f"{host}: HAMi's nvidia.com/gpu",
    )
    verified(lab, as_vgpu, host)
    # NVIDIA's device plugin config is gone (the HAMi plugin serves the GPUs), MIG is off,
    # maxPods makes room for every share, and nvidia is containerd's default runtime.
    assert not node.file(PLUGIN_CONFIG).exists
    assert all(g["mig"]["current"] is False for g in lab.probe(host)["gpus"])
    drop_in = yaml.safe_load(
        node.file(kubelet_drop_in_path("/etc/kubernetes/kubelet.conf.d")).content_string
    )
    assert drop_in["maxPods"] == plan["kubelet_max_pods"] == 110 + plan["gpu_count"] * 10
    dump = lab.run(host, "containerd config dump").stdout
    assert 'default_runtime_name = "nvidia"' in dump

    again = lab.deploy(as_vgpu, "--limit", host)
    assert "Starting operation" not in again.stdout, again.stdout[-4000:]

    vgpu_plugin_service.stop(lab, host)  # NVIDIA's plugin back for the next modes
    as_mig = lab.inventory_copy(
        tmp_path / "mig",
        inventory_code=(
            f"\n# {host} moved from shared to mig.\n"
            f"mig = (mig[0] + [h for h in shared[0] if h[0] == {host!r}], mig[1])\n"
            f"shared = ([h for h in shared[0] if h[0] != {host!r}], shared[1])\n"
        ),
    )
    lab.deploy(as_mig, "--limit", host)
    verified(lab, as_mig, host)
    assert node.file(MIG_LAYOUT_PATH).is_file

    lab.deploy(None, "--limit", host)
    lab.kube_apply(None)  # the node's labels back to shared's
    verified(lab, None, host)
    assert not node.file(MIG_LAYOUT_PATH).exists and not node.file(MIG_UNIT_PATH).exists
    config = yaml.safe_load(node.file(PLUGIN_CONFIG).content_string)
    assert config["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
