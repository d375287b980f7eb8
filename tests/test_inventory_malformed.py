"""Malformed inventories are user errors: exit 2, one clear line per problem, no traceback.

Each class of issue #11 item 1 (shapes pyinfra's loader chokes on, unreadable and non-Python
files, inventories that exit or raise, silent wrong results) with at least the issue's example.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from inventories import write_inventory

T4 = '{"gpu_model": "T4", "gpu_count": 1}'


def plan(path, *args):
    return CliRunner().invoke(main, ["plan", str(path), *args])


def errors_of(result) -> list[str]:
    """The `error:` lines, after checking the rules every bad input follows."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.stdout == ""  # nothing planned, nothing printed as a plan
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), lines
    return lines


def assert_one_error(result, *fragments: str) -> str:
    [line] = errors_of(result)
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


@pytest.mark.parametrize(
    "inventory, fragments",
    [
        ("whole_card = ()\n", ["group whole_card: a group tuple must be (hosts, data)", "got ()"]),
        (
            'whole_card = (["n1"], {}, {})\n',
            ["group whole_card: a group tuple must be (hosts, data)"],
        ),
        ('whole_card = ("n1", "n2")\n', ["a group tuple must be (hosts, data)"]),
        ('whole_card = [""]\n', ["group whole_card: host name '' is empty"]),
        ('whole_card = [" n1"]\n', ["host name ' n1' is empty or holds spaces"]),
        ('whole_card = [("n1", "x")]\n', ["host n1 (host data): data must be a dict, got 'x'"]),
        ('whole_card = [("n1", {}, 3)]\n', ["a host must be a name or (name, data)"]),
        ("whole_card = [5]\n", ["group whole_card: a host name must be a string, got 5"]),
        ('whole_card = (["n1"], {1: 2})\n', ["group whole_card: data keys must be strings"]),
        ("shared = 5\n", ["group shared: a mode group must be a list of hosts", "got 5"]),
        ('mig = "n1"\n', ["group mig: a mode group must be a list"]),
        ('whole_card = ["@nope/x"]\n', ["pyinfra refuses the inventory", "nope"]),
    ],
)
def test_group_and_host_shapes_pyinfra_chokes_on(tmp_path, inventory, fragments):
    path = write_inventory(tmp_path, inventory)
    assert_one_error(plan(path), f"{path}: ", *fragments)


def test_host_name_with_a_newline_cannot_forge_an_error_line(tmp_path):
    path = write_inventory(tmp_path, f'whole_card = [("n1\\nerror: forged", {T4})]\n')
    line = assert_one_error(plan(path), "host name 'n1\\nerror: forged'")
    assert "\n" not in line


def test_escape_sequence_in_a_value_is_shown_escaped(tmp_path):
    path = write_inventory(
        tmp_path, 'whole_card = (["n1"], {"gpu_model": "T4\\x1b[2J", "gpu_count": 1})\n'
    )
    line = assert_one_error(plan(path), "gpu_model", "\\x1b[2J")
    assert "\x1b" not in line


def test_non_utf8_inventory(tmp_path):
    path = tmp_path / "inv.py"
    path.write_bytes(b'whole_card = ["n1"]\n# caf\xe9\n')
    assert_one_error(plan(path), f"{path}: line 2: not UTF-8 text (byte 0xe9)")


def test_non_utf8_group_data_file(tmp_path):
    path = write_inventory(tmp_path, 'whole_card = ["n1"]\n')
    (tmp_path / "group_data" / "whole_card.py").write_bytes(b"gpu_model = '\xff'\n")
    assert_one_error(plan(path), "group_data/whole_card.py: line 1: not UTF-8 text (byte 0xff)")


def test_nul_byte_names_its_line(tmp_path):
    path = tmp_path / "inv.py"
    path.write_bytes(b'whole_card = ["n1"]\nx = 1\0\n')
    assert_one_error(plan(path), f"{path}: line 2: NUL byte")


def test_group_data_all_py_that_is_a_directory(tmp_path):
    path = write_inventory(tmp_path, f'whole_card = (["n1"], {T4})\n')
    (tmp_path / "group_data" / "all.py").mkdir()
    assert_one_error(plan(path), "group_data/all.py: not a regular file")


