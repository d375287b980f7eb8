"""Planning the sharing of `shared` hosts: the strategy (time-slicing or MPS) and the memory each
share may use; what the planner refuses (exit 2, one line naming file, host, group, key) and what
it plans with a warning on every plan and deploy."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from inventories import write_inventory


def plan(tmp_path, hosts: str, group: str):
    path = write_inventory(tmp_path, f"shared = ({hosts}, {group})\n")
    result = CliRunner().invoke(main, ["plan", str(path)])
    return path, result


def plan_json(tmp_path, group: str) -> tuple[dict, str]:
    path = write_inventory(tmp_path, f"shared = (['n1'], {group})\n")
    result = CliRunner().invoke(main, ["plan", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    [host] = json.loads(result.stdout)["hosts"]
    return host["time_slicing"], result.stderr


def errors(result) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line for line in result.output.splitlines() if line.startswith("error: ")]


A100 = '"gpu_model": "A100-80GB", "gpu_count": 8'


def test_four_20_gib_shares_fit_an_a100_80gb_and_are_planned(tmp_path):
    sharing, warnings = plan_json(
        tmp_path, f'{{{A100}, "time_slicing_replicas": 4, "memory_per_share_gib": 20}}'
    )
    assert sharing["strategy"] == "time-slicing"
    assert sharing["memory_per_share"] == {"mib": 20480, "enforced": False, "enforced_by": ""}
    assert warnings == ""


def test_five_20_gib_shares_are_refused_naming_host_group_and_key(tmp_path):
    path, result = plan(
        tmp_path, '["n1"]', f'{{{A100}, "time_slicing_replicas": 5, "memory_per_share_gib": 20}}'
    )
    [line] = errors(result)
    assert line.startswith(f"error: {path}: host n1 (group shared")
    assert (
        ": memory_per_share_gib: 5 shares x 20 GiB = 102400 MiB is more than one GPU's "
        "81920 MiB (80 GiB)"
    ) in line
    assert "4 shares of 20 GiB fit" in line and "allow_memory_overcommit" in line


@pytest.mark.parametrize(
    "model,replicas,budget,fits",
    [
        # H200-141GB has 143771 MiB (140.4 GiB): 141 "GB" are not 141 GiB.
        ("H200-141GB", 10, 14, True),
        ("H200-141GB", 10, 14.1, False),
        # A model without MIG has its memory in the catalog too.
        ("T4", 4, 3.75, True),
        ("T4", 4, 3.8, False),
        # 46068 MiB: three 15 GiB shares (46080 MiB) are 12 MiB too many.
        ("L40S", 3, 15, False),
        ("L40S", 3, 14.9, True),
    ],
)
def test_the_budget_is_checked_in_mib_against_the_catalog_memory(
    tmp_path, model, replicas, budget, fits
):
    group = (
        f'{{"gpu_model": "{model}", "gpu_count": 1, "time_slicing_replicas": {replicas}, '
        f'"memory_per_share_gib": {budget}}}'
    )
    _, result = plan(tmp_path, '["n1"]', group)
    assert (result.exit_code == 0) is fits, result.output


def test_an_allowed_overcommit_is_planned_with_a_warning_on_stderr_every_time(tmp_path):
    group = (
        '{"gpu_model": "T4", "gpu_count": 1, "time_slicing_replicas": 50, '
        '"memory_per_share_gib": 1, "allow_memory_overcommit": True}'
    )
    for _ in range(2):
        sharing, warnings = plan_json(tmp_path, group)
        [line] = warnings.splitlines()
        assert line.startswith("warning: ") and "memory_per_share_gib" in line
        assert "memory overcommitted" in line and "50 shares x 1 GiB = 51200 MiB" in line
        assert "time-slicing isolates no memory" in line
        assert sharing["memory_per_share"]["mib"] == 1024


def test_the_plan_table_shows_memory_per_share_and_whether_it_is_enforced(tmp_path):
    path = write_inventory(
        tmp_path,
        f"""shared = (["ts", ("mps", {{"sharing_strategy": "mps"}}),
                      ("budget", {{"memory_per_share_gib": 10}})],
                     {{{A100}, "time_slicing_replicas": 4}})
        """,
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "memory/share" in rows["host"]
    assert "time-slicing x4" in rows["ts"] and "20 GiB (not enforced)" in rows["ts"]
    assert "mps x4" in rows["mps"] and "20 GiB (MPS limit)" in rows["mps"]
    assert "10 GiB (not enforced)" in rows["budget"]


def test_an_mps_budget_below_the_limit_warns_that_mps_enforces_memory_over_replicas(tmp_path):
    sharing, warnings = plan_json(
        tmp_path,
        f'{{{A100}, "time_slicing_replicas": 4, "sharing_strategy": "mps", '
        '"memory_per_share_gib": 10}',
    )
    assert sharing["memory_per_share"] == {"mib": 20480, "enforced": True, "enforced_by": "MPS"}
    [line] = warnings.splitlines()
    assert "MPS limits each client to the GPU's memory / replicas = 20 GiB, not 10 GiB" in line
    assert "8 replicas would make the limit 10 GiB" in line


def test_an_mps_budget_equal_to_the_limit_is_planned_quietly(tmp_path):
    _, warnings = plan_json(
        tmp_path,
        f'{{{A100}, "time_slicing_replicas": 4, "sharing_strategy": "mps", '
        '"memory_per_share_gib": 20}',
    )
    assert warnings == ""


def test_mps_on_a_mig_host_is_refused_with_the_device_plugins_reasons(tmp_path):
    path = write_inventory(
        tmp_path,
        """mig = (["m1"], {"gpu_model": "A100-80GB", "gpu_count": 1,
                           "mig_layout": {"7g.80gb": 1}, "sharing_strategy": "mps"})
        """,
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    [line] = errors(result)
    assert line.startswith(f"error: {path}: host m1 (group mig") and ": sharing_strategy: " in line
    assert "MPS cannot share MIG devices" in line
    assert "'using --mig-strategy=mixed is not supported with MPS'" in line
    assert "'sharing using MPS is not supported for MIG devices'" in line


def test_time_slicing_on_a_mig_host_keeps_the_plain_mode_message(tmp_path):
    path = write_inventory(
        tmp_path,
        """mig = (["m1"], {"gpu_model": "A100-80GB", "gpu_count": 1,
                           "mig_layout": {"7g.80gb": 1}, "sharing_strategy": "time-slicing"})
        """,
    )
    [line] = errors(CliRunner().invoke(main, ["plan", str(path)]))
    assert "only hosts in shared may set this; this host is in mig" in line


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("sharing_strategy", '"MPS"', "must be one of time-slicing, mps, got 'MPS'"),
        ("sharing_strategy", '"timeslicing"', "must be one of time-slicing, mps"),
        ("memory_per_share_gib", "0", "must be a number of GiB above 0"),
        ("memory_per_share_gib", "-4", "must be a number of GiB above 0"),
        ("memory_per_share_gib", '"8"', "must be a number of GiB above 0"),
        ("memory_per_share_gib", "True", "must be a number of GiB above 0"),
        ("memory_per_share_gib", 'float("nan")', "must be a number of GiB above 0"),
        ("memory_per_share_gib", "4096", "at most 1024"),
        ("allow_memory_overcommit", '"yes"', "must be true or false"),
        ("mps_root", '"run/mps"', "must be an absolute path"),
    ],
)
def test_bad_sharing_values_are_one_line_naming_the_key(tmp_path, key, value, fragment):
    _, result = plan(
        tmp_path, '["n1"]', f'{{{A100}, "time_slicing_replicas": 4, "{key}": {value}}}'
    )
    [line] = errors(result)
    assert f": {key}: " in line and fragment in line, line


def test_kubelet_max_pods_auto_counts_mps_replicas_like_time_slicing(tmp_path):
    path = write_inventory(
        tmp_path,
        f"""shared = (["ts", ("mps", {{"sharing_strategy": "mps"}})],
                     {{{A100}, "time_slicing_replicas": 4}})
        """,
    )
    result = CliRunner().invoke(main, ["plan", str(path), "--format", "json"])
    hosts = {h["name"]: h for h in json.loads(result.stdout)["hosts"]}
    assert hosts["mps"]["kubelet_max_pods"] == hosts["ts"]["kubelet_max_pods"] == 110 + 8 * 4
    assert hosts["mps"]["resources"] == hosts["ts"]["resources"] == {"nvidia.com/gpu.shared": 32}


@pytest.mark.parametrize("budget", ["5e-324", "1e-300", "0.0009", "2**-20"])
@pytest.mark.parametrize("strategy", ["time-slicing", "mps"])
def test_a_budget_under_one_mib_is_refused_not_an_overflow(tmp_path, budget, strategy):
    # Before: 5e-324 GiB was an OverflowError traceback under MPS (memory // budget is inf) and a
    # "0 GiB" share under time-slicing.
    path = write_inventory(
        tmp_path,
        f'shared = (["n1"], {{{A100}, "time_slicing_replicas": 4, '
        f'"sharing_strategy": "{strategy}", "memory_per_share_gib": {budget}}})\n'
        f'vgpu = (["v1"], {{{A100}, "vgpu_flavour": "hami", "memory_per_share_gib": {budget}}})\n',
    )
    for command in (["plan"], ["kube", "render"]):
        result = CliRunner().invoke(main, [*command, str(path)])
        lines = errors(result)
        assert len(lines) == 2 and {line.split(": host ")[1][:2] for line in lines} == {"n1", "v1"}
        for line in lines:
            assert ": memory_per_share_gib: must be at least 1 MiB (1/1024 GiB)" in line, line


def test_a_budget_of_exactly_one_mib_is_planned_in_whole_mib(tmp_path):
    sharing, _ = plan_json(
        tmp_path, f'{{{A100}, "time_slicing_replicas": 4, "memory_per_share_gib": 2**-10}}'
    )
    assert sharing["memory_per_share"]["mib"] == 1
    sharing, warnings = plan_json(
        tmp_path,
        f'{{{A100}, "time_slicing_replicas": 4, "sharing_strategy": "mps", '
        '"memory_per_share_gib": 0.3}',
    )
    assert "81920 replicas would make the limit" not in warnings
    assert "266 replicas would make the limit" in warnings  # 81920 MiB // 307 MiB
