"""The real upstream programs of ../shared/bin (README there), for tests that ask them.

``upstream_binary("nvidia-mig-parted")`` decompresses ``NAME.xz`` once into a cache outside the
repository, checks its sha256 against the README's table and returns its path; the test is
skipped, saying why, only when the compressed binary is not there. ``GPUPROV_SHARED_BIN``
names another directory (a worktree has no ../shared), ``GPUPROV_BIN_CACHE`` another cache.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_bin() -> Path:
    return Path(os.environ.get("GPUPROV_SHARED_BIN", ROOT.parent / "shared" / "bin"))


def upstream_binary(name: str) -> Path:
    source = shared_bin() / f"{name}.xz"
    if not source.is_file():
        pytest.skip(f"{source} not found (set GPUPROV_SHARED_BIN to the shared/bin directory)")
    expected = _sha256_from_readme(source.parent / "README.md", name)
    cache = Path(os.environ.get("GPUPROV_BIN_CACHE", "/var/tmp/gpuprov-bin"))
    target = cache / name
    if not target.is_file() or _sha256(target) != expected:
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f".{name}.{os.getpid()}"
        partial.write_bytes(lzma.decompress(source.read_bytes()))
        assert _sha256(partial) == expected, f"{source} does not match its sha256 in the README"
        partial.chmod(0o755)
        partial.replace(target)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sha256_from_readme(readme: Path, name: str) -> str:
    for line in readme.read_text().splitlines():
        if line.startswith(f"| `{name}.xz`"):
            match = re.search(r"\b[0-9a-f]{64}\b", line)
            if match:
                return match.group(0)
    raise AssertionError(f"{readme} lists no sha256 for {name}.xz")
