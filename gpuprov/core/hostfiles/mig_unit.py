"""``/etc/systemd/system/gpuprov-mig.service``: the boot unit that re-applies the MIG layout.

MIG instances do not survive a reboot (the mode does), so on every boot this unit runs
``agent.pyz apply --boot`` on ``mig-layout.json`` before the kubelet starts. The deploy writes
``render(plan)`` (``templates/gpuprov-mig.service.j2``); verify compares what a host has, directive
by directive, so comments and spacing are not drift but a changed ``ExecStart`` is.

>>> parse_unit("[Service]\\n# why\\nExecStart=/usr/bin/python3 /a apply\\n")
{('Service', 'ExecStart'): ('/usr/bin/python3 /a apply',)}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.mig_layout import leftover, missing, recorded
from gpuprov.core.templates import render as render_template
from gpuprov.host.contract import (
    FABRIC_MANAGER_UNIT,
    KUBELET_UNIT,
    MIG_LAYOUT_PATH,
    MIG_UNIT,
    MIG_UNIT_PATH,
    PERSISTENCED_UNIT,
)

if TYPE_CHECKING:
    from gpuprov.core.plan import HostPlan

CHECK = "mig-unit"

Directives = dict[tuple[str, str], tuple[str, ...]]


def paths(plan: HostPlan) -> Wanted:
    """The files the probe must read for ``check``: the unit on every host (a leftover counts)
    and, on a ``mig`` host, gpuprov's record of it."""
    return Wanted(files=(MIG_UNIT_PATH,) + recorded(plan, MIG_UNIT_PATH))


def render(plan: HostPlan) -> str:
    """The unit's text for ``plan``: the agent and interpreter the host uses."""
    return render_template(
        "gpuprov-mig.service.j2",
        python=plan.agent.gpuprov_python,
        agent=plan.agent.gpuprov_agent_path,
        layout=MIG_LAYOUT_PATH,
        persistenced=PERSISTENCED_UNIT,
        fabric_manager=FABRIC_MANAGER_UNIT,
        kubelet=KUBELET_UNIT,
    )


def parse_unit(text: str) -> Directives:
    """(section, key) -> values, in order, of a systemd unit file; comments and blanks dropped."""
    out: dict[tuple[str, str], list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, sep, value = line.partition("=")
        out.setdefault((section, key.strip()), []).append(value.strip() if sep else "")
    return {k: tuple(v) for k, v in out.items()}


def check(plan: HostPlan, files: dict[str, object]) -> list[Finding]:
    """Findings for the unit file a host has (``files`` as the probe read them)."""
    found = files.get(MIG_UNIT_PATH)
    host = plan.name
    if plan.mode != "mig":
        return leftover(plan, MIG_UNIT_PATH, found)
    hint = f"run the deploy (it rewrites {MIG_UNIT} as planned)"
    if found is None:
        why = f"without {MIG_UNIT} a reboot leaves the GPUs without their MIG instances"
        return [missing(plan, MIG_UNIT_PATH, files, CHECK, why)]
    if not isinstance(found, str):  # the probe's {"error": why} marker
        return [
            Finding(
                host, None, CHECK, f"{MIG_UNIT_PATH} as planned", f"not read: {_error(found)}", hint
            )
        ]
    want, have = parse_unit(render(plan)), parse_unit(found)
    out = []
    for section, key in sorted(want.keys() | have.keys()):
        expected, got = want.get((section, key)), have.get((section, key))
        if expected != got:
            out.append(
                Finding(
                    host,
                    None,
                    CHECK,
                    _shown(section, key, expected),
                    _shown(section, key, got),
                    hint,
                )
            )
    return out


def _shown(section: str, key: str, values: tuple[str, ...] | None) -> str:
    if values is None:
        return f"[{section}] {key} unset"
    return "; ".join(f"[{section}] {key}={value!r:.200}"[:240] for value in values)


def _error(marker: object) -> str:
    return str(marker.get("error")) if isinstance(marker, dict) else repr(marker)[:80]
