"""The device plugin's health view against gpuprov's (gpuprov.core.checks.plugin_health): the
Node's capacity − allocatable per resource, mapped to GPUs through the plan's shares, instances
and cards. tests/lab/test_plugin_health.py runs the real plugin, kubelet and verify."""

from __future__ import annotations

import pytest

from gpuprov.controller.inventory import load
from gpuprov.core.checks.plugin_health import CHECK, compare, unhealthy_gpus
from gpuprov.core.cluster.compare import compare_node
from gpuprov.core.cluster.manifests import DEFAULT_NAMESPACE, render
from gpuprov.core.findings import Finding
from gpuprov.core.plan import build
from inventories import write_inventory

INVENTORY = """\
    shared = (["ts-1"], {"gpu_model": "A100-80GB", "gpu_count": 8, "time_slicing_replicas": 4})
    mig = (["mig-1"], {"gpu_model": "A100-80GB", "gpu_count": 2, "mig_strategy": "mixed",
                       "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    whole_card = (["train-1"], {"gpu_model": "H200-141GB", "gpu_count": 4})
"""
SHARED = "nvidia.com/gpu.shared"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return build(load(str(write_inventory(tmp_path_factory.mktemp("inv"), INVENTORY))))


def node(want, capacity: dict[str, int], allocatable: dict[str, int], pods: int) -> dict:
    return {
        "metadata": {"name": want.name, "labels": dict(want.labels)},
        "spec": {"taints": [t.as_api() for t in want.taints]},
        "status": {
            "capacity": {k: str(v) for k, v in capacity.items()} | {"pods": str(pods)},
            "allocatable": {k: str(v) for k, v in allocatable.items()} | {"pods": str(pods)},
        },
    }


def judged(cluster, host: str, sick: set[int] | None, unhealthy: dict[str, int]) -> list:
    """compare_node's findings for ``host`` whose plugin marked ``unhealthy`` devices."""
    plan = cluster.host(host)
    want = next(w for w in render(cluster, DEFAULT_NAMESPACE).nodes if w.host == host)
    capacity = dict(plan.resources)
    allocatable = {r: n - unhealthy.get(r, 0) for r, n in capacity.items()}
    found = compare_node(
        plan, want, node(want, capacity, allocatable, plan.kubelet.kubelet_max_pods), sick
    )
    return [(f.check, f.gpu, f.expected, f.found) for f in found]


def test_xid_on_gpu_2_and_the_plugin_dropping_its_4_shares_agree(cluster):
    assert judged(cluster, "ts-1", {2}, {SHARED: 4}) == []


def test_the_plugin_marking_shares_gpuprov_finds_healthy_is_a_disagreement(cluster):
    [finding] = judged(cluster, "ts-1", set(), {SHARED: 4})
    assert finding == (
        CHECK,
        None,
        f"{SHARED}: 0 unhealthy (every GPU healthy, as gpuprov's health finds)",
        f"{SHARED}: 4 of 32 unhealthy per the device plugin (Node capacity 32, allocatable 28)",
    )


def test_a_gpu_gpuprov_finds_unhealthy_that_the_plugin_still_offers_names_that_gpu(cluster):
    [finding] = judged(cluster, "ts-1", {2}, {})
    assert finding[:3] == (CHECK, 2, f"{SHARED}: 4 unhealthy (GPU 2, as gpuprov's health finds)")
    assert "0 of 32 unhealthy" in finding[3]


def test_one_unhealthy_share_too_few_or_too_many_is_a_disagreement(cluster):
    assert [f[0] for f in judged(cluster, "ts-1", {2}, {SHARED: 3})] == [CHECK]
    assert [f[0] for f in judged(cluster, "ts-1", {2}, {SHARED: 8})] == [CHECK]
    assert judged(cluster, "ts-1", {2, 5}, {SHARED: 8}) == []


def test_an_unhealthy_mig_gpu_costs_the_node_its_instances_of_each_profile(cluster):
    lost = {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}
    assert judged(cluster, "mig-1", {1}, lost) == []
    # The plugin marking one instance of the GPU leaves the others' counts disagreeing.
    found = judged(cluster, "mig-1", {1}, {"nvidia.com/mig-1g.10gb": 1})
    assert sorted(f[2].split(":")[0] for f in found) == [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]


def test_a_whole_card_is_one_device(cluster):
    assert judged(cluster, "train-1", {3}, {"nvidia.com/gpu": 1}) == []
    assert [f[0] for f in judged(cluster, "train-1", {3}, {"nvidia.com/gpu": 2})] == [CHECK]


def test_with_gpuprovs_view_the_planned_count_is_checked_against_capacity(cluster):
    # Capacity short of the plan is the plugin's config or discovery, not health.
    plan = cluster.host("ts-1")
    want = next(w for w in render(cluster, DEFAULT_NAMESPACE).nodes if w.host == "ts-1")
    found = compare_node(
        plan, want, node(want, {SHARED: 28}, {SHARED: 28}, plan.kubelet.kubelet_max_pods), set()
    )
    assert [(f.check, f.found) for f in found] == [("kube-allocatable", f"{SHARED}: 28")]


def test_without_gpuprovs_view_unhealthy_devices_are_an_allocatable_shortfall(cluster):
    # --health off, or a host gpuprov could not read: allocatable is compared as before.
    assert judged(cluster, "ts-1", None, {SHARED: 4}) == [
        ("kube-allocatable", None, f"{SHARED}: 32", f"{SHARED}: 28")
    ]


@pytest.mark.parametrize(
    "host, resource, devices", [("ts-1", SHARED, 32), ("train-1", "nvidia.com/gpu", 4)]
)
def test_a_plugin_that_stopped_serving_is_an_allocatable_shortfall_not_a_disagreement(
    cluster, host, resource, devices
):
    # The kubelet marks every device of a disconnected plugin unhealthy and keeps them in
    # capacity for its grace period: capacity N, allocatable 0 (measured in the lab,
    # tests/lab/test_kube_node.py's stopped plugin).
    assert judged(cluster, host, set(), {resource: devices}) == [
        ("kube-allocatable", None, f"{resource}: {devices}", f"{resource}: 0")
    ]


def test_a_resource_the_kubelet_does_not_list_is_left_to_the_allocatable_check(cluster):
    plan = cluster.host("ts-1")
    assert compare(plan, {2}, {SHARED: None}, {SHARED: None}) == []


def test_gpuprovs_view_is_the_gpus_of_its_health_findings():
    found = [
        Finding("h", 2, "xid", "", "", ""),
        Finding("h", 5, "ecc", "", "", ""),
        Finding("h", 0, "mig-mode", "", "", ""),
    ]
    assert unhealthy_gpus(found) == {2, 5}
    assert unhealthy_gpus([]) == set()


@pytest.mark.parametrize(
    "finding",
    [
        Finding("h", None, "unreachable", "", "", ""),
        Finding("h", None, "probe-document", "", "", ""),
        Finding("h", None, "nvml", "", "", ""),
        Finding("h", None, "xid", "", "PCI 0000:3b:00 (no GPU NVML lists)", ""),
    ],
)
def test_no_reading_or_a_host_wide_health_finding_gives_no_view(finding):
    assert unhealthy_gpus([finding]) is None
