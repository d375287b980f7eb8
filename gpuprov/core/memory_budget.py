"""GPU memory per share: whether a planned number of shares fits a GPU's memory, and what one
share may use under each sharing strategy.

Pure integer arithmetic on MiB (the catalog's unit, ``memory_mib``): a budget given in GiB
(1 GiB = 1024 MiB) is taken as the whole MiB it holds (``budget_mib``), as HAMi-core and NVIDIA's
MPS daemon count memory in whole MiB, so no tiny or huge float can overflow a division. Time-slicing isolates nothing: one pod can take the whole GPU and the others fail
(an OOM storm with 50 replicas per GPU; NVIDIA/k8s-device-plugin#461, #1119), so a budget is a
plan, not a limit. MPS caps each client: NVIDIA's MPS control daemon sets
``set_default_device_pinned_mem_limit <gpu> <total/replicas>M`` for every GPU it shares
(k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go, ``perDevicePinnedDeviceMemoryLimits``),
and the plugin config has no key for another limit. Any strategy that splits a GPU in N shares
(the vGPU split count too) can ask ``overcommitted``.

>>> overcommitted(81920, 4, 20) is None
True
>>> print(overcommitted(81920, 10, 10))
10 shares x 10 GiB = 102400 MiB is more than one GPU's 81920 MiB (80 GiB); 8 shares of 10 GiB fit, or 8 GiB per share for 10
>>> share_memory(81920, 4, None, "time-slicing").label()
'20 GiB (not enforced)'
>>> share_memory(81920, 4, None, "mps").label()
'20 GiB (MPS limit)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuprov.host.contract import SHARING_MPS

MIB_PER_GIB = 1024
# The smallest budget: one MiB, the unit every consumer counts share memory in (HAMi's gpumem,
# the MPS daemon's pinned memory limit `<n>M`). Less would plan shares of 0 MiB.
BUDGET_MIN_MIB = 1


def budget_mib(budget_gib: float) -> int:
    """A budget in GiB as whole MiB, rounded down (a share holds no fraction of a MiB).

    >>> budget_mib(7.5), budget_mib(0.3), budget_mib(20)
    (7680, 307, 20480)
    """
    return int(budget_gib * MIB_PER_GIB)


def gib(mib: float) -> str:
    """MiB as GiB for a message: at most one decimal, none when whole, rounded down (a share
    shown as fitting must fit).

    >>> gib(81920), gib(143771), gib(7680), gib(46068 // 3)
    ('80', '140.4', '7.5', '14.9')
    """
    return f"{math.floor(mib * 10 / MIB_PER_GIB) / 10:.1f}".removesuffix(".0")


def overcommitted(gpu_memory_mib: int, shares: int, budget_gib: float) -> str | None:
    """Why ``shares`` budgets of ``budget_gib`` do not fit one GPU of ``gpu_memory_mib``, or
    None when they fit (``shares x budget <= memory``)."""
    budget = budget_mib(budget_gib)
    if shares * budget <= gpu_memory_mib:
        return None
    fitting = gpu_memory_mib // budget
    return (
        f"{shares} shares x {gib(budget)} GiB = {shares * budget} MiB is more than "
        f"one GPU's {gpu_memory_mib} MiB ({gib(gpu_memory_mib)} GiB); {fitting} shares of "
        f"{gib(budget)} GiB fit, or {gib(gpu_memory_mib // shares)} GiB per share for {shares}"
    )


def mps_limit_mib(gpu_memory_mib: int, replicas: int) -> int:
    """The pinned device memory limit MPS gives each client: the GPU's memory / replicas, in
    whole MiB as the control daemon computes it.

    >>> mps_limit_mib(81920, 3)
    27306
    """
    return gpu_memory_mib // replicas


def mps_budget_note(gpu_memory_mib: int, replicas: int, budget_gib: float) -> str | None:
    """What a budget below the MPS limit means (the limit stays), or None when it equals it or
    is above it (then ``overcommitted`` speaks)."""
    limit = mps_limit_mib(gpu_memory_mib, replicas)
    budget = budget_mib(budget_gib)
    if budget >= limit:
        return None
    replicas_for_budget = gpu_memory_mib // budget
    return (
        f"MPS limits each client to the GPU's memory / replicas = {gib(limit)} GiB, not "
        f"{gib(budget)} GiB: the device plugin's config has no key for another limit; "
        f"{replicas_for_budget} replicas would make the limit "
        f"{gib(mps_limit_mib(gpu_memory_mib, replicas_for_budget))} GiB"
    )


@dataclass(frozen=True)
class ShareMemory:
    """The memory one share may use, and whether anything on the node holds it to that."""

    mib: int
    enforced: bool
    enforced_by: str = ""  # what enforces it ("MPS"), when something does

    def label(self) -> str:
        """For the plan table: ``20 GiB (MPS limit)``, ``20 GiB (not enforced)``."""
        how = f"{self.enforced_by} limit" if self.enforced else "not enforced"
        if self.enforced_by == "HAMi-core":
            how += ", the pod's request"
        return f"{gib(self.mib)} GiB ({how})"

    def as_dict(self) -> dict:
        return {"mib": self.mib, "enforced": self.enforced, "enforced_by": self.enforced_by}


def share_memory(
    gpu_memory_mib: int, shares: int, budget_gib: float | None, strategy: str
) -> ShareMemory:
    """What one of ``shares`` shares of a GPU may use under ``strategy``: under MPS the control
    daemon's limit whatever the budget; under time-slicing the budget, or an even split of the
    memory when there is none, neither of them enforced."""
    if strategy == SHARING_MPS:
        return ShareMemory(mps_limit_mib(gpu_memory_mib, shares), True, "MPS")
    if budget_gib is None:
        return ShareMemory(gpu_memory_mib // shares, False)
    return ShareMemory(budget_mib(budget_gib), False)


def vgpu_share_memory(
    gpu_memory_mib: int, split_count: int, memory_scaling: float, budget_gib: float | None
) -> ShareMemory:
    """What one of a ``vgpu`` host's ``split_count`` shares of a GPU may use: the budget, or an
    even split of the memory the flavour's scheduler counts (MiB x memory scaling). HAMi-core
    holds each container to the ``gpumem`` it requested, so the limit is the pod's request.

    >>> vgpu_share_memory(81920, 10, 1, None).label()
    "8 GiB (HAMi-core limit, the pod's request)"
    """
    enforcer = "HAMi-core"
    if budget_gib is None:
        return ShareMemory(int(gpu_memory_mib * memory_scaling) // split_count, True, enforcer)
    return ShareMemory(budget_mib(budget_gib), True, enforcer)
