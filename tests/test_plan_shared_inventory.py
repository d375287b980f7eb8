"""An inventory shared with Kubespray plans cleanly; --strict lists the other tool's keys."""

from __future__ import annotations

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from gpuprov.core.variables import VARIABLES, _edits, suggest
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
    assert plan.host("gpu-h100-01").kubelet.kubelet_max_pods == 110


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


def _full_osa(a: str, b: str) -> int:
    """Optimal string alignment distance over the whole matrix (the textbook recurrence)."""
    d = [[i + j if not i or not j else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


@settings(max_examples=2000, deadline=None)
@given(st.text("ab_-", max_size=12), st.text("ab_-", max_size=12), st.integers(0, 3))
def test_the_bounded_edit_distance_is_the_distance_up_to_its_bound(a, b, most):
    # The near-miss search compares a key only within its bound (issue #26: 10,000 foreign keys
    # took a minute); within the bound it must be the real distance, beyond it just "more".
    assert _edits(a, b, most) == min(_full_osa(a, b), most + 1)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(VARIABLES)), st.text("abcdefghijklmnopqrstuvwxyz_", max_size=3))
def test_a_near_miss_is_found_among_every_name_not_only_those_of_its_length(name, noise):
    key = name[: len(name) // 2] + noise + name[len(name) // 2 :]
    normal = key.lower().replace("-", "_")
    allowed = 1 if len(normal) <= 8 else 2
    near = [n for n in VARIABLES if _full_osa(normal, n) <= allowed]
    found = suggest(key)
    if normal in VARIABLES:
        assert found == (normal if normal != key else None)
    elif not near:
        assert found is None
    else:
        best = min(near, key=lambda n: _full_osa(normal, n))  # the first of the nearest
        assert found == best, (key, found, best)
