"""Everything a deploy compares against its plan, in one round trip: files, packages, units.

The deploy reads this once per host at prepare time and schedules an operation only for what
differs; each scheduled operation then reads its own finer fact again when it runs.
"""

from __future__ import annotations

from typing import TypedDict

from pyinfra.api import FactBase
from typing_extensions import override

from gpuprov.controller.facts.files import FileState, files_command, parse_files
from gpuprov.controller.facts.sections import split_sections
from gpuprov.host import packages as dpkg
from gpuprov.host import units as systemd_units
from gpuprov.host.packages import PackageState
from gpuprov.host.units import UnitState

_SECTIONS = ("files", "packages", "units")


class Managed(TypedDict):
    files: dict[str, FileState | None]
    packages: dict[str, PackageState]
    units: dict[str, UnitState]


class ManagedState(FactBase[Managed]):
    """
    The state of the named files (text of those in ``read``), packages and systemd units.

    .. code:: python

        {
            "files": {"/etc/gpuprov/mig-layout.json": None},
            "packages": {"nvidia-driver": {"version": "535.261.03-1", "held": True}},
            "units": {"gpuprov-mig.service": {"enabled": "", "active": "inactive"}},
        }
    """

    @staticmethod
    def default() -> Managed:
        return Managed(files={}, packages={}, units={})

    @override
    def command(
        self,
        paths: list[str],
        read: list[str] | None = None,
        packages: list[str] | None = None,
        units: list[str] | None = None,
    ) -> str:
        parts = ["echo '@@ files'", files_command(paths, read or ())]
        if packages:
            # dpkg-query is absent on non-Debian hosts; the section then stays empty.
            parts += [
                "echo '@@ packages'",
                f"if command -v dpkg-query >/dev/null; then {dpkg.command(packages)}; fi",
            ]
        if units:
            parts += [
                "echo '@@ units'",
                f"if command -v systemctl >/dev/null; then {systemd_units.command(units)}; fi",
            ]
        return "; ".join(p for p in parts if p)

    @override
    def process(self, output: list[str]) -> Managed:
        sections = split_sections(output, "@@ ", _SECTIONS)
        return Managed(
            files=parse_files(sections["files"]),
            packages=dpkg.parse(sections["packages"]),
            units=systemd_units.parse(sections["units"]),
        )
