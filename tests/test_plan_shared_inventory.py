"""An inventory shared with Kubespray plans cleanly; --strict lists the other tool's keys."""

from __future__ import annotations

from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from inventories import write_inventory

KUBESPRAY = "inventories/kubespray/inventory.py"
KUBESPRAY_KEYS = ["kube_version", "container_manager", "kube_network_plugin", "gpu_driver_branch"]


def test_kubespray_style_inventory_plans_with_exit_0():
    result = CliRunner().invoke(main, ["plan", KUBESPRAY])
    assert result.exit_code == 0, result.output
    plan = build(load(KUBESPRAY))
    assert {h.name: h.mode for h in plan.hosts} == {
        "gpu-h100-01": "mig",
        "gpu-h100-02": "mig",
        "gpu-l40s-01": "shared",
    }
    # Kubespray's kubelet_max_pods means the same in gpuprov, and the group wins over all.
    assert plan.host("gpu-h100-01").kubelet_max_pods == 110


def test_strict_lists_each_foreign_key_once_as_an_error():
    result = CliRunner().invoke(main, ["plan", "--strict", KUBESPRAY])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and result.stdout == ""
    lines = result.stderr.splitlines()
    for key in KUBESPRAY_KEYS:
        [line] = [line for line in lines if f": {key}: " in line]
        assert "not a gpuprov key" in line and line.endswith("[3 hosts]")
    # pyinfra's own connection settings are neither gpuprov's nor another tool's.
    assert not any("ssh_user" in line for line in lines)


def test_foreign_keys_with_gpuprov_like_prefixes_are_not_errors(tmp_path):
    path = write_inventory(
        tmp_path,
        'whole_card = ["n1"]\n',
        whole_card="""
        gpu_model = "T4"
        gpu_count = 1
        kube_version = "v1.31.4"
        container_manager = "containerd"
        kube_network_plugin = "calico"
        gpu_driver_branch = "550"
        driver_branch = "550"
        kubelet_custom_flags = []
        """,
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 0, result.output


def test_unknown_key_with_gpuprovs_own_prefix_is_an_error(tmp_path):
    path = write_inventory(
        tmp_path,
        'whole_card = (["n1"], {"gpu_model": "T4", "gpu_count": 1, "gpuprov_agent_dir": "/opt"})\n',
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 2
    assert "gpuprov_agent_dir: unknown gpuprov key" in result.stderr
