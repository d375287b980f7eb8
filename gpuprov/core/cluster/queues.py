"""The teams' queues against the plan's pools: every share as a number, checked at plan time.

A pool is the hosts of one mode group; its capacity is what the plan says its nodes advertise
to the scheduler that counts them (``HostPlan.resources``; a vgpu host's ``Vgpu.advertised``).
``plan_queues`` reads ``kube_queues`` once, from the inventory's top group, and refuses (exit 2)
a share of a pool with no host or of a resource the pool lacks, a lending limit or guarantee
above the quota, children above their parent, and quotas that sum past a pool's capacity (times
``kube_queues_overcommit``), naming the pool, the resource and the sum: neither Kueue nor
Volcano compares a quota with the nodes (reference/scheduling.md 1.3, 1.5 step 4).

>>> queues = plan_queues(inventory, cluster)                      # doctest: +SKIP
>>> queues.queue("team-a").quota["shared"]                        # doctest: +SKIP
{'nvidia.com/gpu.shared': 32}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import PurePath

from gpuprov.core import queues as spec_
from gpuprov.core.cluster.pools import Taint, pool_labels, pool_taints
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.inventory_data import InventoryData
from gpuprov.core.plan import ClusterPlan, HostPlan

KEYS = ("kube_queues", "kube_queues_overcommit", "kube_queues_volcano_plugin")
# Volcano's webhook refuses a queue deeper than --max-queue-depth, 5 by default
# (cmd/webhook-manager/app/options/options.go; reference/volcano-suc.md); root is one level.
DEPTH_MAX = 4

Quota = dict[str, dict[str, int]]  # pool -> resource -> count


@dataclass(frozen=True)
class Pool:
    """One mode group's nodes as a scheduler sees them."""

    name: str
    hosts: tuple[str, ...]
    capacity: dict[str, int]  # resource -> count over the pool's hosts
    labels: dict[str, str]
    taints: tuple[Taint, ...]


@dataclass(frozen=True)
class Queue:
    """One team's queue, every share a number of the pool's resources."""

    team: str
    quota: Quota
    borrowing_limit: Quota | None  # None: borrow without limit (within a cohort)
    lending_limit: Quota | None  # None: lend all that is idle
    guarantee: Quota
    cohort: str | None
    parent: str | None
    namespaces: tuple[str, ...]
    weight: int | None
    priority: int | None


@dataclass(frozen=True)
class QueuePlan:
    inventory: str
    source: str  # where kube_queues was set: "group all, group_data/all.py"
    pools: tuple[Pool, ...]
    queues: tuple[Queue, ...]
    volcano_plugin: str

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)

    def queue(self, team: str) -> Queue:
        return next(q for q in self.queues if q.team == team)

    def children(self, team: str | None) -> tuple[Queue, ...]:
        return tuple(q for q in self.queues if q.parent == team)

    def problem(self, message: str, key: str = "kube_queues") -> Problem:
        return Problem(self.inventory, message, source=self.source, key=key)


def top_groups(inventory: InventoryData) -> tuple[str, ...]:
    """The groups every host is in: ``all``, and the one pyinfra names after the inventory file."""
    return ("all", PurePath(inventory.path).stem)


def plan_queues(inventory: InventoryData, cluster: ClusterPlan) -> QueuePlan | None:
    """The teams' queues of ``inventory`` over ``cluster``'s pools, or None without teams;
    InputError naming each problem. ``cluster`` must be the whole inventory's plan (a limited
    plan has a smaller capacity)."""
    problems = _misplaced(inventory)
    if problems:
        raise InputError(problems)
    data = cluster.hosts[0].queues
    tops = top_groups(inventory)
    where = next(
        (g for g in reversed(tops) if any(k in inventory.group_data.get(g, {}) for k in KEYS)),
        "all",
    )
    source = inventory.describe_group(where)
    teams = spec_.teams(data.kube_queues)
    if not teams:
        return None
    pools = _pools(cluster, inventory.path, problems)
    plan = QueuePlan(
        inventory.path, source, tuple(pools.values()), (), data.kube_queues_volcano_plugin
    )
    queues = tuple(_queue(plan, t, problems) for t in teams)
    plan = QueuePlan(plan.inventory, source, plan.pools, queues, plan.volcano_plugin)
    overcommit = data.kube_queues_overcommit
    for pool in overcommit:
        if pool not in pools:
            problems.append(plan.problem(_no_pool(pool), key="kube_queues_overcommit"))
    if not problems:
        problems += _sums(plan, overcommit)
        problems += _nesting(plan)
    if problems:
        raise InputError(problems)
    return plan


