"""The cluster side of `vgpu` hosts: node configs and labels from `gpuprov kube render`, the
labels a re-grouping takes away, and what `verify --kubeconfig` expects each node to advertise."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.cluster.compare import compare_nodes
from gpuprov.core.cluster.manifests import DEFAULT_NAMESPACE, NodeState, render
from gpuprov.core.cluster.nodes import node_change
from gpuprov.core.plan import build
from inventories import write_inventory

INVENTORY = """\
    vgpu = [("hami-1", {"vgpu_flavour": "hami", "kube_node_name": "hami-1.example"}),
            ("volcano-1", {"vgpu_flavour": "volcano", "vgpu_split_count": 4,
                           "vgpu_memory_factor": 1024, "vgpu_memory_scaling": 1.5})]
    shared = (["ts-1"], {"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": 4})
    all = (["hami-1", "volcano-1", "ts-1"], {"gpu_model": "A100-80GB", "gpu_count": 8})
"""


@pytest.fixture
def cluster(tmp_path):
    return build(load(str(write_inventory(tmp_path, INVENTORY))))


def labels(rendered) -> dict[str, dict[str, str]]:
    return {n.host: n.labels for n in rendered.nodes}


def test_hami_nodes_get_gpu_on_and_no_nvidia_device_plugin_config(cluster):
    got = labels(render(cluster, DEFAULT_NAMESPACE))["hami-1"]
    assert got == {
        "gpuprov.io/pool": "vgpu",
        "gpuprov.io/vgpu": "hami",
        "gpu": "on",
        "nvidia.com/gpu.deploy.device-plugin": "false",
    }


def test_volcano_nodes_get_their_flavour_label_and_no_nvidia_device_plugin_config(cluster):
    got = labels(render(cluster, DEFAULT_NAMESPACE))
    assert got["volcano-1"] == {
        "gpuprov.io/pool": "vgpu",
        "gpuprov.io/vgpu": "volcano",
        "nvidia.com/gpu.deploy.device-plugin": "false",
    }
    assert got["ts-1"]["nvidia.com/device-plugin.config"] == "shared-r4"


def test_each_flavour_gets_its_node_config_entry_in_its_plugins_configmap(cluster):
    maps = {
        m["metadata"]["name"]: m
        for m in render(cluster, DEFAULT_NAMESPACE, vgpu_namespace="hami-system").config_maps()
    }
    hami = json.loads(maps["gpuprov-hami-node-config"]["data"]["config.json"])
    volcano = json.loads(maps["volcano-vgpu-node-config"]["data"]["config.json"])
    assert maps["gpuprov-hami-node-config"]["metadata"]["namespace"] == "hami-system"
    assert hami == {
        "nodeconfig": [
            {
                "name": "hami-1.example",
                "operatingmode": "hami-core",
                "devicesplitcount": 10,
                "devicememoryscaling": 1,
                "devicecorescaling": 1,
                "migstrategy": "none",
                "filterdevices": {"uuid": [], "index": []},
            }
        ]
    }
    [entry] = volcano["nodeconfig"]
    assert (entry["name"], entry["devicesplitcount"], entry["devicememoryscaling"]) == (
        "volcano-1",
        4,
        1.5,
    )
    # The NVIDIA plugin's ConfigMap holds no config for vgpu hosts.
    assert sorted(render(cluster, DEFAULT_NAMESPACE).device_plugin_configs) == [
        "shared-r4",
        "whole",
    ]


def test_chart_values_point_each_flavours_plugin_at_gpuprovs_config_and_labels(cluster):
    rendered = render(cluster, DEFAULT_NAMESPACE)
    [hami] = rendered.files["hami-values.yaml"][1]
    [volcano] = rendered.files["volcano-values.yaml"][1]
    plugin = hami["devicePlugin"]
    assert plugin["nodeConfiguration"] == {"externalConfigName": "gpuprov-hami-node-config"}
    assert plugin["nvidiaNodeSelector"] == {"gpu": "on"}
    assert {"key": "gpuprov.io/pool", "operator": "Exists"} in plugin["tolerations"]
    assert volcano["deviceConfig"] == {"nvidia": {"gpuMemoryFactor": 1024, "deviceSplitCount": 4}}
    assert volcano["nodeSelector"] == {"gpuprov.io/vgpu": "volcano"}
    assert volcano["nodeConfig"] == {"enabled": False}


def test_render_without_vgpu_hosts_writes_no_vgpu_files(tmp_path):
    path = write_inventory(
        tmp_path, 'whole_card = (["w1"], {"gpu_model": "A100-80GB", "gpu_count": 1})\n'
    )
    files = render(build(load(str(path))), DEFAULT_NAMESPACE).files
    assert not [name for name in files if "vgpu" in name or "hami" in name or "volcano" in name]


def test_render_cli_writes_the_vgpu_files(tmp_path, cluster):
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["kube", "render", cluster.inventory, "--out", str(out), "--vgpu-namespace", "x"]
    )
    assert result.exit_code == 0, result.output
    [hami_map, volcano_map] = yaml.safe_load_all((out / "vgpu-node-configmaps.yaml").read_text())
    assert hami_map["metadata"] == {"name": "gpuprov-hami-node-config", "namespace": "x"}
    assert volcano_map["metadata"]["name"] == "volcano-vgpu-node-config"


def test_volcano_hosts_with_different_split_counts_warn_about_the_one_flag(tmp_path):
    path = write_inventory(
        tmp_path,
        'vgpu = [("v1", {"vgpu_split_count": 4}), ("v2", {})]\n'
        'all = (["v1", "v2"], {"gpu_model": "A100-80GB", "gpu_count": 1,'
        ' "vgpu_flavour": "volcano"})\n',
    )
    rendered = render(build(load(str(path))), DEFAULT_NAMESPACE)
    [volcano] = rendered.files["volcano-values.yaml"][1]
    assert "deviceSplitCount" not in volcano["deviceConfig"]["nvidia"]
    assert any("split counts 4, 10" in w for w in rendered.warnings)


def test_a_volcano_memory_list_over_the_kubelets_4_mib_warns_with_the_factor_that_fits(tmp_path):
    path = write_inventory(
        tmp_path,
        'vgpu = [("v1", {"vgpu_memory_factor": 10}), ("v2", {"vgpu_memory_factor": 10})]\n'
        'all = (["v1", "v2"], {"gpu_model": "A100-80GB", "gpu_count": 8,'
        ' "vgpu_flavour": "volcano"})\n',
    )
    warnings = render(build(load(str(path))), DEFAULT_NAMESPACE).warnings
    # 8 x 81920 MiB / 10 = 65536 devices x 66 bytes > 4194304; 655360 / 63550 -> 11.
    assert [w.split(":")[0] for w in warnings if "4194304-byte" in w] == ["v1", "v2"]
    assert all("vgpu_memory_factor to 11 or more" in w for w in warnings if "4194304" in w)


def test_the_articles_volcano_hosts_with_factor_16_fit_the_kubelets_limit(tmp_path):
    path = write_inventory(
        tmp_path,
        'vgpu = (["v1"], {"gpu_model": "A100-80GB", "gpu_count": 8,'
        ' "vgpu_flavour": "volcano", "vgpu_memory_factor": 16})\n',
    )
    assert not [
        w for w in render(build(load(str(path))), DEFAULT_NAMESPACE).warnings if "byte" in w
    ]


# --- re-grouping: what `gpuprov kube apply` takes away


def test_a_shared_node_regrouped_to_vgpu_loses_its_device_plugin_config_label(cluster):
    want = next(n for n in render(cluster, DEFAULT_NAMESPACE).nodes if n.host == "hami-1")
    before = NodeState(
        want.name,
        want.host,
        {"gpuprov.io/pool": "shared", "nvidia.com/device-plugin.config": "shared-r4"},
        want.taints,
    )
    node = before.labels_object()
    change = node_change(want, node)
    assert change.labels["nvidia.com/device-plugin.config"] is None
    assert change.labels["gpu"] == "on" and change.labels["gpuprov.io/pool"] == "vgpu"


def test_a_vgpu_node_regrouped_to_shared_loses_gpu_on_and_the_flavour(tmp_path, cluster):
    before = next(n for n in render(cluster, DEFAULT_NAMESPACE).nodes if n.host == "hami-1")
    path = write_inventory(
        tmp_path,
        'shared = ([("hami-1", {"kube_node_name": "hami-1.example"})], {"gpu_model": "A100-80GB",'
        ' "gpu_count": 8, "time_slicing_replicas": 4})\n',
    )
    [want] = render(build(load(str(path))), DEFAULT_NAMESPACE).nodes
    change = node_change(want, before.labels_object())
    removed = {k for k, v in change.labels.items() if v is None}
    assert removed == {"gpu", "gpuprov.io/vgpu", "nvidia.com/gpu.deploy.device-plugin"}
    assert change.labels["nvidia.com/device-plugin.config"] == "shared-r4"


# --- verify --kubeconfig: the advertised counts under each flavour's names

GOOD = {
    "hami-1.example": {"nvidia.com/gpu": "80", "pods": "190"},
    "volcano-1": {
        "volcano.sh/vgpu-number": "32",
        "volcano.sh/vgpu-memory": "640",
        "volcano.sh/vgpu-cores": "800",
        "pods": "142",
    },
    "ts-1": {"nvidia.com/gpu.shared": "8", "pods": "118"},
}


# What each plugin writes for 8 A100-80GB (formats: gpuprov.core.checks.vgpu_register; real
# ones the lab's plugins wrote are in tests/data/vgpu_register/).
UUIDS = [f"GPU-5a1c0d2e-0000-4000-8000-00000000000{i}" for i in range(8)]
ANNOTATIONS = {
    "hami-1.example": {
        "hami.io/node-nvidia-register": json.dumps(
            [
                {
                    "id": u,
                    "index": i,
                    "count": 10,
                    "devmem": 81920,
                    "devcore": 100,
                    "type": "NVIDIA A100-SXM4-80GB",
                    "mode": "hami-core",
                    "health": True,
                }
                for i, u in enumerate(UUIDS)
            ]
        )
    },
    "volcano-1": {
        "volcano.sh/node-vgpu-register": "".join(
            f"{u},4,80,NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core:" for u in UUIDS
        )
    },
    "ts-1": {},
}


@pytest.fixture
def nodes(cluster):
    out = {}
    for want in render(cluster, DEFAULT_NAMESPACE).nodes:
        out[want.name] = {
            "metadata": {
                "name": want.name,
                "labels": dict(want.labels),
                "annotations": dict(ANNOTATIONS[want.name]),
            },
            "spec": {"taints": [t.as_api() for t in want.taints]},
            "status": {"allocatable": dict(GOOD[want.name])},
        }
    return out


def check(cluster, nodes) -> dict[str, list[tuple[str, str, str]]]:
    results = compare_nodes(cluster.hosts, render(cluster, DEFAULT_NAMESPACE).nodes, nodes)
    return {h: [(f.check, f.expected, f.found) for f in fs] for h, fs in results.items() if fs}


def test_vgpu_nodes_advertising_their_plan_have_no_findings(cluster, nodes):
    assert check(cluster, nodes) == {}


def test_a_volcano_node_advertising_another_split_is_named(cluster, nodes):
    nodes["volcano-1"]["status"]["allocatable"]["volcano.sh/vgpu-number"] = "80"
    assert check(cluster, nodes) == {
        "volcano-1": [
            ("kube-allocatable", "volcano.sh/vgpu-number: 32", "volcano.sh/vgpu-number: 80")
        ]
    }


def test_a_volcano_node_without_its_memory_resource_is_named(cluster, nodes):
    del nodes["volcano-1"]["status"]["allocatable"]["volcano.sh/vgpu-memory"]
    [(check_name, expected, found)] = check(cluster, nodes)["volcano-1"]
    assert (expected, found) == ("volcano.sh/vgpu-memory: 640", "no volcano.sh/vgpu-memory")


def test_time_slicing_still_advertised_on_a_vgpu_node_is_named(cluster, nodes):
    nodes["hami-1.example"]["status"]["allocatable"]["nvidia.com/gpu.shared"] = "8"
    assert check(cluster, nodes) == {
        "hami-1": [
            (
                "kube-allocatable",
                "nvidia.com/gpu.shared: 0 (not planned)",
                "nvidia.com/gpu.shared: 8",
            )
        ]
    }


def test_volcano_resources_left_on_a_node_regrouped_to_shared_are_named(cluster, nodes):
    nodes["ts-1"]["status"]["allocatable"]["volcano.sh/vgpu-number"] = "20"
    [(_, expected, _)] = check(cluster, nodes)["ts-1"]
    assert expected == "volcano.sh/vgpu-number: 0 (not planned)"


def test_a_device_plugin_config_label_left_on_a_vgpu_node_is_named(cluster, nodes):
    nodes["hami-1.example"]["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "whole"
    [(check_name, expected, found)] = check(cluster, nodes)["hami-1"]
    assert check_name == "kube-label"
    assert found == "nvidia.com/device-plugin.config=whole"
    assert "NVIDIA's device plugin stays off" in expected


def test_a_hami_node_without_gpu_on_is_named(cluster, nodes):
    del nodes["hami-1.example"]["metadata"]["labels"]["gpu"]
    assert check(cluster, nodes) == {"hami-1": [("kube-label", "gpu=on", "no label gpu")]}


def test_a_volcano_node_whose_plugin_has_not_seen_the_new_split_is_named(cluster, nodes):
    note = nodes["volcano-1"]["metadata"]["annotations"]
    note["volcano.sh/node-vgpu-register"] = note["volcano.sh/node-vgpu-register"].replace(
        ",4,80,", ",10,80,", 1
    )
    [(name, expected, found)] = check(cluster, nodes)["volcano-1"]
    assert (name, expected, found) == (
        "vgpu-register",
        f"{UUIDS[0]} count: 4",
        f"{UUIDS[0]} count: 10",
    )


def test_a_hami_node_without_its_register_annotation_is_named(cluster, nodes):
    nodes["hami-1.example"]["metadata"]["annotations"] = {}
    assert check(cluster, nodes) == {
        "hami-1": [
            (
                "vgpu-register",
                "annotation hami.io/node-nvidia-register",
                "no annotation hami.io/node-nvidia-register",
            )
        ]
    }
