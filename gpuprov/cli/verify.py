"""`gpuprov verify INVENTORY`: does every host match its plan? Exit 0 yes, 1 no, 2 bad input.

The report is formatted here: a table (or ``--format json``, schema ``gpuprov.verify/v1``) of
every finding, then one summary line. A finding repeated on many hosts of one pool
(``gpuprov.core.pool_report``) is one line instead of one row per host, followed by a line per
pool; the JSON keeps every host's findings. Text from hosts is printed with control characters
escaped, so a host name or file value cannot forge a line of the report.

>>> hosts_summary({"a": [], "b": [Finding("b", None, "unreachable", "reachable", "timeout", "")]})
'2 hosts: 1 ok, 0 drift, 1 unreachable (b)'
"""

from __future__ import annotations

import functools
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

import click

from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.cli.plan import limit_option, load_plan
from gpuprov.controller import readback
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles.documents import one_line
from gpuprov.core.pool_report import (
    STATUSES,
    Repeat,
    host_status,
    named,
    pool_counts,
    pooled,
)
from gpuprov.host.contract import EXIT_DRIFT, EXIT_OK, VERIFY_SCHEMA

# Column widths that keep the six-column table within 100 characters.
_WIDTHS = {"host": 14, "gpu": 3, "check": 17, "expected": 19, "found": 19, "hint": 17}
_LINE = 100  # the width of a repeated finding's lines
_SUMMARY_NAMES = 5  # hosts the summary names per status before "… +N"


@click.command()
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@format_option
@click.option(
    "--snapshot-dir",
    metavar="DIR",
    type=click.Path(exists=True, file_okay=False),
    help="Compare saved probe outputs DIR/<host>.json instead of connecting.",
)
@click.option(
    "--kubeconfig",
    metavar="FILE",
    help="Also check the nodes as the API server shows them (labels, taints, cordon, "
    "allocatable, pods), read in pages of 500 nodes per list call.",
)
@click.option(
    "--cluster-only",
    is_flag=True,
    help="With --kubeconfig: check only the nodes as the API server shows them and contact no "
    "host (a fleet changed in-cluster, or too big for one SSH controller).",
)
@click.option(
    "--health",
    type=click.Choice(["on", "off"]),
    default="on",
    show_default=True,
    help="Read and judge each GPU's health (XIDs, ECC, row remapping, retired pages; "
    "docs/health.md) in the same round trip.",
)
@click.option(
    "--canary",
    is_flag=True,
    help="With --kubeconfig: run one pod per node and planned resource (canary_image) through "
    "the scheduler, the device plugin and the container runtime, and check the device each "
    "got; the pods are deleted afterwards.",
)
@click.option(
    "--cordon-unhealthy",
    is_flag=True,
    help="With --kubeconfig: cordon the nodes whose host has an unhealthy GPU (never uncordons).",
)
@bad_input
def verify(
    inventory: str,
    limit: tuple[str, ...],
    fmt: str,
    snapshot_dir: str | None,
    kubeconfig: str | None,
    cluster_only: bool,
    health: str,
    canary: bool,
    cordon_unhealthy: bool,
) -> None:
    """Compare every host of INVENTORY with its plan; exit 1 if any drifts or is unreachable."""
    if cordon_unhealthy and (not kubeconfig or health == "off" or cluster_only):
        needs = "needs --kubeconfig and --health on, not --cluster-only"
        raise InputError([Problem("--cordon-unhealthy", needs)])
    if cluster_only and (not kubeconfig or snapshot_dir):
        raise InputError([Problem("--cluster-only", "needs --kubeconfig and no --snapshot-dir")])
    if canary and (not kubeconfig or snapshot_dir or cluster_only):
        needs = "needs --kubeconfig, and no --snapshot-dir or --cluster-only"
        raise InputError([Problem("--canary", needs)])
    loaded, cluster = load_plan(inventory, limit)
    cluster_check = None
    if kubeconfig:
        # Imported only with --kubeconfig: the cluster's manifests and comparisons are not on
        # a plain verify's way.
        from gpuprov.controller.kube.cluster_verify import ClusterCheck

        cluster_check = ClusterCheck(kubeconfig, cluster)
    if cluster_only:
        results: dict[str, list[Finding]] = {p.name: [] for p in cluster.hosts}
    elif canary and kubeconfig:
        results = _with_canaries(loaded, cluster, kubeconfig, health == "on")
    elif snapshot_dir:
        results = readback.verify_snapshots(snapshot_dir, cluster.hosts, health == "on")
    else:
        results = readback.verify_live(loaded, cluster.hosts, health == "on")
    if cluster_check is not None:
        # The device plugin's health view is compared with a live read only: a snapshot is
        # from another moment than the Node (docs/health.md, "Two views").
        live_health = health == "on" and not cluster_only and not snapshot_dir
        cluster_check.add_to(results, cordon_unhealthy, live_health)
    report = verify_report(results)
    if fmt == "json":
        emit_json(report)
    else:
        pools = {p.name: p.mode for p in cluster.hosts}
        node_names = cluster_check.node_names() if cluster_check is not None else {}
        click.echo(report_text(results, pools, node_names))
    sys.exit(EXIT_OK if report["ok"] else EXIT_DRIFT)


