"""Enablement and activity of named systemd units (``gpuprov.host.units``, the command the
probe runs too)."""

from __future__ import annotations

from pyinfra.api import FactBase
from typing_extensions import override

from gpuprov.host import units as systemd_units
from gpuprov.host.units import UnitState


class UnitStates(FactBase[dict[str, UnitState]]):
    """
    ``systemctl is-enabled`` / ``is-active`` of each named unit.

    .. code:: python

        {
            "nvidia-persistenced.service": {"enabled": "enabled", "active": "active"},
            "gpuprov-mig.service": {"enabled": "", "active": "inactive"},
        }
    """

    default = dict

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return "systemctl"

    @override
    def command(self, units: list[str]) -> str:
        return systemd_units.command(units)

    @override
    def process(self, output: list[str]) -> dict[str, UnitState]:
        return systemd_units.parse(output)
