"""Kueue objects from the queue plan: one ResourceFlavor per pool, one ClusterQueue per team,
one LocalQueue per team namespace, at ``kueue.x-k8s.io/v1beta2`` (the storage version since
Kueue v0.16; reference/scheduling.md 1.1), with Kueue's own limits checked before anything is
written.

Pools whose resources overlap (whole cards and HAMi's vGPU both count ``nvidia.com/gpu``) share
one resource group, as Kueue allows a resource in one group only; a flavor lists every resource
of its group, in the group's order, with 0 for one its pool lacks.

>>> objects = render(queue_plan)                                  # doctest: +SKIP
>>> [o["kind"] for o in objects][:2]                              # doctest: +SKIP
['Namespace', 'ResourceFlavor']
"""

from __future__ import annotations

from typing import Any

from gpuprov.core.cluster.queues import Pool, QueuePlan
from gpuprov.core.errors import InputError

API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_OWNER_LABEL = "app.kubernetes.io/managed-by"  # Kubernetes' recommended labels
QUEUE_OWNER = "gpuprov"
# Kueue v1beta2's limits (apis/kueue/v1beta2/*_types.go markers and
# pkg/webhooks/clusterqueue_webhook.go; reference/scheduling.md 1.2, 1.3).
FLAVOR_LABELS_MAX = 8
FLAVOR_TAINTS_MAX = 8
FLAVOR_TOLERATIONS_MAX = 8
RESOURCE_GROUPS_MAX = 16
GROUP_RESOURCES_MAX = 64
GROUP_FLAVORS_MAX = 64
TOTAL_FLAVORS_MAX = 256
TOTAL_RESOURCES_MAX = 256
GROUP_COMBINATIONS_MAX = 512
_NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


def flavor_name(pool: str) -> str:
    """A pool's ResourceFlavor (a DNS subdomain: ``whole_card`` -> ``whole-card``).

    >>> flavor_name("whole_card")
    'whole-card'
    """
    return pool.replace("_", "-")


def render(plan: QueuePlan) -> list[dict[str, Any]]:
    """The Namespaces, ResourceFlavors, ClusterQueues and LocalQueues of ``plan``; InputError
    naming the Kueue limit a plan would break (nested teams are Volcano's)."""
    nested = [q.team for q in plan.queues if q.parent]
    if nested:
        raise InputError(
            [
                plan.problem(
                    f"team {nested[0]} has a parent: nested teams are Volcano queues "
                    "(--queues volcano); Kueue teams share through a cohort"
                )
            ]
        )
    groups = resource_groups(plan.pools)
    flavors = [_flavor(p) for p in plan.pools]
    queues = [_cluster_queue(plan, q.team, groups) for q in plan.queues]
    problems = [plan.problem(why) for o in flavors + queues for why in limit_problems(o)]
    if problems:
        raise InputError(problems)
    namespaces = sorted({n for q in plan.queues for n in q.namespaces})
    local = [
        _object("LocalQueue", q.team, {"clusterQueue": q.team}, namespace)
        for q in plan.queues
        for namespace in q.namespaces
    ]
    return [*map(_namespace, namespaces), *flavors, *queues, *local]


def resource_groups(pools: tuple[Pool, ...]) -> list[tuple[list[str], list[Pool]]]:
    """(covered resources, pools) per resource group: pools sharing a resource name join one."""
    groups: list[tuple[set[str], list[Pool]]] = []
    for pool in pools:
        names = set(pool.capacity)
        joined = [g for g in groups if g[0] & names]
        merged = (names.union(*(g[0] for g in joined)), [p for g in joined for p in g[1]] + [pool])
        groups = [g for g in groups if g not in joined] + [merged]
    return [(sorted(names), members) for names, members in groups]


