"""The programs the lab needs on this machine, and the Debian packages that provide them.

`gpuprov lab up` installs whatever is missing with apt-get (it runs as root anyway), so the
README's commands work on a fresh Debian machine.

>>> sorted(set(PROGRAMS.values()))[:3]
['apt-utils', 'containerd', 'gcc']
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from gpuprov_lab.errors import LabError

# program -> Debian package (bookworm). dpkg-deb, mount, unshare and bash are Essential.
PROGRAMS = {
    "mmdebstrap": "mmdebstrap",
    "systemd-nspawn": "systemd-container",
    "apt-ftparchive": "apt-utils",
    "gpg": "gnupg",
    "gpg-connect-agent": "gnupg",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "nft": "nftables",  # the lab's stand-in for kube-proxy (gpuprov_lab.network)
    "cc": "gcc",  # compiles the simulated libnvidia-ml.so.1 the driver package ships
    # The tests read gpuprov's containerd files with the real containerd (Debian's 1.6).
    "containerd": "containerd",
    "ctr": "containerd",
}
_SBIN = ("/usr/sbin", "/sbin")  # ip is in /usr/sbin (/sbin), not always on PATH


def missing() -> list[str]:
    """Debian packages to install for the programs not found on this machine."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    return sorted({pkg for prog, pkg in PROGRAMS.items() if shutil.which(prog, path=path) is None})


def ensure() -> None:
    """Install the missing packages with apt-get (no recommends); a no-op when none is missing."""
    packages = missing()
    if not packages:
        return
    print(f"installing {' '.join(packages)} (apt-get)", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        result = subprocess.run(argv, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise LabError(
                f"{' '.join(argv[:2])} failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}"
            )
