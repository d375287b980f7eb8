"""Volcano Queues from the queue plan (``scheduling.volcano.sh/v1beta1``), and the scheduler
configuration they assume, with Volcano's queue rules checked before anything is written.

Volcano has no pools: a queue's resources count over the whole cluster, so each team's shares
of all pools add up per resource name. ``deserved`` is the team's quota, ``guarantee`` its
guarantee, ``capability`` what it may reach: the quota without a cohort (no borrowing); with
one, quota + ``borrowing_limit`` where it sets one, else the pools' whole capacity; never above
its parent's.
The scheduler runs the ``capacity`` plugin (``deserved``; nested teams need its
``enableHierarchy``) or ``proportion`` (``weight``); Volcano forbids both (its capacity plugin
guide; reference/scheduling.md 1.4).

>>> [q["spec"]["deserved"] for q in render(queue_plan)[:1]]      # doctest: +SKIP
[{'nvidia.com/gpu.shared': '32'}]
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from gpuprov.core.cluster.kueue import QUEUE_OWNER, QUEUE_OWNER_LABEL
from gpuprov.core.cluster.queues import Queue, QueuePlan
from gpuprov.core.errors import InputError
from gpuprov.host.contract import VOLCANO_COUNT_RESOURCE

API_VERSION = "scheduling.volcano.sh/v1beta1"
# The chart's scheduler ConfigMap, which the scheduler reads with --scheduler-conf
# (installer/volcano-development.yaml 9117-9120, 9300; reference/volcano-suc.md).
SCHEDULER_NAMESPACE = "volcano-system"
SCHEDULER_CONFIGMAP = "volcano-scheduler-configmap"
SCHEDULER_CONF_KEY = "volcano-scheduler.conf"


def render(plan: QueuePlan) -> list[dict[str, Any]]:
    """One Queue per team, parents first; InputError naming the Volcano rule one breaks."""
    if plan.volcano_plugin == "proportion":
        nested = [q.team for q in plan.queues if q.parent]
        if nested:
            raise InputError(
                [
                    plan.problem(
                        f"team {nested[0]} has a parent, and nested queues need the capacity "
                        "plugin (enableHierarchy); set kube_queues_volcano_plugin: capacity",
                        key="kube_queues_volcano_plugin",
                    )
                ]
            )
    documents: list[dict[str, Any]] = []
    capabilities: dict[str, dict[str, int]] = {}
    for queue in _parents_first(plan):
        capability = _capability(plan, queue)
        if queue.parent:
            parent = capabilities[queue.parent]
            capability = {r: min(n, parent.get(r, n)) for r, n in capability.items()}
        capabilities[queue.team] = capability
        documents.append(_queue(queue, capability))
    problems = [plan.problem(why) for why in rule_problems(documents)]
    if problems:
        raise InputError(problems)
    return documents


def scheduler_config_map(plan: QueuePlan, vgpu: bool) -> dict[str, Any]:
    """The scheduler configuration the queues assume, as the chart's ConfigMap: Volcano's chart
    configuration (installer/helm/chart/volcano/config/volcano-scheduler.conf) with the
    queue plugin of ``kube_queues_volcano_plugin``; ``vgpu`` adds ``deviceshare`` with
    ``deviceshare.VGPUEnable`` for the volcano-flavoured vgpu pool."""
    first = [
        {"name": "priority"},
        {"name": "gang", "enablePreemptable": False},
        {"name": "conformance"},
    ]
    second: list[dict[str, Any]] = [{"name": "drf", "enablePreemptable": False}]
    second.append({"name": "predicates"})
    if plan.volcano_plugin == "proportion":
        actions = "enqueue, allocate, backfill"
        second.insert(0, {"name": "overcommit"})
        second.append({"name": "proportion"})
    else:
        # The capacity plugin needs reclaim to take back lent `deserved`, and checks a job's
        # minResources at enqueue itself (docs/user-guide/how_to_use_capacity_plugin.md).
        actions = "enqueue, allocate, backfill, reclaim"
        capacity: dict[str, Any] = {"name": "capacity"}
        if any(q.parent for q in plan.queues):
            capacity["enableHierarchy"] = True
        second.append(capacity)
    if vgpu:
        # pkg/scheduler/plugins/deviceshare/deviceshare.go (reference/scheduling.md 1.4).
        second.append({"name": "deviceshare", "arguments": {"deviceshare.VGPUEnable": True}})
    second += [{"name": "nodeorder"}, {"name": "binpack"}]
    conf = {"actions": actions, "tiers": [{"plugins": first}, {"plugins": second}]}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": SCHEDULER_CONFIGMAP,
            "namespace": SCHEDULER_NAMESPACE,
            "labels": {QUEUE_OWNER_LABEL: QUEUE_OWNER},
        },
        "data": {SCHEDULER_CONF_KEY: yaml.safe_dump(conf, sort_keys=False)},
    }


def uses_vgpu(plan: QueuePlan) -> bool:
    """Whether a pool advertises Volcano's vGPU shares (its scheduler then needs deviceshare)."""
    return any(VOLCANO_COUNT_RESOURCE in p.capacity for p in plan.pools)


