"""The proposal: which hosts go to which mode group with which data, and where every observed
workload would run.

1. Workloads that need whole cards (several GPUs at once, more than half a card's memory, or
   more compute than a shared GPU may carry) get whole GPUs in ``whole_card``, a multi-GPU job
   all of its GPUs on one host, preferably the host it ran on.
2. The others are packed onto shared GPUs, MIG instances, or both, first fit decreasing, each
   way tried on the hosts left, and the way that needs the fewest GPUs wins (a tie goes to
   MIG's hardware isolation):
   - ``shared``: per host the most replicas whose even share (``memory_per_share_gib``) still
     holds the largest workload placed there; MPS instead of time-slicing where the compute of
     the workloads sharing a GPU is the constraint (at once they use at least half the compute
     limit) and MPS's per-client thread cap (100 / replicas %) leaves each its high percentile;
   - ``mig``: per workload the smallest profile whose memory holds its demand and whose slices
     carry its compute, packed onto GPUs while the exact solver says the layout fits;
   - both: each workload where it costs the smaller share of a GPU.
3. Hosts nothing needs stay whole cards, marked free.

>>> proposal = propose(usage, Sizing())          # doctest: +SKIP
>>> proposal.gpus_used, [h.mode for h in proposal.hosts][:3]   # doctest: +SKIP
(62, ['whole_card', 'whole_card', 'whole_card'])
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gpuprov.core import catalog
from gpuprov.core.advise.demand import Demand, Sizing, replicas_for, share_gib, share_mib, size
from gpuprov.core.advise.packing import (
    EPSILON,
    Gpu,
    MigGpu,
    Placement,
    SharedGpu,
    WholeGpu,
    _peak,
    place_whole,
)
from gpuprov.core.advise.usage import Usage
from gpuprov.core.memory_budget import MIB_PER_GIB, mps_limit_mib
from gpuprov.host.contract import SHARING_MPS, SHARING_TIME_SLICING

SHARE_AUTO, SHARE_SHARED, SHARE_MIG = "auto", "shared", "mig"
STRATEGY_AUTO = "auto"
# A shared GPU whose workloads use at least this share of the compute limit at once has
# compute as its constraint: MPS runs them side by side where time-slicing takes turns.
MPS_COMPUTE_SHARE = 0.5


@dataclass
class ProposedHost:
    """One host of the proposal. ``free``: no observed workload needs it."""

    name: str
    gpu_count: int
    mode: str  # shared | mig | whole_card
    gpus: list[Gpu]
    replicas: int = 0
    share_gib: float = 0.0
    strategy: str = ""
    free: bool = False

    @property
    def gpus_used(self) -> int:
        return sum(1 for g in self.gpus if g.placed)

    def as_dict(self) -> dict:
        out = {
            "name": self.name,
            "mode": self.mode,
            "gpu_count": self.gpu_count,
            "gpus_used": self.gpus_used,
            "free": self.free,
        }
        if self.mode == "shared":
            out |= {
                "replicas": self.replicas,
                "memory_per_share_gib": self.share_gib,
                "sharing_strategy": self.strategy,
            }
        if self.mode == "mig":
            out["mig_layouts"] = {str(g.index): g.layout() for g in self.gpus}
        return out


@dataclass(frozen=True)
class Unplaced:
    demand: Demand
    reason: str

    def as_dict(self) -> dict:
        return {"workload": self.demand.name, "reason": self.reason}


@dataclass
class Proposal:
    model: catalog.GpuModel
    sizing: Sizing
    demands: list[Demand]
    hosts: list[ProposedHost]
    placements: list[Placement]
    unplaced: list[Unplaced]
    shared_with: str  # which way the shareable workloads went: shared, mig, or both
    considered: dict[str, int] = field(default_factory=dict)  # way -> GPUs it needed

    @property
    def gpus_used(self) -> int:
        return sum(h.gpus_used for h in self.hosts)

    def gpus_in(self, mode: str) -> int:
        return sum(h.gpus_used for h in self.hosts if h.mode == mode and not h.free)


class _Pool:
    """The hosts not given a mode yet, in the order they are handed out."""

    def __init__(self, hosts: dict[str, int]):
        self.hosts = dict(hosts)

    def take(self, gpus: int = 1, prefer: str = "") -> tuple[str, int] | None:
        if prefer in self.hosts and self.hosts[prefer] >= gpus:
            return prefer, self.hosts.pop(prefer)
        name = next((h for h, n in self.hosts.items() if n >= gpus), None)
        return (name, self.hosts.pop(name)) if name is not None else None

    def copy(self) -> _Pool:
        return _Pool(self.hosts)


def propose(
    usage: Usage,
    sizing: Sizing,
    share_with: str = SHARE_AUTO,
    strategy: str = STRATEGY_AUTO,
    hosts: dict[str, int] | None = None,
) -> Proposal:
    """The proposal for ``usage`` on its hosts (or on ``hosts``: name -> GPU count)."""
    model = usage.model
    demands = [size(w, model, sizing) for w in usage.workloads]
    pool = _Pool(_hosts_by_fit(hosts or usage.hosts, demands))
    whole = [d for d in demands if d.whole]
    shareable = [d for d in demands if not d.whole]
    proposed, placements, unplaced = _pack_whole(whole, pool, model)

    ways = {SHARE_SHARED: lambda: _pack_ways(shareable, pool.copy(), model, sizing, "shared")}
    if model.mig_capable and share_with in (SHARE_AUTO, SHARE_MIG):
        ways[SHARE_MIG] = lambda: _pack_ways(shareable, pool.copy(), model, sizing, "mig")
        if share_with == SHARE_AUTO:
            ways["both"] = lambda: _pack_ways(shareable, pool.copy(), model, sizing, "both")
    if share_with == SHARE_MIG and model.mig_capable:
        ways.pop(SHARE_SHARED)
    results = {name: way() for name, way in ways.items()}
    considered = {name: sum(h.gpus_used for h in r[0]) for name, r in results.items()}

    def score(name: str) -> tuple:
        hosts_, placed, lost = results[name]
        mig = sum(1 for p in placed if p.slot not in ("share", "whole"))
        return (len(lost), considered[name], -mig, len(hosts_))

    best = min(results, key=score)
    hosts_, placed, lost = results[best]
    used_hosts = {h.name for h in hosts_}
    proposed += hosts_
    placements += placed
    unplaced += lost
    for name, count in pool.hosts.items():
        if name not in used_hosts:
            gpus = [WholeGpu(name, i, model.memory_mib) for i in range(count)]
            proposed.append(ProposedHost(name, count, "whole_card", gpus, free=True))
    for host in proposed:
        if host.mode == "shared":
            _finish_shared(host, model, sizing, strategy)
        elif host.mode == "mig":
            for gpu in host.gpus:
                if gpu.instances:
                    gpu.solved()
    order = {"whole_card": 0, "shared": 1, "mig": 2}
    proposed.sort(key=lambda h: (h.free, order[h.mode], h.name))
    return Proposal(model, sizing, demands, proposed, placements, unplaced, best, considered)


def _hosts_by_fit(hosts: dict[str, int], demands: list[Demand]) -> dict[str, int]:
    """Hosts in the order they are handed out: those that ran whole-card workloads first
    (they keep them: fewer moves), then by name."""
    whole_on = Counter(d.host for d in demands if d.whole for _ in range(d.gpus))
    return dict(sorted(hosts.items(), key=lambda kv: (-whole_on[kv[0]], kv[0])))


def _pack_whole(
    whole: list[Demand], pool: _Pool, model: catalog.GpuModel
) -> tuple[list[ProposedHost], list[Placement], list[Unplaced]]:
    hosts: list[ProposedHost] = []
    placements: list[Placement] = []
    unplaced: list[Unplaced] = []
    largest = max(pool.hosts.values(), default=0)
    for demand in sorted(whole, key=lambda d: (-d.gpus, -d.memory_mib, d.name)):
        if demand.gpus > largest:
            unplaced.append(
                Unplaced(demand, f"needs {demand.gpus} GPUs on one host; hosts have {largest}")
            )
            continue
        placement = next((p for h in hosts if (p := place_whole(demand, h.gpus)) is not None), None)
        if placement is None:
            taken = pool.take(demand.gpus, prefer=demand.host)
            if taken is None:
                unplaced.append(Unplaced(demand, "no host left for it in the pool"))
                continue
            name, count = taken
            host = ProposedHost(
                name,
                count,
                "whole_card",
                [WholeGpu(name, i, model.memory_mib) for i in range(count)],
            )
            hosts.append(host)
            placement = place_whole(demand, host.gpus)
            assert placement is not None
        placements.append(placement)
    return hosts, placements, unplaced


def mig_profile(
    demand: Demand, model: catalog.GpuModel, compute_limit: float
) -> catalog.MigProfile | None:
    """The smallest MIG profile (not a whole-GPU one, not a media-engine one) that holds the
    demand's memory and carries its compute; None when none does."""
    candidates = [
        p
        for p in model.profiles
        if "+" not in p.name
        and p.memory_slices < model.memory_slots
        and p.memory_mib >= demand.memory_mib
        and demand.compute <= p.compute_slices / model.compute_slices * compute_limit + EPSILON
    ]
    return min(
        candidates, key=lambda p: (p.memory_slices, p.compute_slices, p.memory_mib), default=None
    )


