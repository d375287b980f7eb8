"""The systemd units the deploy enables, read back: the driver's services (``nvidia-persistenced``,
the fabric manager) enabled and running, the MIG boot unit enabled on ``mig`` hosts (a oneshot:
it runs at boot, so whether it is active now says nothing) and not enabled anywhere else.

The probe's ``units`` section is ``systemctl is-enabled`` / ``is-active`` of every unit
``wanted(plan)`` names (``gpuprov.host.units``, the command the deploy's facts run).

>>> [f.check for f in check(plan, probe, "python3 agent.pyz probe ...")]  # doctest: +SKIP
['unit']
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles.documents import Report, one_line
from gpuprov.core.packaging import planned
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import MIG_UNIT
from gpuprov.host.units import ENABLED

CHECK = "unit"


@dataclass(frozen=True)
class Want:
    """What the deploy leaves a unit as."""

    enabled: bool  # starts at boot
    running: bool | None  # active now; None: not compared (a oneshot)


def wanted(plan: HostPlan) -> dict[str, Want]:
    """Each unit the deploy manages on ``plan``'s host, as the deploy leaves it.

    >>> wanted(plan)                                          # doctest: +SKIP
    {'nvidia-persistenced.service': Want(enabled=True, running=True), 'gpuprov-mig.service': ...}
    """
    out = {unit: Want(True, True) for unit in planned.driver_units(plan)}
    out[MIG_UNIT] = Want(plan.mode == "mig", None)
    return out


def check(plan: HostPlan, probe: ProbeDocument, command: str) -> list[Finding]:
    """Findings for the planned units against the probe's ``units`` section; ``command`` is the
    probe command that writes the section (for the hint when it is missing)."""
    report = Report(plan.name)
    section = probe.units
    if section is None or isinstance(section.get("error"), str):
        found = "not in the probe document" if section is None else one_line(section["error"])
        report.add(
            CHECK,
            "the probe's units section (systemd's view of the planned units)",
            found[:200],
            f"probe with the planned units: {command}",
        )
        return report.findings
    for unit, want in wanted(plan).items():
        state = section.get(unit) or {"enabled": "", "active": ""}
        enabled, active = state["enabled"], state["active"]
        if want.enabled and enabled not in ENABLED:
            report.add(
                CHECK,
                f"{unit} enabled at boot",
                f"{unit} {enabled or 'not found'}",
                f"run the deploy (it enables {unit})",
            )
        if not want.enabled and enabled in ENABLED:
            report.add(
                "leftover",
                f"{unit} not enabled (not a MIG host)",
                f"{unit} {enabled}",
                "run the deploy (it disables the unit and removes its file)",
            )
        if want.running and active != "active":
            report.add(
                CHECK,
                f"{unit} running",
                f"{unit} {active or 'not running'}",
                f"run the deploy (it starts {unit}); if it stops again, see `journalctl -u {unit}`",
            )
    return report.findings
