"""The device plugin build `gpuprov lab up` runs by default: shared/bin's ``.xz``, decompressed
once into the cache and checked against the sha256 in shared/bin's README."""

from __future__ import annotations

import hashlib
import lzma

import pytest
from gpuprov_lab import plugin_service as device_plugin
from gpuprov_lab.errors import LabError


@pytest.fixture
def shared_bin(tmp_path, monkeypatch):
    """A shared/bin directory, and a cache of this test's own instead of /var/tmp."""
    monkeypatch.setenv("GPUPROV_SHARED_BIN", str(tmp_path))
    monkeypatch.setattr(device_plugin, "CACHE", tmp_path / "cache")
    return tmp_path


def _ship(directory, name: str, data: bytes, sha256: str | None = None) -> None:
    (directory / f"{name}.xz").write_bytes(lzma.compress(data))
    digest = sha256 or hashlib.sha256(data).hexdigest()
    (directory / "README.md").write_text(
        f"| file | upstream | tag | sha256 | licence |\n|---|---|---|---|---|\n"
        f"| `{name}.xz` | upstream | v1 | {digest} | MIT |\n"
    )


def test_the_binary_is_decompressed_once_under_its_sha256(shared_bin):
    data = b"\x7fELF gpuprov test binary " + str(shared_bin).encode()
    name = "gpuprov-test-plugin"
    _ship(shared_bin, name, data)
    path = device_plugin.binary(name)
    assert path.read_bytes() == data and path.stat().st_mode & 0o111
    assert (
        path
        == shared_bin / "cache" / "gpuprov-bin" / f"{name}-{hashlib.sha256(data).hexdigest()[:12]}"
    )
    made = path.stat().st_mtime_ns
    assert device_plugin.binary(name) == path and path.stat().st_mtime_ns == made  # kept


def test_a_binary_that_does_not_match_its_sha256_is_refused_and_not_kept(shared_bin):
    name = "gpuprov-test-plugin-bad"
    _ship(shared_bin, name, b"tampered", sha256="ab" * 32)
    with pytest.raises(LabError, match="decompresses to sha256 .* its README says abab"):
        device_plugin.binary(name)
    assert list((shared_bin / "cache" / "gpuprov-bin").iterdir()) == []


def test_no_shared_bin_says_how_to_give_the_plugin(shared_bin):
    with pytest.raises(LabError, match="--device-plugin PATH"):
        device_plugin.binary("gpuprov-test-absent")
