"""Compile the simulated driver (library and programs) with the machine's C compiler, once.

The library is ``libnvidia-ml.so.1``; the two programs over it are ``nvidia-smi`` and
``gpuprov-sim``. The C sources hold the rules; the data comes from gpuprov: ``sim_consts.h`` and ``sim_data.h``
are generated here from the catalog (models, MIG profiles, placements), pynvml (struct versions,
profile counts, error names), ``gpuprov.host.health.xid`` (what each XID means) and
the simulator's own choices below (handle layout, MIG UUID namespace, CI slices, error strings). The files
are cached under ``/var/tmp/gpuprov-libnvml-<hash>/``, keyed by the hash of the sources, the
generated headers, the flags and the compiler's version, so an unchanged tree compiles nothing.
The programs find the library beside them (run path ``$ORIGIN``) or where the system keeps it,
as the real ``nvidia-smi`` finds the driver's.

>>> built = build()                                        # doctest: +SKIP
>>> built.library.name, built.programs["nvidia-smi"].parent == built.library.parent  # doctest: +SKIP
('libnvidia-ml.so.1', True)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pynvml

from gpuprov.core import catalog
from gpuprov.host.health import xid
from gpuprov_lab.sim.contract import (
    SIM_ENV,
    SIM_KERNEL_LOG_NAME,
    SIM_SCHEMA,
    SIM_STATE_PATH,
    SIM_TRACE_ENV,
)

LIBRARY = "libnvidia-ml.so.1"
# A handle is HANDLE_TAG << 44 | kind << 36 | gpu << 24 | gi << 12 | ci (nvml_sim.c handle()).
HANDLE_TAG = 0x7E57
KIND_DEVICE, KIND_GPU_INSTANCE, KIND_COMPUTE_INSTANCE, KIND_MIG_DEVICE = 1, 2, 3, 4
MIG_UUID_NAMESPACE = uuid.UUID("0b6f7c1e-2d43-4a8e-b1f5-6d6967646576")
# A GPU's UUID is uuid5(GPU_UUID_NAMESPACE, "<seed>/<index>") (uuid5.c), so a lab host named
# <seed> gets the same GPUs every time it is rebuilt.
GPU_UUID_NAMESPACE = uuid.UUID("5a1c0d3e-6f0b-4c8e-9a43-6770757072f6")
DEFAULT_DRIVER_VERSION = "535.261.03"  # what a new host's driver says unless told otherwise
# Compute-instance profile constant -> compute slices it spans (pynvml
# NVML_COMPUTE_INSTANCE_PROFILE_*). The CI profile id NVML reports equals the constant for these:
# `-cci` prints "MIG 3g.20gb (ID  2)" for the full CI of a 3g GI and "(ID  0)" for 1c (public
# nvidia-smi MIG notes; rapidsai/dask-cuda#583).
CI_SLICES = {
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}
# nvmlErrorString for the codes pynvml has no text for. "In use by another client" and
# "Insufficient Resources" are what nvidia-smi and go-nvml print (mig-parted#181, #29).
ERROR_STRINGS = {
    pynvml.NVML_ERROR_IN_USE: "In use by another client",
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient Resources",
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    pynvml.NVML_ERROR_INVALID_STATE: "Invalid state",
}
# The catalog's memory_repair as the C model table numbers it (0: not recorded).
MEMORY_REPAIR = {"row-remapping": 1, "page-retirement": 2}
SOURCES = ("nvml_sim.c", "json.c", "uuid5.c", "state.c", "catalog.c", "events.c", "admin.c")
HEADERS = (
    "json.h", "uuid5.h", "unsupported.h", "nvml_abi.h", "catalog.h", "state.h", "events.h",
    "gpuprov_sim.h",
)  # fmt: skip
# program name -> its source; each links the library (and only it, beyond libc).
PROGRAMS = {"nvidia-smi": "nvidia_smi.c", "gpuprov-sim": "gpuprov_sim.c"}
CACHE = Path("/var/tmp")
WARNINGS = ("-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-pthread")
RELEASE = ("-O2", "-s")
LIBRARY_FLAGS = ("-fPIC", "-shared", "-fvisibility=hidden", f"-Wl,-soname,{LIBRARY}")
PROGRAM_FLAGS = ("-L.", f"-l:{LIBRARY}", "-Wl,-rpath,$ORIGIN")
# The functions faults can make fail: the names the library serves under (SERVED's second
# argument), and the init all three nvmlInit* share.
_SERVED_AS = re.compile(r"SERVED\(\w+, (nvml\w+),")


class BuildError(Exception):
    """No C compiler, or the sources did not compile (the message has the compiler's output)."""


@dataclass(frozen=True)
class Built:
    """The compiled library and programs, all in one cache directory."""

    library: Path
    programs: dict[str, Path]


def library(cache: Path = CACHE, compiler: str | None = None) -> Path:
    """The compiled library for the current sources, compiled first if the cache lacks it."""
    return build(cache, compiler).library


def build(
    cache: Path = CACHE, compiler: str | None = None, flags: tuple[str, ...] = RELEASE
) -> Built:
    """The library and the programs, compiled with ``flags`` (e.g. sanitizers) if not cached."""
    cc = compiler or os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise BuildError(f"no C compiler {cc!r} on PATH (install gcc, or set CC)")
    generated = {"sim_consts.h": sim_consts_header(), "sim_data.h": sim_data_header()}
    version = subprocess.run([cc, "--version"], capture_output=True, check=False).stdout
    digest = hashlib.sha256(version + " ".join(WARNINGS + flags).encode())
    sources = (*SOURCES, *HEADERS, *PROGRAMS.values())
    for name in sources:
        digest.update(name.encode() + b"\0" + _source(name))
    for name, text in generated.items():
        digest.update(name.encode() + b"\0" + text.encode())
    directory = cache / f"gpuprov-libnvml-{digest.hexdigest()[:16]}"
    built = Built(directory / LIBRARY, {name: directory / name for name in PROGRAMS})
    if all(path.is_file() for path in (built.library, *built.programs.values())):
        return built
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as work:
        for name in sources:
            Path(work, name).write_bytes(_source(name))
        for name, text in generated.items():
            Path(work, name).write_text(text)
        _compile(cc, work, [*WARNINGS, *flags, *LIBRARY_FLAGS, "-o", LIBRARY, *SOURCES])
        for name, source in PROGRAMS.items():
            _compile(cc, work, [*WARNINGS, *flags, "-o", name, source, *PROGRAM_FLAGS])
        # Atomic, the library first: a concurrent build of the same hash is harmless, and a
        # complete set of files is only ever seen complete.
        for target in (built.library, *built.programs.values()):
            made = Path(work, target.name)
            made.chmod(0o644 if target == built.library else 0o755)
            os.replace(made, target)
    return built


def _compile(cc: str, work: str, arguments: list[str]) -> None:
    result = subprocess.run([cc, *arguments], cwd=work, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{cc} failed to build {arguments}:\n{result.stderr.strip()}")


def sim_consts_header() -> str:
    """The constants the C sources take from gpuprov and pynvml (#defines only)."""
    lines = [
        "/* Generated by lab/gpuprov_lab/sim/libnvml/build.py: do not edit. */",
        f"#define SIM_SCHEMA {_c(SIM_SCHEMA)}",
        f"#define SIM_ENV {_c(SIM_ENV)}",
        f"#define SIM_TRACE_ENV {_c(SIM_TRACE_ENV)}",
        f"#define SIM_STATE_PATH {_c(SIM_STATE_PATH)}",
        f"#define SIM_KERNEL_LOG_NAME {_c(SIM_KERNEL_LOG_NAME)}",
        f"#define DEFAULT_DRIVER_VERSION {_c(DEFAULT_DRIVER_VERSION)}",
        f"#define HANDLE_TAG {HANDLE_TAG:#x}ULL",
        f"#define KIND_DEVICE {KIND_DEVICE}",
        f"#define KIND_GPU_INSTANCE {KIND_GPU_INSTANCE}",
        f"#define KIND_COMPUTE_INSTANCE {KIND_COMPUTE_INSTANCE}",
        f"#define KIND_MIG_DEVICE {KIND_MIG_DEVICE}",
        f"#define GPU_INSTANCE_PROFILE_COUNT {pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT}",
        f"#define COMPUTE_INSTANCE_PROFILE_COUNT {pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT}",
        "#define COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED "
        f"{pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED}",
        f"#define MEMORY_V2 {pynvml.nvmlMemory_v2:#x}u",
        f"#define GPU_INSTANCE_PROFILE_INFO_V2 {pynvml.nvmlGpuInstanceProfileInfo_v2:#x}u",
        f"#define COMPUTE_INSTANCE_PROFILE_INFO_V2 {pynvml.nvmlComputeInstanceProfileInfo_v2:#x}u",
        f"#define MEMORY_LOCATION_COUNT {pynvml.NVML_MEMORY_LOCATION_COUNT}",
        f"#define MEMORY_LOCATION_DRAM {pynvml.NVML_MEMORY_LOCATION_DRAM}",
        f"#define REPAIR_ROW_REMAPPING {MEMORY_REPAIR['row-remapping']}",
        f"#define REPAIR_PAGE_RETIREMENT {MEMORY_REPAIR['page-retirement']}",
        f"#define XID_UNKNOWN_MEANING {_c(xid.meaning(-1))}",
    ]
    return "\n".join(lines) + "\n"


def sim_data_header() -> str:
    """The tables the C library takes from gpuprov and pynvml (included by catalog.c only)."""
    lines = [
        "/* Generated by lab/gpuprov_lab/sim/libnvml/build.py: do not edit. */",
        "static const unsigned char MIG_UUID_NAMESPACE[16] = {"
        + ", ".join(f"{b:#04x}" for b in MIG_UUID_NAMESPACE.bytes)
        + "};",
        "static const unsigned char GPU_UUID_NAMESPACE[16] = {"
        + ", ".join(f"{b:#04x}" for b in GPU_UUID_NAMESPACE.bytes)
        + "};",
        "static const unsigned CI_SLICES[][2] = {"
        + ", ".join(f"{{{k}, {v}}}" for k, v in sorted(CI_SLICES.items()))
        + "};",
    ]
    # nvml_abi.h writes NVML's numbers by hand, as nvml.h does; they must be pynvml's.
    for name in re.findall(r"\b(NVML_\w+) = \d+", _source("nvml_abi.h").decode()):
        lines.append(f"_Static_assert({name} == {getattr(pynvml, name)}, {_c(name)});")
    for name in ("NVML_DEVICE_MIG_ENABLE", "NVML_GPU_INSTANCE_PROFILE_COUNT"):
        lines.append(f"_Static_assert({name} == {getattr(pynvml, name)}, {_c(name)});")
    for name in ("XidCriticalError", "SingleBitEccError", "DoubleBitEccError"):
        value = getattr(pynvml, f"nvmlEventType{name}")
        lines.append(f"_Static_assert(nvmlEventType{name} == {value}, {_c(name)});")
    models = []
    for m, model in enumerate(catalog.load().models.values()):
        profiles = []
        for p, profile in enumerate(model.profiles):
            placements = ", ".join(f"{{{s}, {z}}}" for s, z in profile.placements)
            lines.append(
                f"static const struct sim_placement PLACEMENTS_{m}_{p}[] = {{{placements}}};"
            )
            profiles.append(
                f"{{{_c(profile.name)}, {profile.id}, {profile.const}, {profile.compute_slices}, "
                f"{profile.max_instances}, {profile.memory_mib}ULL, PLACEMENTS_{m}_{p}, "
                f"{len(profile.placements)}}}"
            )
        if profiles:
            lines.append(
                f"static const struct sim_profile PROFILES_{m}[] = {{{', '.join(profiles)}}};"
            )
        names = ", ".join(_c(n) for n in model.nvml_names)
        lines.append(f"static const char *const NAMES_{m}[] = {{{names}}};")
        pci = int(model.pci_device_ids[0], 16) if model.pci_device_ids else 0
        major, minor = model.compute_capability
        models.append(
            f"{{{_c(model.alias)}, NAMES_{m}, {len(model.nvml_names)}, {pci:#x}u, "
            f"{model.memory_mib}ULL, {model.memory_slots}, {model.compute_slices}, "
            f"{f'PROFILES_{m}' if profiles else 'NULL'}, {len(profiles)}, {major}, {minor}, "
            f"{MEMORY_REPAIR.get(model.memory_repair, 0)}}}"
        )
    lines.append(f"static const struct sim_model MODELS[] = {{{', '.join(models)}}};")
    errors = {"NVML_SUCCESS": pynvml.NVML_SUCCESS}
    errors |= {n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_ERROR_")}
    rows = [
        f"{{{code}, {_c(name)}, {_c(error_string(code))}}}"
        for name, code in sorted(errors.items(), key=lambda item: (item[1], item[0]))
    ]
    lines.append(f"static const struct sim_error ERRORS[] = {{{', '.join(rows)}}};")
    meanings = ", ".join(f"{{{code}, {_c(text)}}}" for code, text in sorted(xid.MEANINGS.items()))
    lines.append(f"static const struct sim_xid XIDS[] = {{{meanings}}};")
    served = sorted({"nvmlInitWithFlags", *_SERVED_AS.findall(_source("nvml_sim.c").decode())})
    lines.append(
        f"static const char *const FAULTABLE[] = {{{', '.join(_c(name) for name in served)}}};"
    )
    return "\n".join(lines) + "\n"


def error_string(code: int) -> str:
    """What ``nvmlErrorString(code)`` answers: pynvml's text, else NVML's own words."""
    known = pynvml.NVMLError._errcode_to_string.get(code) or ERROR_STRINGS.get(code)
    return known or f"Unknown Error {code}"


def _source(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


def _c(text: str) -> str:
    """A C string literal for ``text`` (printable ASCII, as the catalog and pynvml have)."""
    if not text.isascii() or not text.isprintable():
        raise BuildError(f"cannot put {text!r} into the generated C header")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