def test_group_data_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    path = write_inventory(tmp_path, f'whole_card = (["n1"], {T4})\n')
    os.mkfifo(tmp_path / "group_data" / "whole_card.py")
    assert_one_error(plan(path), "group_data/whole_card.py: not a regular file")


def test_group_data_file_that_cannot_be_read(tmp_path):
    # A regular file whose read fails (EIO), whoever runs the test: /proc/self/mem.
    path = write_inventory(tmp_path, f'whole_card = (["n1"], {T4})\n')
    (tmp_path / "group_data" / "whole_card.py").symlink_to("/proc/self/mem")
    assert_one_error(plan(path), "group_data/whole_card.py: cannot read: Input/output error")


def test_inventory_path_the_system_cannot_look_up(tmp_path):
    too_long = tmp_path / ("a" * 300 + ".py")
    assert_one_error(plan(too_long), "cannot read: File name too long")
    loop = tmp_path / "loop.py"
    loop.symlink_to(loop)
    assert_one_error(plan(loop), "cannot read: Too many levels of symbolic links")


def test_yaml_file_passed_as_the_inventory(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("all:\n  hosts:\n    n1: {}\n")
    assert_one_error(plan(path), f"{path}: not a pyinfra inventory")


def test_yaml_that_is_also_valid_python_is_still_not_an_inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("whole_card: list\n")  # an annotated name in Python: loads and plans nothing
    assert_one_error(plan(path), "not a pyinfra inventory")


def test_inventory_that_calls_sys_exit(tmp_path):
    path = write_inventory(tmp_path, "import sys\nsys.exit(3)\n")
    assert_one_error(plan(path), f"{path}: the file exits while being loaded (sys.exit(3))")


def test_group_data_that_raises_names_file_and_line(tmp_path):
    path = write_inventory(
        tmp_path, 'whole_card = ["n1"]\n', whole_card='gpu_count = 1\nraise RuntimeError("boom")\n'
    )
    assert_one_error(plan(path), "group_data/whole_card.py: line 2: RuntimeError: boom")


def test_group_data_with_a_bad_all_list(tmp_path):
    path = write_inventory(tmp_path, 'whole_card = ["n1"]\n', whole_card='__all__ = ["nope"]\n')
    assert_one_error(plan(path), "__all__ must list names the file defines")


def test_host_with_gpu_keys_in_no_mode_group_is_not_silently_left_out(tmp_path):
    path = write_inventory(
        tmp_path,
        f"""
        gpus = (["n1"], {T4})
        whole_card = ([("n2", {T4})], {{}})
        """,
    )
    assert_one_error(
        plan(path), "host n1 (group gpus): gpu_model: gpu_model is set but the host is in no mode"
    )


def test_inventory_with_no_host_in_a_mode_group_is_not_an_empty_ok(tmp_path):
    path = write_inventory(tmp_path, 'control_plane = ["cp1"]\n')
    assert_one_error(plan(path), "no host is in a mode group (shared, mig, whole_card, vgpu)")


def test_inventory_with_no_hosts_at_all_is_not_an_empty_ok(tmp_path):
    path = write_inventory(tmp_path, "# hosts to come\n")
    assert_one_error(plan(path), "the inventory defines no host: nothing to plan")


def test_upper_case_gpuprov_key_is_a_near_miss_not_ignored(tmp_path):
    path = write_inventory(
        tmp_path,
        """
        mig = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 2, "mig_layout": {"7g.80gb": 1},
                        "MIG_LAYOUT_BY_GPU": {1: {"1g.10gb": 7}}})
        """,
    )
    assert_one_error(plan(path), "MIG_LAYOUT_BY_GPU: unknown key; did you mean mig_layout_by_gpu?")


def test_every_problem_of_every_file_is_reported_in_one_run(tmp_path):
    path = write_inventory(
        tmp_path, 'whole_card = ["n1"]\n', whole_card="gpu_count = (\n", all="x = undefined\n"
    )
    lines = errors_of(plan(path))
    assert len(lines) == 2
    assert any("group_data/all.py: line 1: NameError" in line for line in lines)
    assert any("group_data/whole_card.py: line 1: SyntaxError" in line for line in lines)


def test_real_process_with_a_hostile_inventory_exits_2_without_traceback(tmp_path):
    path = write_inventory(tmp_path, "whole_card = ()\nimport sys\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprov", "plan", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {path}: group whole_card:")
