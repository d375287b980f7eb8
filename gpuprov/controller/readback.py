"""Read every planned host's state (live over pyinfra, or from saved probe snapshots) and compare.

Live, each host costs one round trip: pyinfra connects to all hosts in parallel, then one
``VerifyProbe`` probe per host runs the agent with that host's own paths, all in pyinfra's
gevent pool at once. Each probe has the host's ``gpuprov_timeout_probe`` and each connection SSH
keepalives (gpuprov/controller/keepalive.py): a hung probe or a host that drops off is a finding for that
host, and the report still covers every host. While probes run, stderr names the hosts verify
is still waiting for, every ``WAIT_REPORT`` seconds.

>>> loaded, cluster = load_plan("inventories/example.py", ())              # doctest: +SKIP
>>> results = verify_live("inventories/example.py", cluster.hosts)  # doctest: +SKIP
>>> {name: len(findings) for name, findings in results.items()}   # doctest: +SKIP
{'gpu-a100-01': 0, ...}
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gevent
from gevent import monkey
from paramiko import SSHException
from pyinfra.api import BaseStateCallback, Config, State
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import FactProcessError, PyinfraError
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, ctx_state

from gpuprov.controller import inventory as inventory_
from gpuprov.controller import keepalive
from gpuprov.controller.facts.probe import VerifyProbe
from gpuprov.core.checks.host import (
    compare,
    containerd_main,
    critical_xids,
    kubelet_devices_dir,
    probe_command,
    wanted_files,
    wanted_packages,
    wanted_units,
)
from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import CRI_SOCKETS, POD_RESOURCES_SOCKET, SNAPSHOT_SUFFIX

# pyinfra's API runs each host in a greenlet. As pyinfra's own CLI does (pyinfra_cli/__init__.py),
# make blocking I/O cooperative: otherwise paramiko's blocking reads stop gevent's hub, and a host
# whose probe hangs holds up every other host and no time limit fires.
monkey.patch_all()

Results = dict[str, list[Finding]]

WAIT_REPORT = 5  # seconds before (and between) naming the hosts verify still waits for


# A snapshot larger than this is not a probe's output (a probe of 16 GPUs with its files is
# tens of KiB); reading it whole would only spend memory.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def unreachable(host: str, reason: str, hint: str) -> Finding:
    """The finding for a host whose state could not be read at all."""
    return Finding(host, None, "unreachable", "reachable", reason, hint)


def fact_arguments(
    plan: HostPlan, health: bool = True, pod_resources: bool = False
) -> dict[str, Any]:
    """The ``VerifyProbe`` arguments for one host: its agent, interpreter, wanted files, on
    containerd hosts the main config whose effective result the probe reads, whether it reads
    the GPUs' health, the kubelet's device-plugin directory (unless
    ``verify_kubelet_devices`` is off), the packages and units the deploy manages, and with
    ``pod_resources`` (``verify --canary``) or a kubelet whose devices verify checks the
    kubelet's pod-resources socket."""
    wanted = wanted_files(plan)
    return {
        "agent_path": plan.agent.gpuprov_agent_path,
        "python": plan.agent.gpuprov_python,
        "files": list(wanted.files),
        "globs": list(wanted.globs),
        "containerd": containerd_main(plan),
        "health": health,
        "critical_xids": critical_xids(plan) if health else None,
        "kubelet_devices": kubelet_devices_dir(plan),
        "packages": list(wanted_packages(plan)),
        "units": list(wanted_units(plan)),
        # The kubelet's pod-resources too wherever its devices are checked: the pods running
        # beyond the planned capacity (gpuprov.core.checks.shares_in_use).
        "pod_resources": POD_RESOURCES_SOCKET
        if pod_resources or kubelet_devices_dir(plan)
        else None,
        # ... read once the kubelet names every pod the runtime runs (right after a kubelet
        # restart it names none for a moment).
        "runtime": CRI_SOCKETS[plan.runtime.container_runtime],
    }