def _misplaced(inventory: InventoryData) -> list[Problem]:
    """The queue keys describe the whole cluster: set in a mode group or a host, they would
    give one pool its own idea of every team's share."""
    tops = top_groups(inventory)
    problems = []
    for group, data in inventory.group_data.items():
        for key in KEYS:
            if key in data and group not in tops:
                problems.append(
                    Problem(
                        inventory.path,
                        f"set it in the inventory's top group ({' or '.join(tops)}) only: the "
                        "teams share the whole cluster",
                        source=inventory.describe_group(group),
                        key=key,
                    )
                )
    for host in inventory.hosts:
        for key in KEYS:
            if key in host.host_data:
                problems.append(
                    Problem(
                        inventory.path,
                        f"set it in the inventory's top group ({' or '.join(tops)}) only, not "
                        "per host",
                        host=host.name,
                        source="host data",
                        key=key,
                    )
                )
    return problems


def _pools(cluster: ClusterPlan, path: str, problems: list[Problem]) -> dict[str, Pool]:
    by_mode: dict[str, list[HostPlan]] = {}
    for host in cluster.hosts:
        by_mode.setdefault(host.mode, []).append(host)
    pools = {}
    for mode, hosts in by_mode.items():
        capacity: Counter[str] = Counter()
        for host in hosts:
            capacity.update(host.vgpu.advertised if host.vgpu else host.resources)
        labels, taints = pool_labels(hosts[0]), pool_taints(hosts[0])
        for host in hosts[1:]:
            if pool_labels(host) != labels or pool_taints(host) != taints:
                # A flavor selects a pool's nodes by one set of labels and taints.
                problems.append(
                    Problem(
                        path,
                        f"pool {mode}: hosts {hosts[0].name} and {host.name} differ in their "
                        "kube_node_labels or kube_node_taints; a queue's flavor selects one "
                        "pool by one set of them",
                        host=host.name,
                        key="kube_node_labels",
                    )
                )
                break
        pools[mode] = Pool(
            mode, tuple(h.name for h in hosts), dict(sorted(capacity.items())), labels, taints
        )
    return pools


def _no_pool(pool: str) -> str:
    return f"pool {pool} has no host in this inventory"


