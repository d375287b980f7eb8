"""`gpuprov kube apply` of `vgpu` hosts against a real kube-apiserver and kubectl: the flavour's
node config lands in its ConfigMap, and a node re-grouped from `shared` to `vgpu` and back gets
and loses the labels each mode needs."""

from __future__ import annotations

import json
from pathlib import Path

from test_kube_apply_apiserver import apply, get, make_node, plane  # noqa: F401 (fixture)

from inventories import write_inventory

GROUP = {"gpu_model": "A100-80GB", "gpu_count": 8}


def inventory(directory: Path, node: str, mode: str) -> str:
    data = {"vgpu": {"vgpu_flavour": "hami"}, "shared": {"time_slicing_replicas": 4}}[mode]
    directory.mkdir(exist_ok=True)
    return str(write_inventory(directory, f"{mode} = ([{node!r}], { ({**GROUP, **data})!r})\n"))


def test_a_shared_node_moved_to_hami_vgpu_and_back(plane, tmp_path):  # noqa: F811
    node = "vgpu-regroup-1"
    make_node(plane, tmp_path, node)
    shared = inventory(tmp_path / "shared", node, "shared")
    assert apply(shared, plane.admin_kubeconfig).exit_code == 0

    result = apply(inventory(tmp_path / "vgpu", node, "vgpu"), plane.admin_kubeconfig)
    assert result.exit_code == 0, result.output
    labels = get(plane, "node", node)["metadata"]["labels"]
    assert labels["gpu"] == "on" and labels["gpuprov.io/vgpu"] == "hami"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert "nvidia.com/device-plugin.config" not in labels
    assert labels["example.com/team"] == "team-a"  # foreign, kept
    configmap = get(plane, "configmap", "gpuprov-hami-node-config", "kube-system")
    [entry] = json.loads(configmap["data"]["config.json"])["nodeconfig"]
    assert (entry["name"], entry["devicesplitcount"], entry["operatingmode"]) == (
        node,
        10,
        "hami-core",
    )

    assert apply(shared, plane.admin_kubeconfig).exit_code == 0
    labels = get(plane, "node", node)["metadata"]["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "shared-r4"
    assert not {"gpu", "gpuprov.io/vgpu", "nvidia.com/gpu.deploy.device-plugin"} & set(labels)
