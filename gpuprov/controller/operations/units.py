"""systemd units: enabled and running, restarted after a config change, or gone."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpuprov.controller.facts.managed import ManagedState
from gpuprov.controller.facts.units import UnitStates
from gpuprov.controller.operations.files import remove
from gpuprov.host.units import ABSENT, ENABLED


@operation()
def service(units: list[str], enabled: bool = True, running: bool | None = True):
    """
    Ensure systemd units are enabled (or not) and running (or not).

    + units: unit names
    + enabled: start the units at boot
    + running: the units are active now (None: leave that alone, e.g. a oneshot unit)

    **Example:**

    .. code:: python

        service(name="nvidia-persistenced", units=["nvidia-persistenced.service"])
    """
    current = host.get_fact(UnitStates, units=units)
    changed = False
    for unit in units:
        state = current.get(unit, {"enabled": "", "active": ""})
        is_enabled = state["enabled"] in ENABLED
        if is_enabled != enabled:
            yield StringCommand("systemctl", "enable" if enabled else "disable", shlex.quote(unit))
            changed = True
        if running is not None and (state["active"] == "active") != running:
            yield StringCommand("systemctl", "start" if running else "stop", shlex.quote(unit))
            changed = True
    if not changed:
        host.noop(
            f"{', '.join(units)} already {'enabled' if enabled else 'disabled'}"
            + ("" if running is None else f" and {'running' if running else 'stopped'}")
        )


@operation(is_idempotent=False)
def restarted(unit: str):
    """
    Restart a unit; meant to run with ``_if=`` the operation that changed its config. When
    the restart fails, the unit's last 20 log lines go to stderr after systemctl's message.

    + unit: unit name

    **Example:**

    .. code:: python

        restarted(name="Restart containerd", unit="containerd.service", _if=dropin.did_change)
    """
    name = shlex.quote(unit)
    # On a failure, systemd's own account follows systemctl's one-line message on stderr (the
    # unit's last log lines: which ExecStartPre failed, or that the job was cancelled), so the
    # deploy's output says why without a login to the host.
    yield StringCommand(
        f"systemctl restart {name} || {{ s=$?; journalctl --no-pager -o short-precise -n 20"
        f" -u {name} >&2; exit $s; }}"
    )


@operation()
def absent(unit: str, path: str):
    """
    Ensure a unit gpuprov installed is stopped, disabled and its unit file gone.

    + unit: unit name
    + path: its unit file

    **Example:**

    .. code:: python

        absent(unit="gpuprov-mig.service", path="/etc/systemd/system/gpuprov-mig.service")
    """
    snapshot = host.get_fact(ManagedState, paths=[path], units=[unit])
    state = snapshot["units"].get(unit, {"enabled": "", "active": ""})
    exists = snapshot["files"].get(path) is not None
    if not exists and state["enabled"] in ABSENT and state["active"] != "active":
        host.noop(f"{unit} already absent")
        return
    if state["enabled"] not in ABSENT or state["active"] == "active":
        yield StringCommand("systemctl", "disable", "--now", shlex.quote(unit))
    if exists:
        yield remove(path)
    yield StringCommand("systemctl", "daemon-reload")
