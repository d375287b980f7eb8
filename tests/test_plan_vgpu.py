"""The `vgpu` mode group: what each flavour's nodes advertise, maxPods, and what is refused.

The articles' case is a 10-way split of 8 x A800-80GB. The catalog has no separate A800-80GB
model: it is the A100-80GB's silicon and memory (81920 MiB; mig-parted's config-default.yaml
groups their device ids), so these plans use A100-80GB.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from plans import plan_for
from test_plan_bad_input import assert_bad_input

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from inventories import write_inventory

EIGHT_80GB = {"gpu_model": "A100-80GB", "gpu_count": 8}
A800_MIB = 81920


def cluster(tmp_path, flavour: str, nodes: int = 3, **data):
    names = [f"gpu-{n:02}" for n in range(nodes)]
    group = {**EIGHT_80GB, "vgpu_flavour": flavour, "vgpu_split_count": 10, **data}
    path = write_inventory(tmp_path, f"vgpu = ({names!r}, {group!r})\n")
    return build(load(str(path)))


def test_hami_ten_way_split_of_eight_80gb_gpus_per_node_and_cluster(tmp_path):
    plan = cluster(tmp_path, "hami")
    node = plan.host("gpu-00")
    assert node.vgpu.advertised == {
        "nvidia.com/gpu": 80,
        "nvidia.com/gpumem": 8 * A800_MIB,
        "nvidia.com/gpucores": 800,
    }
    # HAMi's plugin registers only the share count; memory and cores are the scheduler's.
    assert node.resources == {"nvidia.com/gpu": 80}
    assert plan.totals == {"nvidia.com/gpu": 240}
    assert plan.vgpu_totals == {
        "nvidia.com/gpu": 240,
        "nvidia.com/gpucores": 2400,
        "nvidia.com/gpumem": 3 * 8 * A800_MIB,
    }


def test_volcano_ten_way_split_of_eight_80gb_gpus_per_node_and_cluster(tmp_path):
    plan = cluster(tmp_path, "volcano")
    node = plan.host("gpu-02")
    want = {
        "volcano.sh/vgpu-number": 80,
        "volcano.sh/vgpu-memory": 8 * A800_MIB,
        "volcano.sh/vgpu-cores": 800,
    }
    assert node.vgpu.advertised == want
    assert node.resources == want  # Volcano's plugin registers all three with the kubelet
    assert plan.totals == {
        "volcano.sh/vgpu-cores": 2400,
        "volcano.sh/vgpu-memory": 3 * 8 * A800_MIB,
        "volcano.sh/vgpu-number": 240,
    }


def test_volcano_memory_factor_counts_memory_in_blocks_of_that_many_mib(tmp_path):
    node = cluster(tmp_path, "volcano", nodes=1, vgpu_memory_factor=1024).host("gpu-00")
    assert node.resources["volcano.sh/vgpu-memory"] == 8 * 80  # 80 GiB blocks of 1 GiB


def test_hami_scalings_multiply_what_its_scheduler_hands_out(tmp_path):
    node = cluster(tmp_path, "hami", nodes=1, vgpu_memory_scaling=1.5, vgpu_core_scaling=2).host(
        "gpu-00"
    )
    assert node.vgpu.advertised["nvidia.com/gpumem"] == 8 * int(A800_MIB * 1.5)
    assert node.vgpu.advertised["nvidia.com/gpucores"] == 1600
    assert node.resources == {"nvidia.com/gpu": 80}


def test_volcano_scalings_do_not_change_what_the_kubelet_shows(tmp_path):
    node = cluster(tmp_path, "volcano", nodes=1, vgpu_memory_scaling=2, vgpu_core_scaling=2).host(
        "gpu-00"
    )
    assert node.resources["volcano.sh/vgpu-memory"] == 8 * A800_MIB
    assert node.resources["volcano.sh/vgpu-cores"] == 800


@pytest.mark.parametrize("flavour", ["hami", "volcano"])
def test_auto_max_pods_makes_room_for_every_share(tmp_path, flavour):
    assert cluster(tmp_path, flavour, nodes=1).host("gpu-00").kubelet.kubelet_max_pods == 110 + 80


def test_one_share_per_gpu_adds_no_pods(tmp_path):
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour="hami", vgpu_split_count=1)
    assert plan.kubelet.kubelet_max_pods == 110 and plan.resources == {"nvidia.com/gpu": 2}


def test_an_explicit_max_pods_is_kept(tmp_path):
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour="hami", kubelet_max_pods=150)
    assert plan.kubelet.kubelet_max_pods == 150


def test_split_count_defaults_to_the_charts_ten(tmp_path):
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour="volcano")
    assert plan.vgpu.split_count == 10 and plan.resources["volcano.sh/vgpu-number"] == 20


def test_vgpu_gpus_have_mig_off_and_no_time_slicing(tmp_path):
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour="hami")
    assert [g.mig_enabled for g in plan.gpus] == [False, False]
    assert plan.sharing is None and plan.mig_strategy is None


def test_plan_table_shows_the_flavour_split_and_what_only_the_scheduler_counts(tmp_path):
    path = write_inventory(
        tmp_path, f"vgpu = (['v1'], {{**{EIGHT_80GB!r}, 'vgpu_flavour': 'hami'}})\n"
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert "hami x10" in result.output
    assert "gpumem: 655360 (scheduler)" in result.output
    assert "gpucores: 800 (scheduler)" in result.output
    assert "vGPU resource" in result.output


# --- refused, each as one line naming file, host, group and key, exit 2


def run_plan(tmp_path, inventory: str):
    path = write_inventory(tmp_path, inventory)
    return path, CliRunner().invoke(main, ["plan", str(path)])


def test_nvidia_not_the_default_runtime_is_refused(tmp_path):
    path, result = run_plan(
        tmp_path,
        "vgpu = (['v1'], {'gpu_model': 'A100-80GB', 'gpu_count': 8, 'vgpu_flavour': 'hami',"
        " 'container_runtime_default': False})\n",
    )
    assert_bad_input(
        result,
        f"{path}: host v1 (group vgpu): container_runtime_default: a host in vgpu needs nvidia "
        "as the default container runtime",
    )


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("vgpu_split_count", 0, "vgpu_split_count: must be an integer >= 1, got 0"),
        ("vgpu_split_count", 1025, "vgpu_split_count: must be an integer <= 1024"),
        ("vgpu_memory_scaling", 0, "vgpu_memory_scaling: must be a number > 0, got 0"),
        ("vgpu_memory_scaling", -1.5, "vgpu_memory_scaling: must be a number > 0"),
        ("vgpu_memory_scaling", "2", "vgpu_memory_scaling: must be a number > 0, got '2'"),
        ("vgpu_core_scaling", 1001, "vgpu_core_scaling: must be <= 1000"),
        ("vgpu_core_scaling", float("nan"), "vgpu_core_scaling: must be a number > 0"),
        ("vgpu_memory_factor", 0, "vgpu_memory_factor: must be an integer >= 1, got 0"),
        ("vgpu_memory_factor", 81921, "must be at most the memory of one A100-80GB (81920 MiB)"),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, key, value, message):
    path, result = run_plan(
        tmp_path,
        "vgpu = (['v1'], {'gpu_model': 'A100-80GB', 'gpu_count': 8, 'vgpu_flavour': 'volcano',"
        f" {key!r}: {value!r}}})\n".replace("nan", "float('nan')"),
    )
    assert_bad_input(result, f"{path}: host v1 (group vgpu): ", message)


def test_unknown_flavour_is_refused_with_the_choices(tmp_path):
    _, result = run_plan(
        tmp_path,
        "vgpu = (['v1'], {'gpu_model': 'A100-80GB', 'gpu_count': 1, 'vgpu_flavour': 'kueue'})\n",
    )
    assert_bad_input(result, "vgpu_flavour: must be one of hami, volcano, got 'kueue'")


def test_flavour_is_required(tmp_path):
    _, result = run_plan(tmp_path, "vgpu = (['v1'], {'gpu_model': 'A100-80GB', 'gpu_count': 1})\n")
    assert_bad_input(result, "vgpu_flavour: required for every host in vgpu")


def test_host_in_vgpu_and_shared_is_refused(tmp_path):
    _, result = run_plan(
        tmp_path,
        "vgpu = (['v1'], {'gpu_model': 'A100-80GB', 'gpu_count': 1, 'vgpu_flavour': 'hami'})\n"
        "shared = (['v1'], {'time_slicing_replicas': 2})\n",
    )
    assert_bad_input(result, "host v1", "more than one mode group (vgpu, shared)")


def test_vgpu_keys_on_a_shared_host_are_refused(tmp_path):
    _, result = run_plan(
        tmp_path,
        "shared = (['s1'], {'gpu_model': 'A100-80GB', 'gpu_count': 1,"
        " 'time_slicing_replicas': 2, 'vgpu_split_count': 4})\n",
    )
    assert_bad_input(result, "vgpu_split_count: only hosts in vgpu may set this")


def test_memory_factor_on_a_hami_host_is_refused(tmp_path):
    _, result = run_plan(
        tmp_path,
        "vgpu = (['v1'], {'gpu_model': 'A100-80GB', 'gpu_count': 1, 'vgpu_flavour': 'hami',"
        " 'vgpu_memory_factor': 1024})\n",
    )
    assert_bad_input(result, "vgpu_memory_factor: only the volcano flavour reads a memory factor")


def test_volcano_hosts_with_different_memory_factors_are_refused(tmp_path):
    path, result = run_plan(
        tmp_path,
        "vgpu = [('v1', {'vgpu_memory_factor': 1}), ('v2', {'vgpu_memory_factor': 1024})]\n"
        "all = (['v1', 'v2'], {'gpu_model': 'A100-80GB', 'gpu_count': 1,"
        " 'vgpu_flavour': 'volcano'})\n",
    )
    assert_bad_input(
        result,
        f"{path}: vgpu_memory_factor: volcano hosts differ (1 on v1; 1024 on v2)",
    )


# --- memory budgets per share (memory_per_share_gib), on the split count


def test_a_budget_that_fits_the_split_is_each_shares_memory(tmp_path):
    node = cluster(tmp_path, "hami", nodes=1, memory_per_share_gib=8).host("gpu-00")
    assert node.vgpu.memory.mib == 8 * 1024
    assert node.vgpu.as_dict()["memory_per_share"]["enforced_by"] == "HAMi-core"


def test_without_a_budget_a_share_is_the_scaled_memory_over_the_split(tmp_path):
    node = cluster(tmp_path, "hami", nodes=1, vgpu_memory_scaling=2).host("gpu-00")
    assert node.vgpu.memory.mib == 2 * A800_MIB // 10


def test_a_budget_the_split_overcommits_is_refused_naming_the_key(tmp_path):
    # 10 shares x 9 GiB = 92160 MiB > 81920 MiB of one 80 GB GPU
    names = ["gpu-00"]
    group = {**EIGHT_80GB, "vgpu_flavour": "volcano", "memory_per_share_gib": 9}
    path = write_inventory(tmp_path, f"vgpu = ({names!r}, {group!r})\n")
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    assert "memory_per_share_gib" in result.output
    assert "10 shares x 9 GiB" in result.output and "vgpu_split_count" in result.output


def test_an_allowed_overcommit_of_the_split_plans_with_a_warning(tmp_path):
    names = ["gpu-00"]
    group = {
        **EIGHT_80GB,
        "vgpu_flavour": "hami",
        "memory_per_share_gib": 9,
        "allow_memory_overcommit": True,
    }
    path = write_inventory(tmp_path, f"vgpu = ({names!r}, {group!r})\n")
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning: " in result.stderr and "memory overcommitted" in result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "9 GiB (HAMi-core limit, the pod's request)" in rows["gpu-00"]