def limit_problems(document: dict[str, Any]) -> list[str]:
    """Each of Kueue's limits that a ResourceFlavor or ClusterQueue breaks, named.

    >>> limit_problems({"kind": "ResourceFlavor", "metadata": {"name": "f"},
    ...                 "spec": {"nodeLabels": {str(i): "x" for i in range(9)}}})
    ["ResourceFlavor f: 9 nodeLabels, above Kueue's limit of 8"]
    """
    name, spec = f"{document['kind']} {document['metadata']['name']}", document["spec"]
    if document["kind"] == "ResourceFlavor":
        sizes = (
            ("nodeLabels", FLAVOR_LABELS_MAX),
            ("nodeTaints", FLAVOR_TAINTS_MAX),
            ("tolerations", FLAVOR_TOLERATIONS_MAX),
        )
        return [
            f"{name}: {len(spec[k])} {k}, above Kueue's limit of {most}"
            for k, most in sizes
            if len(spec.get(k, ())) > most
        ]
    out = []
    groups = spec["resourceGroups"]
    if len(groups) > RESOURCE_GROUPS_MAX:
        out.append(
            f"{name}: {len(groups)} resource groups, above Kueue's limit of {RESOURCE_GROUPS_MAX}"
        )
    covered = [r for g in groups for r in g["coveredResources"]]
    flavors = [f["name"] for g in groups for f in g["flavors"]]
    for what, items, most in (
        ("covered resources", covered, TOTAL_RESOURCES_MAX),
        ("flavors", flavors, TOTAL_FLAVORS_MAX),
    ):
        if len(items) > most:
            out.append(f"{name}: {len(items)} {what} in all groups, above Kueue's limit of {most}")
        repeated = sorted({i for i in items if items.count(i) > 1})
        if repeated:
            out.append(f"{name}: {what} {', '.join(repeated)} in more than one resource group")
    for group in groups:
        resources = group["coveredResources"]
        if not 1 <= len(resources) <= GROUP_RESOURCES_MAX:
            out.append(f"{name}: a resource group covers {len(resources)} resources (1 to 64)")
        if not 1 <= len(group["flavors"]) <= GROUP_FLAVORS_MAX:
            out.append(f"{name}: a resource group has {len(group['flavors'])} flavors (1 to 64)")
        if len(resources) * len(group["flavors"]) > GROUP_COMBINATIONS_MAX:
            out.append(f"{name}: a resource group has more than 512 flavor x resource quotas")
        for flavor in group["flavors"]:
            listed = [r["name"] for r in flavor["resources"]]
            if listed != resources:
                # "Each flavor MUST list all the resources listed for this group in the same
                # order" (clusterqueue_types.go); the webhook: "must match the name in
                # coveredResources".
                out.append(
                    f"{name}: flavor {flavor['name']} lists {', '.join(listed)}; Kueue needs "
                    f"the group's covered resources in order: {', '.join(resources)}"
                )
    return out


def _object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {QUEUE_OWNER_LABEL: QUEUE_OWNER}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def _namespace(name: str) -> dict[str, Any]:
    """A team's namespace, so its LocalQueue has one (server-side apply keeps others' fields)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _flavor(pool: Pool) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(pool.labels)}
    if pool.taints:
        spec["nodeTaints"] = [t.as_api() for t in pool.taints]
        # Kueue adds these to the pods it admits to the flavor, so a team's Job needs none.
        spec["tolerations"] = [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            if t.value
            else {"key": t.key, "operator": "Exists", "effect": t.effect}
            for t in pool.taints
        ]
    return _object("ResourceFlavor", flavor_name(pool.name), spec)


def _cluster_queue(
    plan: QueuePlan, team: str, groups: list[tuple[list[str], list[Pool]]]
) -> dict[str, Any]:
    queue = plan.queue(team)
    resource_groups = []
    for resources, pools in groups:
        flavors = []
        for pool in pools:
            rows = []
            for resource in resources:
                row: dict[str, Any] = {
                    "name": resource,
                    "nominalQuota": str(queue.quota.get(pool.name, {}).get(resource, 0)),
                }
                for key, limits in (
                    ("borrowingLimit", queue.borrowing_limit),
                    ("lendingLimit", queue.lending_limit),
                ):
                    if limits is not None and resource in limits.get(pool.name, {}):
                        row[key] = str(limits[pool.name][resource])
                rows.append(row)
            flavors.append({"name": flavor_name(pool.name), "resources": rows})
        resource_groups.append({"coveredResources": resources, "flavors": flavors})
    spec: dict[str, Any] = {}
    if queue.cohort:
        spec["cohortName"] = queue.cohort
    spec["namespaceSelector"] = {
        "matchExpressions": [
            {"key": _NAMESPACE_LABEL, "operator": "In", "values": list(queue.namespaces)}
        ]
    }
    spec["resourceGroups"] = resource_groups
    if queue.weight is not None:
        spec["fairSharing"] = {"weight": queue.weight}
    return _object("ClusterQueue", team, spec)
