"""The fleet image's OCI layout (gpuprov.controller.image): the blobs are what their digests
say, the manifest lists the layers bottom first with the config's diff ids, the index names the
image as containerd's import reads it, and a base without the same python is refused."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.controller import image
from gpuprov.core.errors import InputError


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_layout_holds_each_blob_under_its_digest_and_names_the_image(tmp_path):
    base = tmp_path / "base.tar"
    base.write_bytes(tar_of({"usr/bin/python3": b"py"}))
    site = tmp_path / "site"
    (site / "gpuprov").mkdir(parents=True)
    (site / "gpuprov" / "__init__.py").write_text("__version__ = '0'\n")
    layer = image._gpuprov_layer(site)
    built = image.write(str(tmp_path / "img.tar"), "gpuprov.invalid/fleet:1", [base, layer])
    with tarfile.open(built.path) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    for name, data in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "gpuprov.invalid/fleet:1"
    assert entry["digest"] == built.manifest_digest
    manifest = json.loads(blobs[f"blobs/sha256/{entry['digest'].split(':')[1]}"])
    config = json.loads(blobs[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    layers = [d["digest"] for d in manifest["layers"]]
    assert config["rootfs"]["diff_ids"] == layers
    assert layers[0] == "sha256:" + hashlib.sha256(base.read_bytes()).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = tar.getnames()
        launcher = tar.extractfile(image.LAUNCHER).read().decode()
    assert f"{image.SITE}/gpuprov/__init__.py" in names
    assert "python3 -m gpuprov" in launcher
    # The same inputs, the same image.
    again = image.write(str(tmp_path / "again.tar"), "gpuprov.invalid/fleet:1", [base, layer])
    assert again.manifest_digest == built.manifest_digest


def test_a_kubectl_given_is_in_the_layer_executable_on_the_jobs_path(tmp_path):
    site = tmp_path / "site"
    (site / "gpuprov").mkdir(parents=True)
    (site / "gpuprov" / "__init__.py").write_text("__version__ = '0'\n")
    kubectl = tmp_path / "kubectl"
    kubectl.write_bytes(b"\x7fELF kubectl")
    with tarfile.open(fileobj=io.BytesIO(image._gpuprov_layer(site, kubectl))) as tar:
        member = tar.getmember(image.KUBECTL)
        assert tar.extractfile(member).read() == b"\x7fELF kubectl"
    assert member.mode == 0o755
    (path,) = [e.removeprefix("PATH=").split(":") for e in image.ENV if e.startswith("PATH=")]
    assert "/" + image.KUBECTL.rsplit("/", 1)[0] in path
    with tarfile.open(fileobj=io.BytesIO(image._gpuprov_layer(site))) as tar:
        assert image.KUBECTL not in tar.getnames()


def test_a_base_without_the_same_python_is_refused(tmp_path):
    base = tmp_path / "base.tar"
    base.write_bytes(tar_of({"usr/bin/python3": b"py", "usr/lib/python3.2/os.py": b""}))
    with pytest.raises(InputError, match="python3"):
        image.build(str(base), str(tmp_path / "out.tar"), "gpuprov.invalid/fleet:1")
    assert not (tmp_path / "out.tar").exists()


def test_a_source_pip_cannot_install_is_one_error_naming_it_and_nothing_written(tmp_path):
    base = tmp_path / "base.tar"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    base.write_bytes(tar_of({"usr/bin/python3": b"py", f"usr/lib/python{python}/os.py": b""}))
    out = tmp_path / "img.tar"
    missing = str(tmp_path / "no-such-checkout")
    result = CliRunner().invoke(
        main,
        ["fleet", "image", "--base", str(base), "--out", str(out), "--source", missing],
    )
    assert result.exit_code == 2, result.output
    assert f"{missing}: pip could not install it into the image" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_the_default_source_is_the_checkout_gpuprov_runs_from():
    # A checkout (pyproject.toml beside the package): pip installs it; an installed gpuprov has
    # none around it, and the same version comes from the index (the doctest).
    assert image.default_source() == str(image.CHECKOUT)
    assert (image.CHECKOUT / "pyproject.toml").is_file()
