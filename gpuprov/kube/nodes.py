"""What a node must change so gpuprov's labels and taints hold, keeping everything else.

Labels go through server-side apply (field manager ``gpuprov``), which owns single labels. A
Node's taints are one atomic list for server-side apply (kubernetes/kubernetes#128866,
fluxcd/kustomize-controller#772: applying a list takes the others' taints away), so gpuprov
computes the new list itself: other owners' taints kept, the ones gpuprov set last time
(annotation ``gpuprov.io/taints``) and no longer wants removed, its own added.

>>> current = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}
>>> want = NodeState("n1", "h1", {}, (Taint("gpuprov.io/pool", "mig", "NoSchedule"),))
>>> [str(t) for t in taint_change(want, current).after]
['x:NoSchedule', 'gpuprov.io/pool=mig:NoSchedule']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprov.contract import OWNED_TAINTS_ANNOTATION
from gpuprov.kube.manifests import NodeState
from gpuprov.kube.pools import Taint


@dataclass(frozen=True)
class TaintChange:
    """A node's taint list now and as it must become, as the API server spells taints
    (other owners' taints kept byte for byte, ``timeAdded`` included)."""

    node: str
    raw_before: tuple[dict[str, Any], ...]
    raw_after: tuple[dict[str, Any], ...]

    @property
    def before(self) -> tuple[Taint, ...]:
        return tuple(Taint.from_api(t) for t in self.raw_before)

    @property
    def after(self) -> tuple[Taint, ...]:
        return tuple(Taint.from_api(t) for t in self.raw_after)

    @property
    def added(self) -> list[Taint]:
        return [t for t in self.after if t not in self.before]

    @property
    def removed(self) -> list[Taint]:
        return [t for t in self.before if t not in self.after]


def owned_taints(node: dict[str, Any]) -> set[tuple[str, str]]:
    """(key, effect) of the taints gpuprov set on ``node`` last time."""
    text = (node.get("metadata", {}).get("annotations") or {}).get(OWNED_TAINTS_ANNOTATION, "")
    return {tuple(item.rsplit(":", 1)) for item in text.split(",") if ":" in item}


def taint_change(want: NodeState, node: dict[str, Any]) -> TaintChange | None:
    """The new taint list of ``node``, or None when it already holds exactly what it should."""
    before = tuple(node.get("spec", {}).get("taints") or [])
    ours = {t.identity for t in want.taints} | owned_taints(node)
    kept = tuple(t for t in before if Taint.from_api(t).identity not in ours)
    after = kept + tuple(t.as_api() for t in want.taints)
    if {Taint.from_api(t) for t in after} == {Taint.from_api(t) for t in before}:
        return None
    return TaintChange(want.name, before, after)


def label_changes(want: NodeState, node: dict[str, Any]) -> dict[str, tuple[str | None, str]]:
    """gpuprov's labels and annotation that differ on ``node``: key -> (now, wanted)."""
    metadata = node.get("metadata", {})
    out = {}
    for have, wanted in (
        (metadata.get("labels") or {}, want.labels),
        (metadata.get("annotations") or {}, want.annotations),
    ):
        for key, value in wanted.items():
            if have.get(key) != value:
                out[key] = (have.get(key), value)
    return out
