"""Decide whether a MIG layout fits a GPU model, and where each instance goes.

A layout is the mig-parted convention, profile name -> count. The solver is exact: it answers
"fits" if and only if some assignment of the model's placements exists in which no two GPU
instances share a memory slot, every profile stays within its max count and the compute slices
add up to at most the model's total. The answer is deterministic, and cached per (model, layout).

>>> from gpuprov.core.catalog import find_model
>>> fit = solve(find_model("A100-80GB"), {"4g.40gb": 1, "3g.40gb": 1})
>>> [(i.profile, i.start, i.size) for i in fit.instances]
[('4g.40gb', 0, 4), ('3g.40gb', 4, 4)]
>>> solve(find_model("A100-80GB"), {"3g.40gb": 1, "1g.20gb": 3}).kind
'memory-slices'
>>> solve(find_model("A30-24GB"), {"1g.6gb+me": 1, "2g.12gb+me": 1}).kind
'media-engines'
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from gpuprov.core.catalog import GpuModel, MigProfile
from gpuprov.host.mig.instance import Instance

# The profile-name attribute of instances that take the GPU's media engines (mig-parted naming).
MEDIA_EXTENSION = "+me"


@dataclass(frozen=True)
class Fit:
    """The solver's answer. ``kind`` says why a layout does not fit (None when it fits)."""

    fits: bool
    instances: tuple[Instance, ...] = ()
    kind: str | None = (
        None  # unknown-profile | max-instances | media-engines | compute-slices | memory-slices
        # | no-placement
    )
    reason: str | None = None


def solve(model: GpuModel, layout: Mapping[str, int]) -> Fit:
    """Fit ``layout`` (profile -> count, counts >= 0) onto ``model``; see the module docstring."""
    key = tuple(sorted((p, c) for p, c in layout.items() if c))
    return _solve(model, key)


@lru_cache(maxsize=4096)
def _solve(model: GpuModel, layout: tuple[tuple[str, int], ...]) -> Fit:
    profiles: list[tuple[MigProfile, int]] = []
    for name, count in layout:
        profile = model.profile(name)
        if profile is None:
            return _unknown_profile(model, name)
        if count > profile.max_instances:
            return Fit(
                False,
                kind="max-instances",
                reason=f"{count} x {name} exceeds the maximum of "
                f"{profile.max_instances} on {model.alias}",
            )
        profiles.append((profile, count))
    if not model.mig_capable:
        return Fit(False, kind="unknown-profile", reason=f"{model.alias} does not support MIG")

    # `+me` instances share the GPU's one set of media engines (catalog: media_engine_sets).
    media = sum(c for p, c in profiles if MEDIA_EXTENSION in p.name)
    if media > model.media_engine_sets:
        return Fit(
            False,
            kind="media-engines",
            reason=f"{media} +me instances, {model.alias} has media engines for "
            f"{model.media_engine_sets} at a time",
        )
    compute = sum(p.compute_slices * c for p, c in profiles)
    if compute > model.compute_slices:
        return Fit(
            False,
            kind="compute-slices",
            reason=f"needs {compute} compute slices, {model.alias} has {model.compute_slices}",
        )
    memory = sum(p.memory_slices * c for p, c in profiles)
    if memory > model.memory_slots:
        return Fit(
            False,
            kind="memory-slices",
            reason=f"needs {memory} memory slots, {model.alias} has {model.memory_slots}",
        )

    # Most constrained first (fewest placements, then largest), so dead ends show up early.
    order = sorted(
        profiles, key=lambda pc: (len(pc[0].placements), -pc[0].memory_slices, pc[0].name)
    )
    wanted = [p for p, c in order for _ in range(c)]
    chosen = _place(wanted, 0, 0, -1, [])
    if chosen is None:
        return Fit(
            False,
            kind="no-placement",
            reason="no assignment of placements exists: " + _describe_conflict(model, profiles),
        )
    return Fit(True, instances=tuple(sorted(chosen)))


def _place(
    wanted: list[MigProfile], i: int, used: int, last_start: int, chosen: list[Instance]
) -> list[Instance] | None:
    """Depth-first search over placements; ``used`` is a bitmask of occupied memory slots."""
    if i == len(wanted):
        return list(chosen)
    profile = wanted[i]
    same_as_previous = i > 0 and wanted[i - 1] is profile
    for start, size in profile.placements:
        # Instances of one profile are interchangeable: keep their starts increasing.
        if same_as_previous and start <= last_start:
            continue
        mask = ((1 << size) - 1) << start
        if used & mask:
            continue
        chosen.append(Instance(start, size, profile.name, profile.id))
        found = _place(wanted, i + 1, used | mask, start, chosen)
        if found is not None:
            return found
        chosen.pop()
    return None


def _describe_conflict(model: GpuModel, profiles: list[tuple[MigProfile, int]]) -> str:
    parts = []
    for profile, count in profiles:
        starts = ",".join(str(s) for s, _ in profile.placements)
        parts.append(
            f"{count} x {profile.name} (starts {starts}, {profile.memory_slices} slots each)"
        )
    return "; ".join(parts) + f" cannot share {model.memory_slots} memory slots without overlap"


def _unknown_profile(model: GpuModel, name: str) -> Fit:
    names = [p.name for p in model.profiles]
    close = difflib.get_close_matches(name, names, n=2, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; valid: {', '.join(names)}"
    if not names:
        hint = f"; {model.alias} does not support MIG"
    return Fit(
        False, kind="unknown-profile", reason=f"unknown profile '{name}' for {model.alias}{hint}"
    )
