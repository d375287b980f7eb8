"""Package source profiles (``sources.yaml``): which packages make up the planned driver on a
given source, how the source spells their versions, and which one a host uses.

>>> packages = driver_packages(profile("debian-nonfree"), "535.216.03")
>>> packages.exact
('nvidia-driver', 'nvidia-kernel-dkms', 'nvidia-smi', 'firmware-nvidia-gsp', 'libnvidia-ml1')
>>> packages.own, packages.pin
(('nvidia-persistenced',), ('src:nvidia-graphics-drivers',))
>>> driver_packages(profile("cuda-ubuntu"), "590.48.01", persistenced=False).own
('nvidia-driver-pinning-590',)
>>> select(None, "debian").name, select("cuda-ubuntu", "ubuntu").name
('debian-nonfree', 'cuda-ubuntu')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

# NVIDIA's libnvidia-container repository: the toolkit in four packages that depend on each
# other at the same version, versioned `<upstream>-1`
# (https://nvidia.github.io/libnvidia-container/stable/deb/, NVIDIA's container toolkit
# install guide pins all four: `nvidia-container-toolkit=1.17.8-1 ...`).
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
TOOLKIT_REVISION = r"\d+"

_ERA_KEYS = {
    "from_branch",
    "revision",
    "driver",
    "nvml",
    "persistenced",
    "persistenced_own_version",
    "fabric_manager",
    "mps",
    "lock",
    "pin",
}
_PROFILE_KEYS = {"title", "distributions", "cites", "eras"}


class ProfileError(ValueError):
    """A package source the plan names does not exist, or cannot give what the plan asks for."""


@dataclass(frozen=True)
class Era:
    """A source's naming from one driver branch on."""

    from_branch: int
    revision: str
    driver: tuple[str, ...]
    nvml: str
    persistenced: str | None
    persistenced_own_version: bool
    fabric_manager: str | None
    mps: str | None
    lock: str | None
    pin: tuple[str, ...]


@dataclass(frozen=True)
class Profile:
    name: str
    title: str
    distributions: tuple[str, ...]
    cites: tuple[str, ...]
    eras: tuple[Era, ...]

    def era(self, branch: int) -> Era:
        """The naming that applies to driver branch ``branch``."""
        return [e for e in self.eras if e.from_branch <= branch][-1]


@dataclass(frozen=True)
class DriverPackages:
    """What the planned driver is on one source."""

    exact: tuple[str, ...]  # installed at exactly the planned driver version
    own: tuple[str, ...]  # installed at the version the source has (then held)
    pin: tuple[str, ...]  # apt preferences `Package:` patterns pinned to the driver version
    revision: str  # the source's Debian revision, a regular expression
    version: str = ""  # the planned upstream version

    @property
    def names(self) -> tuple[str, ...]:
        return self.own + self.exact

    @property
    def branch(self) -> int:
        return branch_of(self.version)


def driver_version(value: object) -> str:
    """``value`` as a planned driver version (upstream, ``535.261.03``); ValueError otherwise.

    >>> driver_version("535.261.03")
    '535.261.03'
    """
    if not isinstance(value, str) or not re.fullmatch(r"\d+\.\d+(\.\d+)?", value):
        raise ValueError(f"must be an upstream driver version like 535.261.03, got {value!r}")
    return value


def branch_of(version: str) -> int:
    """The driver branch of an upstream version.

    >>> branch_of("590.48.01")
    590
    """
    head = version.split(".")[0]
    if not head.isdigit():
        raise ProfileError(f"driver version {version!r} does not start with a branch number")
    return int(head)


