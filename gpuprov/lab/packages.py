"""The simulated NVIDIA packages the lab repository serves, named and versioned like the real ones.

Two repositories, as NVIDIA has: ``cuda`` (driver, fabric manager) and ``libnvidia-container``
(the container toolkit set, pinned together). Each package exists at two versions so that an
upgrade can be tested. The driver ships a private copy of gpuprov's simulator and catalog plus
nvidia-ml-py's ``pynvml.py`` under /usr/lib/nvidia-sim/python.

>>> sorted({p.name for p in repositories()["cuda"]})
['nvidia-driver-550-server', 'nvidia-fabricmanager-550']
>>> sorted({p.version for p in repositories()["libnvidia-container"]})
['1.17.8-1', '1.18.0-1']
"""

from __future__ import annotations

import ast
from functools import cache
from importlib import resources
from pathlib import Path

import pynvml

import gpuprov
from gpuprov.contract import SIM_NVML_LIBRARY_PATH, SIM_STATE_PATH
from gpuprov.lab.debs import File, Package
from gpuprov.sim.libnvml import build as libnvml

DRIVER_BRANCH = "550"
DRIVER_VERSIONS = ("550.127.05", "550.144.03")  # upstream; the Debian version adds "-1"
TOOLKIT_VERSIONS = ("1.17.8-1", "1.18.0-1")  # Debian versions, as NVIDIA's repository has them
SIM_STATE = SIM_STATE_PATH
SIM_PYTHON = "/usr/lib/nvidia-sim/python"

_HERE = Path(__file__).parent / "packages"


def repositories() -> dict[str, list[Package]]:
    """Repository name -> its packages (every version)."""
    cuda, toolkit = [], []
    for upstream in DRIVER_VERSIONS:
        cuda += [_driver(upstream), _fabricmanager(upstream)]
    for version in TOOLKIT_VERSIONS:
        toolkit += _toolkit(version)
    return {"cuda": cuda, "libnvidia-container": toolkit}


def _driver(upstream: str) -> Package:
    files = {
        "/usr/bin/nvidia-smi": _file("driver/nvidia-smi", upstream, 0o755),
        "/usr/sbin/gpuprov-sim": _file("driver/gpuprov-sim", upstream, 0o755),
        "/usr/bin/nvidia-persistenced": _file("driver/nvidia-persistenced", upstream, 0o755),
        "/lib/systemd/system/nvidia-persistenced.service": _file(
            "driver/nvidia-persistenced.service", upstream
        ),
        "/lib/systemd/system/nvidia-sim-boot.service": _file(
            "driver/nvidia-sim-boot.service", upstream
        ),
        "/lib/systemd/system.conf.d/nvidia-sim.conf": _file("driver/nvidia-sim.conf", upstream),
        **{f"{SIM_PYTHON}/{rel}": File(data) for rel, data in sim_payload().items()},
        # For programs that load NVML themselves (NVIDIA's device plugin): compiled here, on
        # the controller, whose Debian the lab hosts share.
        SIM_NVML_LIBRARY_PATH: File(libnvml.library().read_bytes()),
    }
    return Package(
        f"nvidia-driver-{DRIVER_BRANCH}-server",
        f"{upstream}-1",
        f"NVIDIA driver metapackage (gpuprov lab simulation)\n"
        f"Simulated NVIDIA driver {upstream}: nvidia-smi and NVML answer from the GPU state in\n"
        f"{SIM_STATE}; there is no kernel module.",
        files=files,
        scripts={
            "postinst": _text("driver/postinst", upstream),
            "prerm": _text("driver/prerm", upstream),
        },
        section="non-free/libs",
    )


def _fabricmanager(upstream: str) -> Package:
    return Package(
        f"nvidia-fabricmanager-{DRIVER_BRANCH}",
        f"{upstream}-1",
        "Fabric Manager for NVSwitch based systems (gpuprov lab simulation)\n"
        "Its version must match the driver's exactly, as with the real package.",
        files={
            "/usr/bin/nv-fabricmanager": _file("fabricmanager/nv-fabricmanager", upstream, 0o755),
            "/lib/systemd/system/nvidia-fabricmanager.service": _file(
                "fabricmanager/nvidia-fabricmanager.service", upstream
            ),
        },
        depends=(f"nvidia-driver-{DRIVER_BRANCH}-server (= {upstream}-1)",),
        section="non-free/libs",
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
                "/usr/bin/nvidia-container-runtime": tool("nvidia-container-runtime"),
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
    """Relative path -> content: gpuprov.sim, every gpuprov module it imports, and pynvml.py."""
    root = Path(gpuprov.__file__).parent
    wanted = {"gpuprov", "gpuprov.sim", "gpuprov.catalog"}
    wanted |= {f"gpuprov.sim.{p.stem}" for p in (root / "sim").glob("*.py")}
    todo, files = sorted(wanted), {}
    while todo:
        module = todo.pop()
        path = _module_path(root, module)
        if path is None or str(path.relative_to(root.parent)) in files:
            continue
        source = path.read_bytes()
        files[str(path.relative_to(root.parent))] = source
        for imported in _gpuprov_imports(ast.parse(source), module, path.name == "__init__.py"):
            parts = imported.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    catalog_data = resources.files("gpuprov.catalog").joinpath("gpus.yaml").read_bytes()
    files["gpuprov/catalog/gpus.yaml"] = catalog_data
    files["pynvml.py"] = Path(pynvml.__file__).read_bytes()
    return dict(sorted(files.items()))


def _module_path(root: Path, module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for candidate in (root / rel / "__init__.py", (root / rel).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


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
    return [m for m in out if m == "gpuprov" or m.startswith("gpuprov.")]


def _text(name: str, upstream: str) -> bytes:
    return (_HERE / name).read_text().replace("@UPSTREAM@", upstream).encode()


def _file(name: str, upstream: str, mode: int = 0o644) -> File:
    return File(_text(name, upstream), mode)
