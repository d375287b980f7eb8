"""Every kind of bad input is one clear message naming file, host/group, key and value; exit 2."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from inventories import write_inventory


def run_plan(tmp_path, inventory: str, **group_files: str):
    path = write_inventory(tmp_path, inventory, **group_files)
    result = CliRunner().invoke(main, ["plan", str(path)])
    return path, result


def assert_bad_input(result, *fragments):
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert lines, result.output
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, result.output)


def test_host_in_two_mode_groups(tmp_path):
    path, result = run_plan(
        tmp_path,
        """
        shared = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 1, "time_slicing_replicas": 2})
        whole_card = ["n1"]
    """,
    )
    assert_bad_input(result, f"{path}: host n1", "more than one mode group (shared, whole_card)")


def test_unknown_gpu_model_suggests_close_matches(tmp_path):
    path, result = run_plan(
        tmp_path, 'whole_card = ["n1"]\n', whole_card='gpu_model = "A100-80G"\ngpu_count = 1\n'
    )
    assert_bad_input(
        result,
        f"{path}: host n1 (group whole_card, group_data/whole_card.py): "
        "gpu_model: unknown GPU model 'A100-80G'; did you mean A100-80GB",
    )


def test_misspelt_profile_names_the_profile_and_suggests(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "H100-80GB", "gpu_count": 1, "mig_layout": {"3g.4gb": 2}})
    """,
    )
    assert_bad_input(
        result,
        "host n1 (group mig): mig_layout:",
        "unknown profile '3g.4gb' for H100-80GB; did you mean 3g.40gb",
    )


def test_layout_that_does_not_fit_says_why(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 1,
                        "mig_layout": {"3g.40gb": 1, "1g.20gb": 3}})
    """,
    )
    assert_bad_input(
        result,
        "mig_layout: 1 x 3g.40gb + 3 x 1g.20gb does not fit A100-80GB",
        "needs 10 memory slots",
    )


def test_layout_for_one_gpu_names_the_gpu(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        mig = (["n1", ("n2", {"mig_layout_by_gpu": {1: {"4g.40gb": 2}}})],
               {"gpu_model": "A100-80GB", "gpu_count": 2, "mig_layout": {"7g.80gb": 1}})
    """,
    )
    assert_bad_input(
        result,
        "host n2 (host data): mig_layout_by_gpu: GPU 1: 2 x 4g.40gb",
        "exceeds the maximum of 1",
    )


@pytest.mark.parametrize("replicas, said", [(1, "got 1"), ("4", "got '4'"), (2.5, "got 2.5")])
def test_replicas_must_be_an_integer_of_at_least_two(tmp_path, replicas, said):
    _, result = run_plan(
        tmp_path,
        f"""
        shared = (["n1"], {{"gpu_model": "A100-80GB", "gpu_count": 1,
                           "time_slicing_replicas": {replicas!r}}})
    """,
    )
    assert_bad_input(result, "time_slicing_replicas: must be an integer >= 2", said)


@pytest.mark.parametrize("count, said", [(-1, "got -1"), (1.5, "got 1.5")])
def test_layout_counts_must_be_non_negative_integers(tmp_path, count, said):
    _, result = run_plan(
        tmp_path,
        f"""
        mig = (["n1"], {{"gpu_model": "A100-80GB", "gpu_count": 1,
                        "mig_layout": {{"1g.10gb": {count!r}}}}})
    """,
    )
    assert_bad_input(result, "mig_layout: count of 1g.10gb must be an integer >= 0", said)


def test_gpu_count_must_be_positive(tmp_path):
    _, result = run_plan(tmp_path, 'whole_card = (["n1"], {"gpu_model": "T4", "gpu_count": 0})\n')
    assert_bad_input(result, "gpu_count: must be an integer >= 1, got 0")


def test_mig_keys_on_a_host_not_in_mig(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        whole_card = (["n1"], {"gpu_model": "T4", "gpu_count": 1, "mig_layout": {"1g.5gb": 1}})
    """,
    )
    assert_bad_input(
        result,
        "host n1 (group whole_card): mig_layout: only hosts in mig may set "
        "this; this host is in whole_card",
    )


def test_time_slicing_keys_on_a_host_not_in_shared(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "A30-24GB", "gpu_count": 1, "mig_layout": {"4g.24gb": 1},
                        "time_slicing_replicas": 4})
    """,
    )
    assert_bad_input(result, "time_slicing_replicas: only hosts in shared may set this")