def driver_packages(
    source: Profile,
    version: str,
    persistenced: bool = True,
    fabric_manager: bool = False,
    mps: bool = False,
) -> DriverPackages:
    """The packages of driver ``version`` (upstream) on ``source``; ``mps`` adds the one with
    the CUDA MPS binaries.

    >>> driver_packages(profile("debian-nonfree"), "535.261.03", mps=True).exact[-1]
    'nvidia-cuda-mps'
    """
    era = source.era(branch_of(version))
    fields = {"branch": branch_of(version), "version": version}
    exact = [name.format(**fields) for name in era.driver] + [era.nvml.format(**fields)]
    own = [era.lock.format(**fields)] if era.lock else []
    if persistenced and era.persistenced:
        name = era.persistenced.format(**fields)
        (own if era.persistenced_own_version else exact).append(name)
    if fabric_manager:
        if not era.fabric_manager:
            raise ProfileError(
                f"{source.name} ({source.title}) does not package the NVIDIA fabric manager; "
                "set driver_source to a source that does (cuda-debian, cuda-ubuntu, "
                "ubuntu-archive)"
            )
        exact.append(era.fabric_manager.format(**fields))
    if mps:
        if not era.mps:
            raise ProfileError(f"{source.name} ({source.title}) names no package for CUDA MPS")
        exact.append(era.mps.format(**fields))
    return DriverPackages(
        exact=tuple(dict.fromkeys(exact)),
        own=tuple(own),
        pin=tuple(p.format(**fields) for p in era.pin),
        revision=era.revision,
        version=version,
    )


def every_driver_name(version: str, persistenced: bool = True) -> tuple[str, ...]:
    """The driver's package names on every source: what the host reports on before its
    source is known (the choice may depend on its /etc/os-release)."""
    names: dict[str, None] = {}
    for source in profiles().values():
        packages = driver_packages(source, version, persistenced)
        names.update(dict.fromkeys(packages.names))
        era = source.era(branch_of(version))
        if era.fabric_manager:
            names[era.fabric_manager.format(branch=branch_of(version), version=version)] = None
    return tuple(names)


def _templates(era: Era) -> list[str]:
    optional = (era.nvml, era.persistenced, era.fabric_manager, era.mps, era.lock)
    return list(era.driver) + [t for t in optional if t]


def installed_patterns(source: Profile) -> tuple[str, ...]:
    """dpkg-query patterns of every driver package ``source`` names, any branch or era: what to
    look for on a host to find the driver it has now.

    >>> installed_patterns(profile("cuda-ubuntu"))[:2]
    ('nvidia-dkms-*-open', 'nvidia-utils-*')
    """
    out = {
        t.replace("{branch}", "*").replace("{version}", "*"): None
        for era in source.eras
        for t in _templates(era)
    }
    return tuple(out)


def replaced(source: Profile, wanted: DriverPackages, installed: list[str]) -> list[str]:
    """Those ``installed`` packages that are ``source``'s driver of another branch (a name with
    another branch in it) or of another naming era (a name the planned era does not use): a
    branch change removes them in the same transaction that installs ``wanted``. Packages the
    plan merely leaves out (persistenced switched off) are not touched.

    >>> new = driver_packages(profile("cuda-ubuntu"), "590.48.01", persistenced=False)
    >>> replaced(profile("cuda-ubuntu"), new, ["libnvidia-compute-580", "libnvidia-compute"])
    ['libnvidia-compute-580']
    >>> old = driver_packages(profile("ubuntu-archive"), "550.127.05", persistenced=False)
    >>> replaced(profile("ubuntu-archive"), old, ["nvidia-compute-utils-550-server",
    ...          "nvidia-driver-535-server", "nvidia-driver-550-server"])
    ['nvidia-driver-535-server']
    """
    branch = wanted.branch
    planned_era = source.era(branch)
    planned_names = {
        t.format(branch=branch, version=wanted.version) for t in _templates(planned_era)
    }
    out = []
    for name in installed:
        named = _naming(source, name)
        if name in wanted.names or named is None:
            continue
        if "branch" in named:
            if int(named["branch"]) != branch:
                out.append(name)
        elif name not in planned_names:
            out.append(name)
    return out


def _naming(source: Profile, name: str) -> dict[str, str] | None:
    """None unless ``name`` follows one of ``source``'s templates; then ``{"branch": ...}`` when
    the name holds a branch, ``{}`` when it does not."""
    for era in source.eras:
        for template in _templates(era):
            pattern = re.escape(template).replace(r"\{branch\}", r"(?P<branch>\d+)")
            match = re.fullmatch(pattern.replace(r"\{version\}", r"[\d.]+"), name)
            if match:
                return match.groupdict()
    return None


