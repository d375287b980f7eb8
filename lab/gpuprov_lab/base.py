"""The lab's base rootfs, cached in /var/tmp/gpuprov-lab-base-<version>.

The version is a hash of ``base.sh``, the node files it installs and the contract values it is
given, so editing any builds a new base on the next `up` (about 30 s) and nothing stale is ever
reused.

>>> version() == version() and len(version())
12
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from gpuprov.host.contract import APT_SOURCES_DIR, CONTAINERD_CONFIG_PATH, CONTAINERD_UNIT
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import CACHE, prune_cache

HERE = Path(__file__).parent
SCRIPT = HERE / "base.sh"
NODE = HERE / "node"
# What base.sh needs of the host contract (a script cannot import it).
CONTRACT = {
    "APT_SOURCES_DIR": APT_SOURCES_DIR,
    "CONTAINERD_CONFIG": CONTAINERD_CONFIG_PATH,
    "CONTAINERD_UNIT": CONTAINERD_UNIT,
}


def version() -> str:
    digest = hashlib.sha256()
    for path in [SCRIPT, *sorted(NODE.iterdir())]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for name, value in sorted(CONTRACT.items()):
        digest.update(f"{name}={value}\0".encode())
    return digest.hexdigest()[:12]


def path() -> Path:
    return CACHE / f"gpuprov-lab-base-{version()}"


def ensure() -> Path:
    """The cached base for this version, built first if missing.

    Builds of the same version queue on a lock beside the cache (two builds sharing one
    temporary directory broke each other), so the second finds the first one's base.
    """
    base = path()
    if (base / "usr/sbin/sshd").exists():
        return base
    with open(base.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (base / "usr/sbin/sshd").exists():
            return base
        return _build(base)


def _build(base: Path) -> Path:
    log = base.with_suffix(".log")
    print(f"building the lab base {base} (about 30 s; log {log})", file=sys.stderr)
    with open(log, "w") as out:
        result = subprocess.run(
            ["bash", str(SCRIPT), str(base), mirror(), str(NODE)],
            env={**os.environ, **CONTRACT},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if result.returncode != 0:
        raise LabError(
            f"building the lab base failed; see {log}:\n{log.read_text(errors='replace')[-1500:]}"
        )
    prune_cache("gpuprov-lab-base-", base)
    return base


def mirror() -> str:
    """This machine's Debian mirror (without the trailing /debian), as mmdebstrap needs it."""
    if os.environ.get("GPUPROV_LAB_MIRROR"):
        return os.environ["GPUPROV_LAB_MIRROR"].rstrip("/")
    texts = [p.read_text() for p in sorted(Path(APT_SOURCES_DIR).glob("*.sources"))]
    texts += [p.read_text() for p in [Path("/etc/apt/sources.list")] if p.exists()]
    for text in texts:
        for uri in re.findall(r"^(?:URIs:|deb(?:\s+\[[^]]*\])?)\s+(\S+)", text, re.MULTILINE):
            if re.search(r"/debian/?$", uri):
                return re.sub(r"/debian/?$", "", uri)
    return "http://deb.debian.org"