def rule_problems(documents: list[dict[str, Any]]) -> list[str]:
    """Each of Volcano's Queue rules (pkg/webhooks/admission/queues/validate/validate_queue.go;
    reference/volcano-suc.md) that ``documents`` break: guarantee <= deserved <= capability,
    a guaranteed resource also deserved, the children's guarantee and deserved within their
    parent's, a child's capability within its ancestors'.

    >>> rule_problems([{"metadata": {"name": "a"}, "spec": {"deserved": {"x": "2"},
    ...                 "guarantee": {"resource": {"x": "4"}}}}])
    ['queue a: guarantee x 4 is above deserved 2']
    """
    by_name = {d["metadata"]["name"]: d["spec"] for d in documents}
    out = []
    for name, spec in by_name.items():
        deserved, capability = _ints(spec.get("deserved")), _ints(spec.get("capability"))
        for resource, count in _ints(spec.get("guarantee", {}).get("resource")).items():
            if resource not in deserved:
                out.append(f"queue {name}: guarantee {resource} has no deserved")
            elif count > deserved[resource]:
                out.append(
                    f"queue {name}: guarantee {resource} {count} is above deserved "
                    f"{deserved[resource]}"
                )
        for resource, count in deserved.items():
            if resource in capability and count > capability[resource]:
                out.append(
                    f"queue {name}: deserved {resource} {count} is above capability "
                    f"{capability[resource]}"
                )
        ancestor = spec.get("parent")
        while ancestor in by_name:
            above = _ints(by_name[ancestor].get("capability"))
            for resource, count in capability.items():
                if resource in above and count > above[resource]:
                    out.append(
                        f"queue {name}: capability {resource} {count} is above its ancestor "
                        f"{ancestor}'s {above[resource]}"
                    )
            ancestor = by_name[ancestor].get("parent")
    for parent, spec in by_name.items():
        children = [s for s in by_name.values() if s.get("parent") == parent]
        for field in ("guarantee", "deserved"):
            total: Counter[str] = Counter()
            for child in children:
                total.update(_ints(_field(child, field)))
            own = _ints(_field(spec, field))
            for resource, count in total.items():
                if children and count > own.get(resource, 0):
                    out.append(
                        f"queue {parent}: its children's {field} {resource} sums to {count}, "
                        f"above its own {own.get(resource, 0)}"
                    )
    return out


def _field(spec: dict[str, Any], field: str) -> dict[str, Any] | None:
    return spec.get("guarantee", {}).get("resource") if field == "guarantee" else spec.get(field)


def _ints(resources: dict[str, Any] | None) -> dict[str, int]:
    return {r: int(n) for r, n in (resources or {}).items()}


def _parents_first(plan: QueuePlan) -> list[Queue]:
    out: list[Queue] = []
    level: tuple[Queue, ...] = plan.children(None)
    while level:
        out += level
        level = tuple(c for q in level for c in plan.children(q.team))
    return out


def _flat(quota: dict[str, dict[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for counts in quota.values():
        total.update(counts)
    return dict(sorted(total.items()))


def _capability(plan: QueuePlan, queue: Queue) -> dict[str, int]:
    deserved = _flat(queue.quota)
    whole = _flat({p.name: p.capacity for p in plan.pools})
    if queue.cohort is None:
        return deserved
    # As Kueue's: a resource without a borrowing limit borrows without one.
    borrow = _flat(queue.borrowing_limit or {})
    return {
        r: min(n + borrow[r], whole[r]) if r in borrow else whole[r] for r, n in deserved.items()
    }


def _queue(queue: Queue, capability: dict[str, int]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if queue.weight is not None:
        spec["weight"] = queue.weight
    if queue.priority is not None:
        spec["priority"] = queue.priority
    spec["capability"] = {r: str(n) for r, n in capability.items()}
    spec["deserved"] = {r: str(n) for r, n in _flat(queue.quota).items()}
    if queue.guarantee:
        spec["guarantee"] = {"resource": {r: str(n) for r, n in _flat(queue.guarantee).items()}}
    if queue.parent:
        spec["parent"] = queue.parent
    return {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": queue.team, "labels": {QUEUE_OWNER_LABEL: QUEUE_OWNER}},
        "spec": spec,
    }
