"""Planned GPU vs observed GPU -> the MIG actions that turn one into the other.

Shared by the host-side applier (``gpuprov/host/mig/apply.py``) and the deploy, so both agree on
what "already applied" means. Pure: plain data in, plain data out; stdlib only, because it ships
inside the host bundle where neither pyyaml nor the catalog is importable.

The diff is incremental. A GPU instance (GI) is kept when its profile id *and* its placement
match a planned instance and it holds exactly one full compute instance (CI); a kept GI is never
touched, so its id (and every MIG device UUID under it) survives the apply. Everything else
observed is destroyed, every planned instance not kept is created, largest first.

>>> planned = {"index": 0, "mig_enabled": True, "instances": [
...     {"profile": "4g.40gb", "profile_id": 5, "start": 0, "size": 4},
...     {"profile": "3g.40gb", "profile_id": 9, "start": 4, "size": 4}]}
>>> observed = {"index": 0, "mig": {"current": True, "pending": True}, "gpu_instances": [
...     {"id": 1, "profile_id": 9, "start": 4, "size": 4,
...      "compute_instances": [{"id": 0, "profile_id": 2, "slice_count": 3}]},
...     {"id": 2, "profile_id": 9, "start": 0, "size": 4, "compute_instances": []}]}
>>> actions = diff(planned, observed)
>>> [gi.id for gi in actions.keep], [gi.id for gi in actions.destroy]
([1], [2])
>>> [(t.profile, t.start) for t in actions.create]
[('4g.40gb', 0)]
>>> observed["gpu_instances"][1] = {"id": 3, "profile_id": 5, "start": 0, "size": 4,
...     "compute_instances": [{"id": 0, "profile_id": 3, "slice_count": 4}]}
>>> diff(planned, observed).changes
False
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprov.host.mig.instance import Instance


class MigDiffError(ValueError):
    """The plan asks for something the observed GPU cannot do (MIG on a GPU without MIG)."""


@dataclass(frozen=True)
class ObservedGi:
    """A GI as the probe reads it; ``ci_slices`` lists the slice count of each of its CIs."""

    id: int
    profile_id: int
    start: int
    size: int
    ci_slices: tuple[int, ...]
    profile: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "gi": self.id,
            "profile": self.profile,
            "profile_id": self.profile_id,
            "start": self.start,
            "size": self.size,
        }


@dataclass(frozen=True)
class MigActions:
    """What to do to one GPU, in the order it must be done.

    ``mig_mode`` is the MIG mode to set (None: leave it); ``reset`` says whether the GPU needs a
    reset (or a reboot) before the planned mode is the current one. ``destroy`` comes before
    ``create``; while a reset is outstanding the planned instances wait in ``create``.
    """

    index: int
    mig_mode: bool | None
    reset: bool
    keep: tuple[ObservedGi, ...]
    destroy: tuple[ObservedGi, ...]
    create: tuple[Instance, ...]

    @property
    def changes(self) -> bool:
        """True when anything at all must happen to this GPU."""
        return self.mig_mode is not None or self.reset or bool(self.destroy or self.create)


def diff(planned: Any, observed: Mapping[str, Any]) -> MigActions:
    """The actions that make ``observed`` (a probe GPU dict) match ``planned``.

    ``planned`` is a ``GpuPlan`` or a GPU of mig-layout.json (``mig_enabled``, ``instances``).
    Raises MigDiffError when the plan wants MIG on a GPU that is not MIG capable.
    """
    index = observed["index"]
    want = bool(_field(planned, "mig_enabled"))
    targets = tuple(_target(i) for i in _field(planned, "instances")) if want else ()
    mig = observed.get("mig")
    if mig is None:
        if want:
            raise MigDiffError(f"GPU {index} is not MIG capable, but the plan enables MIG on it")
        return MigActions(index, None, False, (), (), ())
    mig_mode = want if bool(mig["pending"]) != want else None
    reset = bool(mig["current"]) != want
    if not mig["current"]:
        # MIG is off, so no GI exists yet; the plan's instances follow the reset.
        return MigActions(index, mig_mode, reset, (), (), _largest_first(targets))

    unmatched = {(t.profile_id, t.start, t.size): t for t in targets}
    keep, destroy = [], []
    existing = (_observed_gi(g) for g in observed.get("gpu_instances") or ())
    for gi in sorted(existing, key=lambda g: (g.start, g.id)):
        target = unmatched.get((gi.profile_id, gi.start, gi.size))
        if target is not None and gi.ci_slices == (target.compute_slices,):
            keep.append(gi)
            del unmatched[(gi.profile_id, gi.start, gi.size)]
        else:
            destroy.append(gi)
    return MigActions(
        index, mig_mode, reset, tuple(keep), tuple(destroy), _largest_first(unmatched.values())
    )


def _largest_first(targets: Any) -> tuple[Instance, ...]:
    return tuple(sorted(targets, key=lambda t: (-t.size, t.start)))


def _field(planned: Any, name: str) -> Any:
    return planned[name] if isinstance(planned, Mapping) else getattr(planned, name)


def _target(instance: Any) -> Instance:
    return Instance(
        start=int(_field(instance, "start")),
        size=int(_field(instance, "size")),
        profile=str(_field(instance, "profile")),
        profile_id=int(_field(instance, "profile_id")),
    )


def _observed_gi(gi: Mapping[str, Any]) -> ObservedGi:
    return ObservedGi(
        id=gi["id"],
        profile_id=gi["profile_id"],
        start=gi["start"],
        size=gi["size"],
        ci_slices=tuple(ci["slice_count"] for ci in gi.get("compute_instances", ())),
        profile=gi.get("profile"),
    )
