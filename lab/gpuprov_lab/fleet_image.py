"""gpuprov's fleet image for the lab: built by ``gpuprov.controller.image`` on a Debian base
that mmdebstrap makes here, and imported into a running lab host's containerd with
``gpuprov_lab.images.import_archives`` (no registry is reachable from the lab, so nothing is
ever pulled).

The base is ``mmdebstrap --variant=minbase --include=python3 bookworm`` as a tar, from this
machine's Debian mirror (``gpuprov_lab.base.mirror``): Debian bookworm's python3 is 3.11, the
interpreter the lab runs, so the wheels the builder's pip picks fit it. Both are cached under
``/var/tmp``: the base by its mmdebstrap arguments, the image by a hash of gpuprov's sources
and ``pyproject.toml`` and the kubectl it carries (a changed checkout builds a new image; an
unchanged one is reused).

>>> IMAGE
'gpuprov.invalid/gpuprov-fleet:lab'
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from gpuprov.controller import image
from gpuprov_lab import base
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import CACHE, prune_cache

IMAGE = "gpuprov.invalid/gpuprov-fleet:lab"
PACKAGES = ("python3",)
SUITE = "bookworm"
SNAPSHOTTER = "native"  # the lab base's containerd config (gpuprov_lab.images.SNAPSHOTTER)


def base_tar() -> Path:
    """The cached Debian base rootfs tar, made first if missing (about a minute)."""
    mirror = base.mirror()
    key = hashlib.sha256(f"{SUITE} {PACKAGES} {mirror}".encode()).hexdigest()[:12]
    path = CACHE / f"gpuprov-fleet-base-{key}.tar"
    with _locked(path):
        if not path.exists():
            partial = path.with_suffix(".partial.tar")
            result = subprocess.run(
                ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                 SUITE, str(partial), f"deb {mirror}/debian {SUITE} main"],
                capture_output=True, text=True,
            )  # fmt: skip
            if result.returncode != 0:
                raise LabError(
                    f"mmdebstrap of the fleet image's base failed:\n{result.stderr[-1500:]}"
                )
            partial.rename(path)
            prune_cache("gpuprov-fleet-base-", path)
    return path


def ensure(kubectl: Path) -> Path:
    """The fleet image archive of this checkout with ``kubectl`` (the lab's build, for the
    deploy's drain in the Job), built first if missing."""
    digest = hashlib.sha256()
    stat = kubectl.stat()
    digest.update(f"{kubectl} {stat.st_size} {stat.st_mtime_ns}".encode())
    sources = [image.CHECKOUT / "pyproject.toml", *sorted((image.CHECKOUT / "gpuprov").rglob("*"))]
    for path in sources:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(
                str(path.relative_to(image.CHECKOUT)).encode() + b"\0" + path.read_bytes()
            )
    root = base_tar()
    digest.update(root.name.encode())
    path = CACHE / f"gpuprov-fleet-image-{digest.hexdigest()[:12]}.tar"
    with _locked(path):
        if not path.exists():
            print(f"building the fleet image {path} (pip install of gpuprov)", file=sys.stderr)
            image.build(str(root), str(path), IMAGE, kubectl=str(kubectl))
            prune_cache("gpuprov-fleet-image-", path)
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Builds of one cached file queue on a lock beside it; the second finds the first's."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
