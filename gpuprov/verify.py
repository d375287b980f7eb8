"""Read every planned host's state (live over pyinfra, or from saved probe snapshots) and compare.

Live, each host costs one round trip: pyinfra connects to all hosts in parallel, then one
``VerifyProbe`` fact per host runs the agent's probe with that host's own paths, all in
pyinfra's gevent pool at once.

>>> loaded, cluster = load_plan("inventories/example.py", ())              # doctest: +SKIP
>>> results = verify_live("inventories/example.py", cluster.hosts)  # doctest: +SKIP
>>> {name: host_status(findings) for name, findings in results.items()}   # doctest: +SKIP
{'gpu-a100-01': 'ok', ...}
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gevent
from pyinfra.api import BaseStateCallback, Config, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.facts import get_fact
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, ctx_state

from gpuprov import inventory as inventory_
from gpuprov.compare import compare, unreachable, wanted_files
from gpuprov.errors import InputError, Problem
from gpuprov.facts.probe import VerifyProbe
from gpuprov.findings import Finding
from gpuprov.plan import HostPlan

Results = dict[str, list[Finding]]


def fact_arguments(plan: HostPlan) -> dict[str, Any]:
    """The ``VerifyProbe`` arguments for one host: its agent, interpreter and wanted files."""
    files, globs = wanted_files(plan)
    return {
        "agent_path": plan.settings["gpuprov_agent_path"],
        "python": plan.settings["gpuprov_python"],
        "files": files,
        "globs": globs,
        "containerd": plan.settings["containerd_config_path"]
        if plan.container_runtime == "containerd"
        else None,
    }


def probe_command(plan: HostPlan) -> str:
    """The shell command that prints this host's probe document (for a snapshot)."""
    args = fact_arguments(plan)
    words = [args["python"], args["agent_path"], "probe"]
    for path in args["files"]:
        words += ["--file", path]
    for pattern in args["globs"]:
        words += ["--glob", pattern]
    if args["containerd"]:
        words += ["--containerd", args["containerd"]]
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
        if plan.name in observed:
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


def _gather(state: State, hosts: list[tuple[Host, HostPlan]]) -> dict[str, dict[str, Any]]:
    """VerifyProbe of each host, each with its own arguments, in parallel in pyinfra's pool."""

    def one(host: Host, plan: HostPlan) -> dict[str, Any]:
        with ctx_host.use(host):
            # apply_failed_hosts=False: a host whose probe fails is a finding, not a reason
            # for pyinfra to stop the others ("No hosts remaining!").
            return get_fact(
                state, host, VerifyProbe, kwargs=fact_arguments(plan), apply_failed_hosts=False
            )

    with ctx_state.use(state):
        greenlets = {plan.name: state.pool.spawn(one, host, plan) for host, plan in hosts}
    gevent.joinall(list(greenlets.values()))
    return {name: greenlet.get() for name, greenlet in greenlets.items()}


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
