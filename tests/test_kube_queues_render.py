"""`gpuprov kube render --queues kueue|volcano`: the teams' queue objects with the plan's numbers,
and each of Kueue's limits and Volcano's queue rules refused before anything is written.
(That the real Kueue and Volcano accept what is rendered: tests/test_lab_queues_kueue.py and tests/test_lab_queues_volcano.py.)"""

from __future__ import annotations

import textwrap

import yaml
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.core.cluster.kueue import limit_problems
from gpuprov.core.cluster.volcano_queues import rule_problems
from inventories import write_inventory

POOLS = """\
    shared = (["ts-1", "ts-2"],
              {"gpu_model": "A100-80GB", "gpu_count": 8, "time_slicing_replicas": 4})
    mig = (["mig-1"], {"gpu_model": "H100-80GB", "gpu_count": 8, "mig_strategy": "mixed",
                       "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    whole_card = (["wc-1"], {"gpu_model": "H200-141GB", "gpu_count": 4})
"""
TEAMS = textwrap.dedent("""
    kube_queues = {
        "team-a": {"quota": {"shared": 0.5, "whole_card": 1}, "cohort": "gpus",
                   "borrowing_limit": {"shared": 0.25}, "namespaces": ["ml", "infer"]},
        "team-b": {"quota": {"shared": 0.5, "mig": {"nvidia.com/mig-1g.10gb": 8}},
                   "cohort": "gpus", "lending_limit": {"shared": 0.25},
                   "guarantee": {"mig": {"nvidia.com/mig-1g.10gb": 2}}},
        "solo": {"quota": {"whole_card": 2}, "weight": 3, "priority": 5},
    }
""")


def render(tmp_path, scheduler: str, all_data: str = TEAMS, inventory: str = POOLS, **groups):
    path = write_inventory(tmp_path, inventory, all=all_data, **groups)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["kube", "render", str(path), "--queues", scheduler, "--out", str(out)]
    )
    return path, result, out


def documents(out, name: str) -> list[dict]:
    return list(yaml.safe_load_all((out / name).read_text()))


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {
        d["metadata"].get("namespace", "") + "/" + d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == kind
    }


def test_kueue_flavor_per_pool_selects_its_nodes_and_tolerates_its_taint(tmp_path):
    _, result, out = render(tmp_path, "kueue")
    assert result.exit_code == 0, result.output
    flavors = by_kind(documents(out, "kueue-queues.yaml"), "ResourceFlavor")
    assert sorted(flavors) == ["/mig", "/shared", "/whole-card"]
    spec = flavors["/whole-card"]["spec"]
    assert spec["nodeLabels"] == {"gpuprov.io/pool": "whole_card"}
    assert spec["nodeTaints"] == [
        {"key": "gpuprov.io/pool", "value": "whole_card", "effect": "NoSchedule"}
    ]
    assert spec["tolerations"] == [
        {
            "key": "gpuprov.io/pool",
            "operator": "Equal",
            "value": "whole_card",
            "effect": "NoSchedule",
        }
    ]


def test_kueue_cluster_queues_carry_the_plans_numbers_cohort_and_limits(tmp_path):
    _, result, out = render(tmp_path, "kueue")
    assert result.exit_code == 0, result.output
    docs = documents(out, "kueue-queues.yaml")
    queues = by_kind(docs, "ClusterQueue")
    a, b, solo = (queues[f"/{t}"]["spec"] for t in ("team-a", "team-b", "solo"))
    assert a["cohortName"] == b["cohortName"] == "gpus" and "cohortName" not in solo
    groups = {tuple(g["coveredResources"]): g["flavors"] for g in a["resourceGroups"]}
    assert list(groups) == [
        ("nvidia.com/gpu.shared",),
        ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"),
        ("nvidia.com/gpu",),
    ]
    assert groups[("nvidia.com/gpu.shared",)] == [
        {
            "name": "shared",
            "resources": [
                {"name": "nvidia.com/gpu.shared", "nominalQuota": "32", "borrowingLimit": "16"}
            ],
        }
    ]
    # No quota in mig, but the cohort lets it borrow there: the flavor is listed at 0.
    mig = groups[("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb")]
    assert [r["nominalQuota"] for r in mig[0]["resources"]] == ["0", "0", "0"]
    b_shared = b["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert b_shared == {"name": "nvidia.com/gpu.shared", "nominalQuota": "32", "lendingLimit": "16"}
    assert a["namespaceSelector"]["matchExpressions"][0]["values"] == ["ml", "infer"]
    assert solo["fairSharing"] == {"weight": 3}
    local = by_kind(docs, "LocalQueue")
    assert sorted(local) == ["infer/team-a", "ml/team-a", "solo/solo", "team-b/team-b"]
    assert local["ml/team-a"]["spec"] == {"clusterQueue": "team-a"}
    assert sorted(by_kind(docs, "Namespace")) == ["/infer", "/ml", "/solo", "/team-b"]


def test_kueue_pools_sharing_a_resource_name_share_one_resource_group(tmp_path):
    inventory = POOLS + (
        '    vgpu = (["vg-1"], {"gpu_model": "A100-80GB", "gpu_count": 2, '
        '"vgpu_flavour": "hami"})\n'
    )
    teams = 'kube_queues = {"a": {"quota": {"whole_card": 1.0, "vgpu": 0.5}}}'
    _, result, out = render(tmp_path, "kueue", teams, inventory)
    assert result.exit_code == 0, result.output
    spec = by_kind(documents(out, "kueue-queues.yaml"), "ClusterQueue")["/a"]["spec"]
    group = next(g for g in spec["resourceGroups"] if "nvidia.com/gpu" in g["coveredResources"])
    assert group["coveredResources"] == [
        "nvidia.com/gpu",
        "nvidia.com/gpucores",
        "nvidia.com/gpumem",
    ]
    rows = {
        f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]
    }
    # Each flavor lists every covered resource, in order; whole cards have no gpumem (0).
    assert rows == {
        "whole-card": {"nvidia.com/gpu": "4", "nvidia.com/gpucores": "0", "nvidia.com/gpumem": "0"},
        "vgpu": {
            "nvidia.com/gpu": "10",
            "nvidia.com/gpucores": "100",
            "nvidia.com/gpumem": "81920",
        },
    }
    assert limit_problems(by_kind(documents(out, "kueue-queues.yaml"), "ClusterQueue")["/a"]) == []


