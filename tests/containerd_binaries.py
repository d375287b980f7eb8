"""The real containerd binaries the runtime tests run: Debian's 1.6 on PATH and upstream 2.3.4
from ``../shared/bin/containerd.xz`` (relative to the repository root), decompressed once into a
cache outside the repository and checked against its published sha256."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# GPUPROV_SHARED names another checkout's shared directory (a git worktree has none beside it).
SHARED = Path(os.environ.get("GPUPROV_SHARED", ROOT.parent / "shared"))
UPSTREAM_XZ = SHARED / "bin" / "containerd.xz"
UPSTREAM_SHA256 = "91893aca8e819c4f53d836eb3857e612863431a4c89e4db7108c72622b801198"
CACHE = Path(os.environ.get("GPUPROV_BIN_CACHE", "/var/tmp/gpuprov-bin"))
HOW_TO = (
    f"containerd 2.3.4 not found: put the upstream binary, xz-compressed, at {UPSTREAM_XZ} "
    f"(sha256 of the binary {UPSTREAM_SHA256[:12]}...; see ../shared/bin/README.md)"
)


def debian_containerd() -> str:
    """Debian's containerd 1.6 (CI installs it with the lab's packages)."""
    path = shutil.which("containerd")
    if path is None:
        pytest.fail("containerd is not installed: apt-get install containerd")
    return path


def upstream_containerd() -> str:
    """containerd 2.3.4; skips (saying how to provide it) when the clone has no ../shared."""
    target = CACHE / "containerd-2.3.4"
    if not target.exists():
        if not UPSTREAM_XZ.exists():
            pytest.skip(HOW_TO)
        CACHE.mkdir(parents=True, exist_ok=True)
        data = lzma.decompress(UPSTREAM_XZ.read_bytes())
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.replace(target)
    if hashlib.sha256(target.read_bytes()).hexdigest() != UPSTREAM_SHA256:
        pytest.fail(f"{target}: sha256 differs from {UPSTREAM_SHA256}; remove it and rerun")
    return str(target)
