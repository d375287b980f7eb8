"""Build the host-side agent bundle, ``agent.pyz``: a zipapp the deploy uploads to each host.

It holds the host-side package ``gpuprov.host``, whole, nvidia-ml-py's ``pynvml.py`` and the
pure-Python HTTP/2 stack of the python-hyper project (``h2`` with its ``hpack`` and
``hyperframe``, each with its LICENSE: MIT), which the kubelet's pod-resources reader speaks gRPC
with (``gpuprov.host.kubelet.grpc_unary``), so a host needs only ``python3`` (>= 3.10). The build is deterministic (sorted entries, fixed timestamps and modes):
the same sources give the same bytes, hence the same SHA1, and re-uploading it is a no-op.
Each module's imports are checked: a host-side module that reached outside the stdlib and
pynvml would fail on a host, so the build refuses it.

>>> data = build_bundle()                                    # doctest: +SKIP
>>> write_bundle("/tmp/agent.pyz")                           # doctest: +SKIP
>>> # python3 /tmp/agent.pyz apply --layout /etc/gpuprov/mig-layout.json --check
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import io
import os
import sys
import tempfile
import zipfile
from pathlib import Path

SHEBANG = b"#!/usr/bin/env python3\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold
_PACKAGE = Path(__file__).resolve().parents[1]  # the gpuprov package directory
# What goes in: the host-side package, whole, and the package face above it. Product code only:
# the simulated driver belongs to the lab, and the catalog to the controller (the agent asks
# NVML, not the catalog, what a GPU can do).
HOST_PACKAGE = "host"
_MEMBERS = ("__init__.py", HOST_PACKAGE)
# Installed pure-Python packages carried whole (top-level names), for the gRPC client.
VENDORED = ("h2", "hpack", "hyperframe")
# The zip's __main__.py: runs the agent from a bytecode-cached copy of the zip (see that module).
_MAIN = _PACKAGE / HOST_PACKAGE / "agent" / "zipmain.py"


class BundleError(Exception):
    """A module meant for the bundle is missing or imports what hosts do not have."""


@functools.cache
def build_bundle() -> bytes:
    """The zipapp's bytes (built once per process)."""
    files = _sources()
    files["pynvml.py"] = _pynvml_source()
    for package in VENDORED:
        files.update(_vendored(package))
    files["__main__.py"] = _MAIN.read_bytes()
    _check_imports(files)
    out = io.BytesIO()
    out.write(SHEBANG)
    # Stored, not deflated: the bytes then depend on the sources alone, not on the controller's
    # zlib build, so every control machine of a fleet uploads the same SHA1 (a no-op re-run).
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, files[name])
    return out.getvalue()


def write_bundle(path: str) -> None:
    """Write the bundle to ``path`` atomically, mode 0644."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".agent-", suffix=".pyz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(build_bundle())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _sources() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for member in _MEMBERS:
        path = _PACKAGE / member
        if not path.exists():
            raise BundleError(f"{path} is missing; the agent bundle needs it")
        paths = (
            [path]
            if path.is_file()
            else sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix == ".py" and "__pycache__" not in p.parts
            )
        )
        for p in paths:
            files["gpuprov/" + p.relative_to(_PACKAGE).as_posix()] = p.read_bytes()
    return files


def _pynvml_source() -> bytes:
    # find_spec locates the installed module without importing it (it would load libnvidia-ml
    # only on nvmlInit, but the builder has no reason to import it at all).
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise BundleError("nvidia-ml-py's pynvml.py is not installed; `pip install nvidia-ml-py`")
    return Path(spec.origin).read_bytes()


def _vendored(package: str) -> dict[str, bytes]:
    """An installed pure-Python package's modules and its distribution's LICENSE, by zip name."""
    from importlib import metadata

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise BundleError(f"{package} is not installed; `pip install {package}`")
    root = Path(next(iter(spec.submodule_search_locations)))
    files = {
        f"{package}/{p.relative_to(root).as_posix()}": p.read_bytes()
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts
    }
    licenses = [
        f for f in metadata.distribution(package).files or () if f.name.startswith("LICENSE")
    ]
    if not licenses:
        raise BundleError(f"{package}'s distribution has no LICENSE file to carry with it")
    files[f"{package}/LICENSE"] = Path(licenses[0].locate()).read_bytes()
    return files


def _check_imports(files: dict[str, bytes]) -> None:
    modules = {_module_name(n) for n in files if n.endswith(".py")}
    on_disk = {
        _module_name("gpuprov/" + p.relative_to(_PACKAGE).as_posix())
        for p in _PACKAGE.rglob("*.py")
    }
    for name, source in files.items():
        if not name.endswith(".py") or name == "pynvml.py":
            continue
        for imported in _imports(name, source):
            top = imported.split(".")[0]
            if top in sys.stdlib_module_names or top in ("pynvml", *VENDORED):
                continue
            if top == "gpuprov" and _bundled(imported, modules, on_disk):
                continue
            raise BundleError(
                f"{name} imports {imported}, which a GPU host does not have; "
                "only the stdlib, pynvml and " + ", ".join(VENDORED) + " may be used host-side"
            )


def _imports(name: str, source: bytes) -> list[str]:
    package = _module_name(name)
    if not name.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    found = []
    tree = ast.parse(source, filename=name)
    # Imports under `if TYPE_CHECKING:` never run; they name planner-side types for readers.
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            # `from pkg import x` imports pkg.x when x is a module, else a name from pkg.
            found.extend(f"{base}.{alias.name}" for alias in node.names)
    return found


def _bundled(imported: str, modules: set[str], on_disk: set[str]) -> bool:
    """Is ``imported`` a bundled module, or a name defined by one (not an unbundled module)?"""
    if imported in modules:
        return True
    return imported not in on_disk and imported.rpartition(".")[0] in modules


def _module_name(name: str) -> str:
    dotted = name.removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")