def test_a_pool_with_more_labels_than_a_flavor_takes_is_refused_naming_kueues_limit(tmp_path):
    labels = {f"example.com/l{i}": "x" for i in range(9)}
    path, result, _ = render(tmp_path, "kueue", TEAMS + f"\nkube_node_labels = {labels!r}\n")
    assert result.exit_code == 2, result.output
    assert (
        "kube_queues: ResourceFlavor shared: 9 nodeLabels, above Kueue's limit of 8"
        in result.output
    )


def test_kueue_limits_name_the_broken_limit():
    def queue(groups):
        return {
            "kind": "ClusterQueue",
            "metadata": {"name": "q"},
            "spec": {"resourceGroups": groups},
        }

    def group(resources, flavors, listed=None):
        rows = [{"name": r, "nominalQuota": "1"} for r in (listed or resources)]
        return {
            "coveredResources": resources,
            "flavors": [{"name": f, "resources": rows} for f in flavors],
        }

    assert limit_problems(queue([group(["a", "b"], ["f"], ["b", "a"])])) == [
        "ClusterQueue q: flavor f lists b, a; Kueue needs the group's covered resources in order: a, b"
    ]
    assert (
        "17 resource groups, above Kueue's limit of 16"
        in limit_problems(queue([group([f"r{i}"], [f"f{i}"]) for i in range(17)]))[0]
    )
    assert limit_problems(queue([group(["a"], ["f"]), group(["a"], ["g"])])) == [
        "ClusterQueue q: covered resources a in more than one resource group"
    ]
    many = limit_problems(queue([group([f"r{i}" for i in range(65)], ["f"])]))
    assert "ClusterQueue q: a resource group covers 65 resources (1 to 64)" in many
    combos = limit_problems(
        queue([group([f"r{i}" for i in range(9)], [f"f{i}" for i in range(57)])])
    )
    assert combos == ["ClusterQueue q: a resource group has more than 512 flavor x resource quotas"]


def test_kueue_refuses_nested_teams(tmp_path):
    teams = 'kube_queues = {"org": {"quota": {"shared": 1.0}}, "a": {"quota": {"shared": 0.5}, "parent": "org"}}'
    _, result, _ = render(tmp_path, "kueue", teams)
    assert result.exit_code == 2
    assert "team a has a parent: nested teams are Volcano queues" in result.output


def test_queues_without_teams_are_refused(tmp_path):
    _, result, _ = render(tmp_path, "volcano", "")
    assert result.exit_code == 2
    assert (
        "kube_queues: --queues volcano needs teams, and kube_queues declares none" in result.output
    )


def test_without_queues_nothing_of_them_is_rendered(tmp_path):
    path = write_inventory(tmp_path, POOLS, all=TEAMS)
    result = CliRunner().invoke(main, ["kube", "render", str(path)])
    assert result.exit_code == 0, result.output
    assert "kueue.x-k8s.io" not in result.output and "scheduling.volcano.sh" not in result.output


