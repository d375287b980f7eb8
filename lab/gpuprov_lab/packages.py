"""The simulated NVIDIA packages the lab repositories serve, named, versioned and depending on
each other as Debian's own (component non-free, gpuprov/core/packaging/sources.yaml
``debian-nonfree``), so the deploy meets the real naming.

Two repositories: ``non-free`` (the driver at Debian bookworm's version and at
bookworm-backports' one, and nvidia-persistenced at its own version) and
``libnvidia-container`` (NVIDIA's toolkit set, pinned together). bookworm's 535.261.03-1 sorts
after backports' 535.216.03-2~bpo12+1, so the backports version is the older one: the lab
installs it first and upgrades to bookworm's.

The simulator is the "kernel module": ``nvidia-kernel-dkms`` ships a private copy of gpuprov's
simulator and catalog plus nvidia-ml-py's ``pynvml.py`` under /usr/lib/nvidia-sim/python, and
loading the driver is its postinst. ``nvidia-driver`` depends on packages at its exact version
that the deploy does not name (``nvidia-driver-libs``, ``nvidia-alternative``), as Debian's
does: only the pin file gets those to the planned version.

>>> sorted({p.name for p in repositories()["non-free"]})[:3]
['firmware-nvidia-gsp', 'libnvidia-ml1', 'nvidia-alternative']
>>> sorted({p.version for p in repositories()["non-free"] if p.name == "nvidia-driver"})
['535.216.03-2~bpo12+1', '535.261.03-1']
>>> sorted({p.version for p in repositories()["libnvidia-container"]})
['1.17.8-1', '1.18.0-1']
"""

from __future__ import annotations

import ast
import importlib.util
import posixpath
from functools import cache
from importlib import resources
from pathlib import Path

import pynvml

import gpuprov_lab
from gpuprov.host.contract import (
    KERNEL_LOG_PATH,
    NVIDIA_RUNTIME_BINARY,
    PERSISTENCED_UNIT,
    SIM_ENV,
    SIM_KERNEL_LOG_NAME,
    SIM_NVML_LIBRARY_PATH,
    SIM_PYTHON_DIR,
    SIM_STATE_PATH,
)
from gpuprov_lab.debs import File, Package
from gpuprov_lab.sim.libnvml import build as libnvml

# Upstream -> Debian version, as Debian has them (tests/data/packages/debian-bookworm-*):
# bookworm-backports' (the older) first, bookworm's second: the lab's upgrade path.
DEBIAN_VERSIONS = {"535.216.03": "535.216.03-2~bpo12+1", "535.261.03": "535.261.03-1"}
DRIVER_VERSIONS = tuple(DEBIAN_VERSIONS)
PERSISTENCED_VERSION = "535.171.04-1~deb12u1"  # its own source, in contrib
DRIVER_PACKAGES = (
    "nvidia-driver",
    "nvidia-driver-libs",
    "nvidia-alternative",
    "nvidia-kernel-dkms",
    "firmware-nvidia-gsp",
    "nvidia-smi",
    "libnvidia-ml1",
    "nvidia-persistenced",
    "nvidia-cuda-mps",
)
TOOLKIT_VERSIONS = ("1.17.8-1", "1.18.0-1")  # Debian versions, as NVIDIA's repository has them
SIM_STATE = SIM_STATE_PATH
SIM_PYTHON = SIM_PYTHON_DIR  # the agent bundle has no simulator: the probe finds it here
SOURCE = "nvidia-graphics-drivers"

_HERE = Path(__file__).parent / "packages"


def repositories() -> dict[str, list[Package]]:
    """Repository name -> its packages (every version)."""
    non_free = [_persistenced()]
    for upstream in DRIVER_VERSIONS:
        non_free += _driver(upstream)
    toolkit = []
    for version in TOOLKIT_VERSIONS:
        toolkit += _toolkit(version)
    return {"non-free": non_free, "libnvidia-container": toolkit}


def _stub(name: str, text: str) -> dict[str, File]:
    return {f"/usr/share/doc/{name}/README.gpuprov-lab": File(text.encode())}


