"""gpuprov's fleet image, the one the Jobs of ``kube render --fleet`` run, written as an OCI
image layout tar by this module alone (no container engine: tarfile, json and hashlib).

Two layers, uncompressed:

1. the base: a root filesystem tar with ``/usr/bin/python3`` (the lab makes one with
   ``mmdebstrap --variant=minbase --include=python3``; any distribution's rootfs tar will do),
   taken as it is: a rootfs tar is already a layer (the image-spec's layer format is a plain
   tar of the files, https://github.com/opencontainers/image-spec/blob/v1.1.0/layer.md);
2. gpuprov: installed with pip (``pip install --target``) from ``source``, by default this
   checkout when gpuprov runs from one, else this very version from the package index, into
   ``/opt/gpuprov/site``, and ``/usr/local/bin/gpuprov``, a shell launcher running
   ``python3 -m gpuprov`` with that directory on its path; with ``kubectl`` given, that binary
   at ``/usr/local/bin/kubectl`` (the deploy drains through it, as the Job's account). pip runs with this interpreter and
   picks wheels for it (pyinfra's gevent is compiled), so the base's python must be the same
   ``major.minor``: checked, and refused otherwise.

The layout (https://github.com/opencontainers/image-spec/blob/v1.1.0/image-layout.md):
``oci-layout``, ``index.json`` naming the image in the ``io.containerd.image.name`` annotation
(as ``ctr images export`` writes it, containerd core/images/archive/exporter.go, so ``ctr -n
k8s.io images import`` gives it that name) and ``blobs/sha256/``. The layer of gpuprov is
deterministic (fixed times and owners, sorted), so the same checkout, wheels and base give the
same digests. A real cluster pushes the tar to its registry (``skopeo copy
oci-archive:IMAGE.tar docker://REGISTRY/gpuprov-fleet:TAG``, ``crane push``...).

>>> python_of(["usr/bin/python3", "usr/lib/python3.11/os.py"])
'3.11'
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpuprov import __version__
from gpuprov.core.errors import InputError, Problem

# A name that never resolves (RFC 2606 ``.invalid``): a cluster names its registry's copy.
DEFAULT_IMAGE = f"gpuprov.invalid/gpuprov-fleet:{__version__}"
SITE = "opt/gpuprov/site"
LAUNCHER = "usr/local/bin/gpuprov"
KUBECTL = "usr/local/bin/kubectl"  # on the Job's PATH (ENV)
LAUNCHER_TEXT = f'#!/bin/sh\nPYTHONPATH=/{SITE} exec /usr/bin/python3 -m gpuprov "$@"\n'
ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
ARCHITECTURE, OS = "amd64", "linux"
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository holding pyproject.toml


@dataclass(frozen=True)
class Built:
    path: Path
    manifest_digest: str


def python_of(names: list[str]) -> str | None:
    """The ``major.minor`` of the base's ``/usr/bin/python3`` (from its ``usr/lib/python3.X``
    standard library), None without one."""
    clean = {n.removeprefix("./").rstrip("/") for n in names}
    if "usr/bin/python3" not in clean:
        return None
    found = {m.group(1) for n in clean if (m := re.fullmatch(r"usr/lib/python(3\.\d+)/os\.py", n))}
    return found.pop() if len(found) == 1 else None


def default_source(checkout: Path = CHECKOUT) -> str:
    """What pip installs into the image unless told: the checkout gpuprov runs from, or, for
    an installed gpuprov (no checkout around it), the same version from the package index.

    >>> default_source(Path("/nowhere")) == f"gpuprov=={__version__}"
    True
    """
    return str(checkout) if (checkout / "pyproject.toml").is_file() else f"gpuprov=={__version__}"


def build(
    base: str, out: str, name: str, source: str | None = None, kubectl: str | None = None
) -> Built:
    """Write the image ``name`` (``base`` plus gpuprov from ``source``: anything pip installs,
    a checkout, a wheel or a requirement; and the ``kubectl`` binary at
    ``/usr/local/bin/kubectl`` when given: the deploy's drain in the Job) to ``out``."""
    with tarfile.open(base) as tar:
        names = tar.getnames()
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    got = python_of(names)
    if got != want:
        raise InputError(
            [
                Problem(
                    base,
                    f"the base must have /usr/bin/python3 {want} (this python, whose wheels go "
                    f"into the image), got {got or 'none'}",
                )
            ]
        )
    with tempfile.TemporaryDirectory(prefix="gpuprov-image-") as work:
        site = Path(work) / "site"
        source = source or default_source()
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", str(site),
             source],
        )  # fmt: skip
        if installed.returncode != 0:
            raise InputError(
                [Problem(source, f"pip could not install it into the image (exit "
                         f"{installed.returncode}; its output is above)")]
            )  # fmt: skip
        layer = _gpuprov_layer(site, Path(kubectl) if kubectl else None)
    return write(out, name, [Path(base), layer])


