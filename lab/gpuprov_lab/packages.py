"""The simulated NVIDIA packages the lab repositories serve, named, versioned and depending on
each other as Debian's own (component non-free, gpuprov/core/packaging/sources.yaml
``debian-nonfree``), so the deploy meets the real naming.

Two repositories: ``non-free`` (the driver at Debian bookworm's version and at
bookworm-backports' one, and nvidia-persistenced at its own version) and
``libnvidia-container`` (NVIDIA's toolkit set, pinned together). bookworm's 535.261.03-1 sorts
after backports' 535.216.03-2~bpo12+1, so the backports version is the older one: the lab
installs it first and upgrades to bookworm's.

The simulator is the C ``libnvidia-ml.so.1`` (``gpuprov_lab.sim.libnvml``), compiled here on
the controller, whose Debian the lab hosts share: ``libnvidia-ml1`` installs it where Debian's
driver puts NVML, so every NVML client on the host (pynvml under gpuprov's probe, NVIDIA's device
plugin) loads it by name, and ``nvidia-smi`` is the C program over it. The "kernel module"
``nvidia-kernel-dkms`` ships the hardware switches (``gpuprov-sim``, with its own copy of the
library beside it under /usr/lib/nvidia-sim) and the boot unit; loading the driver is its
postinst. No Python of the lab's reaches a host. ``nvidia-driver`` depends on packages at its exact version
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

import posixpath
from pathlib import Path

from gpuprov.host.contract import (
    KERNEL_LOG_PATH,
    MIG_UNIT,
    NVIDIA_RUNTIME_BINARY,
    PERSISTENCED_UNIT,
)
from gpuprov_lab.debs import File, Package
from gpuprov_lab.sim.contract import (
    SIM_ENV,
    SIM_KERNEL_LOG_NAME,
    SIM_NVML_LIBRARY_PATH,
    SIM_STATE_PATH,
)
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
SIM_PRIVATE_DIR = "/usr/lib/nvidia-sim"  # gpuprov-sim and the library copy its run path finds
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

    built = libnvml.build()
    kernel_files = {
        "/usr/sbin/gpuprov-sim": _file("driver/gpuprov-sim", upstream, 0o755),
        f"{SIM_PRIVATE_DIR}/gpuprov-sim": File(built.programs["gpuprov-sim"].read_bytes(), 0o755),
        f"{SIM_PRIVATE_DIR}/{libnvml.LIBRARY}": File(built.library.read_bytes()),
        "/usr/lib/nvidia-sim/kmsg-link": _file("driver/nvidia-sim-kmsg", upstream, 0o755),
        "/usr/sbin/nvidia-sim-devices": _file("driver/nvidia-sim-devices", upstream, 0o755),
        "/lib/systemd/system/nvidia-sim-boot.service": _file(
            "driver/nvidia-sim-boot.service", upstream
        ),
        "/lib/systemd/system.conf.d/nvidia-sim.conf": _file("driver/nvidia-sim.conf", upstream),
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
            files={SIM_NVML_LIBRARY_PATH: File(built.library.read_bytes())},
            scripts={"postinst": _text("libnvidia-ml1/postinst", upstream)},
            depends=(f"nvidia-alternative (= {version})",),
        ),
        package(
            "nvidia-smi",
            "NVIDIA System Management Interface",
            files={"/usr/bin/nvidia-smi": File(built.programs["nvidia-smi"].read_bytes(), 0o755)},
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


def _text(name: str, upstream: str) -> bytes:
    """A packaged file with the version, the simulator's names and gpuprov's own (the MIG unit
    the simulated boot runs before) filled in."""
    text = (_HERE / name).read_text().replace("@UPSTREAM@", upstream)
    for mark, value in (
        ("@SIM_STATE@", SIM_STATE_PATH),
        ("@SIM_ENV@", SIM_ENV),
        ("@SIM_PRIVATE@", SIM_PRIVATE_DIR),
        ("@SIM_KMSG@", posixpath.join(posixpath.dirname(SIM_STATE_PATH), SIM_KERNEL_LOG_NAME)),
        ("@KERNEL_LOG@", KERNEL_LOG_PATH),
        ("@MIG_UNIT@", MIG_UNIT),
    ):
        text = text.replace(mark, value)
    return text.encode()


def _file(name: str, upstream: str, mode: int = 0o644) -> File:
    return File(_text(name, upstream), mode)
