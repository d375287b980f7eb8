"""Enablement and activity of named systemd units, in one command."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TypedDict

from pyinfra.api import FactBase
from typing_extensions import override


class UnitState(TypedDict):
    enabled: str  # `systemctl is-enabled`: enabled, disabled, static, masked, "" (no such unit)
    active: str  # `systemctl is-active`: active, inactive, failed, activating, ...


def units_command(units: Sequence[str]) -> str:
    # One line per unit, even for a unit that does not exist (is-enabled then prints nothing).
    return "; ".join(
        f"printf '%s\\t%s\\t%s\\n' {shlex.quote(u)} "
        f'"$(systemctl is-enabled {shlex.quote(u)} 2>/dev/null)" '
        f'"$(systemctl is-active {shlex.quote(u)} 2>/dev/null)"'
        for u in units
    )


def parse_units(lines: Sequence[str]) -> dict[str, UnitState]:
    out: dict[str, UnitState] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) == 3:
            out[fields[0]] = UnitState(enabled=fields[1], active=fields[2])
    return out


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
        return units_command(units)

    @override
    def process(self, output: list[str]) -> dict[str, UnitState]:
        return parse_units(output)
