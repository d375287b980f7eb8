"""What each observed workload asks of a GPU pool: memory per GPU (its peak, or its high
percentile when the user allows overcommit, plus headroom), compute, how many GPUs at once,
and when; and whether it must have whole cards.

A share never gets less memory than a workload's peak plus headroom unless the user allows it
(``allow_overcommit``: the percentile instead of the peak). A workload needs whole cards when no
share could hold it: it uses several GPUs at once (a training job keeps its GPUs to itself),
it needs more than half a card's memory (a share of a GPU split in two, the fewest replicas,
is half), or its compute alone is above what one shared GPU may carry (``compute_limit``).

>>> from gpuprov.core.advise.usage import WorkloadUsage
>>> from gpuprov.core import catalog
>>> w = WorkloadUsage("ml/train", "n1", (), 8, 70000, 65000, 60000.0, 0.9, 0.95, "gr_active",
...                   100, 0.0, 99.0, 1.0, (), "x")
>>> d = size(w, catalog.find_model("A100-80GB"), Sizing())
>>> d.memory_mib, d.whole
(77000, '8 GPUs at once')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuprov.core import catalog
from gpuprov.core.advise.usage import WorkloadUsage
from gpuprov.core.memory_budget import MIB_PER_GIB, gib

REPLICAS_MIN, REPLICAS_MAX = 2, 1024  # the device plugin's minimum, gpuprov's maximum


@dataclass(frozen=True)
class Sizing:
    """How usage becomes demand (the command line's options)."""

    percentile: float = 99.0
    headroom: float = 10.0  # percent above the peak (or percentile) each share keeps
    allow_overcommit: bool = False  # size by the percentile instead of the peak
    compute_limit: float = 0.8  # the compute one shared GPU may carry (sum of means, 0-1)

    def as_dict(self) -> dict:
        return {
            "percentile": self.percentile,
            "headroom_percent": self.headroom,
            "allow_overcommit": self.allow_overcommit,
            "compute_limit": self.compute_limit,
        }


@dataclass(frozen=True)
class Demand:
    """One workload's ask. ``memory_mib`` is per GPU; ``compute`` a share of one GPU."""

    name: str
    gpus: int
    memory_mib: int
    compute: float  # mean; 0 when the input measures none
    compute_high: float
    start: float
    end: float
    whole: str | None  # why it needs whole cards, or None
    host: str
    usage: WorkloadUsage

    def overlaps(self, other: Demand) -> bool:
        return self.start <= other.end and other.start <= self.end


def size(usage: WorkloadUsage, model: catalog.GpuModel, sizing: Sizing) -> Demand:
    """``usage`` as a demand on a pool of ``model``."""
    basis = usage.memory_high if sizing.allow_overcommit else usage.memory_peak
    # rounded to a micro-MiB first: 22220 x 1.1 is 24442.000000000004 in floats
    need = math.ceil(round(basis * (1 + sizing.headroom / 100), 6))
    compute = usage.compute_mean or 0.0
    whole = None
    if usage.gpus > 1:
        whole = f"{usage.gpus} GPUs at once"
    elif need > share_mib(model.memory_mib, REPLICAS_MIN):
        whole = (
            f"needs {gib(need)} GiB, more than half of one {model.alias} "
            f"({gib(share_mib(model.memory_mib, REPLICAS_MIN))} GiB)"
        )
    elif compute > sizing.compute_limit:
        whole = (
            f"compute {compute:.0%} of a GPU, above the {sizing.compute_limit:.0%} one shared "
            "GPU may carry"
        )
    return Demand(
        name=usage.name,
        gpus=usage.gpus,
        memory_mib=min(need, model.memory_mib),
        compute=compute,
        compute_high=usage.compute_high or 0.0,
        start=usage.first,
        end=usage.last,
        whole=whole,
        host=usage.host,
        usage=usage,
    )


def share_gib(memory_mib: int, replicas: int) -> float:
    """The ``memory_per_share_gib`` gpuprov proposes for ``replicas`` shares: the GPU's memory
    split evenly, rounded down to 0.01 GiB (so that replicas x share always fits).

    >>> share_gib(81920, 3)
    26.66
    """
    return int(memory_mib * 100 / replicas / MIB_PER_GIB) / 100


def share_mib(memory_mib: int, replicas: int) -> int:
    """``share_gib`` in whole MiB, what a workload's need is compared with."""
    return int(share_gib(memory_mib, replicas) * MIB_PER_GIB)


def replicas_for(need_mib: int, memory_mib: int) -> int | None:
    """The most shares of a ``memory_mib`` GPU whose every share holds ``need_mib``, or None
    when not even two do.

    >>> replicas_for(26000, 81920), replicas_for(2200, 81920), replicas_for(50000, 81920)
    (3, 37, None)
    """
    replicas = min(REPLICAS_MAX, memory_mib // max(need_mib, 1))
    while replicas >= REPLICAS_MIN and share_mib(memory_mib, replicas) < need_mib:
        replicas -= 1
    return replicas if replicas >= REPLICAS_MIN else None