def _driver(upstream: str) -> list[Package]:
    """One driver release, in Debian's package split (the parts the deploy installs)."""
    version = DEBIAN_VERSIONS[upstream]

    def package(name: str, summary: str, **fields) -> Package:
        fields.setdefault("files", _stub(name, f"Stand-in for Debian's {name} {version}.\n"))
        return Package(
            name,
            version,
            f"{summary} (gpuprov lab simulation)",
            source=SOURCE,
            section=fields.pop("section", "non-free/libs"),
            **fields,
        )

    kernel_files = {
        "/usr/sbin/gpuprov-sim": _file("driver/gpuprov-sim", upstream, 0o755),
        "/usr/lib/nvidia-sim/kmsg-link": _file("driver/nvidia-sim-kmsg", upstream, 0o755),
        "/usr/sbin/nvidia-sim-devices": _file("driver/nvidia-sim-devices", upstream, 0o755),
        "/lib/systemd/system/nvidia-sim-boot.service": _file(
            "driver/nvidia-sim-boot.service", upstream
        ),
        "/lib/systemd/system.conf.d/nvidia-sim.conf": _file("driver/nvidia-sim.conf", upstream),
        **{f"{SIM_PYTHON}/{rel}": File(data) for rel, data in sim_payload().items()},
    }
    return [
        package("nvidia-alternative", "allows the selection of NVIDIA as GLX provider"),
        package("nvidia-driver-libs", "NVIDIA metapackage (OpenGL/GLX/EGL/GLES libraries)"),
        package(
            "firmware-nvidia-gsp",
            "NVIDIA GSP firmware",
            provides=(f"firmware-nvidia-gsp (= {upstream})", f"firmware-nvidia-gsp-{upstream}"),
            section="non-free-firmware/kernel",
        ),
        Package(
            "nvidia-kernel-dkms",
            version,
            "NVIDIA binary kernel module DKMS source (gpuprov lab simulation)\n"
            f"Simulated NVIDIA driver {upstream}: nvidia-smi and NVML answer from the GPU state\n"
            f"in {SIM_STATE}; installing this package loads it.",
            files=kernel_files,
            scripts={
                "postinst": _text("driver/postinst", upstream),
                "prerm": _text("driver/prerm", upstream),
            },
            depends=(
                f"firmware-nvidia-gsp (= {upstream}) | firmware-nvidia-gsp-{upstream}",
                f"nvidia-alternative (= {version})",
            ),
            source=SOURCE,
            section="non-free/kernel",
        ),
        package(
            "libnvidia-ml1",
            "NVIDIA Management Library (NVML) runtime library",
            # For programs that load NVML themselves (NVIDIA's device plugin): the simulated C
            # library, compiled here on the controller, whose Debian the lab hosts share.
            files={SIM_NVML_LIBRARY_PATH: File(libnvml.library().read_bytes())},
            scripts={"postinst": _text("libnvidia-ml1/postinst", upstream)},
            depends=(f"nvidia-alternative (= {version})",),
        ),
        package(
            "nvidia-smi",
            "NVIDIA System Management Interface",
            files={"/usr/bin/nvidia-smi": _file("driver/nvidia-smi", upstream, 0o755)},
            depends=(f"nvidia-alternative (= {version})", f"libnvidia-ml1 (= {version})"),
            section="non-free/utils",
        ),
        package(
            "nvidia-cuda-mps",
            "NVIDIA CUDA Multi Process Service (MPS)",
            files=_mps_stand_ins(upstream),
            section="non-free/utils",
        ),
        package(
            "nvidia-driver",
            "NVIDIA metapackage",
            depends=(
                f"nvidia-driver-libs (= {version})",
                f"nvidia-alternative (= {version})",
                f"nvidia-kernel-dkms (= {version}) | nvidia-kernel-{upstream}",
            ),
            section="non-free/x11",
        ),
    ]


def _mps_stand_ins(upstream: str) -> dict[str, File]:
    """The MPS binaries where Debian puts them, answering as a host without an MPS server
    would: the simulated GPUs run no CUDA, so nothing may pretend MPS is up (NVIDIA's device
    plugin keeps waiting for the daemon, as on a host where it has not started)."""
    script = (
        "#!/bin/sh\n"
        f"echo 'nvidia-cuda-mps (gpuprov lab simulation of {upstream}): the simulated GPUs run "
        "no MPS server' >&2\nexit 1\n"
    ).encode()
    return {
        "/usr/bin/nvidia-cuda-mps-control": File(script, 0o755),
        "/usr/bin/nvidia-cuda-mps-server": File(script, 0o755),
    }


