"""`gpuprov kube render --out DIR` where DIR or a file in it cannot be written (issue #26):
refused before anything is written, one line per target naming it, exit 2, no traceback, and
never blocked on a FIFO (the real process runs under a time limit)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from inventories import write_inventory

INVENTORY = (
    'shared = (["ts-1"], {"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": 4})\n'
    'whole_card = (["train-1"], {"gpu_model": "H200-141GB", "gpu_count": 4})\n'
)
FILES = {
    "device-plugin-configmap.yaml",
    "nodes.yaml",
    "node-taints.yaml",
    "device-plugin-values.yaml",
    "gpu-operator-values.yaml",
}


def render(tmp_path: Path, out: str) -> subprocess.CompletedProcess:
    inventory = write_inventory(tmp_path, INVENTORY)
    return subprocess.run(
        [sys.executable, "-m", "gpuprov", "kube", "render", str(inventory), "--out", out],
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(result: subprocess.CompletedProcess, *fragments: str) -> list[str]:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), lines
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, lines)
    return lines


def snapshot(directory: Path) -> dict[str, tuple]:
    """Every entry of ``directory`` with its type, link target and content: what must not move."""
    out = {}
    for entry in sorted(directory.iterdir()):
        status = entry.lstat()
        content = entry.read_bytes() if stat.S_ISREG(status.st_mode) else None
        link = os.readlink(entry) if entry.is_symlink() else None
        out[entry.name] = (stat.S_IFMT(status.st_mode), link, content, status.st_mtime_ns)
    return out


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: os.symlink("/nonexistent/x", d / "nodes.yaml"), "a dangling symbolic link"),
        (lambda d: (d / "node-taints.yaml").mkdir(), "a directory where the file goes"),
        (lambda d: os.mkfifo(d / "nodes.yaml"), "a FIFO where the file goes"),
        (lambda d: os.symlink("/dev/null", d / "nodes.yaml"), "a character device"),
    ],
)
def test_a_target_that_is_not_a_file_refuses_the_whole_set_and_writes_nothing(
    tmp_path, make, fragment
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "device-plugin-configmap.yaml").write_text("the previous render\n")
    make(out)
    before = snapshot(out)
    lines = refused(render(tmp_path, str(out)), f"{out}/", fragment, "--out")
    assert len(lines) == 1
    assert snapshot(out) == before  # the earlier file is neither rewritten nor touched


def test_two_bad_targets_are_two_lines(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "nodes.yaml")
    (out / "gpu-operator-values.yaml").mkdir()
    lines = refused(render(tmp_path, str(out)), "nodes.yaml", "gpu-operator-values.yaml")
    assert len(lines) == 2


@pytest.mark.parametrize(
    "out, fragment",
    [
        ("/dev/null", "/dev/null: --out: a character device, not a directory"),
        ("{tmp}/inv.py/k8s", "inv.py is a regular file, so no directory can be made under it"),
        ("{tmp}/inv.py/a/b", "inv.py is a regular file, so no directory can be made under it"),
        ("{tmp}/link", "link is a dangling symbolic link"),
        ("{tmp}/fifo", "a FIFO, not a directory"),
    ],
)
def test_an_output_directory_that_cannot_be_one_is_refused(tmp_path, out, fragment):
    os.symlink(tmp_path / "nowhere", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    [_] = refused(render(tmp_path, out.format(tmp=tmp_path)), fragment)
    assert not (tmp_path / "nowhere").exists()


def test_the_set_is_written_whole_each_file_0644_and_a_linked_file_keeps_its_link(tmp_path):
    out = tmp_path / "k8s" / "new"  # made, parents too
    result = render(tmp_path, str(out))
    assert result.returncode == 0, result.stderr
    assert {p.name for p in out.iterdir()} == FILES  # no temporary file left
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}
    kept = tmp_path / "kept-nodes.yaml"
    kept.write_text("old\n")
    (out / "nodes.yaml").unlink()
    os.symlink(kept, out / "nodes.yaml")
    assert render(tmp_path, str(out)).returncode == 0
    assert os.readlink(out / "nodes.yaml") == str(kept)
    assert kept.read_text().startswith("# The labels gpuprov owns on each node.")
