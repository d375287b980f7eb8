"""One report per problem, counting the hosts and GPUs it affects (issue #11 item 3)."""

from __future__ import annotations

from click.testing import CliRunner

from gpuprov.cli import main
from inventories import write_inventory


def plan(path, *args):
    return CliRunner().invoke(main, ["plan", str(path), *args])


def error_lines(result) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.stderr.splitlines()


def test_ten_thousand_hosts_with_one_bad_group_value_are_one_line(tmp_path):
    hosts = [f"gpu-{i:05d}" for i in range(10_000)]
    path = write_inventory(
        tmp_path,
        f"mig = {hosts!r}\n",
        mig='gpu_model = "A100-80GB"\ngpu_count = 8\nmig_layout = {"4g.40gb": 2}\n',
    )
    [line] = error_lines(plan(path))
    assert line.startswith(
        f"error: {path}: hosts gpu-00000, gpu-00001, gpu-00002 and 9997 more "
        "(group mig, group_data/mig.py): mig_layout: 2 x 4g.40gb does not fit A100-80GB"
    )
    assert line.endswith("[10000 hosts, 80000 GPUs]")


def test_one_host_with_a_layout_that_fits_no_gpu_counts_its_gpus(tmp_path):
    path = write_inventory(
        tmp_path,
        'mig = (["n1"], {"gpu_model": "H100-80GB", "gpu_count": 8, "mig_layout": {"7g.80gb": 2}})\n',
    )
    [line] = error_lines(plan(path))
    assert "host n1 (group mig): mig_layout: 2 x 7g.80gb does not fit" in line
    assert line.endswith("[8 GPUs]")


def test_distinct_problems_stay_distinct_and_hosts_of_one_problem_are_merged(tmp_path):
    path = write_inventory(
        tmp_path,
        """
        shared = (["a", "b", ("c", {"time_slicing_replicas": 1})],
                  {"gpu_model": "T4", "gpu_count": 1, "time_slicing_replicas": 2000})
        """,
    )
    lines = error_lines(plan(path))
    assert len(lines) == 2
    assert (
        "hosts a, b (group shared): time_slicing_replicas: must be an integer <= 1024" in (lines[0])
    )
    assert lines[0].endswith("[2 hosts]")
    assert "host c (host data): time_slicing_replicas: must be an integer >= 2, got 1" in lines[1]


def test_ten_thousand_malformed_host_entries_are_one_line_per_kind(tmp_path):
    path = write_inventory(
        tmp_path,
        "whole_card = [5] * 5000 + [(f'h{i}', 'x') for i in range(5000)]\n",
    )
    lines = error_lines(plan(path))
    assert len(lines) == 2
    assert "group whole_card: a host name must be a string, got 5" in lines[0]
    assert "hosts h0, h1, h2 and 4997 more (host data): data must be a dict" in lines[1]
    assert lines[1].endswith("[5000 hosts]")
