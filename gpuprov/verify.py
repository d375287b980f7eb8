"""Read every planned host's state (live over pyinfra, or from saved probe snapshots) and compare.

Live, each host costs one round trip: pyinfra connects to all hosts in parallel, then one
``GpuNodeState`` probe per host runs the agent with that host's own paths, all in pyinfra's
gevent pool at once. Each probe has the host's ``gpuprov_timeout_probe`` and each connection SSH
keepalives (gpuprov/keepalive.py): a hung probe or a host that drops off is a finding for that
host, and the report still covers every host. While probes run, stderr names the hosts verify
is still waiting for, every ``WAIT_REPORT`` seconds.

>>> loaded, cluster = load_plan("inventories/example.py", ())              # doctest: +SKIP
>>> results = verify_live("inventories/example.py", cluster.hosts)  # doctest: +SKIP
>>> {name: host_status(findings) for name, findings in results.items()}   # doctest: +SKIP
{'gpu-a100-01': 'ok', ...}
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gevent
from paramiko import SSHException
from pyinfra.api import BaseStateCallback, Config, State
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import FactProcessError, PyinfraError
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, ctx_state

from gpuprov import inventory as inventory_
from gpuprov import keepalive
from gpuprov.compare import Finding, compare, unreachable, wanted_files
from gpuprov.errors import InputError, Problem
from gpuprov.facts.node import GpuNodeState
from gpuprov.plan import HostPlan

Results = dict[str, list[Finding]]

WAIT_REPORT = 5  # seconds before (and between) naming the hosts verify still waits for


def fact_arguments(plan: HostPlan) -> dict[str, Any]:
    """The ``GpuNodeState`` arguments for one host: its agent, interpreter and wanted files."""
    files, globs = wanted_files(plan)
    return {
        "agent_path": plan.settings["gpuprov_agent_path"],
        "python": plan.settings["gpuprov_python"],
        "files": files,
        "globs": globs,
    }


def probe_command(plan: HostPlan) -> str:
    """The shell command that prints this host's probe document (for a snapshot)."""
    args = fact_arguments(plan)
    words = [args["python"], args["agent_path"], "probe"]
    for path in args["files"]:
        words += ["--file", path]
    for pattern in args["globs"]:
        words += ["--glob", pattern]
    return shlex.join(words)


class _ConnectErrors(BaseStateCallback):
    """Keeps why each host could not be connected to, for its finding."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def host_connect_error(self, state: State, host: Host, error: Exception) -> None:
        self.errors[host.name] = str(error.args[0] if error.args else error)


def verify_live(loaded: inventory_.LoadedInventory, plans: Sequence[HostPlan]) -> Results:
    """Connect to every host of ``plans``, read its state in one round trip, compare."""
    by_name = {h.name: h for h in loaded.pyinfra}
    hosts = [by_name[p.name] for p in plans]
    state = State(inventory=loaded.pyinfra, config=Config(), initial_limit=hosts)
    connect_errors = _ConnectErrors()
    state.add_callback_handler(connect_errors)
    state.add_callback_handler(
        keepalive.Keepalive({p.name: p.settings["gpuprov_ssh_dead_after"] for p in plans})
    )
    try:
        connect_all(state)
    except PyinfraError:
        pass  # "No hosts remaining!": every host failed to connect; each one is named below
    connected = [(by_name[p.name], p) for p in plans if by_name[p.name].connected]
    try:
        observed = _gather(state, connected)
    finally:
        disconnect_all(state)
    results: Results = {}
    for plan in plans:
        if isinstance(observed.get(plan.name), Finding):
            results[plan.name] = [observed[plan.name]]
        elif plan.name in observed:
            results[plan.name] = compare(plan, observed[plan.name])
        else:
            reason = connect_errors.errors.get(plan.name, "could not connect")
            results[plan.name] = [
                unreachable(
                    plan.name,
                    reason,
                    "check that the host is up and that pyinfra can "
                    "connect to it (ssh_user, ssh_key, ...)",
                )
            ]
    return results


def _gather(
    state: State, hosts: list[tuple[Host, HostPlan]]
) -> dict[str, dict[str, Any] | Finding]:
    """Each host's probe document (or the finding why there is none), all hosts at once."""
    with ctx_state.use(state):
        greenlets = {plan.name: state.pool.spawn(_probe, state, host, plan) for host, plan in hosts}
    started = time.monotonic()
    pending = list(greenlets.values())
    while pending:
        gevent.joinall(pending, timeout=WAIT_REPORT)
        pending = [g for g in pending if not g.ready()]
        if pending:
            names = sorted(name for name, g in greenlets.items() if not g.ready())
            print(
                f"verify: still waiting for {len(names)} host(s) after "
                f"{time.monotonic() - started:.0f} s: {', '.join(names)}",
                file=sys.stderr,
                flush=True,
            )
    return {name: greenlet.get() for name, greenlet in greenlets.items()}


def _probe(state: State, host: Host, plan: HostPlan) -> dict[str, Any] | Finding:
    """One host's probe document, run under its ``gpuprov_timeout_probe``.

    A probe that exits non-zero or prints no document reads as an empty document, as a failed
    fact would (the comparison names it). One that does not answer in time, or whose connection
    is lost, is an ``unreachable`` finding naming the limit: one host cannot hold up the report.
    The host's own connector arguments (``_sudo`` in its data, ...) apply, as to a fact.
    """
    limit = plan.settings["gpuprov_timeout_probe"]
    fact = GpuNodeState()
    command = fact.command(**fact_arguments(plan))
    started = time.monotonic()
    try:
        with ctx_host.use(host):
            arguments, _ = pop_global_arguments(state, host, {"_timeout": limit})
            connector = {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}
            ok, output = host.run_shell_command(command, **connector)
    except TimeoutError:
        return unreachable(
            plan.name,
            f"the probe gave no answer within {limit} s (gpuprov_timeout_probe)",
            f"on the host, check what `{probe_command(plan)}` waits for "
            "(a hung nvidia-smi or NVML call after an XID?)",
        )
    except (OSError, SSHException, EOFError) as e:
        return unreachable(
            plan.name,
            f"the connection was lost after {time.monotonic() - started:.0f} s: "
            f"{e or type(e).__name__}",
            "check that the host is up and reachable, then run verify again",
        )
    if not ok or not output.stdout_lines:
        return {}
    try:
        return fact.process(output.stdout_lines)
    except FactProcessError:
        return {}


def verify_snapshots(directory: str, plans: Sequence[HostPlan]) -> Results:
    """Compare each host with its saved probe output ``DIR/<host>.json`` (air-gapped sites).

    A missing snapshot is a finding; one that is not a probe JSON document is bad input.
    """
    results: Results = {}
    problems = []
    for plan in plans:
        path = Path(directory) / f"{plan.name}.json"
        if not path.is_file():
            results[plan.name] = [
                unreachable(
                    plan.name,
                    f"no snapshot {path}",
                    f"on the host run `{probe_command(plan)} > {plan.name}.json` and copy it to "
                    f"{directory}",
                )
            ]
            continue
        try:
            document = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            problems.append(Problem(str(path), f"not a probe JSON document: {e}"))
            continue
        if not isinstance(document, dict):
            problems.append(Problem(str(path), "not a probe JSON document: not an object"))
            continue
        results[plan.name] = compare(plan, document)
    if problems:
        raise InputError(problems)
    return results
