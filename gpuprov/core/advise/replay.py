"""The observed usage replayed on an existing plan: would every workload fit, and how full would
each pool (mode group) be?

Each planned GPU of the usage's model becomes what its host's mode makes it: a ``shared`` GPU
its replicas, each share the memory the plan gives it (the budget, or memory / replicas); a
``vgpu`` GPU its split, each share its budget; a ``mig`` GPU its planned instances; a
``whole_card`` GPU (or a MIG GPU with MIG off) a whole card. Workloads are placed largest
first, each on the tightest slot that holds it (best fit), by the rules of ``packing``; one
that finds none is named with the reason. The placement is a heuristic: a workload it cannot
place might fit in a cleverer one, never the other way round.

>>> result = replay(plan, usage, Sizing())          # doctest: +SKIP
>>> result.fits, [p.as_dict()["slots_peak"] for p in result.pools]   # doctest: +SKIP
(True, [24, 111])
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprov.core import catalog
from gpuprov.core.advise.demand import Demand, Sizing, size
from gpuprov.core.advise.packing import (
    Gpu,
    MigGpu,
    MigInstance,
    Placement,
    SharedGpu,
    WholeGpu,
    place_whole,
)
from gpuprov.core.advise.usage import Usage
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.plan import ClusterPlan, HostPlan


@dataclass(frozen=True)
class PoolFill:
    """How full one mode group would be."""

    mode: str
    hosts: int
    gpus: int
    gpus_used: int
    slots: int
    slots_peak: int  # slots in use at the busiest moment
    memory_peak_percent: float  # workloads' memory at that moment over the pool's

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "hosts": self.hosts,
            "gpus": self.gpus,
            "gpus_used": self.gpus_used,
            "slots": self.slots,
            "slots_peak": self.slots_peak,
            "memory_peak_percent": round(self.memory_peak_percent, 1),
        }


@dataclass(frozen=True)
class Misfit:
    demand: Demand
    reason: str

    def as_dict(self) -> dict:
        return {"workload": self.demand.name, "reason": self.reason}


@dataclass(frozen=True)
class Replay:
    model: catalog.GpuModel
    placements: tuple[Placement, ...]
    misfits: tuple[Misfit, ...]
    pools: tuple[PoolFill, ...]
    other_hosts: tuple[str, ...]  # planned hosts of other GPU models, left out

    @property
    def fits(self) -> bool:
        return not self.misfits


def capacity(host: HostPlan, model: catalog.GpuModel, compute_limit: float) -> list[Gpu]:
    """The GPUs a planned host offers, as packing sees them."""
    gpus: list[Gpu] = []
    for gpu in host.gpus:
        if host.mode == "shared" and host.sharing and host.sharing.memory:
            sharing = host.sharing
            gpus.append(
                SharedGpu(host.name, gpu.index, sharing.replicas, sharing.memory.mib, compute_limit)
            )
        elif host.mode == "vgpu" and host.vgpu and host.vgpu.memory:
            split = host.vgpu.split_count
            if split > 1:
                gpus.append(
                    SharedGpu(host.name, gpu.index, split, host.vgpu.memory.mib, compute_limit)
                )
            else:
                gpus.append(WholeGpu(host.name, gpu.index, model.memory_mib))
        elif host.mode == "mig" and gpu.mig_enabled:
            instances = [
                MigInstance(model.profile(i.profile), start=i.start) for i in gpu.instances
            ]
            gpus.append(MigGpu(host.name, gpu.index, model, compute_limit, instances))
        else:
            gpus.append(WholeGpu(host.name, gpu.index, model.memory_mib))
    return gpus


def replay(plan: ClusterPlan, usage: Usage, sizing: Sizing) -> Replay:
    """Place ``usage``'s workloads on ``plan``'s hosts of the same GPU model."""
    model = usage.model
    hosts = [h for h in plan.hosts if h.gpu_model == model.alias]
    others = tuple(h.name for h in plan.hosts if h.gpu_model != model.alias)
    if not hosts:
        raise InputError(
            [
                Problem(
                    plan.inventory,
                    f"no host of the usage's GPU model {model.alias} in the plan "
                    f"(it has {', '.join(sorted({h.gpu_model for h in plan.hosts}))})",
                )
            ]
        )
    by_host = {h.name: capacity(h, model, sizing.compute_limit) for h in hosts}
    demands = [size(w, model, sizing) for w in usage.workloads]
    placements, misfits = [], []
    for demand in sorted(demands, key=lambda d: (-d.gpus, -d.memory_mib, -d.compute, d.name)):
        placement = _best_fit(demand, by_host)
        if placement is None:
            misfits.append(Misfit(demand, _why(demand, by_host)))
        else:
            placements.append(placement)
    pools = tuple(
        _fill(mode, [h for h in hosts if h.mode == mode], by_host, model)
        for mode in dict.fromkeys(h.mode for h in hosts)
    )
    return Replay(model, tuple(placements), tuple(misfits), pools, others)


def _best_fit(demand: Demand, by_host: dict[str, list[Gpu]]) -> Placement | None:
    if demand.gpus > 1:
        for gpus in by_host.values():
            whole = [g for g in gpus if isinstance(g, WholeGpu)]
            placement = place_whole(demand, whole)
            if placement is not None:
                return placement
        return None
    best: tuple[int, Gpu] | None = None
    for gpus in by_host.values():
        for gpu in gpus:
            if not gpu.fits(demand):
                continue
            room = _room(gpu, demand)
            if best is None or room < best[0]:
                best = (room, gpu)
    if best is None:
        return None
    gpu = best[1]
    return Placement(demand, gpu.host, (gpu.index,), gpu.place(demand))


def _room(gpu: Gpu, demand: Demand) -> int:
    """The memory of the slot ``demand`` would take on ``gpu`` (best fit takes the least)."""
    if isinstance(gpu, SharedGpu):
        return gpu.share_mib
    if isinstance(gpu, MigGpu):
        slot = gpu.slot_for(demand, None)
        return slot.profile.memory_mib if slot else 1 << 62
    return gpu.memory_mib


def _why(demand: Demand, by_host: dict[str, list[Gpu]]) -> str:
    """Why nothing holds ``demand``: no slot could ever, or every one that could is taken."""
    need = f"{demand.memory_mib} MiB" + (
        f" on each of {demand.gpus} GPUs" if demand.gpus > 1 else ""
    )
    if demand.gpus > 1:
        largest = max(
            (sum(1 for g in gpus if isinstance(g, WholeGpu)) for gpus in by_host.values()),
            default=0,
        )
        if largest < demand.gpus:
            return f"needs {demand.gpus} whole GPUs on one host; the plan's hosts have at most {largest}"
        return f"needs {demand.gpus} whole GPUs on one host ({need}): all are taken while it runs"
    could = any(_could_hold(gpu, demand) for gpus in by_host.values() for gpu in gpus)
    if not could:
        return (
            f"needs {need} and {demand.compute:.0%} of a GPU's compute: no share, MIG instance or "
            "whole card of the plan holds that"
        )
    return f"needs {need}: every slot that holds it is taken while it runs"


def _could_hold(gpu: Gpu, demand: Demand) -> bool:
    """Whether ``gpu`` could hold ``demand`` if nothing else ran on it."""
    if isinstance(gpu, SharedGpu):
        return demand.memory_mib <= gpu.share_mib and demand.compute <= gpu.compute_limit
    if isinstance(gpu, MigGpu):
        return any(gpu.eligible(i.profile, demand) for i in gpu.instances)
    return demand.memory_mib <= gpu.memory_mib


def _fill(mode: str, hosts: list[HostPlan], by_host: dict[str, list[Gpu]], model) -> PoolFill:
    gpus = [g for h in hosts for g in by_host[h.name]]
    slots = 0
    for gpu in gpus:
        if isinstance(gpu, SharedGpu):
            slots += gpu.replicas
        elif isinstance(gpu, MigGpu):
            slots += len(gpu.instances)
        else:
            slots += 1
    # Every placement on the pool's GPUs, once per GPU it takes, swept over time.
    events = []
    for gpu in gpus:
        for demand in gpu.placed:
            events.append((demand.start, 0, demand.memory_mib))
            events.append((demand.end, 1, demand.memory_mib))
    busy = most = 0
    memory = most_memory = 0
    for _, kind, mib in sorted(events):
        if kind == 0:
            busy, memory = busy + 1, memory + mib
            if busy > most:
                most, most_memory = busy, memory
        else:
            busy, memory = busy - 1, memory - mib
    total_memory = len(gpus) * model.memory_mib
    return PoolFill(
        mode=mode,
        hosts=len(hosts),
        gpus=len(gpus),
        gpus_used=sum(1 for g in gpus if g.placed),
        slots=slots,
        slots_peak=most,
        memory_peak_percent=100 * most_memory / total_memory if total_memory else 0.0,
    )
