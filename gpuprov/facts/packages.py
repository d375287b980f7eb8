"""Installed version and hold state of named Debian packages, in one `dpkg-query`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TypedDict

from pyinfra.api import FactBase
from typing_extensions import override


class PackageState(TypedDict):
    version: str | None  # None unless the package is fully installed
    held: bool  # `apt-mark hold` (dpkg selection "hold")


def packages_command(packages: Sequence[str]) -> str:
    # dpkg-query exits 1 and complains on stderr for a package it has never seen; the package is
    # then simply absent from the output.
    names = " ".join(shlex.quote(p) for p in packages)
    return (
        f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Want}}\\t"
        f"${{db:Status-Status}}\\n' {names} 2>/dev/null || true"
    )


def parse_packages(lines: Sequence[str]) -> dict[str, PackageState]:
    out: dict[str, PackageState] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) != 4:
            continue
        name, version, want, status = fields
        out[name] = PackageState(
            version=version if status == "installed" else None, held=want == "hold"
        )
    return out


class PackageStates(FactBase[dict[str, PackageState]]):
    """
    Version and hold state of each named package that dpkg knows; unknown ones are left out.

    .. code:: python

        {
            "nvidia-driver-550-server": {"version": "550.127.05-1", "held": True},
            "nvidia-fabricmanager-550": {"version": None, "held": False},
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
