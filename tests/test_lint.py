"""ruff keeps the code base in one style (lint and format), as part of the one test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_lint_is_clean():
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_file_holds_a_merge_conflict_marker():
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    marked = []
    for name in listed:
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 4 << 20:
            lines = path.read_bytes().splitlines()
            if any(line.startswith((b"<<<<<<< ", b">>>>>>> ")) for line in lines):
                marked.append(name)
    assert marked == []
