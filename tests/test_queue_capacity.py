"""verify's comparison of live queue quotas with the live capacity of the nodes they can use
(gpuprov.core.cluster.queue_capacity): a node lost, cordoned or re-grouped leaves a quota above
capacity, a finding naming the queue, the pool and both numbers."""

from __future__ import annotations

from gpuprov.core.cluster.queue_capacity import kueue_findings, live_capacity, volcano_findings

POOL = "gpuprov.io/pool"


def node(pool: str, allocatable: dict[str, str], cordoned: bool = False) -> dict:
    return {
        "metadata": {"labels": {POOL: pool}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": allocatable},
    }


def flavor(name: str, pool: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeLabels": {POOL: pool}}}


def cluster_queue(name: str, flavor_name: str, resource: str, nominal: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": [resource],
                    "flavors": [
                        {
                            "name": flavor_name,
                            "resources": [{"name": resource, "nominalQuota": nominal}],
                        }
                    ],
                }
            ]
        },
    }


SHARED = "nvidia.com/gpu.shared"
TEAMS = [
    cluster_queue("team-a", "shared", SHARED, "16"),
    cluster_queue("team-b", "shared", SHARED, "16"),
]


def test_quotas_within_the_pools_nodes_are_no_finding():
    nodes = {"a100-1": node("shared", {SHARED: "32"})}
    assert kueue_findings(TEAMS, [flavor("shared", "shared")], nodes) == {}


def test_a_host_moved_to_another_pool_leaves_every_queue_of_its_flavor_above_capacity():
    nodes = {"a100-1": node("whole_card", {"nvidia.com/gpu": "8"})}
    found = kueue_findings(TEAMS, [flavor("shared", "shared")], nodes)
    assert sorted(found) == ["queue team-a", "queue team-b"]
    (finding,) = found["queue team-a"]
    assert finding.check == "kube-queues"
    assert finding.expected == f"pool (flavor) shared: {SHARED} quota within the live capacity"
    assert finding.found == (
        f"{SHARED}: quota 16, the ClusterQueues' quotas sum to 32 (team-a 16, team-b 16); "
        "live capacity 0 on 0 schedulable nodes with gpuprov.io/pool=shared"
    )


def test_a_cordoned_node_counts_for_nothing():
    nodes = {
        "a100-1": node("shared", {SHARED: "32"}, cordoned=True),
        "a100-2": node("shared", {SHARED: "16"}),
    }
    assert live_capacity({POOL: "shared"}, nodes) == ({SHARED: 16}, 1)
    found = kueue_findings(TEAMS, [flavor("shared", "shared")], nodes)
    assert "live capacity 16 on 1 schedulable node with" in found["queue team-a"][0].found


def test_a_quota_of_zero_or_a_flavor_kueue_cannot_find_is_no_finding():
    queues = [cluster_queue("a", "shared", SHARED, "0"), cluster_queue("b", "gone", SHARED, "4")]
    assert kueue_findings(queues, [flavor("shared", "shared")], {}) == {}


def test_volcano_deserved_of_top_level_queues_sums_against_the_whole_cluster():
    def queue(name, parent=None, **spec):
        return {
            "metadata": {"name": name},
            "spec": {**spec, **({"parent": parent} if parent else {})},
        }

    queues = [
        queue("org", deserved={SHARED: "24"}, capability={SHARED: "24"}),
        queue("child", "org", deserved={SHARED: "24"}),
        queue("solo", deserved={SHARED: "16"}, capability={SHARED: "40"}),
    ]
    nodes = {"a": node("shared", {SHARED: "32"})}
    found = volcano_findings(queues, nodes)
    assert sorted(found) == ["queue org", "queue solo"]  # the child counts within its parent
    assert found["queue org"][0].found == (
        f"{SHARED}: deserved 24, the queues' deserved sum to 40 (org 24, solo 16); live capacity "
        "32 on 1 schedulable node"
    )
    assert [f.found for f in found["queue solo"]] == [
        f"{SHARED}: capability 40; live capacity 32 on 1 schedulable node",
        f"{SHARED}: deserved 16, the queues' deserved sum to 40 (org 24, solo 16); live capacity "
        "32 on 1 schedulable node",
    ]
