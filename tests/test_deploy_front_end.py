"""`gpuprov deploy`: pyinfra's own command line, run only once gpuprov's loader has read the
inventory (issue #26). A malformed inventory is one line per problem and exit 2 before pyinfra
starts (no traceback, no pyinfra-debug.log); a good one goes to pyinfra with every argument as
given. Plain `pyinfra` loads the inventory before it reads any deploy file, so there gpuprov's
code cannot run first: the last test shows it, and is why the front end exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inventories import write_inventory

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = str(ROOT / "deploys" / "gpu_node.py")
T4 = '{"gpu_model": "T4", "gpu_count": 1}'


def run(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def gpuprov_deploy(cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    return run(cwd, sys.executable, "-m", "gpuprov", "deploy", *arguments)


@pytest.mark.parametrize(
    "inventory, said",
    [
        ("whole_card = ()\n", "group whole_card: a group tuple must be (hosts, data)"),
        ('whole_card = ("n1", "n2")\n', "a group tuple must be (hosts, data)"),
        ('whole_card = [("n1", "x")]\n', "host n1 (host data): data must be a dict, got 'x'"),
        ("import sys\nsys.exit(3)\n", "the file exits while being loaded (sys.exit(3))"),
        ('whole_card = ["n1"]\nx = 1 +\n', "line 2: SyntaxError"),
    ],
)
def test_a_malformed_inventory_is_one_line_and_pyinfra_never_starts(tmp_path, inventory, said):
    path = write_inventory(tmp_path, inventory)
    result = gpuprov_deploy(tmp_path, "-y", str(path), DEPLOY)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {path}: ") and said in line, line
    assert "Traceback" not in result.stderr and "--> Loading" not in result.stdout + result.stderr
    assert not (tmp_path / "pyinfra-debug.log").exists()


def test_the_inventory_is_found_where_pyinfras_chdir_puts_it(tmp_path):
    write_inventory(tmp_path, "whole_card = ()\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = gpuprov_deploy(elsewhere, "--chdir", str(tmp_path), "-y", "inv.py", DEPLOY)
    assert result.returncode == 2 and "group whole_card: a group tuple" in result.stderr


def test_a_good_inventory_goes_to_pyinfra_with_every_argument(tmp_path):
    path = write_inventory(tmp_path, f'whole_card = [("n1", {T4})]\n')
    result = gpuprov_deploy(tmp_path, str(path), "debug-inventory")
    assert result.returncode == 0, result.stderr
    assert "--> Groups: whole_card, inv" in result.stdout + result.stderr


def test_plain_pyinfra_loads_the_inventory_before_any_gpuprov_code(tmp_path):
    path = write_inventory(tmp_path, "whole_card = ()\n")
    pyinfra = Path(sys.executable).with_name("pyinfra")
    result = run(tmp_path, str(pyinfra), "-y", str(path), DEPLOY)
    assert result.returncode != 0
    assert "IndexError" in result.stdout + result.stderr  # pyinfra's loader, not gpuprov's
    assert "error: " not in result.stderr  # the deploy file never ran