def test_misspelt_key_names_the_key_it_probably_meant(tmp_path):
    _, result = run_plan(
        tmp_path,
        'shared = ["n1"]\n',
        shared="""
        gpu_model = "A100-80GB"
        gpu_count = 8
        time_slicing_replicas = 4
        time_slicng_replicas = 8
    """,
    )
    assert_bad_input(
        result,
        "(group shared, group_data/shared.py): time_slicng_replicas: "
        "unknown key; did you mean time_slicing_replicas?",
    )


def test_missing_required_key(tmp_path):
    _, result = run_plan(
        tmp_path, 'shared = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 1})\n'
    )
    assert_bad_input(result, "time_slicing_replicas: required for every host in shared")


def test_single_strategy_with_differing_layouts(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 2, "mig_layout": {"1g.10gb": 7},
                        "mig_layout_by_gpu": {1: {"3g.40gb": 2}}, "mig_strategy": "single"})
    """,
    )
    assert_bad_input(
        result,
        "mig_strategy: mig_strategy single needs MIG on every GPU with one "
        "identical single-profile layout",
    )


def test_python_error_in_inventory_names_file_and_line(tmp_path):
    path, result = run_plan(tmp_path, 'shared = ["n1"]\nmig = undefined_name\n')
    assert_bad_input(result, f"{path}: line 2: NameError: name 'undefined_name' is not defined")


def test_syntax_error_in_group_data_names_file_and_line(tmp_path):
    _, result = run_plan(
        tmp_path, 'whole_card = ["n1"]\n', whole_card='gpu_model = "T4"\ngpu_count = (1\n'
    )
    assert_bad_input(result, "group_data/whole_card.py: line 2: SyntaxError")


def test_every_problem_is_reported_in_one_run(tmp_path):
    _, result = run_plan(
        tmp_path,
        """
        shared = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 1, "time_slicing_replicas": 1})
        mig = (["n2"], {"gpu_model": "H100-80GB", "gpu_count": 1, "mig_layout": {"9g.1gb": 1}})
        whole_card = (["n3"], {"gpu_model": "Z100", "gpu_count": 1})
    """,
    )
    assert_bad_input(result, "host n1", "host n2", "host n3")
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 3


def test_missing_inventory_file(tmp_path):
    result = CliRunner().invoke(main, ["plan", str(tmp_path / "nope.py")])
    assert_bad_input(result, "inventory file not found")


def test_limit_that_matches_nothing(tmp_path):
    result = CliRunner().invoke(main, ["plan", "inventories/example.py", "--limit", "nope*"])
    assert_bad_input(result, "--limit nope* matches no host")


def test_real_process_exits_2_without_traceback(tmp_path):
    path = tmp_path / "inv.py"
    path.write_text('shared = ["n1"]\nwhole_card = ["n1"]\n')
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprov", "plan", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {path}: host n1")


@pytest.mark.parametrize(
    "args, code",
    [
        (["A100-80GB", "4g.40gb=1", "3g.40gb=1"], 0),
        (["A100-80GB", "4g.40gb=2"], 1),
        (["A100-80GB", "3g.4gb=1"], 2),
        (["A100-80GB", "3g.40gb=x"], 2),
        (["Z100", "1g.5gb=1"], 2),
    ],
)
def test_mig_check_exit_codes(args, code):
    result = CliRunner().invoke(main, ["mig", "check", *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "data, args, key",
    [
        ('"kube_node_labels": list(range(10**6))', [], "kube_node_labels"),
        ('"kube_node_labels": {"k" * 10**6: "v"}', [], "kube_node_labels"),
        ('"kube_node_taints": ["k" * 10**6 + ":NoSchedule"]', [], "kube_node_taints"),
        ('"x" * 10**6: 1', ["--strict"], "xxxx"),
        ('"gpu_model": "Z" * 4000', [], "gpu_model"),
    ],
)
def test_a_huge_value_or_key_is_quoted_shortened_on_one_line(tmp_path, data, args, key):
    # Before: a million-item list, a 1 MB label key or a 1 MB foreign key made one error line of
    # several MB.
    path = write_inventory(
        tmp_path, f'whole_card = (["n1"], {{"gpu_model": "T4", "gpu_count": 1, {data}}})\n'
    )
    result = CliRunner().invoke(main, ["plan", str(path), *args])
    assert_bad_input(result, f"{path}: host n1", key)
    [line] = result.output.splitlines()
    assert len(line) < 1200 and not re.search(r"(.)\1{199}", line), line[:300]
