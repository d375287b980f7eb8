"""Enablement and activity of named systemd units, read in one shell command.

The deploy (``UnitStates``, ``ManagedState``) and the probe (``gpuprov verify``) run this same
command. Stdlib only: the agent bundle carries it.

>>> parse(["gpuprov-mig.service\\tenabled\\tinactive", "nvidia-persistenced.service\\t\\t"])
{'gpuprov-mig.service': {'enabled': 'enabled', 'active': 'inactive'}, 'nvidia-persistenced.service': {'enabled': '', 'active': ''}}
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any, TypedDict

# `systemctl is-enabled` states of a unit that starts at boot (or that its dependencies start):
# what `service(enabled=True)` leaves as it is.
ENABLED = ("enabled", "enabled-runtime", "static", "alias")
# `systemctl is-enabled` of a unit that is not there: nothing printed, or `not-found`.
ABSENT = ("", "not-found")


class UnitState(TypedDict):
    enabled: str  # `systemctl is-enabled`: enabled, disabled, static, masked, "" (no such unit)
    active: str  # `systemctl is-active`: active, inactive, failed, activating, ...


def command(units: Sequence[str]) -> str:
    # One line per unit, even for a unit that does not exist (is-enabled then prints nothing).
    return "; ".join(
        f"printf '%s\\t%s\\t%s\\n' {shlex.quote(u)} "
        f'"$(systemctl is-enabled {shlex.quote(u)} 2>/dev/null)" '
        f'"$(systemctl is-active {shlex.quote(u)} 2>/dev/null)"'
        for u in units
    )


def parse(lines: Sequence[str]) -> dict[str, UnitState]:
    out: dict[str, UnitState] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) == 3:
            out[fields[0]] = UnitState(enabled=fields[1], active=fields[2])
    return out


def read(units: Sequence[str]) -> dict[str, Any]:
    """The probe's ``units`` section: ``{unit: {"enabled", "active"}}``, run here;
    ``{"error": why}`` when there is no systemctl.

    >>> set(read(["gpuprov-no-such.service"])) <= {"gpuprov-no-such.service", "error"}
    True
    """
    if shutil.which("systemctl") is None:
        return {"error": "no systemctl on this host"}
    result = subprocess.run(
        ["sh", "-c", command(units)], capture_output=True, text=True, check=False
    )
    return dict(parse(result.stdout.splitlines()))