def _cost_shared(demand: Demand, model: catalog.GpuModel, limit: float) -> float:
    replicas = replicas_for(demand.memory_mib, model.memory_mib) or 1
    return max(1 / replicas, demand.compute / limit)


def _cost_mig(profile: catalog.MigProfile, model: catalog.GpuModel) -> float:
    return max(
        profile.memory_slices / model.memory_slots, profile.compute_slices / model.compute_slices
    )


def _pack_ways(
    shareable: list[Demand], pool: _Pool, model: catalog.GpuModel, sizing: Sizing, way: str
) -> tuple[list[ProposedHost], list[Placement], list[Unplaced]]:
    limit = sizing.compute_limit
    to_mig: list[tuple[Demand, catalog.MigProfile]] = []
    to_shared: list[Demand] = []
    for demand in shareable:
        profile = mig_profile(demand, model, limit) if way != "shared" else None
        if profile is not None and (
            way == "mig" or _cost_mig(profile, model) <= _cost_shared(demand, model, limit)
        ):
            to_mig.append((demand, profile))
        else:
            to_shared.append(demand)
    hosts, placements, unplaced = _pack_mig(to_mig, pool, model, limit)
    more = _pack_shared(to_shared, pool, model, limit)
    return hosts + more[0], placements + more[1], unplaced + more[2]


