"""How few GPUs any packing of the same demands could use: the yardstick for the proposal.

Both bounds hold at every moment, so their largest value over time is a bound too:

- **memory and compute**: whole-card workloads need their GPUs; the others need at least their
  memory over one card's memory, and their compute over the compute limit, in GPUs;
- **linear programming** (with scipy, ``pip install 'gpuprov[advise]'``): the configuration LP of
  the same problem at its busiest moments. A shared GPU with R replicas has R slots, each
  holding only workloads whose memory fits one R-th, and the compute limit; a MIG GPU has the
  instances of one of the model's maximal layouts, each holding workloads whose memory and
  compute it carries. Minimising the GPUs, with workloads split fractionally, is a relaxation
  of every packing, and HiGHS (scipy's ``linprog``) solves it exactly. It counts the granularity
  the simple bound ignores: a workload of 0.4 of a card takes a half-card share.

>>> from gpuprov.core.advise.demand import Demand
>>> from gpuprov.core import catalog
>>> a100 = catalog.find_model("A100-80GB")
>>> ds = [Demand(f"w{i}", 1, 30000, 0.05, 0.1, 0, 10, None, "n", None) for i in range(4)]
>>> simple_bound(ds, a100, 0.8).gpus
2
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gpuprov.core import catalog
from gpuprov.core.advise.demand import Demand, replicas_for
from gpuprov.core.advise.packing import EPSILON
from gpuprov.core.mig.solver import solve

# The LP is solved at this many of the busiest moments (by the simple bound).
LP_MOMENTS = 3
# Compute is rounded down to this step to group workloads into classes (rounding down keeps
# the LP a relaxation).
COMPUTE_STEP = 0.01


@dataclass(frozen=True)
class Bound:
    gpus: int
    at: float | None  # the moment it holds at
    method: str
    note: str = ""

    def as_dict(self) -> dict:
        return {"gpus": self.gpus, "at": self.at, "method": self.method, "note": self.note}


def _moments(demands: list[Demand], model: catalog.GpuModel, limit: float) -> list[tuple]:
    """Every start of a demand, with the simple bound there and the demands running then."""
    events = sorted(
        [(d.start, 0, i) for i, d in enumerate(demands)]
        + [(d.end, 1, i) for i, d in enumerate(demands)]
    )
    running: set[int] = set()
    out = []
    whole = memory = compute = 0.0
    for when, kind, i in events:
        d = demands[i]
        sign = 1 if kind == 0 else -1
        if kind == 0:
            running.add(i)
        else:
            running.discard(i)
        if d.whole:
            whole += sign * d.gpus
        else:
            memory += sign * d.memory_mib / model.memory_mib
            compute += sign * d.compute / limit
        if kind == 0:
            gpus = round(whole) + math.ceil(max(memory, compute, 0.0) - 1e-6)
            out.append((gpus, when, frozenset(running)))
    return out


def simple_bound(demands: list[Demand], model: catalog.GpuModel, limit: float) -> Bound:
    """The memory-and-compute bound at the busiest moment."""
    moments = _moments(demands, model, limit)
    if not moments:
        return Bound(0, None, "memory and compute")
    gpus, when, _ = max(moments, key=lambda m: (m[0], -m[1]))
    return Bound(gpus, when, "memory and compute")


def lp_bound(
    demands: list[Demand], model: catalog.GpuModel, limit: float, mig: bool = True
) -> Bound:
    """The LP bound at the busiest moments; gpus 0 with a note when scipy is missing."""
    try:
        import numpy as np
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix
    except ImportError:
        return Bound(
            0, None, "linear programming", "scipy is not installed: pip install 'gpuprov[advise]'"
        )
    moments = _moments(demands, model, limit)
    seen: set[frozenset] = set()
    best = Bound(0, None, "linear programming")
    layouts = _maximal_layouts(model) if mig and model.mig_capable else []
    for _gpus, when, running in sorted(moments, key=lambda m: (-m[0], m[1])):
        if running in seen:
            continue
        seen.add(running)
        active = [demands[i] for i in running]
        whole = sum(d.gpus for d in active if d.whole)
        value = _solve(
            [d for d in active if not d.whole], model, limit, layouts, np, linprog, coo_matrix
        )
        if value is None:
            return Bound(0, None, "linear programming", "HiGHS found no solution")
        total = whole + math.ceil(value - 1e-6)
        if total > best.gpus:
            best = Bound(total, when, "linear programming")
        if len(seen) >= LP_MOMENTS:
            break
    return best


def _maximal_layouts(model: catalog.GpuModel) -> list[dict[str, int]]:
    """Every layout of the model's sharing profiles (no media-engine or whole-GPU ones) the
    solver fits and to which no instance can be added."""
    profiles = [
        p for p in model.profiles if "+" not in p.name and p.memory_slices < model.memory_slots
    ]
    fitting = []
    for counts in itertools.product(*(range(p.max_instances + 1) for p in profiles)):
        layout = {p.name: c for p, c in zip(profiles, counts, strict=True) if c}
        if layout and solve(model, layout).fits:
            fitting.append(layout)
    maximal = []
    for layout in fitting:
        grown = ({**layout, p.name: layout.get(p.name, 0) + 1} for p in profiles)
        if not any(solve(model, g).fits for g in grown):
            maximal.append(layout)
    return maximal


def _solve(shareable, model, limit, layouts, np, linprog, coo_matrix) -> float | None:
    """The configuration LP's value for ``shareable`` demands (see the module docstring)."""
    if not shareable:
        return 0.0
    profiles = sorted({p for layout in layouts for p in layout})
    by_name = {p.name: p for p in model.profiles}
    classes: dict[tuple, int] = {}
    for d in shareable:
        replicas = replicas_for(d.memory_mib, model.memory_mib) or 1
        compute = math.floor(d.compute / COMPUTE_STEP) * COMPUTE_STEP
        eligible = tuple(
            name
            for name in profiles
            if by_name[name].memory_mib >= d.memory_mib
            and compute <= by_name[name].compute_slices / model.compute_slices * limit + EPSILON
        )
        key = (replicas, round(compute, 6), eligible)
        classes[key] = classes.get(key, 0) + 1
    replica_counts = sorted({k[0] for k in classes})
    # Variables: z_R, y_L, then x_(k,R) and u_(k,p).
    columns: list[tuple] = [("z", r) for r in replica_counts] + [
        ("y", i) for i in range(len(layouts))
    ]
    for k, key in enumerate(classes):
        columns += [("x", k, r) for r in replica_counts if r <= key[0]]
        columns += [("u", k, p) for p in key[2]]
    index = {c: i for i, c in enumerate(columns)}
    rows, cols, vals, b_ub = [], [], [], []
    row = 0
    keys = list(classes)
    for r in replica_counts:
        xs = [(index[("x", k, r)], keys[k][1]) for k in range(len(keys)) if ("x", k, r) in index]
        for weight_of, capacity in ((lambda c: 1.0, float(r)), (lambda c: c, limit)):
            for i, c in xs:
                rows.append(row), cols.append(i), vals.append(weight_of(c))
            rows.append(row), cols.append(index[("z", r)]), vals.append(-capacity)
            b_ub.append(0.0)
            row += 1
    if layouts:
        for p in profiles:
            for k in range(len(keys)):
                if ("u", k, p) in index:
                    rows.append(row), cols.append(index[("u", k, p)]), vals.append(1.0)
            for i, layout in enumerate(layouts):
                if p in layout:
                    rows.append(row), cols.append(index[("y", i)]), vals.append(-float(layout[p]))
            b_ub.append(0.0)
            row += 1
        for k, key in enumerate(keys):
            for p in key[2]:
                rows.append(row), cols.append(index[("u", k, p)]), vals.append(key[1])
        for i in range(len(layouts)):
            rows.append(row), cols.append(index[("y", i)]), vals.append(-limit)
        b_ub.append(0.0)
        row += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(row, len(columns)))
    eq_rows, eq_cols = [], []
    for k in range(len(keys)):
        for c in columns:
            if c[0] in ("x", "u") and c[1] == k:
                eq_rows.append(k), eq_cols.append(index[c])
    a_eq = coo_matrix(([1.0] * len(eq_rows), (eq_rows, eq_cols)), shape=(len(keys), len(columns)))
    b_eq = np.array([float(classes[k]) for k in keys])
    cost = np.array([1.0 if c[0] in ("z", "y") else 0.0 for c in columns])
    result = linprog(cost, A_ub=a_ub, b_ub=np.array(b_ub), A_eq=a_eq, b_eq=b_eq, method="highs")
    return float(result.fun) if result.status == 0 else None
