"""`gpuprov verify INVENTORY`: does every host match its plan? Exit 0 yes, 1 no, 2 bad input."""

from __future__ import annotations

import sys
import textwrap

import click

from gpuprov import verify as verify_
from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.cli.plan import limit_option, load_plan
from gpuprov.compare import hosts_summary, verify_report
from gpuprov.contract import EXIT_DRIFT, EXIT_OK
from gpuprov.findings import Finding
from gpuprov.kube.cluster_check import ClusterCheck

# Column widths that keep the six-column table within 100 characters.
_WIDTHS = {"host": 14, "gpu": 3, "check": 17, "expected": 19, "found": 19, "hint": 17}


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
    "allocatable, pods), in one list call.",
)
@bad_input
def verify(
    inventory: str,
    limit: tuple[str, ...],
    fmt: str,
    snapshot_dir: str | None,
    kubeconfig: str | None,
) -> None:
    """Compare every host of INVENTORY with its plan; exit 1 if any drifts or is unreachable."""
    loaded, cluster = load_plan(inventory, limit)
    cluster_check = ClusterCheck(kubeconfig, cluster) if kubeconfig else None
    if snapshot_dir:
        results = verify_.verify_snapshots(snapshot_dir, cluster.hosts)
    else:
        results = verify_.verify_live(loaded, cluster.hosts)
    if cluster_check is not None:
        cluster_check.add_to(results)
    report = verify_report(results)
    if fmt == "json":
        emit_json(report)
    else:
        findings = [f for host_findings in results.values() for f in host_findings]
        if findings:
            click.echo(table([_row(f) for f in findings], list(_WIDTHS)))
            click.echo()
        click.echo(hosts_summary(results))
    sys.exit(EXIT_OK if report["ok"] else EXIT_DRIFT)


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
        textwrap.fill(cells[column], width, break_on_hyphens=False)
        for column, width in _WIDTHS.items()
    ]