def _queue(plan: QueuePlan, team: spec_.TeamSpec, problems: list[Problem]) -> Queue:
    def counts(key: str, shares: tuple[spec_.Share, ...] | None) -> Quota | None:
        if shares is None:
            return None
        out: Quota = {}
        for share in shares:
            where = f"team {team.name}: {key}: {share.pool}"
            if share.pool not in {p.name for p in plan.pools}:
                # A fraction of a mode group with no host left (its last host re-grouped) is
                # nothing to hand out: the queue keeps no quota there, and verify --kubeconfig
                # names a live queue still above the live capacity. A count cannot be met.
                if not isinstance(share.amount, float):
                    problems.append(plan.problem(f"{where}: {_no_pool(share.pool)}"))
                continue
            capacity = plan.pool(share.pool).capacity
            if share.resource is None:
                if isinstance(share.amount, int) and len(capacity) > 1:
                    problems.append(
                        plan.problem(
                            f"{where}: a count needs its resource (the pool has "
                            f"{', '.join(capacity)}): write {{RESOURCE: count}} or a fraction"
                        )
                    )
                    continue
                for resource, total in capacity.items():
                    # A resource the team names itself wins over the pool-wide share.
                    out.setdefault(share.pool, {}).setdefault(resource, share.of(total))
            elif share.resource not in capacity:
                problems.append(
                    plan.problem(
                        f"{where}: the pool has no {share.resource} (it has {', '.join(capacity)})"
                    )
                )
            else:
                out.setdefault(share.pool, {})[share.resource] = share.of(capacity[share.resource])
        return out

    quota = counts("quota", team.quota) or {}
    lending = counts("lending_limit", team.lending_limit)
    guarantee = counts("guarantee", team.guarantee) or {}
    for key, limited in (("lending_limit", lending or {}), ("guarantee", guarantee)):
        for pool, resource, count in _rows(limited):
            nominal = quota.get(pool, {}).get(resource, 0)
            if count > nominal:
                # Kueue: lendingLimit <= nominalQuota (clusterqueue_webhook.go); Volcano:
                # deserved >= guarantee (validate_queue.go; reference/scheduling.md 1.3, 1.4).
                problems.append(
                    plan.problem(
                        f"team {team.name}: {key}: {pool}: {resource} {count} is above the "
                        f"team's quota {nominal}"
                    )
                )
    return Queue(
        team.name,
        quota,
        counts("borrowing_limit", team.borrowing_limit),
        lending,
        guarantee,
        team.cohort,
        team.parent,
        team.namespaces,
        team.weight,
        team.priority,
    )


def _rows(quota: Quota) -> list[tuple[str, str, int]]:
    return [(pool, r, n) for pool, counts in quota.items() for r, n in counts.items()]


def _sums(plan: QueuePlan, overcommit: dict[str, float]) -> list[Problem]:
    """The top-level teams' quotas within each pool's capacity (nested teams share their
    parent's, checked by ``_nesting``)."""
    problems = []
    for pool in plan.pools:
        factor = overcommit.get(pool.name, 1)
        for resource, capacity in pool.capacity.items():
            parts = {
                q.team: n
                for q in plan.children(None)
                if (n := q.quota.get(pool.name, {}).get(resource, 0))
            }
            total = sum(parts.values())
            allowed = int(capacity * factor)
            if total > allowed:
                each = ", ".join(f"{t} {n}" for t, n in parts.items())
                over = f" x overcommit {factor} = {allowed}" if factor != 1 else ""
                problems.append(
                    plan.problem(
                        f"pool {pool.name}: {resource}: the teams' quotas sum to {total} "
                        f"({each}), above the pool's capacity {capacity}{over} "
                        f"({len(pool.hosts)} host{'s' if len(pool.hosts) != 1 else ''}); lower a share or set "
                        "kube_queues_overcommit"
                    )
                )
    return problems


def _nesting(plan: QueuePlan) -> list[Problem]:
    """Volcano's hierarchy rules at plan time: the children's quotas and guarantees within
    their parent's, and no deeper than Volcano's webhook allows."""
    problems = []
    for parent in plan.queues:
        children = plan.children(parent.team)
        for key in ("quota", "guarantee"):
            total: Counter[tuple[str, str]] = Counter()
            for child in children:
                total.update({(p, r): n for p, r, n in _rows(getattr(child, key))})
            for (pool, resource), count in total.items():
                own = getattr(parent, key).get(pool, {}).get(resource, 0)
                if count > own:
                    problems.append(
                        plan.problem(
                            f"team {parent.team}: its children's {key} of {pool} {resource} "
                            f"sums to {count}, above its own {own}"
                        )
                    )
        depth, queue = 1, parent
        while queue.parent is not None:
            depth, queue = depth + 1, plan.queue(queue.parent)
        if depth > DEPTH_MAX:
            problems.append(
                plan.problem(
                    f"team {parent.team}: {depth} levels of parents deep; Volcano allows "
                    f"{DEPTH_MAX} below its root queue"
                )
            )
    return problems
