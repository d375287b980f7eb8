"""Inventory + group data become a per-host, per-GPU plan with the device plugin's resource names."""

from __future__ import annotations

import pytest

from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from inventories import write_inventory


def plan_of(tmp_path, inventory: str, **group_files: str):
    return build(load(str(write_inventory(tmp_path, inventory, **group_files))))


def test_example_inventory_plans_every_mode():
    plan = build(load("inventories/example.py"))
    modes = {h.name: h.mode for h in plan.hosts}
    assert modes == {
        "gpu-a100-01": "shared",
        "gpu-a100-02": "shared",
        "gpu-h100-01": "mig",
        "gpu-h100-02": "mig",
        "gpu-h200-01": "whole_card",
    }
    assert plan.totals["nvidia.com/gpu.shared"] == 2 * 8 * 4
    assert plan.totals["nvidia.com/gpu"] == 4


def test_host_data_overrides_group_layout_for_one_gpu():
    host = build(load("inventories/example.py")).host("gpu-h100-02")
    assert [(i.profile, i.start) for i in host.gpus[7].instances] == [("7g.80gb", 0)]
    assert [(i.profile, i.start) for i in host.gpus[0].instances] == [
        ("2g.20gb", 0),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("3g.40gb", 4),
    ]
    assert host.resources == {
        "nvidia.com/mig-1g.10gb": 14,
        "nvidia.com/mig-2g.20gb": 7,
        "nvidia.com/mig-3g.40gb": 7,
        "nvidia.com/mig-7g.80gb": 1,
    }


def test_time_slicing_renamed_resource_and_auto_max_pods(tmp_path):
    plan = plan_of(
        tmp_path,
        """
        shared = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 8,
                           "time_slicing_replicas": 4})
    """,
    )
    host = plan.host("n1")
    assert host.resources == {"nvidia.com/gpu.shared": 32}
    assert host.kubelet.kubelet_max_pods == 110 + 32
    assert host.sharing.rename and host.sharing.fail_requests_greater_than_one


def test_time_slicing_without_rename_keeps_nvidia_com_gpu(tmp_path):
    plan = plan_of(
        tmp_path,
        """
        shared = (["n1"], {"gpu_model": "L40S", "gpu_count": 2, "time_slicing_replicas": 3,
                           "time_slicing_rename": False, "kubelet_max_pods": 200})
    """,
    )
    assert plan.host("n1").resources == {"nvidia.com/gpu": 6}
    assert plan.host("n1").kubelet.kubelet_max_pods == 200


def test_mig_single_strategy_advertises_nvidia_com_gpu(tmp_path):
    plan = plan_of(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "H100-80GB", "gpu_count": 2,
                        "mig_layout": {"1g.10gb": 7}, "mig_strategy": "single"})
    """,
    )
    assert plan.host("n1").resources == {"nvidia.com/gpu": 14}


def test_mixed_strategy_names_each_profile_and_keeps_mig_off_gpus_whole(tmp_path):
    plan = plan_of(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 2,
                        "mig_layout": {"1g.10gb+me": 1, "3g.40gb": 1},
                        "mig_layout_by_gpu": {1: None}})
    """,
    )
    host = plan.host("n1")
    assert host.resources == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb.me": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    assert not host.gpus[1].mig_enabled and host.gpus[1].instances == ()


def test_whole_card_hosts_advertise_one_resource_per_gpu(tmp_path):
    plan = plan_of(
        tmp_path, 'whole_card = ["n1"]\n', whole_card='gpu_model = "NVIDIA H200"\ngpu_count = 4\n'
    )
    host = plan.host("n1")
    assert host.gpu_model == "H200-141GB" and host.resources == {"nvidia.com/gpu": 4}


def test_hosts_outside_mode_groups_are_not_planned(tmp_path):
    plan = plan_of(
        tmp_path,
        """
        control_plane = ["cp1"]
        whole_card = (["n1"], {"gpu_model": "T4", "gpu_count": 1})
    """,
    )
    assert [h.name for h in plan.hosts] == ["n1"]


def test_settings_carry_defaults_for_the_deploy(tmp_path):
    plan = plan_of(tmp_path, 'whole_card = (["n1"], {"gpu_model": "T4", "gpu_count": 1})\n')
    host = plan.host("n1")
    assert host.device_plugin.device_plugin_config_path == "/etc/nvidia/device-plugin/config.yaml"
    assert host.runtime.container_runtime == "containerd"


def test_plan_json_has_the_documented_top_level_shape():
    doc = build(load("inventories/example.py")).as_dict()
    assert doc["schema"] == "gpuprov.plan/v1"
    assert set(doc["hosts"][0]) >= {
        "name",
        "mode",
        "gpus",
        "resources",
        "kubelet_max_pods",
        "driver_version",
        "container_runtime",
        "settings",
    }


@pytest.mark.parametrize("count", [1, 3])
def test_identical_layouts_are_solved_once(tmp_path, count):
    from gpuprov.core.mig.solver import _solve

    _solve.cache_clear()
    # Two hosts that differ (so each is planned) but share one layout on all 4 GPUs.
    plan = plan_of(
        tmp_path,
        f"""
        mig = (["n{count}a", ("n{count}b", {{"kubelet_max_pods": 300}})],
               {{"gpu_model": "A30-24GB", "gpu_count": 4, "mig_layout": {{"1g.6gb": {count}}}}})
    """,
    )
    info = _solve.cache_info()
    assert info.misses == 1 and info.hits == 2 * 4 - 1
    assert plan.host(f"n{count}b").kubelet.kubelet_max_pods == 300


def test_hosts_of_one_kind_share_one_plan_under_their_own_names(tmp_path):
    plan = plan_of(
        tmp_path,
        """
        whole_card = (["a", "b", "c"], {"gpu_model": "T4", "gpu_count": 2})
    """,
    )
    assert [h.name for h in plan.hosts] == ["a", "b", "c"]
    assert plan.host("a").gpus is plan.host("c").gpus
