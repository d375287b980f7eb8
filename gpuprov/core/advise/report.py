"""The numbers that say what the proposal gains, computed the same way before and after.

- GPUs now: the GPUs that held a workload in the input; proposed: the GPUs the packing uses.
- Mean memory and compute per GPU: every workload's mean use while it ran, times the share of
  the window it ran, summed, over the GPUs (now, or proposed) and one GPU's memory (or one
  GPU's compute). The same total over fewer GPUs: the gain is the ratio of the GPU counts,
  with nothing assumed about how the workloads behave when packed.
- Reserved memory after: what the shares and instances set aside for the workloads (their
  demand: peak plus headroom), same averaging.
- Gap to the bound: how many GPUs above the best lower bound the proposal is, in percent.

>>> summary(usage, proposal, [bound])["gpus"]          # doctest: +SKIP
{'seen': 200, 'now': 184, 'proposed': 62, 'shared': 38, 'mig': 0, 'whole_card': 24}
"""

from __future__ import annotations

from gpuprov.core.advise.bounds import Bound
from gpuprov.core.advise.proposal import Proposal
from gpuprov.core.advise.usage import Usage


def summary(usage: Usage, proposal: Proposal, bounds: list[Bound]) -> dict:
    card = usage.model.memory_mib
    now = usage.gpus_busy
    proposed = proposal.gpus_used
    memory = sum(w.memory_mean * w.gpus * w.duty for w in usage.workloads)
    compute = sum((w.compute_mean or 0.0) * w.gpus * w.duty for w in usage.workloads)
    placed = {p.demand.name for p in proposal.placements}
    reserved = sum(
        (card if d.whole else d.memory_mib) * d.gpus * d.usage.duty
        for d in proposal.demands
        if d.name in placed
    )
    best = max((b.gpus for b in bounds), default=0)
    unmeasured = sum(1 for w in usage.workloads if w.compute_mean is None)
    return {
        "gpus": {
            "seen": len(usage.gpus),
            "now": now,
            "proposed": proposed,
            **{mode: proposal.gpus_in(mode) for mode in ("shared", "mig", "whole_card")},
            "free_hosts": [h.name for h in proposal.hosts if h.free],
        },
        "memory_per_gpu_percent": {
            "before": _percent(memory, now * card),
            "after": _percent(memory, proposed * card),
            "reserved_after": _percent(reserved, proposed * card),
        },
        "compute_per_gpu_percent": {
            "before": _percent(compute, now),
            "after": _percent(compute, proposed),
            "workloads_unmeasured": unmeasured,
        },
        "fit_no_share": [
            {"workload": d.name, "reason": d.whole} for d in proposal.demands if d.whole
        ],
        "not_placed": [u.as_dict() for u in proposal.unplaced],
        "bounds": [b.as_dict() for b in bounds],
        "gap_to_bound_percent": _percent(proposed - best, best) if best else None,
        "shared_with": proposal.shared_with,
        "ways_considered": proposal.considered,
    }


def workload_rows(usage: Usage, proposal: Proposal) -> list[dict]:
    """One row per workload: what it used, what it asks, where it goes."""
    where = {p.demand.name: p for p in proposal.placements}
    missing = {u.demand.name: u.reason for u in proposal.unplaced}
    rows = []
    for demand in proposal.demands:
        placement = where.get(demand.name)
        row = demand.usage.as_dict() | {
            "demand_mib": demand.memory_mib,
            "whole_card_because": demand.whole,
            "placed": placement.as_dict() if placement else None,
            "not_placed_because": missing.get(demand.name),
        }
        rows.append(row)
    return rows


def _percent(part: float, whole: float) -> float | None:
    return round(100 * part / whole, 1) if whole else None
