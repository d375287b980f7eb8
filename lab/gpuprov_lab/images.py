"""The container images the lab's pods run, built here as OCI image archives: no registry is
reachable from the lab, so nothing is ever pulled.

Two images, each one uncompressed layer:

- ``PAUSE``: the pod sandbox image, named as containerd's ``sandbox_image`` in the lab base's
  config (``registry.k8s.io/pause:3.10``), so containerd finds it and never pulls. Its program
  is ``pause.c`` here (what a sandbox's first process must do: hold the pod's namespaces, reap
  children, end on SIGTERM or SIGINT), compiled static with this machine's C compiler.
- ``CANARY``: ``gpuprov.invalid/lab-canary:1``, Debian's static busybox (package
  ``busybox-static``, taken from the lab base, which installs it) with the links of the applets
  a test or a canary pod runs (``sh``, ``env``, ``cat``, ``sleep``, ...; Debian's build has no
  ``printenv``: ``sh -c 'echo "$NVIDIA_VISIBLE_DEVICES"'``). ``.invalid`` is a domain that
  never resolves (RFC 2606): a pod that names it with a pull policy that pulls fails at once
  instead of reaching out.

And one the lab imports only where a test needs it (``kubectl_archive``, ``import_archive``):

- ``KUBECTL``: ``gpuprov.invalid/lab-kubectl:<Kubernetes version>``, the lab's own kubectl
  (the binary the lab runs, dynamically linked to glibc) with the lab base's ``libc.so.6`` and
  loader, entrypoint ``/bin/kubectl``: system-upgrade-controller's cordon and drain containers
  give only ``args`` (``cordon NODE``) to the image it names in
  ``SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE`` (rancher/system-upgrade-controller v0.20.1
  ``pkg/upgrade/job/job.go``).

The archives are deterministic (fixed times, owners and order; no compression), so the same
inputs give the same image digests, and cached by the hash of those inputs under
``/var/tmp/gpuprov-lab-images-<hash>/``. ``ctr -n k8s.io images import`` reads them
(the OCI image layout, https://github.com/opencontainers/image-spec/blob/v1.1.0/image-layout.md;
the image's name from the ``io.containerd.image.name`` annotation of its index entry, as
containerd's own ``ctr images export`` writes it, containerd core/images/archive/exporter.go).

>>> sorted(_canary_files(b"#!busybox"))[:3]
['bin/busybox', 'bin/cat', 'bin/env']
>>> sorted(_kubectl_files(b"kubectl", b"libc", b"ld"))
['bin/kubectl', 'lib/x86_64-linux-gnu/ld-linux-x86-64.so.2', 'lib/x86_64-linux-gnu/libc.so.6', 'lib64/ld-linux-x86-64.so.2']
>>> reference_tag("registry.k8s.io/pause:3.10")
'3.10'
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gpuprov.core.hostfiles.documents import parse
from gpuprov.host.contract import CONTAINERD_UNIT, CRI_PLUGIN, KUBELET_UNIT
from gpuprov_lab import kubelet_unit, ssh
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import CACHE, RunDir, prune_cache

HERE = Path(__file__).parent
PAUSE_SOURCE = HERE / "pause.c"
CONTAINERD_CONFIG = HERE / "node" / "containerd-config.toml"
CANARY = "gpuprov.invalid/lab-canary:1"
KUBECTL = "gpuprov.invalid/lab-kubectl"  # tagged with the Kubernetes version
# kubectl's dynamic libraries (`ldd kubectl`: libc and the loader), in the lab base (usrmerge:
# /lib is usr/lib there; /lib64's loader is an absolute link to this one).
LIBC_DIR = "usr/lib/x86_64-linux-gnu"
LOADER = "ld-linux-x86-64.so.2"
BUSYBOX = "bin/busybox"  # in the lab base, from busybox-static
# The applets the lab's pods use: the shell, and what a canary or a test reads and waits with.
APPLETS = ("cat", "env", "ls", "sh", "sleep", "true")
CFLAGS = ("-static", "-Os", "-s", "-Wall", "-Werror")
PATH_ENV = "PATH=/bin"
# The image config's platform: the lab's hosts run this machine's kernel and Debian amd64.
ARCHITECTURE, OS = "amd64", "linux"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"


def sleeper(limits: dict[str, int] | None = None) -> dict:
    """A test pod's one container: the canary image, never pulled, sleeping an hour, with
    ``limits`` (device name -> count).

    >>> sleeper({"nvidia.com/gpu.shared": 1})["resources"]
    {'limits': {'nvidia.com/gpu.shared': '1'}}
    """
    return {
        "name": "c",
        "image": CANARY,
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        **({"resources": {"limits": {k: str(v) for k, v in limits.items()}}} if limits else {}),
    }


def sandbox_image() -> str:
    """The pause image the lab base's containerd names (``sandbox_image``): the pause image is
    built under this name so that containerd has it and pulls nothing."""
    config = parse("toml", CONTAINERD_CONFIG.read_text())
    return config["plugins"][CRI_PLUGIN[config["version"]]]["sandbox_image"]


@dataclass(frozen=True)
class Archive:
    """An image archive on this machine: its reference and the manifest digest it imports as."""

    name: str
    path: Path
    digest: str


def ensure(base: Path) -> list[Archive]:
    """The pause and canary archives for the lab base ``base``, built first when missing."""
    busybox = (base / BUSYBOX).read_bytes()
    pause = _compile_pause()
    images = {sandbox_image(): _pause_files(pause), CANARY: _canary_files(busybox)}
    config = {sandbox_image(): {"Entrypoint": ["/pause"]}, CANARY: {"Cmd": ["/bin/sh"]}}
    digest = hashlib.sha256(Path(__file__).read_bytes() + pause + busybox).hexdigest()[:16]
    directory = CACHE / f"gpuprov-lab-images-{digest}"
    archives = []
    for name, files in images.items():
        path = directory / f"{name.replace('/', '_').replace(':', '_')}.tar"
        if not path.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, archive(name, files, config[name]))
        archives.append(Archive(name, path, _manifest_digest(path)))
    prune_cache("gpuprov-lab-images-", directory)
    return archives


def kubectl_archive(base: Path, kubectl: Path, version: str) -> Archive:
    """The kubectl image for the lab base ``base``, built first when missing."""
    files = _kubectl_files(
        kubectl.read_bytes(),
        (base / LIBC_DIR / "libc.so.6").read_bytes(),
        (base / LIBC_DIR / LOADER).read_bytes(),
    )
    name = f"{KUBECTL}:{version}"
    digest = hashlib.sha256(name.encode())
    for path in sorted(files):
        value = files[path]
        digest.update(
            path.encode() + b"\0" + (value.encode() if isinstance(value, str) else value[0])
        )
    directory = CACHE / f"gpuprov-lab-kubectl-{digest.hexdigest()[:16]}"
    path = directory / "kubectl.tar"
    if not path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, archive(name, files, {"Entrypoint": ["/bin/kubectl"]}))
        prune_cache("gpuprov-lab-kubectl-", directory)
    return Archive(name, path, _manifest_digest(path))


def archive(name: str, files: dict[str, tuple[bytes, int] | str], config: dict) -> bytes:
    """An OCI image layout, as a tar, of one image ``name`` with one layer of ``files``.

    ``files``: path in the image -> ``(content, mode)``, or a link target (a symlink).
    ``config``: the image config's ``config`` (``Entrypoint``, ``Cmd``); ``Env`` is added.

    >>> data = archive("x.invalid/a:1", {"bin/a": (b"a", 0o755), "bin/b": "a"}, {"Cmd": ["a"]})
    >>> data == archive("x.invalid/a:1", {"bin/a": (b"a", 0o755), "bin/b": "a"}, {"Cmd": ["a"]})
    True
    >>> sorted(tarfile.open(fileobj=io.BytesIO(data)).getnames())[-2:]
    ['index.json', 'oci-layout']
    """
    layer = _tar(_layer_entries(files))
    layer_digest = _sha(layer)
    image_config = {
        "architecture": ARCHITECTURE,
        "os": OS,
        "config": {"Env": [PATH_ENV], **config},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_blob = _json(image_config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": _descriptor("application/vnd.oci.image.config.v1+json", config_blob),
        "layers": [_descriptor(LAYER_MEDIA_TYPE, layer)],
    }
    manifest_blob = _json(manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                **_descriptor(MANIFEST_MEDIA_TYPE, manifest_blob),
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": reference_tag(name),
                },
                "platform": {"architecture": ARCHITECTURE, "os": OS},
            }
        ],
    }
    blobs = {_sha(b): b for b in (layer, config_blob, manifest_blob)}
    entries: list[tuple[str, bytes | str | None, int]] = [
        ("blobs", None, 0o755),
        ("blobs/sha256", None, 0o755),
        *((f"blobs/sha256/{d.split(':', 1)[1]}", b, 0o644) for d, b in sorted(blobs.items())),
        ("index.json", _json(index), 0o644),
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644),
    ]
    return _tar(entries)


def reference_tag(name: str) -> str:
    """The tag of an image reference (``org.opencontainers.image.ref.name`` holds it)."""
    return name.rsplit(":", 1)[1]


def _pause_files(pause: bytes) -> dict[str, tuple[bytes, int] | str]:
    return {"pause": (pause, 0o755)}


def _canary_files(busybox: bytes) -> dict[str, tuple[bytes, int] | str]:
    files: dict[str, tuple[bytes, int] | str] = {BUSYBOX: (busybox, 0o755)}
    files |= {f"bin/{applet}": "busybox" for applet in APPLETS}
    return files


def _kubectl_files(
    kubectl: bytes, libc: bytes, loader: bytes
) -> dict[str, tuple[bytes, int] | str]:
    lib = "lib/x86_64-linux-gnu"
    return {
        "bin/kubectl": (kubectl, 0o755),
        f"{lib}/libc.so.6": (libc, 0o755),
        f"{lib}/{LOADER}": (loader, 0o755),
        f"lib64/{LOADER}": f"/{lib}/{LOADER}",
    }


def _layer_entries(files: dict[str, tuple[bytes, int] | str]):
    directories = sorted({str(p) for f in files for p in Path(f).parents if str(p) != "."})
    yield from ((d, None, 0o755) for d in directories)
    for path in sorted(files):
        value = files[path]
        if isinstance(value, str):
            yield path, value, 0o777
        else:
            yield path, value[0], value[1]


def _tar(entries) -> bytes:
    """A tar of ``(path, content, mode)``: content bytes (a file), str (a symlink's target) or
    None (a directory); owner root, time 0, in the given order: the same entries, the same
    bytes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content, mode in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = (
                mode, 0, 0, 0, "", "",
            )  # fmt: skip
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def _compile_pause() -> bytes:
    """``pause.c`` compiled static, cached by the hash of source, flags and compiler version."""
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise LabError(f"no C compiler {cc!r} on PATH to build the lab's pause image (install gcc)")
    source = PAUSE_SOURCE.read_bytes()
    version = subprocess.run([cc, "--version"], capture_output=True, check=False).stdout
    digest = hashlib.sha256(source + version + " ".join(CFLAGS).encode()).hexdigest()[:16]
    target = CACHE / f"gpuprov-lab-pause-{digest}" / "pause"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as work:
            built = Path(work, "pause")
            result = subprocess.run(
                [cc, *CFLAGS, "-o", str(built), str(PAUSE_SOURCE)],
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                raise LabError(f"{cc} failed to build the pause program:\n{result.stderr.strip()}")
            os.replace(built, target)  # atomic: a concurrent build of the same hash is harmless
        prune_cache("gpuprov-lab-pause-", target.parent)
    return target.read_bytes()


def _manifest_digest(path: Path) -> str:
    with tarfile.open(path) as tar:
        index = json.load(tar.extractfile("index.json"))
    return index["manifests"][0]["digest"]


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    partial.replace(path)


def _descriptor(media_type: str, blob: bytes) -> dict:
    return {"mediaType": media_type, "digest": _sha(blob), "size": len(blob)}


def _json(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _sha(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


# --- in a lab host

IMAGE_DIR = "/var/lib/gpuprov-lab/images"
IMPORT_DIR = "/var/lib/gpuprov-lab/import"  # an archive imported now (import_archive), then gone
IMPORT_UNIT = "/etc/systemd/system/gpuprov-lab-images.service"
# The CRI plugin's snapshotter in the lab base's containerd config (native: overlayfs does not
# work on the host's own overlay root): images are unpacked for it at import, not at first use.
SNAPSHOTTER = "native"


def import_unit() -> str:
    """The unit that imports the host's image archives into containerd's ``k8s.io`` namespace
    (the CRI plugin's) at every boot, before the kubelet starts: an image already there is
    imported again in a few milliseconds.

    >>> "ctr -n k8s.io images import --snapshotter=native" in import_unit()
    True
    """
    return (
        "[Unit]\n"
        "Description=The lab's container images, imported into containerd (gpuprov lab: no "
        "registry is reachable)\n"
        f"After={CONTAINERD_UNIT}\n"
        f"Requires={CONTAINERD_UNIT}\n"
        f"Before={KUBELET_UNIT}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/bin/sh -ec 'for f in {IMAGE_DIR}/*.tar; do "
        f'ctr -n k8s.io images import --snapshotter={SNAPSHOTTER} "$f"; done\'\n'
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def install(root: Path, archives: list[Archive]) -> None:
    """Put ``archives`` and the unit that imports them into the host root ``root`` (not booted)."""
    for archive_ in archives:
        kubelet_unit.put(root, f"{IMAGE_DIR}/{archive_.path.name}", archive_.path.read_bytes())
    kubelet_unit.put(root, IMPORT_UNIT, import_unit().encode())
    kubelet_unit.enable(root, IMPORT_UNIT)


def import_archives(run_dir: RunDir, hosts: list[str], paths: list[Path]) -> dict[str, float]:
    """``import_archive`` of each of ``paths`` into each host, the hosts side by side (an import
    waits mostly on the disk: the copy into the host's root and containerd's unpack); the
    seconds each host took."""

    def one(host: str) -> float:
        started = time.monotonic()
        for path in paths:
            import_archive(run_dir, host, path)
        return time.monotonic() - started

    with ThreadPoolExecutor(max_workers=len(hosts) or 1) as pool:
        return dict(zip(hosts, pool.map(one, hosts), strict=True))


def import_archive(run_dir: RunDir, host: str, path: Path, timeout: float = 600) -> None:
    """Import the archive ``path`` (on this machine) into running host ``host``'s containerd
    (``k8s.io``, the CRI plugin's namespace, which the kubelet's pods use), now. The archive
    is copied into the host's root (an overlay on another file system: no hard link) and
    removed again once imported."""
    target = run_dir.host(host).root / IMPORT_DIR.lstrip("/") / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    shutil.copyfile(path, target)
    inside = f"{IMPORT_DIR}/{path.name}"
    try:
        result = ssh.run(
            run_dir,
            host,
            f"ctr -n k8s.io images import --snapshotter={SNAPSHOTTER} {inside}",
            timeout=timeout,
        )
    finally:
        target.unlink(missing_ok=True)
    if result.returncode != 0:
        raise LabError(f"{host}: importing {path.name} failed:\n{result.stdout}{result.stderr}")