def select(source: str | None, distribution: str | None) -> Profile:
    """The profile named ``source``, or, when None, the one of the host's distribution (the
    ``ID`` of its /etc/os-release)."""
    known = profiles()
    if source is not None:
        if source not in known:
            raise ProfileError(
                f"driver_source {source!r} is not a known package source; "
                f"known: {', '.join(sorted(known))}"
            )
        return known[source]
    for candidate in known.values():
        if distribution in candidate.distributions:
            return candidate
    with_default = sorted(d for p in known.values() for d in p.distributions)
    raise ProfileError(
        f"no default package source for distribution {distribution or 'unknown'!r} "
        f"(defaults exist for {', '.join(with_default)}); set driver_source to one of "
        f"{', '.join(sorted(known))}"
    )


def os_release_id(text: str | None) -> str | None:
    """The ``ID`` of an /etc/os-release (os-release(5)), or None.

    >>> os_release_id('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\\nID=debian\\n')
    'debian'
    """
    for line in (text or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ID":
            return value.strip().strip("\"'") or None
    return None


def profile(name: str) -> Profile:
    return profiles()[name]


@cache
def profiles() -> dict[str, Profile]:
    """Every profile in ``sources.yaml``, validated."""
    text = resources.files("gpuprov.core.packaging").joinpath("sources.yaml").read_text()
    # libyaml's loader when PyYAML has it: the same documents, a tenth of the start-up time.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse(yaml.load(text, Loader=loader), "gpuprov/core/packaging/sources.yaml")


def parse(document: Any, origin: str) -> dict[str, Profile]:
    """Profiles from a parsed ``sources.yaml``; ProfileError naming the key on any mistake."""
    if not isinstance(document, dict) or not document:
        raise ProfileError(f"{origin}: expected a mapping of source name to profile")
    return {name: _profile(name, body, f"{origin}: {name}") for name, body in document.items()}


def _profile(name: str, body: Any, where: str) -> Profile:
    _keys(body, _PROFILE_KEYS, {"title", "eras"}, where)
    eras = body["eras"]
    if not isinstance(eras, list) or not eras:
        raise ProfileError(f"{where}: eras must be a non-empty list")
    parsed = tuple(_era(e, f"{where}: eras[{i}]") for i, e in enumerate(eras))
    if [e.from_branch for e in parsed] != sorted({e.from_branch for e in parsed}):
        raise ProfileError(f"{where}: eras must be in increasing from_branch order")
    if parsed[0].from_branch != 0:
        raise ProfileError(f"{where}: the first era must start at from_branch 0")
    return Profile(
        name=name,
        title=_str(body["title"], f"{where}: title"),
        distributions=_strs(body.get("distributions", []), f"{where}: distributions"),
        cites=_strs(body.get("cites", []), f"{where}: cites"),
        eras=parsed,
    )


def _era(body: Any, where: str) -> Era:
    _keys(body, _ERA_KEYS, {"from_branch", "revision", "driver", "nvml", "pin"}, where)
    if not isinstance(body["from_branch"], int) or isinstance(body["from_branch"], bool):
        raise ProfileError(f"{where}: from_branch must be an integer")
    revision = _str(body["revision"], f"{where}: revision")
    try:
        re.compile(revision)
    except re.error as e:
        raise ProfileError(f"{where}: revision is not a regular expression: {e}") from None
    optional = {
        k: (_str(body[k], f"{where}: {k}") if body.get(k) is not None else None)
        for k in ("persistenced", "fabric_manager", "mps", "lock")
    }
    own = body.get("persistenced_own_version", False)
    if not isinstance(own, bool):
        raise ProfileError(f"{where}: persistenced_own_version must be true or false")
    return Era(
        from_branch=body["from_branch"],
        revision=revision,
        driver=_strs(body["driver"], f"{where}: driver"),
        nvml=_str(body["nvml"], f"{where}: nvml"),
        persistenced=optional["persistenced"],
        persistenced_own_version=own,
        fabric_manager=optional["fabric_manager"],
        mps=optional["mps"],
        lock=optional["lock"],
        pin=_strs(body["pin"], f"{where}: pin"),
    )


def _keys(body: Any, allowed: set[str], required: set[str], where: str) -> None:
    if not isinstance(body, dict):
        raise ProfileError(f"{where}: expected a mapping")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ProfileError(
            f"{where}: unknown key {unknown[0]!r}; known: {', '.join(sorted(allowed))}"
        )
    missing = sorted(required - set(body))
    if missing:
        raise ProfileError(f"{where}: missing key {missing[0]!r}")


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ProfileError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ProfileError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(_str(v, where) for v in value)