def test_volcano_queue_deserves_its_quota_and_reaches_what_its_cohort_allows(tmp_path):
    _, result, out = render(tmp_path, "volcano")
    assert result.exit_code == 0, result.output
    queues = by_kind(documents(out, "volcano-queues.yaml"), "Queue")
    a, b, solo = (queues[f"/{t}"]["spec"] for t in ("team-a", "team-b", "solo"))
    assert a["deserved"] == {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "32"}
    # quota + borrowing_limit where it has one; the pool's capacity where the cohort has no limit
    assert a["capability"] == {"nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "48"}
    assert b["capability"] == {"nvidia.com/gpu.shared": "64", "nvidia.com/mig-1g.10gb": "16"}
    assert b["guarantee"] == {"resource": {"nvidia.com/mig-1g.10gb": "2"}}
    # No cohort: it cannot borrow.
    assert solo == {
        "weight": 3,
        "priority": 5,
        "capability": {"nvidia.com/gpu": "2"},
        "deserved": {"nvidia.com/gpu": "2"},
    }


def test_volcano_scheduler_configuration_has_one_queue_plugin(tmp_path):
    _, result, out = render(tmp_path, "volcano")
    assert result.exit_code == 0, result.output
    (config_map,) = documents(out, "volcano-scheduler-configmap.yaml")
    assert (config_map["metadata"]["name"], config_map["metadata"]["namespace"]) == (
        "volcano-scheduler-configmap",
        "volcano-system",
    )
    conf = yaml.safe_load(config_map["data"]["volcano-scheduler.conf"])
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "capacity" in plugins and "proportion" not in plugins and "reclaim" in conf["actions"]
    _, result, out = render(
        tmp_path, "volcano", TEAMS + '\nkube_queues_volcano_plugin = "proportion"\n'
    )
    conf = yaml.safe_load(
        documents(out, "volcano-scheduler-configmap.yaml")[0]["data"]["volcano-scheduler.conf"]
    )
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "proportion" in plugins and "capacity" not in plugins


def test_volcano_nested_teams_stay_within_their_parent_and_turn_on_hierarchy(tmp_path):
    teams = textwrap.dedent("""
        kube_queues = {
            "org": {"quota": {"shared": 0.5}},
            "a": {"quota": {"shared": 0.25}, "parent": "org", "cohort": "c"},
            "b": {"quota": {"shared": 0.25}, "parent": "org"},
        }
    """)
    _, result, out = render(tmp_path, "volcano", teams)
    assert result.exit_code == 0, result.output
    queues = by_kind(documents(out, "volcano-queues.yaml"), "Queue")
    assert list(queues) == ["/org", "/a", "/b"]  # parents first, as the webhook needs them
    assert queues["/a"]["spec"]["parent"] == "org"
    # a may borrow (cohort), but never past its parent's capability.
    assert queues["/a"]["spec"]["capability"] == {"nvidia.com/gpu.shared": "32"}
    conf = yaml.safe_load(
        documents(out, "volcano-scheduler-configmap.yaml")[0]["data"]["volcano-scheduler.conf"]
    )
    capacity = next(p for t in conf["tiers"] for p in t["plugins"] if p["name"] == "capacity")
    assert capacity == {"name": "capacity", "enableHierarchy": True}
    _, result, _ = render(
        tmp_path, "volcano", teams + 'kube_queues_volcano_plugin = "proportion"\n'
    )
    assert result.exit_code == 2
    assert (
        "kube_queues_volcano_plugin: team a has a parent, and nested queues need the capacity plugin"
        in result.output
    )


def test_volcano_vgpu_pool_turns_on_deviceshare(tmp_path):
    inventory = POOLS + (
        '    vgpu = (["vg-1"], {"gpu_model": "A100-80GB", "gpu_count": 2, '
        '"vgpu_flavour": "volcano"})\n'
    )
    _, result, out = render(
        tmp_path, "volcano", 'kube_queues = {"a": {"quota": {"vgpu": 0.5}}}', inventory
    )
    assert result.exit_code == 0, result.output
    spec = documents(out, "volcano-queues.yaml")[0]["spec"]
    assert spec["deserved"] == {
        "volcano.sh/vgpu-cores": "100",
        "volcano.sh/vgpu-memory": "81920",
        "volcano.sh/vgpu-number": "10",
    }
    conf = yaml.safe_load(
        documents(out, "volcano-scheduler-configmap.yaml")[0]["data"]["volcano-scheduler.conf"]
    )
    share = next(p for t in conf["tiers"] for p in t["plugins"] if p["name"] == "deviceshare")
    assert share["arguments"] == {"deviceshare.VGPUEnable": True}


def test_volcano_rules_name_the_broken_rule():
    def queue(name, parent=None, **spec):
        return {
            "metadata": {"name": name},
            "spec": {**spec, **({"parent": parent} if parent else {})},
        }

    assert rule_problems([queue("q", deserved={"x": "4"}, capability={"x": "2"})]) == [
        "queue q: deserved x 4 is above capability 2"
    ]
    assert rule_problems([queue("q", guarantee={"resource": {"x": "1"}})]) == [
        "queue q: guarantee x has no deserved"
    ]
    family = [
        queue("p", deserved={"x": "4"}, capability={"x": "4"}),
        queue("c1", "p", deserved={"x": "3"}, capability={"x": "8"}),
        queue("c2", "p", deserved={"x": "2"}),
    ]
    assert rule_problems(family) == [
        "queue c1: capability x 8 is above its ancestor p's 4",
        "queue p: its children's deserved x sums to 5, above its own 4",
    ]