class _ConnectErrors(BaseStateCallback):
    """Keeps why each host could not be connected to, for its finding."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def host_connect_error(self, state: State, host: Host, error: Exception) -> None:
        self.errors[host.name] = str(error.args[0] if error.args else error)


def verify_live(
    loaded: inventory_.LoadedInventory,
    plans: Sequence[HostPlan],
    health: bool = True,
    pod_resources: bool = False,
    documents: dict[str, dict[str, Any]] | None = None,
) -> Results:
    """Connect to every host of ``plans``, read its state in one round trip, compare;
    ``health``: read and judge the GPUs' health in that same round trip; ``pod_resources``:
    read the kubelet's pod-resources in it too. ``documents``, when given, receives each probe
    document read (by host) for the callers that compare more (``verify --canary``)."""
    by_name = {h.name: h for h in loaded.pyinfra}
    hosts = [by_name[p.name] for p in plans]
    state = State(inventory=loaded.pyinfra, config=Config(), initial_limit=hosts)
    connect_errors = _ConnectErrors()
    state.add_callback_handler(connect_errors)
    state.add_callback_handler(
        keepalive.Keepalive({p.name: p.timeouts.gpuprov_ssh_dead_after for p in plans})
    )
    try:
        connect_all(state)
    except PyinfraError:
        pass  # "No hosts remaining!": every host failed to connect; each one is named below
    connected = [(by_name[p.name], p) for p in plans if by_name[p.name].connected]
    try:
        observed = _gather(state, connected, health, pod_resources)
    finally:
        disconnect_all(state)
    if documents is not None:
        documents.update({n: d for n, d in observed.items() if not isinstance(d, Finding)})
    results: Results = {}
    for plan in plans:
        if isinstance(observed.get(plan.name), Finding):
            results[plan.name] = [observed[plan.name]]
        elif plan.name in observed:
            results[plan.name] = compare(plan, observed[plan.name], health)
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
    state: State, hosts: list[tuple[Host, HostPlan]], health: bool, pod_resources: bool = False
) -> dict[str, dict[str, Any] | Finding]:
    """Each host's probe document (or the finding why there is none), all hosts at once."""
    with ctx_state.use(state):
        greenlets = {
            plan.name: state.pool.spawn(_probe, state, host, plan, health, pod_resources)
            for host, plan in hosts
        }
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


def _probe(
    state: State, host: Host, plan: HostPlan, health: bool, pod_resources: bool = False
) -> dict[str, Any] | Finding:
    """One host's probe document, run under its ``gpuprov_timeout_probe``.

    A probe that exits non-zero or prints no document reads as an empty document, as a failed
    fact would (the comparison names it). One that does not answer in time, or whose connection
    is lost, is an ``unreachable`` finding naming the limit: one host cannot hold up the report.
    The host's own connector arguments (``_sudo`` in its data, ...) apply, as to a fact.
    """
    limit = plan.timeouts.gpuprov_timeout_probe
    fact = VerifyProbe()
    command = fact.command(**fact_arguments(plan, health, pod_resources))
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
            f"on the host, check what `{probe_command(plan, health)}` waits for "
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


def verify_snapshots(directory: str, plans: Sequence[HostPlan], health: bool = True) -> Results:
    """Compare each host with its saved probe output ``DIR/<host>.json`` (air-gapped sites).

    Every host gets its own result: a missing, unreadable or malformed snapshot is a finding for
    that host, and the others are still compared. A host whose name cannot be a file name inside
    ``DIR`` (``../x``, ``/abs``, too long) is a finding too: nothing outside ``DIR`` is read.
    """
    return {plan.name: _snapshot_findings(directory, plan, health) for plan in plans}


def snapshot_name(host: str) -> str | None:
    """The snapshot file name of ``host``, or None when the name cannot be one file in a
    directory.

    >>> snapshot_name("gpu-1"), snapshot_name("../x"), snapshot_name("a" * 300)
    ('gpu-1.json', None, None)
    """
    name = host + SNAPSHOT_SUFFIX
    if (
        not host
        or host in (".", "..")
        or "/" in host
        or "\0" in host
        or len(os.fsencode(name)) > 255  # NAME_MAX of Linux file systems
    ):
        return None
    return name


def _snapshot_findings(directory: str, plan: HostPlan, health: bool) -> list[Finding]:
    take = (
        f"on the host run `{probe_command(plan, health)} > {shlex.quote(plan.name + SNAPSHOT_SUFFIX)}` "
        f"and copy it to {directory}"
    )
    name = snapshot_name(plan.name)
    if name is None:
        return [
            Finding(
                plan.name,
                None,
                "snapshot",
                f"a snapshot file in {directory}",
                "the host name cannot be a file name there (empty, '/', '..' or too long)",
                "verify this host live (without --snapshot-dir), or rename it in the inventory",
            )
        ]
    path = Path(directory) / name
    try:
        if not path.is_file():
            return [unreachable(plan.name, f"no snapshot {path}", take)]
        with path.open("rb") as f:
            data = f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as e:
        return [unreachable(plan.name, f"cannot read {path}: {e.strerror or e}", take)]
    problem = None
    if len(data) > MAX_SNAPSHOT_BYTES:
        problem = f"larger than {MAX_SNAPSHOT_BYTES // 2**20} MiB"
    else:
        try:
            return compare(plan, json.loads(data.decode("utf-8")), health)
        except UnicodeDecodeError as e:
            problem = f"not UTF-8 ({e.reason} at byte {e.start})"
        except (ValueError, RecursionError) as e:
            problem = f"not JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return [
        Finding(
            plan.name,
            None,
            "probe-document",
            f"a probe JSON document in {path}",
            problem,
            f"take the snapshot again: {take}",
        )
    ]