def _with_canaries(
    loaded: Any, cluster: Any, kubeconfig: str, health: bool
) -> dict[str, list[Finding]]:
    """Verify's live read-back with the canaries running: the pods first, then the single
    probe round trip (with the kubelet's pod-resources) while they run, then their deletion,
    then each host's canary findings after its others."""
    from gpuprov.controller.kube.canary import CanaryRun
    from gpuprov.core.checks import probe_document

    run = CanaryRun(kubeconfig, cluster)
    documents: dict[str, dict[str, Any]] = {}
    with run:
        outcomes = run.wait()
        results = readback.verify_live(
            loaded, cluster.hosts, health, pod_resources=True, documents=documents
        )
    probes = {}
    for plan in cluster.hosts:
        agent, python = plan.agent.gpuprov_agent_path, plan.agent.gpuprov_python
        probes[plan.name] = probe_document.read(plan.name, documents.get(plan.name), agent, python)[
            0
        ]
    for host, found in run.findings(outcomes, probes).items():
        results.setdefault(host, []).extend(found)
    return results


def report_text(
    results: Mapping[str, list[Finding]],
    pools: Mapping[str, str],
    node_names: Mapping[str, str] | None = None,
) -> str:
    """The table of findings shown per host, then each finding repeated across a pool as one
    line with its hint, then (when there are repeats) a line per pool, then the summary.

    >>> print(report_text({"a": []}, {"a": "mig"}))
    1 host: 1 ok, 0 drift, 0 unreachable
    """
    singles, repeats = pooled(results, pools, node_names)
    parts = []
    if singles:
        parts.append(table([_row(f) for f in singles], list(_WIDTHS)) + "\n")
    if repeats:
        parts += [_repeat_lines(r) for r in repeats]
        parts.append("")
        for pool, counts in pool_counts(results, pools).items():
            states = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
            hosts = sum(counts.values())
            parts.append(f"pool {one_line(pool)}, {hosts} host{'s' * (hosts != 1)}: {states}")
    parts.append(hosts_summary(results))
    return "\n".join(parts)


def _repeat_lines(repeat: Repeat) -> str:
    indent = " " * 4
    fill = functools.partial(
        textwrap.fill, width=_LINE, subsequent_indent=indent, break_on_hyphens=False
    )
    hint = fill(f"hint: {one_line(repeat.hint)}", initial_indent=indent)
    return fill(one_line(repeat.line())) + "\n" + hint


def verify_report(results: Mapping[str, list[Finding]]) -> dict[str, Any]:
    """The ``gpuprov verify --format json`` document for ``{host: findings}``.

    >>> verify_report({"gpu-1": []})
    {'schema': 'gpuprov.verify/v1', 'hosts': [{'name': 'gpu-1', 'status': 'ok', 'findings': []}], 'ok': True}
    """
    hosts = [
        {"name": name, "status": host_status(findings), "findings": [f.as_dict() for f in findings]}
        for name, findings in results.items()
    ]
    return {"schema": VERIFY_SCHEMA, "hosts": hosts, "ok": all(h["status"] == "ok" for h in hosts)}


def hosts_summary(results: Mapping[str, list[Finding]]) -> str:
    """One line saying how many hosts are in each state, naming those that are not ok."""
    by_status: dict[str, list[str]] = {status: [] for status in STATUSES}
    for name, findings in results.items():
        by_status[host_status(findings)].append(one_line(name))
    parts = []
    for status, names in by_status.items():
        listed = f" ({named(names, _SUMMARY_NAMES)})" if names and status != "ok" else ""
        parts.append(f"{len(names)} {status}{listed}")
    count = len(results)
    return f"{count} host{'s' if count != 1 else ''}: {', '.join(parts)}"


def _row(finding: Finding) -> list[str]:
    cells = {
        "host": finding.host,
        "gpu": "" if finding.gpu is None else str(finding.gpu),
        "check": finding.check,
        "expected": finding.expected,
        "found": finding.found,
        "hint": finding.hint,
    }
    return [
        textwrap.fill(one_line(cells[column]), width, break_on_hyphens=False)
        for column, width in _WIDTHS.items()
    ]
