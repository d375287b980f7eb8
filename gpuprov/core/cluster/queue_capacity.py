"""Live queue quotas against the live capacity of the nodes they can use: pure, no I/O.

Neither Kueue nor Volcano compares a quota with the nodes (reference/scheduling.md 1.3): a node
lost, cordoned or moved to another pool leaves the quota as it was, and jobs are admitted that
can never run. ``kueue_findings`` sums gpuprov's ClusterQueues' ``nominalQuota`` per flavor and
resource and compares it with the allocatable of the schedulable nodes that flavor selects
(its ``nodeLabels``); ``volcano_findings`` sums the top-level Queues' ``deserved`` per resource
and compares it, and each queue's ``capability``, with the whole cluster's schedulable nodes
(Volcano queues span every node). Each finding names the queue, the pool and both numbers.

>>> node = {"metadata": {"labels": {"gpuprov.io/pool": "shared"}},
...         "status": {"allocatable": {"nvidia.com/gpu.shared": "32"}}}
>>> live_capacity({"gpuprov.io/pool": "shared"}, {"n1": node})
({'nvidia.com/gpu.shared': 32}, 1)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpuprov.core.cluster.compare import count
from gpuprov.core.findings import Finding
from gpuprov.host.contract import HAMI_CORES_RESOURCE, HAMI_MEMORY_RESOURCE

CHECK = "kube-queues"
# HAMi's scheduler counts GPU memory and cores from its node annotations, not from
# status.allocatable (gpuprov.core.vgpu: a hami host's allocatable is its share count only).
_NOT_ALLOCATABLE = (HAMI_MEMORY_RESOURCE, HAMI_CORES_RESOURCE)


def live_capacity(
    selector: Mapping[str, str], nodes: Mapping[str, dict[str, Any]]
) -> tuple[dict[str, int], int]:
    """(resource -> allocatable summed, node count) over the schedulable nodes carrying every
    label of ``selector``."""
    total: Counter[str] = Counter()
    matched = 0
    for node in nodes.values():
        labels = node.get("metadata", {}).get("labels") or {}
        if node.get("spec", {}).get("unschedulable") or any(
            labels.get(k) != v for k, v in selector.items()
        ):
            continue
        matched += 1
        for resource, quantity in (node.get("status", {}).get("allocatable") or {}).items():
            total[resource] += count(quantity) or 0
    return dict(total), matched


def kueue_findings(
    cluster_queues: list[dict[str, Any]],
    flavors: list[dict[str, Any]],
    nodes: Mapping[str, dict[str, Any]],
) -> dict[str, list[Finding]]:
    """``queue NAME`` -> findings for each ClusterQueue whose flavor's quotas, summed over the
    ClusterQueues given, exceed what the flavor's nodes advertise."""
    selectors = {f["metadata"]["name"]: f.get("spec", {}).get("nodeLabels") or {} for f in flavors}
    shares: dict[tuple[str, str], dict[str, int]] = {}
    for queue in cluster_queues:
        for group in queue.get("spec", {}).get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for row in flavor.get("resources", []):
                    nominal = count(row.get("nominalQuota")) or 0
                    if nominal and row["name"] not in _NOT_ALLOCATABLE:
                        key = (flavor["name"], row["name"])
                        shares.setdefault(key, {})[queue["metadata"]["name"]] = nominal
    out: dict[str, list[Finding]] = {}
    for (flavor, resource), parts in shares.items():
        if flavor not in selectors:
            continue  # Kueue marks the ClusterQueue inactive (FlavorNotFound) itself
        capacity, matched = live_capacity(selectors[flavor], nodes)
        have, total = capacity.get(resource, 0), sum(parts.values())
        if total <= have:
            continue
        labels = ",".join(f"{k}={v}" for k, v in selectors[flavor].items())
        for name in parts:
            out.setdefault(f"queue {name}", []).append(
                _finding(
                    name,
                    f"pool (flavor) {flavor}: {resource} quota within the live capacity",
                    f"{resource}: quota {parts[name]}, the ClusterQueues' quotas sum to {total} "
                    f"({_each(parts)}); live capacity {have} on {matched} schedulable node"
                    f"{'s' * (matched != 1)} with {labels}",
                )
            )
    return out


def volcano_findings(
    queues: list[dict[str, Any]], nodes: Mapping[str, dict[str, Any]]
) -> dict[str, list[Finding]]:
    """``queue NAME`` -> findings for each top-level Queue whose ``deserved``, summed over the
    top-level Queues given, exceeds the cluster's schedulable nodes, and each Queue whose
    ``capability`` alone does."""
    capacity, matched = live_capacity({}, nodes)
    where = f"{matched} schedulable node{'s' * (matched != 1)}"
    deserved: dict[str, dict[str, int]] = {}
    out: dict[str, list[Finding]] = {}
    for queue in queues:
        name, spec = queue["metadata"]["name"], queue.get("spec", {})
        if spec.get("parent") in (None, "", "root"):
            for resource, quantity in (spec.get("deserved") or {}).items():
                if (n := count(quantity) or 0) and resource not in _NOT_ALLOCATABLE:
                    deserved.setdefault(resource, {})[name] = n
        for resource, quantity in (spec.get("capability") or {}).items():
            n, have = count(quantity) or 0, capacity.get(resource, 0)
            if resource not in _NOT_ALLOCATABLE and n > have:
                out.setdefault(f"queue {name}", []).append(
                    _finding(
                        name,
                        f"{resource} capability within the live capacity",
                        f"{resource}: capability {n}; live capacity {have} on {where}",
                    )
                )
    for resource, parts in deserved.items():
        total, have = sum(parts.values()), capacity.get(resource, 0)
        if total > have:
            for name in parts:
                out.setdefault(f"queue {name}", []).append(
                    _finding(
                        name,
                        f"{resource} deserved within the live capacity",
                        f"{resource}: deserved {parts[name]}, the queues' deserved sum to "
                        f"{total} ({_each(parts)}); live capacity {have} on {where}",
                    )
                )
    return out


def _each(parts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in parts.items())


def _finding(queue: str, expected: str, found: str) -> Finding:
    return Finding(
        f"queue {queue}",
        None,
        CHECK,
        expected,
        found,
        "the pool lost, cordoned or re-grouped nodes: change kube_queues and run `gpuprov kube "
        "apply --queues ...` with this inventory, or bring the nodes back",
    )
