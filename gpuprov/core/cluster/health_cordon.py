"""Which nodes should be cordoned because a GPU on them is unhealthy, and cordoning them.

``gpuprov verify --kubeconfig`` names each planned node whose host has GPU health findings
(``gpuprov.core.checks.health``) and is still schedulable; ``--cordon-unhealthy`` cordons those
(``kubectl cordon``, which only sets ``spec.unschedulable``) and says so. Nothing here ever
uncordons: bringing a node back after the GPU is serviced is the operator's decision.

>>> unhealthy({"gpu-1": [Finding("gpu-1", 0, "xid", "", "", "")], "gpu-2": []})
['gpu-1']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprov.core.checks import health
from gpuprov.core.cluster.manifests import NodeState
from gpuprov.core.findings import Finding

CHECK = "kube-cordon"
EXPECTED = "cordoned: a GPU on the host is unhealthy"


def unhealthy(results: Mapping[str, Sequence[Finding]]) -> list[str]:
    """The hosts with GPU health findings, in report order."""
    return [
        host for host, found in results.items() if any(f.check in health.FINDINGS for f in found)
    ]


def to_cordon(
    hosts: Sequence[str], wanted: Sequence[NodeState], nodes: Mapping[str, Mapping[str, Any]]
) -> list[NodeState]:
    """The nodes of ``hosts`` that exist and are still schedulable."""
    by_host = {w.host: w for w in wanted}
    return [
        by_host[host]
        for host in hosts
        if host in by_host
        and by_host[host].name in nodes
        and not nodes[by_host[host].name].get("spec", {}).get("unschedulable")
    ]


def hint(want: NodeState) -> Finding:
    """The finding that says ``want``'s node should be cordoned."""
    return _finding(
        want,
        f"node {want.name} is schedulable",
        f"gpuprov verify --cordon-unhealthy (or kubectl cordon {want.name}), then drain it",
    )


def cordoned(want: NodeState) -> Finding:
    """The finding that says gpuprov verify cordoned ``want``'s node just now."""
    return _finding(
        want,
        f"node {want.name} cordoned now (--cordon-unhealthy)",
        f"drain it, service the GPU, verify again, then kubectl uncordon {want.name}",
    )


def kept(want: NodeState) -> Finding:
    """An unhealthy host's node that is already cordoned: it should stay so."""
    return _finding(
        want,
        f"node {want.name} is cordoned (spec.unschedulable)",
        f"keep it cordoned until the GPU is serviced, then kubectl uncordon {want.name}",
    )


def _finding(want: NodeState, found: str, hint_: str) -> Finding:
    return Finding(want.host, None, CHECK, EXPECTED, found, hint_)
