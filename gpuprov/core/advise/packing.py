"""Demands placed on GPUs: time-sliced (or MPS) shares, MIG instances, whole cards.

Placement respects time: two workloads that never ran at the same time may use the same share
one after the other (a pod holds its GPU from its first sample to its last). On a shared GPU at
every moment at most ``replicas`` workloads run, each needing at most the share's memory, and
their compute adds up to at most the compute limit. A MIG instance holds one workload at a
time, whose memory fits the instance's and whose compute fits the instance's slices. A whole
GPU holds one workload at a time; a workload of several GPUs takes that many on one host.

The same GPUs serve the proposal (which opens GPUs as it needs them) and the replay (which
places onto the GPUs an inventory's plan has).

>>> from gpuprov.core.advise.demand import Demand
>>> gpu = SharedGpu("n1", 0, replicas=3, share_mib=27300, compute_limit=0.8)
>>> a = Demand("a", 1, 20000, 0.1, 0.2, 0, 100, None, "n1", None)
>>> b = Demand("b", 1, 26000, 0.1, 0.2, 50, 200, None, "n1", None)
>>> gpu.fits(a), gpu.place(a), gpu.fits(b)
(True, 'share', True)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gpuprov.core import catalog
from gpuprov.core.advise.demand import Demand
from gpuprov.core.mig.solver import solve

# Room for float sums: 0.1 + 0.7 is 0.7999999999999999.
EPSILON = 1e-9


def _peak(placed: list[Demand], demand: Demand) -> tuple[int, float]:
    """The most workloads of ``placed`` running at one moment of ``demand``'s time, and the
    most compute they used at one moment."""
    during = [p for p in placed if p.start <= demand.end and demand.start <= p.end]
    if not during:
        return 0, 0.0
    events = []
    for p in during:
        events.append((max(p.start, demand.start), 0, p.compute))
        events.append((min(p.end, demand.end), 1, p.compute))
    count = most = 0
    compute = most_compute = 0.0
    # At one instant a start counts before an end: both workloads were there.
    for _, kind, c in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 0:
            count += 1
            compute += c
            most = max(most, count)
            most_compute = max(most_compute, compute)
        else:
            count -= 1
            compute -= c
    return most, most_compute


@dataclass
class SharedGpu:
    """A GPU time-sliced (or shared by MPS) into ``replicas`` shares of ``share_mib``."""

    host: str
    index: int
    replicas: int
    share_mib: int
    compute_limit: float
    placed: list[Demand] = field(default_factory=list)
    _compute: float = 0.0

    kind = "share"

    def fits(self, demand: Demand) -> bool:
        if demand.gpus > 1 or demand.memory_mib > self.share_mib:
            return False
        if demand.compute > self.compute_limit + EPSILON:
            return False
        # Cheap first: if everything placed ran at once there would still be room.
        if len(self.placed) < self.replicas and (
            self._compute + demand.compute <= self.compute_limit + EPSILON
        ):
            return True
        count, compute = _peak(self.placed, demand)
        return count < self.replicas and compute + demand.compute <= self.compute_limit + EPSILON

    def place(self, demand: Demand) -> str:
        self.placed.append(demand)
        self._compute += demand.compute
        return "share"

    @property
    def capacity_mib(self) -> int:
        return self.share_mib


@dataclass
class MigInstance:
    profile: catalog.MigProfile
    placed: list[Demand] = field(default_factory=list)
    start: int | None = None  # the memory slot the solver placed it at

    def free_for(self, demand: Demand) -> bool:
        return not any(p.overlaps(demand) for p in self.placed)


@dataclass
class MigGpu:
    """A MIG GPU: its instances, each holding one workload at a time. ``growable`` GPUs (the
    proposal's) take new instances while the solver says the layout fits."""

    host: str
    index: int
    model: catalog.GpuModel
    compute_limit: float
    instances: list[MigInstance] = field(default_factory=list)
    growable: bool = False

    kind = "mig"

    def eligible(self, profile: catalog.MigProfile, demand: Demand) -> bool:
        share = profile.compute_slices / self.model.compute_slices
        return (
            demand.gpus == 1
            and profile.memory_mib >= demand.memory_mib
            and demand.compute <= share * self.compute_limit + EPSILON
        )

    def layout(self) -> dict[str, int]:
        return dict(sorted(Counter(i.profile.name for i in self.instances).items()))

    def slot_for(self, demand: Demand, profile: catalog.MigProfile | None) -> MigInstance | None:
        """An instance that can take ``demand``: the smallest free eligible one, or (on a
        growable GPU) a new one of ``profile`` if the solver fits it in."""
        free = [
            i for i in self.instances if self.eligible(i.profile, demand) and i.free_for(demand)
        ]
        if free:
            return min(free, key=lambda i: (i.profile.memory_mib, i.profile.compute_slices))
        if self.growable and profile is not None:
            layout = Counter(i.profile.name for i in self.instances)
            layout[profile.name] += 1
            if solve(self.model, dict(layout)).fits:
                instance = MigInstance(profile)
                self.instances.append(instance)
                return instance
        return None

    def fits(self, demand: Demand, profile: catalog.MigProfile | None = None) -> bool:
        free = any(self.eligible(i.profile, demand) and i.free_for(demand) for i in self.instances)
        if free or not self.growable or profile is None:
            return free
        layout = Counter(i.profile.name for i in self.instances)
        layout[profile.name] += 1
        return solve(self.model, dict(layout)).fits

    def place(self, demand: Demand, profile: catalog.MigProfile | None = None) -> str:
        instance = self.slot_for(demand, profile)
        assert instance is not None, "place() after fits()"
        instance.placed.append(demand)
        return instance.profile.name

    def solved(self) -> None:
        """Give every instance the start slot the solver picks for the layout."""
        fit = solve(self.model, self.layout())
        by_profile: dict[str, list[int]] = {}
        for instance in fit.instances:
            by_profile.setdefault(instance.profile, []).append(instance.start)
        for instance in self.instances:
            instance.start = by_profile[instance.profile.name].pop(0)

    @property
    def placed(self) -> list[Demand]:
        return [d for i in self.instances for d in i.placed]


@dataclass
class WholeGpu:
    """A GPU given whole to one workload at a time."""

    host: str
    index: int
    memory_mib: int
    placed: list[Demand] = field(default_factory=list)

    kind = "whole"

    def fits(self, demand: Demand) -> bool:
        return demand.memory_mib <= self.memory_mib and not any(
            p.overlaps(demand) for p in self.placed
        )

    def place(self, demand: Demand) -> str:
        self.placed.append(demand)
        return "whole"


Gpu = SharedGpu | MigGpu | WholeGpu


@dataclass(frozen=True)
class Placement:
    """Where one workload goes: host, GPU indices, and the slot (``share``, a MIG profile,
    ``whole``)."""

    demand: Demand
    host: str
    gpus: tuple[int, ...]
    slot: str

    def as_dict(self) -> dict:
        return {
            "workload": self.demand.name,
            "host": self.host,
            "gpus": list(self.gpus),
            "slot": self.slot,
        }


def place_whole(demand: Demand, host_gpus: list[WholeGpu]) -> Placement | None:
    """``demand.gpus`` whole GPUs of one host free during the demand's time, or None."""
    free = [g for g in host_gpus if g.fits(demand)]
    if len(free) < demand.gpus:
        return None
    chosen = free[: demand.gpus]
    for gpu in chosen:
        gpu.place(demand)
    return Placement(demand, chosen[0].host, tuple(g.index for g in chosen), "whole")


def used(gpu: Gpu) -> bool:
    return bool(gpu.placed)
