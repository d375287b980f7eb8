"""The teams' queues (`kube_queues`) against the plan's pools: every share a number of what the
pool's nodes advertise, and every impossible queue refused at plan time (exit 2, one line
naming file, group, key, and the pool, resource and sum)."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.cluster.queues import plan_queues
from gpuprov.core.plan import build
from gpuprov.core.queues import TEAM_KEYS
from inventories import write_inventory

# shared: 2 x 8 A100 x 4 replicas = 64 gpu.shared; mig: 8 H100 x (1g x 2, 2g, 3g) = 16/8/8;
# whole_card: 4 H200.
POOLS = """\
    shared = (["ts-1", "ts-2"],
              {"gpu_model": "A100-80GB", "gpu_count": 8, "time_slicing_replicas": 4})
    mig = (["mig-1"], {"gpu_model": "H100-80GB", "gpu_count": 8, "mig_strategy": "mixed",
                       "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    whole_card = (["wc-1"], {"gpu_model": "H200-141GB", "gpu_count": 4})
"""


def plan_with(tmp_path, all_data: str, inventory: str = POOLS, **groups: str):
    path = write_inventory(tmp_path, inventory, all=all_data, **groups)
    return path, CliRunner().invoke(main, ["plan", str(path)])


def queue_plan(tmp_path, all_data: str):
    path = write_inventory(tmp_path, POOLS, all=all_data)
    inventory = load(str(path))
    return plan_queues(inventory, build(inventory))


def refused(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, result.output)
    return result.output


def test_fractions_and_counts_become_numbers_of_what_the_pools_advertise(tmp_path):
    plan = queue_plan(
        tmp_path,
        """
        kube_queues = {
            "team-a": {"quota": {"shared": 0.5, "whole_card": 1}, "cohort": "gpus",
                       "borrowing_limit": {"shared": 0.25}},
            "team-b": {"quota": {"mig": {"nvidia.com/mig-1g.10gb": 0.5, "nvidia.com/mig-3g.40gb": 3}},
                       "cohort": "gpus", "lending_limit": {"mig": {"nvidia.com/mig-3g.40gb": 1}}},
        }
        """,
    )
    assert plan.pool("shared").capacity == {"nvidia.com/gpu.shared": 64}
    assert plan.pool("mig").capacity == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    a, b = plan.queue("team-a"), plan.queue("team-b")
    assert a.quota == {"shared": {"nvidia.com/gpu.shared": 32}, "whole_card": {"nvidia.com/gpu": 1}}
    assert a.borrowing_limit == {"shared": {"nvidia.com/gpu.shared": 16}}
    assert b.quota == {"mig": {"nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-3g.40gb": 3}}
    assert b.lending_limit == {"mig": {"nvidia.com/mig-3g.40gb": 1}}
    assert b.namespaces == ("team-b",)
    assert plan.source == "group all, group_data/all.py"


def test_a_fraction_rounds_down_so_the_shares_never_exceed_the_pool(tmp_path):
    plan = queue_plan(
        tmp_path,
        'kube_queues = {"a": {"quota": {"whole_card": 0.34}}, "b": {"quota": {"whole_card": 0.66}}}',
    )
    assert [plan.queue(t).quota["whole_card"]["nvidia.com/gpu"] for t in "ab"] == [1, 2]


def test_no_teams_plans_as_before(tmp_path):
    assert queue_plan(tmp_path, "") is None


def test_quotas_above_a_pool_are_refused_naming_pool_resource_and_sum(tmp_path):
    path, result = plan_with(
        tmp_path,
        """
        kube_queues = {"team-a": {"quota": {"shared": 0.75}},
                       "team-b": {"quota": {"shared": 40, "whole_card": 1}}}
        """,
    )
    refused(
        result,
        f"{path}: group all, group_data/all.py: kube_queues: pool shared: nvidia.com/gpu.shared: "
        "the teams' quotas sum to 88 (team-a 48, team-b 40), above the pool's capacity 64 "
        "(2 hosts)",
    )


def test_a_declared_overcommit_lets_the_quotas_sum_past_the_pool(tmp_path):
    data = """
        kube_queues = {"team-a": {"quota": {"shared": 0.75}}, "team-b": {"quota": {"shared": 40}}}
        kube_queues_overcommit = {"shared": %s}
    """
    assert plan_with(tmp_path, data % "1.5")[1].exit_code == 0
    refused(plan_with(tmp_path, data % "1.25")[1], "capacity 64 x overcommit 1.25 = 80")


@pytest.mark.parametrize(
    ("team", "fragment"),
    [
        ({"quota": {"gpu": 0.5}}, "'gpu' is no pool (pools are the mode groups: shared, mig"),
        (
            {"quota": {"shared": 1.5}},
            "team 'a': quota: shared: a fraction must be from 0.0 to 1.0, got 1.5",
        ),
        (
            {"quota": {"shared": 0.5}, "borrowing_limit": {"shared": 0.5}},
            "team 'a': borrowing_limit needs a cohort",
        ),
        (
            {"quota": {"shared": 0.5}, "lending_limit": {"shared": 0.1}},
            "team 'a': lending_limit needs a cohort",
        ),
        ({"quota": {"shared": -1}}, "must be a count (an integer >= 0) or a fraction"),
        ({"quota": {"shared": True}}, "must be a count (an integer >= 0) or a fraction"),
        ({"quota": {"shared": 1}, "wieght": 2}, "unknown key 'wieght'"),
        ({"cohort": "gpus"}, "team 'a': quota is required"),
        ({"quota": {"shared": 1}, "cohort": "GPUs!"}, "team 'a': cohort"),
        ({"quota": {"shared": 1}, "parent": "nobody"}, "parent 'nobody' is no team"),
        ({"quota": {"shared": 1}, "weight": 0}, "weight must be an integer from 1 to 65535"),
        ({"quota": {"shared": 1}, "namespaces": ["Team_A"]}, "namespaces: a namespace"),
    ],
)
def test_a_malformed_team_is_refused_naming_team_and_key(tmp_path, team, fragment):
    path, result = plan_with(tmp_path, f"kube_queues = {{'a': {team!r}}}")
    refused(result, "(group all, group_data/all.py): kube_queues: ", fragment)


@pytest.mark.parametrize(
    ("team", "fragment"),
    [
        ({"quota": {"vgpu": 2}}, "team a: quota: vgpu: pool vgpu has no host in this inventory"),
        (
            {"quota": {"mig": 2}},
            "team a: quota: mig: a count needs its resource (the pool has nvidia.com/mig-1g.10gb,",
        ),
        (
            {"quota": {"whole_card": {"nvidia.com/gpu.shared": 1}}},
            "team a: quota: whole_card: the pool has no nvidia.com/gpu.shared (it has nvidia.com/gpu)",
        ),
        (
            {"quota": {"shared": 8}, "cohort": "c", "lending_limit": {"shared": 9}},
            "team a: lending_limit: shared: nvidia.com/gpu.shared 9 is above the team's quota 8",
        ),
        (
            {"quota": {"shared": 8}, "guarantee": {"shared": 0.5}},
            "team a: guarantee: shared: nvidia.com/gpu.shared 32 is above the team's quota 8",
        ),
    ],
)
def test_a_share_the_pools_cannot_give_is_refused(tmp_path, team, fragment):
    path, result = plan_with(tmp_path, f"kube_queues = {{'a': {team!r}}}")
    refused(result, f"{path}: group all, group_data/all.py: kube_queues: {fragment}")


def test_a_fraction_of_a_mode_group_left_without_hosts_plans_as_nothing(tmp_path):
    # The last shared host re-grouped (tests/lab/test_regroup.py): the plan goes on; the live
    # queue above the live capacity is verify's finding (gpuprov.core.cluster.queue_capacity).
    _, result = plan_with(tmp_path, "kube_queues = {'a': {'quota': {'vgpu': 0.5, 'shared': 0.5}}}")
    assert result.exit_code == 0, result.output


def test_children_above_their_parent_are_refused(tmp_path):
    _, result = plan_with(
        tmp_path,
        """
        kube_queues = {
            "org": {"quota": {"shared": 16}},
            "a": {"quota": {"shared": 10}, "parent": "org"},
            "b": {"quota": {"shared": 10}, "parent": "org"},
        }
        """,
    )
    refused(
        result,
        "team org: its children's quota of shared nvidia.com/gpu.shared sums to 20, above its own 16",
    )


def test_children_count_in_their_parents_share_not_twice_in_the_pool(tmp_path):
    plan = queue_plan(
        tmp_path,
        """
        kube_queues = {
            "org": {"quota": {"shared": 1.0}},
            "a": {"quota": {"shared": 0.5}, "parent": "org"},
            "b": {"quota": {"shared": 0.5}, "parent": "org"},
        }
        """,
    )
    assert [q.team for q in plan.children("org")] == ["a", "b"]


def test_parents_that_loop_are_refused(tmp_path):
    _, result = plan_with(
        tmp_path,
        """
        kube_queues = {"a": {"quota": {"shared": 1}, "parent": "b"},
                       "b": {"quota": {"shared": 1}, "parent": "a"}}
        """,
    )
    refused(result, "parents loop (a -> b -> a)")


def test_queues_set_in_a_mode_group_or_a_host_are_refused(tmp_path):
    inventory = POOLS.replace(
        '(["ts-1", "ts-2"],', '(["ts-1", ("ts-2", {"kube_queues_volcano_plugin": "proportion"})],'
    )
    path = write_inventory(
        tmp_path, inventory, whole_card='kube_queues = {"a": {"quota": {"whole_card": 1}}}\n'
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    refused(
        result,
        f"{path}: group whole_card, group_data/whole_card.py: kube_queues: set it in the "
        "inventory's top group (all or inv) only",
        f"{path}: host ts-2 (host data): kube_queues_volcano_plugin: set it in the inventory's "
        "top group",
    )


def test_the_group_named_after_the_inventory_is_a_top_group_too(tmp_path):
    path = write_inventory(tmp_path, POOLS, inv='kube_queues = {"a": {"quota": {"shared": 0.5}}}\n')
    inventory = load(str(path))
    plan = plan_queues(inventory, build(inventory))
    assert plan.source == "group inv, group_data/inv.py"
    assert plan.queue("a").quota == {"shared": {"nvidia.com/gpu.shared": 32}}


def test_a_limited_plan_leaves_the_queues_to_the_whole_plan(tmp_path):
    # One of the two shared hosts has half the pool: the queues are not checked against it.
    path = write_inventory(tmp_path, POOLS, all='kube_queues = {"a": {"quota": {"shared": 64}}}\n')
    assert CliRunner().invoke(main, ["plan", str(path), "--limit", "ts-1"]).exit_code == 0
    assert CliRunner().invoke(main, ["plan", str(path)]).exit_code == 0


def test_the_example_inventory_declares_two_teams_that_fill_its_pools():
    inventory = load("inventories/example.py")
    plan = plan_queues(inventory, build(inventory))
    assert [q.team for q in plan.queues] == ["team-a", "team-b"]
    for pool in plan.pools:
        for resource, capacity in pool.capacity.items():
            total = sum(q.quota.get(pool.name, {}).get(resource, 0) for q in plan.queues)
            assert capacity - len(plan.queues) < total <= capacity, (pool.name, resource)


def test_docs_name_every_team_key():
    text = textwrap.dedent(open("docs/kubernetes.md").read())
    section = text[text.index("## Queues") :]
    for key in TEAM_KEYS:
        assert f"`{key}`" in section, key


def test_teams_a_scheduler_would_refuse_are_a_warning_when_the_other_can_take_them(tmp_path):
    # Nine node labels: more than a Kueue ResourceFlavor takes, nothing Volcano counts.
    labels = {f"example.com/l{i}": "x" for i in range(9)}
    teams = "\nkube_queues = {'team-a': {'quota': {'shared': 0.5}}}\n"
    _, result = plan_with(tmp_path, teams + f"kube_node_labels = {labels!r}\n")
    assert result.exit_code == 0, result.output
    assert (
        "warning: kube render --queues kueue would refuse: " in result.output
    ) and "9 nodeLabels, above Kueue's limit of 8" in result.output


def test_teams_no_scheduler_can_take_are_refused_at_plan_time(tmp_path):
    # Nested teams are Volcano's alone, and the proportion plugin cannot nest them.
    _, result = plan_with(
        tmp_path,
        """
        kube_queues_volcano_plugin = "proportion"
        kube_queues = {"org": {"quota": {"shared": 0.5}},
                       "a": {"quota": {"shared": 0.25}, "parent": "org"}}
        """,
    )
    refused(result, "kube_queues_volcano_plugin", "nested queues need the capacity plugin")
