"""The cluster side of `gpuprov verify`: plan + Node objects -> findings (gpuprov.core.cluster.compare).

Node objects here are written as the API server lists them (``kubectl get nodes -o json``);
tests/test_kube_verify_apiserver.py runs the same comparison against a real API server.
"""

from __future__ import annotations

import pytest

from gpuprov.controller.inventory import load
from gpuprov.core.cluster.compare import api_unreachable, compare_nodes, count
from gpuprov.core.cluster.manifests import DEFAULT_NAMESPACE, render
from gpuprov.core.plan import build
from inventories import write_inventory

INVENTORY = """\
    shared = (["ts-1"], {"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": 4})
    mig = (["mig-1"], {"gpu_model": "A100-80GB", "gpu_count": 2,
                       "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    whole_card = ([("train-1", {"kube_node_name": "train-1.example"})],
                  {"gpu_model": "H200-141GB", "gpu_count": 4})
"""

# What a node advertises when everything went to plan (kubelet + device plugin).
GOOD = {
    "ts-1": {"nvidia.com/gpu.shared": "8", "pods": "118", "cpu": "64"},
    "mig-1": {
        "nvidia.com/mig-3g.40gb": "2",
        "nvidia.com/mig-2g.20gb": "2",
        "nvidia.com/mig-1g.10gb": "4",
        "pods": "110",
    },
    "train-1.example": {"nvidia.com/gpu": "4", "pods": "110"},
}


@pytest.fixture
def cluster(tmp_path):
    return build(load(str(write_inventory(tmp_path, INVENTORY))))


@pytest.fixture
def nodes(cluster):
    """Node objects as gpuprov kube apply leaves them, advertising the plan."""
    out = {}
    for want in render(cluster, DEFAULT_NAMESPACE).nodes:
        out[want.name] = {
            "metadata": {"name": want.name, "labels": {"kubernetes.io/os": "linux", **want.labels}},
            "spec": {
                "taints": [{"key": "other", "effect": "NoExecute"}]
                + [t.as_api() for t in want.taints]
            },
            "status": {"allocatable": dict(GOOD[want.name])},
        }
    return out


def check(cluster, nodes) -> dict[str, list[tuple[str, str, str]]]:
    wanted = render(cluster, DEFAULT_NAMESPACE).nodes
    results = compare_nodes(cluster.hosts, wanted, nodes)
    return {
        host: [(f.check, f.expected, f.found) for f in found]
        for host, found in results.items()
        if found
    }


def test_nodes_as_planned_have_no_findings(cluster, nodes):
    assert check(cluster, nodes) == {}


def test_planned_counts_cover_time_slicing_mig_mixed_and_whole_cards(cluster):
    assert {h.name: h.resources for h in cluster.hosts} == {
        "ts-1": {"nvidia.com/gpu.shared": 8},
        "mig-1": {
            "nvidia.com/mig-1g.10gb": 4,
            "nvidia.com/mig-2g.20gb": 2,
            "nvidia.com/mig-3g.40gb": 2,
        },
        "train-1": {"nvidia.com/gpu": 4},
    }


def test_allocatable_short_of_the_plan_names_the_resource(cluster, nodes):
    nodes["ts-1"]["status"]["allocatable"]["nvidia.com/gpu.shared"] = "4"
    del nodes["mig-1"]["status"]["allocatable"]["nvidia.com/mig-1g.10gb"]
    assert check(cluster, nodes) == {
        "ts-1": [("kube-allocatable", "nvidia.com/gpu.shared: 8", "nvidia.com/gpu.shared: 4")],
        "mig-1": [("kube-allocatable", "nvidia.com/mig-1g.10gb: 4", "no nvidia.com/mig-1g.10gb")],
    }


