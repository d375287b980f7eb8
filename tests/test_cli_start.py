"""Pure commands start fast: they import neither pyinfra nor its SSH and greenlet stacks
(paramiko, gevent), which are for the commands that reach hosts (issue #26 item 5).

Each command runs in a new interpreter, as a user runs it, and reports the modules it loaded.
The times are in bench/cli_start.py and docs/performance.md, not here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pyinfra", "paramiko", "gevent")
# Runs `gpuprov ARGS...` in this interpreter, then prints the heavy modules it imported.
PROBE = f"""
import runpy, sys
sys.argv = ["gpuprov", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("gpuprov", run_name="__main__")
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print("loaded:", *heavy, file=sys.stderr)
sys.exit(code)
"""


def loaded(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("loaded:")]
    return line.split()[1:]


@pytest.mark.parametrize(
    "args",
    [
        ["mig", "check", "A100-80GB", "3g.40gb=1"],
        ["mig", "profiles", "A100-80GB"],
        ["variables"],
        ["plan", "inventories/example.py"],
        ["plan", "inventories/kubespray/inventory.py"],
        ["kube", "render", "inventories/example.py", "--out", "{out}"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_pure_command_imports_no_pyinfra_paramiko_or_gevent(args, tmp_path):
    assert loaded(*(a.format(out=tmp_path / "out") for a in args)) == []


def test_the_probe_sees_pyinfra_where_a_command_needs_it(tmp_path):
    # An inventory whose group data imports pyinfra is loaded in pyinfra's context.
    (tmp_path / "group_data").mkdir()
    (tmp_path / "inv.py").write_text('whole_card = ["n1"]\n')
    (tmp_path / "group_data" / "whole_card.py").write_text(
        'from pyinfra import inventory\ngpu_model = "T4"\ngpu_count = 1\n'
    )
    assert {"pyinfra", "gevent", "paramiko"} <= set(loaded("plan", str(tmp_path / "inv.py")))
