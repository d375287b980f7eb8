"""Named Debian packages as dpkg and apt see them, in one command: the installed version and
hold state (`dpkg-query`), and every version the host's apt sources offer (`apt-cache
madison`), which is what a planned version is resolved against."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TypedDict

from pyinfra.api import FactBase
from typing_extensions import override

_GLOB = set("*?[")


class PackageState(TypedDict):
    version: str | None  # None unless the package is fully installed
    held: bool  # `apt-mark hold` (dpkg selection "hold")
    available: list[str]  # the versions apt's indexes list (`apt-cache madison`), as listed


def packages_command(packages: Sequence[str]) -> str:
    """``packages`` are names or dpkg-query glob patterns (``nvidia-*``: to find what is
    installed of another branch); apt is asked about the names only."""
    # dpkg-query exits 1 and complains on stderr for a package it has never seen; the package is
    # then simply absent from the output.
    names = " ".join(shlex.quote(p) for p in packages)
    command = (
        f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Want}}\\t"
        f"${{db:Status-Status}}\\n' {names} 2>/dev/null || true"
    )
    exact = " ".join(shlex.quote(p) for p in packages if not _GLOB & set(p))
    if exact:
        command += (
            f"; if command -v apt-cache >/dev/null; then apt-cache madison {exact} "
            "2>/dev/null || true; fi"
        )
    return command


def parse_packages(lines: Sequence[str]) -> dict[str, PackageState]:
    out: dict[str, PackageState] = {}
    for line in lines:
        madison = [f.strip() for f in line.split(" | ")]
        if len(madison) == 3:
            name, version, origin = madison
            if origin.endswith("Packages"):  # binary indexes, not deb-src "Sources"
                entry = out.setdefault(name, PackageState(version=None, held=False, available=[]))
                if version not in entry["available"]:
                    entry["available"].append(version)
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            continue
        name, version, want, status = fields
        out[name] = PackageState(
            version=version if status == "installed" else None,
            held=want == "hold",
            available=out.get(name, {}).get("available", []),
        )
    return out


class PackageStates(FactBase[dict[str, PackageState]]):
    """
    Version, hold state and apt's versions of each named package dpkg or apt knows; unknown
    ones are left out.

    .. code:: python

        {
            "nvidia-driver": {"version": "535.216.03-2~bpo12+1", "held": True,
                              "available": ["535.261.03-1", "535.216.03-2~bpo12+1"]},
            "nvidia-kernel-dkms": {"version": None, "held": False, "available": []},
        }
    """

    default = dict

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return "dpkg-query"

    @override
    def command(self, packages: list[str]) -> str:
        return packages_command(packages)

    @override
    def process(self, output: list[str]) -> dict[str, PackageState]:
        return parse_packages(output)