def _pack_shared(
    demands: list[Demand], pool: _Pool, model: catalog.GpuModel, limit: float
) -> tuple[list[ProposedHost], list[Placement], list[Unplaced]]:
    hosts: list[ProposedHost] = []
    placements: list[Placement] = []
    unplaced: list[Unplaced] = []
    for demand in sorted(demands, key=lambda d: (-d.memory_mib, -d.compute, d.name)):
        gpu = next((g for h in hosts for g in h.gpus if g.fits(demand)), None)
        if gpu is None:
            replicas = replicas_for(demand.memory_mib, model.memory_mib)
            taken = pool.take()
            if taken is None or replicas is None:
                unplaced.append(Unplaced(demand, "no host left for it in the pool"))
                continue
            name, count = taken
            gpus = [
                SharedGpu(name, i, replicas, share_mib(model.memory_mib, replicas), limit)
                for i in range(count)
            ]
            hosts.append(ProposedHost(name, count, "shared", gpus, replicas=replicas))
            gpu = gpus[0]
        placements.append(Placement(demand, gpu.host, (gpu.index,), gpu.place(demand)))
    return hosts, placements, unplaced


def _pack_mig(
    demands: list[tuple[Demand, catalog.MigProfile]],
    pool: _Pool,
    model: catalog.GpuModel,
    limit: float,
) -> tuple[list[ProposedHost], list[Placement], list[Unplaced]]:
    hosts: list[ProposedHost] = []
    placements: list[Placement] = []
    unplaced: list[Unplaced] = []
    ordered = sorted(
        demands,
        key=lambda dp: (-dp[1].memory_slices, -dp[1].compute_slices, -dp[0].memory_mib, dp[0].name),
    )
    for demand, profile in ordered:
        gpus = [g for h in hosts for g in h.gpus]
        # An instance already there first (a workload that ran before or after another), then
        # a new instance on the first GPU whose layout still fits with it.
        gpu = next((g for g in gpus if g.fits(demand)), None) or next(
            (g for g in gpus if g.fits(demand, profile)), None
        )
        if gpu is None:
            taken = pool.take()
            if taken is None:
                unplaced.append(Unplaced(demand, "no host left for it in the pool"))
                continue
            name, count = taken
            new = [MigGpu(name, i, model, limit, growable=True) for i in range(count)]
            hosts.append(ProposedHost(name, count, "mig", new))
            gpu = new[0]
        slot = gpu.place(demand, profile)
        placements.append(Placement(demand, gpu.host, (gpu.index,), slot))
    return hosts, placements, unplaced


def _finish_shared(
    host: ProposedHost, model: catalog.GpuModel, sizing: Sizing, strategy: str
) -> None:
    """The host's replicas: as many as ran at once on its busiest GPU (at least 2), each share
    the memory split evenly; and its strategy."""
    everything = Demand("", 1, 0, 0.0, 0.0, float("-inf"), float("inf"), None, "", None)
    peaks = [_peak(g.placed, everything) for g in host.gpus]
    replicas = max([2] + [count for count, _ in peaks])
    replicas = min(replicas, host.replicas or replicas)
    host.replicas = replicas
    host.share_gib = share_gib(model.memory_mib, replicas)
    for gpu in host.gpus:
        gpu.replicas, gpu.share_mib = replicas, share_mib(model.memory_mib, replicas)
    if strategy != STRATEGY_AUTO:
        host.strategy = strategy
    else:
        busiest = max((compute for _, compute in peaks), default=0.0)
        capped = all(d.compute_high <= 1 / replicas + EPSILON for g in host.gpus for d in g.placed)
        compute_bound = busiest >= MPS_COMPUTE_SHARE * sizing.compute_limit
        host.strategy = SHARING_MPS if compute_bound and capped else SHARING_TIME_SLICING
    if host.strategy == SHARING_MPS:
        # MPS limits each client to memory / replicas whatever the budget says; a budget of
        # exactly that (not rounded) is what the plan shows as enforced, with no warning.
        host.share_gib = mps_limit_mib(model.memory_mib, replicas) / MIB_PER_GIB