def _persistenced() -> Package:
    upstream = PERSISTENCED_VERSION.split("-")[0]
    return Package(
        "nvidia-persistenced",
        PERSISTENCED_VERSION,
        "daemon to maintain persistent software state in the NVIDIA driver (gpuprov lab "
        "simulation)",
        files={
            "/usr/bin/nvidia-persistenced": _file(
                "persistenced/nvidia-persistenced", upstream, 0o755
            ),
            f"/lib/systemd/system/{PERSISTENCED_UNIT}": _file(
                f"persistenced/{PERSISTENCED_UNIT}", upstream
            ),
        },
        scripts={
            "postinst": _text("persistenced/postinst", upstream),
            "prerm": _text("persistenced/prerm", upstream),
        },
        section="contrib/utils",
    )


def _toolkit(version: str) -> list[Package]:
    upstream = version.rsplit("-", 1)[0]

    def tool(name: str) -> File:
        return _file(f"toolkit/{name}", upstream, 0o755)

    return [
        Package(
            "libnvidia-container1",
            version,
            "NVIDIA container runtime library (gpuprov lab simulation)",
            files={
                "/usr/share/doc/libnvidia-container1/README.gpuprov-lab": File(
                    b"A stand-in: the lab has no GPUs to expose to containers.\n"
                )
            },
        ),
        Package(
            "libnvidia-container-tools",
            version,
            "NVIDIA container runtime library, command-line tools (gpuprov lab simulation)",
            files={"/usr/bin/nvidia-container-cli": tool("nvidia-container-cli")},
            depends=(f"libnvidia-container1 (= {version})",),
        ),
        Package(
            "nvidia-container-toolkit-base",
            version,
            "NVIDIA Container Toolkit Base (gpuprov lab simulation)",
            files={
                "/usr/bin/nvidia-ctk": tool("nvidia-ctk"),
                NVIDIA_RUNTIME_BINARY: tool("nvidia-container-runtime"),
            },
            scripts={"postinst": _text("toolkit/base.postinst", upstream)},
        ),
        Package(
            "nvidia-container-toolkit",
            version,
            "NVIDIA Container toolkit (gpuprov lab simulation)",
            files={"/usr/bin/nvidia-container-runtime-hook": tool("nvidia-container-runtime-hook")},
            depends=(
                f"nvidia-container-toolkit-base (= {version})",
                f"libnvidia-container-tools (= {version})",
            ),
        ),
    ]


@cache
def sim_payload() -> dict[str, bytes]:
    """Relative path -> content: gpuprov_lab.sim, every gpuprov module it imports, and pynvml.py."""
    root = Path(gpuprov_lab.__file__).parent
    wanted = {"gpuprov", "gpuprov_lab", "gpuprov_lab.sim", "gpuprov.core.catalog"}
    wanted |= {f"gpuprov_lab.sim.{p.stem}" for p in (root / "sim").glob("*.py")}
    todo, files = sorted(wanted), {}
    while todo:
        module = todo.pop()
        path = _module_path(module)
        if path is None:
            continue
        rel = str(Path(*module.split(".")) / ("__init__.py" if path.name == "__init__.py" else ""))
        rel = rel if path.name == "__init__.py" else rel + ".py"
        if rel in files:
            continue
        source = path.read_bytes()
        files[rel] = source
        for imported in _gpuprov_imports(ast.parse(source), module, path.name == "__init__.py"):
            parts = imported.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    catalog_data = resources.files("gpuprov.core.catalog").joinpath("gpus.yaml").read_bytes()
    files["gpuprov/core/catalog/gpus.yaml"] = catalog_data
    files["pynvml.py"] = Path(pynvml.__file__).read_bytes()
    return dict(sorted(files.items()))


def _module_path(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _gpuprov_imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return [m for m in out if m.split(".")[0] in ("gpuprov", "gpuprov_lab")]


def _text(name: str, upstream: str) -> bytes:
    """A packaged file with the version and the contract's simulator names filled in."""
    text = (_HERE / name).read_text().replace("@UPSTREAM@", upstream)
    for mark, value in (
        ("@SIM_STATE@", SIM_STATE_PATH),
        ("@SIM_ENV@", SIM_ENV),
        ("@SIM_PYTHON@", SIM_PYTHON_DIR),
        ("@SIM_KMSG@", posixpath.join(posixpath.dirname(SIM_STATE_PATH), SIM_KERNEL_LOG_NAME)),
        ("@KERNEL_LOG@", KERNEL_LOG_PATH),
    ):
        text = text.replace(mark, value)
    return text.encode()


def _file(name: str, upstream: str, mode: int = 0o644) -> File:
    return File(_text(name, upstream), mode)