def write(out: str, name: str, layers: list[Path | bytes]) -> Built:
    """The OCI layout tar of one image with ``layers`` (files or bytes, bottom first)."""
    descriptors, diff_ids = [], []
    for layer in layers:
        digest, size = _digest(layer)
        descriptors.append({"mediaType": LAYER, "digest": digest, "size": size})
        diff_ids.append(digest)  # uncompressed: the diff id is the layer's digest
    config = _json(
        {
            "architecture": ARCHITECTURE,
            "os": OS,
            "config": {"Env": ENV, "Cmd": ["gpuprov", "--help"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": _descriptor(CONFIG, config),
            "layers": descriptors,
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    **_descriptor(MANIFEST, manifest),
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                    "platform": {"architecture": ARCHITECTURE, "os": OS},
                }
            ],
        }
    )
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
        _add(tar, "index.json", index)
        for blob, descriptor in (
            (config, None),
            (manifest, None),
            *zip(layers, descriptors, strict=True),
        ):
            digest = descriptor["digest"] if descriptor else _digest(blob)[0]
            _add(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", blob)
    os.replace(partial, path)
    return Built(path, _descriptor(MANIFEST, manifest)["digest"])


def _gpuprov_layer(site: Path, kubectl: Path | None = None) -> bytes:
    """The tar of gpuprov's files: ``site`` at ``/opt/gpuprov/site``, the launcher, and
    ``kubectl`` at ``/usr/local/bin/kubectl`` when given."""
    files: dict[str, tuple[bytes, int] | None] = {}
    for parent in (*Path(SITE).parents, Path(SITE), *Path(LAUNCHER).parents):
        if str(parent) != ".":
            files[str(parent)] = None
    for path in sorted(site.rglob("*")):
        if path.is_symlink() or "__pycache__" in path.parts:
            continue
        inside = f"{SITE}/{path.relative_to(site)}"
        files[inside] = (
            None if path.is_dir() else (path.read_bytes(), path.stat().st_mode & 0o755 | 0o644)
        )
    files[LAUNCHER] = (LAUNCHER_TEXT.encode(), 0o755)
    if kubectl is not None:
        files[KUBECTL] = (kubectl.read_bytes(), 0o755)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid = 0, 0, 0
            value = files[name]
            if value is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(value[0]), value[1]
                tar.addfile(info, io.BytesIO(value[0]))
    return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, blob: Path | bytes) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = 0o644, 0
    if isinstance(blob, Path):
        info.size = blob.stat().st_size
        with blob.open("rb") as f:
            tar.addfile(info, f)
    else:
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))


def _digest(blob: Path | bytes) -> tuple[str, int]:
    if isinstance(blob, bytes):
        return "sha256:" + hashlib.sha256(blob).hexdigest(), len(blob)
    digest = hashlib.sha256()
    with blob.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest(), blob.stat().st_size


def _descriptor(media_type: str, blob: bytes) -> dict:
    digest, size = _digest(blob)
    return {"mediaType": media_type, "digest": digest, "size": size}


def _json(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