def test_a_gpu_resource_the_plan_does_not_have_is_a_finding_unless_it_is_zero(cluster, nodes):
    allocatable = nodes["mig-1"]["status"]["allocatable"]
    allocatable["nvidia.com/mig-7g.80gb"] = "1"  # the old layout, still advertised
    allocatable["nvidia.com/gpu"] = "0"  # a leftover entry at 0 is fine
    allocatable["example.com/fpga"] = "2"  # not a GPU resource: not gpuprov's business
    assert check(cluster, nodes) == {
        "mig-1": [
            (
                "kube-allocatable",
                "nvidia.com/mig-7g.80gb: 0 (not planned)",
                "nvidia.com/mig-7g.80gb: 1",
            )
        ]
    }


def test_pods_other_than_the_planned_max_pods_is_a_finding(cluster, nodes):
    nodes["ts-1"]["status"]["allocatable"]["pods"] = "110"
    del nodes["train-1.example"]["status"]["allocatable"]["pods"]
    assert check(cluster, nodes) == {
        "ts-1": [("kube-pods", "pods: 118", "pods: 110")],
        "train-1": [("kube-pods", "pods: 110", "no pods in status.allocatable")],
    }


def test_a_cordoned_node_is_a_finding(cluster, nodes):
    nodes["mig-1"]["spec"]["unschedulable"] = True
    assert check(cluster, nodes) == {
        "mig-1": [("kube-cordon", "schedulable", "cordoned (spec.unschedulable)")]
    }


def test_missing_or_wrong_labels_and_taints_are_findings_and_foreign_ones_are_not(cluster, nodes):
    labels = nodes["ts-1"]["metadata"]["labels"]
    labels["nvidia.com/device-plugin.config"] = "shared-r2"
    del labels["gpuprov.io/pool"]
    labels["example.com/team"] = "a"
    nodes["train-1.example"]["spec"]["taints"] = [
        {"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"},
        {"key": "other", "effect": "NoExecute"},
    ]
    assert check(cluster, nodes) == {
        "ts-1": [
            ("kube-label", "gpuprov.io/pool=shared", "no label gpuprov.io/pool"),
            (
                "kube-label",
                "nvidia.com/device-plugin.config=shared-r4",
                "nvidia.com/device-plugin.config=shared-r2",
            ),
        ],
        "train-1": [
            (
                "kube-taint",
                "gpuprov.io/pool=whole_card:NoSchedule",
                "gpuprov.io/pool=shared:NoSchedule",
            )
        ],
    }
    del nodes["train-1.example"]["spec"]["taints"]
    assert check(cluster, nodes)["train-1"] == [
        (
            "kube-taint",
            "gpuprov.io/pool=whole_card:NoSchedule",
            "no taint gpuprov.io/pool:NoSchedule",
        )
    ]


def test_a_missing_node_is_named_by_its_kubernetes_name(cluster, nodes):
    del nodes["train-1.example"]
    [finding] = compare_nodes(cluster.hosts, render(cluster, DEFAULT_NAMESPACE).nodes, nodes)[
        "train-1"
    ]
    assert (finding.check, finding.found) == ("kube-node", "no node train-1.example")
    assert "kube_node_name" in finding.hint


def test_an_unreadable_node_list_is_one_finding_per_host(cluster):
    results = api_unreachable(cluster.hosts, "listing nodes failed: the API server is unreachable")
    assert sorted(results) == ["mig-1", "train-1", "ts-1"]
    assert [(f.check, f.found) for f in results["ts-1"]] == [
        ("kube-api", "listing nodes failed: the API server is unreachable")
    ]


def test_quantities_are_read_as_the_api_server_writes_them(cluster, nodes):
    assert count("1k") == 1000 and count("2Ki") == 2048 and count("1500m") is None
    nodes["ts-1"]["status"]["allocatable"]["pods"] = "1k"
    nodes["ts-1"]["status"]["allocatable"]["nvidia.com/gpu.shared"] = "eight"
    assert check(cluster, nodes) == {
        "ts-1": [
            ("kube-allocatable", "nvidia.com/gpu.shared: 8", "nvidia.com/gpu.shared: eight"),
            ("kube-pods", "pods: 118", "pods: 1k"),
        ]
    }
