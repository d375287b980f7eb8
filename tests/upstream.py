"""NVIDIA's real programs for tests: the release binaries in ../shared/bin, decompressed once.

``GPUPROV_SHARED_BIN`` names the directory (default ``/work/shared/bin``); each binary is checked
against the sha256 its README lists and cached in ``/var/tmp/gpuprov-bin``.

>>> device_plugin()   # doctest: +SKIP
PosixPath('/var/tmp/gpuprov-bin/nvidia-device-plugin-ea872e900a4b')
"""

from __future__ import annotations

import hashlib
import lzma
import os
from pathlib import Path

CACHE = Path("/var/tmp/gpuprov-bin")
DEVICE_PLUGIN_SHA256 = "ea872e900a4b049b8573602f56a1a5ccb51c07432cad74b3eec39440f82366a5"


def device_plugin() -> Path | None:
    """NVIDIA's k8s device plugin v0.20.0, or None when this machine lacks the release binary."""
    return _binary("nvidia-device-plugin", DEVICE_PLUGIN_SHA256)


def _binary(name: str, sha256: str) -> Path | None:
    packed = Path(os.environ.get("GPUPROV_SHARED_BIN", "/work/shared/bin")) / f"{name}.xz"
    binary = CACHE / f"{name}-{sha256[:12]}"
    if binary.exists():
        return binary
    if not packed.exists():
        return None
    data = lzma.decompress(packed.read_bytes())
    if hashlib.sha256(data).hexdigest() != sha256:
        raise AssertionError(f"{packed} does not hold the binary its README lists ({sha256})")
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".{binary.name}.{os.getpid()}")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(binary)
    return binary
