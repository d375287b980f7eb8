"""The lab's container images (``gpuprov_lab.images``): OCI image archives built here, the same
bytes from the same inputs, whose digests and sizes agree with their blobs, and whose pause
program does what a sandbox's must. That containerd imports them and runs pods from them is
tests/lab/test_pods.py."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from gpuprov_lab import images


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def _read(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(name).read()


def _blob(data: bytes, digest: str) -> bytes:
    blob = _read(data, f"blobs/sha256/{digest.removeprefix('sha256:')}")
    assert "sha256:" + hashlib.sha256(blob).hexdigest() == digest
    return blob


def test_an_archive_is_an_oci_layout_whose_every_digest_and_size_is_its_blobs():
    files = {"bin/busybox": (b"\x7fELF busybox", 0o755), "bin/sh": "busybox"}
    data = images.archive("x.invalid/a:2", files, {"Cmd": ["/bin/sh"]})
    assert json.loads(_read(data, "oci-layout")) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(_read(data, "index.json"))["manifests"]
    assert entry["annotations"] == {
        "io.containerd.image.name": "x.invalid/a:2",
        "org.opencontainers.image.ref.name": "2",
    }
    manifest_blob = _blob(data, entry["digest"])
    assert entry["size"] == len(manifest_blob)
    manifest = json.loads(manifest_blob)
    config_blob = _blob(data, manifest["config"]["digest"])
    assert manifest["config"]["size"] == len(config_blob)
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    layer_blob = _blob(data, layer["digest"])
    config = json.loads(config_blob)
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]  # uncompressed: digest = diff id
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"] == {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}
    members = _members(layer_blob)
    assert members["bin"].isdir()
    assert members["bin/busybox"].mode == 0o755 and members["bin/busybox"].uid == 0
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert {m.mtime for m in members.values()} == {0}


def test_the_same_inputs_give_the_same_bytes_and_other_inputs_other_digests():
    files = {"pause": (b"one", 0o755)}
    first = images.archive("x.invalid/p:1", files, {"Entrypoint": ["/pause"]})
    assert first == images.archive("x.invalid/p:1", dict(files), {"Entrypoint": ["/pause"]})
    other = images.archive("x.invalid/p:1", {"pause": (b"two", 0o755)}, {"Entrypoint": ["/pause"]})
    digest = json.loads(_read(first, "index.json"))["manifests"][0]["digest"]
    assert json.loads(_read(other, "index.json"))["manifests"][0]["digest"] != digest


def test_the_pause_image_is_named_as_containerds_sandbox_image():
    config = (Path(images.__file__).parent / "node" / "containerd-config.toml").read_text()
    assert f'sandbox_image = "{images.sandbox_image()}"' in config


@pytest.fixture
def built(tmp_path, monkeypatch):
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    base = tmp_path / "base"
    (base / "bin").mkdir(parents=True)
    (base / images.BUSYBOX).write_bytes(b"\x7fELF a static busybox")
    monkeypatch.setattr(images, "CACHE", tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    return base


def test_ensure_builds_both_archives_once_and_names_them(built):
    archives = images.ensure(built)
    assert [a.name for a in archives] == [images.sandbox_image(), images.CANARY]
    again = images.ensure(built)
    assert [(a.path, a.digest) for a in again] == [(a.path, a.digest) for a in archives]
    canary = archives[1].path.read_bytes()
    manifest = json.loads(_blob(canary, archives[1].digest))
    layer = _members(_blob(canary, manifest["layers"][0]["digest"]))
    assert {f"bin/{applet}" for applet in images.APPLETS} <= set(layer)


def test_the_pause_program_waits_and_ends_cleanly_on_sigterm(built, tmp_path):
    pause = tmp_path / "pause"
    pause.write_bytes(images._compile_pause())
    pause.chmod(0o755)
    proc = subprocess.Popen([str(pause)])
    try:
        time.sleep(0.3)
        assert proc.poll() is None  # it waits
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        proc.kill()


def test_the_kubectl_image_runs_kubectl_with_the_bases_libc_and_is_built_once(
    tmp_path, monkeypatch
):
    base = tmp_path / "base"
    libs = base / images.LIBC_DIR
    libs.mkdir(parents=True)
    (libs / "libc.so.6").write_bytes(b"\x7fELF libc")
    (libs / images.LOADER).write_bytes(b"\x7fELF loader")
    kubectl = tmp_path / "kubectl"
    kubectl.write_bytes(b"\x7fELF kubectl")
    monkeypatch.setattr(images, "CACHE", tmp_path / "cache")
    archive = images.kubectl_archive(base, kubectl, "1.34.4")
    assert archive.name == f"{images.KUBECTL}:1.34.4"
    data = archive.path.read_bytes()
    index = json.loads(_read(data, "index.json"))
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == archive.name
    manifest = json.loads(_blob(data, archive.digest))
    # SUC's cordon container gives only `args: [cordon, NODE]`: the entrypoint must be kubectl.
    config = json.loads(_blob(data, manifest["config"]["digest"]))["config"]
    assert config["Entrypoint"] == ["/bin/kubectl"]
    layer = _blob(data, manifest["layers"][0]["digest"])
    assert _read(layer, "bin/kubectl") == b"\x7fELF kubectl"
    assert _read(layer, "lib/x86_64-linux-gnu/libc.so.6") == b"\x7fELF libc"
    # kubectl's ELF interpreter is /lib64/ld-linux-x86-64.so.2.
    assert (
        _members(layer)[f"lib64/{images.LOADER}"].linkname
        == f"/lib/x86_64-linux-gnu/{images.LOADER}"
    )
    again = images.kubectl_archive(base, kubectl, "1.34.4")
    assert (again.path, again.digest) == (archive.path, archive.digest)
    kubectl.write_bytes(b"\x7fELF another kubectl")
    assert images.kubectl_archive(base, kubectl, "1.34.4").digest != archive.digest
