"""What a node must change so gpuprov's labels and taints hold, keeping everything else.

The change goes to the API server as one JSON patch per node (all of it or nothing), computed
from the node as the one list call read it:

- labels: gpuprov's set; the ones it set last time (annotation ``gpuprov.io/labels``) and no
  longer wants removed; every other label untouched.
- taints: a Node's taints are one atomic list (kubernetes/kubernetes#128866,
  fluxcd/kustomize-controller#772: applying a list takes the others' taints away), so gpuprov
  computes the new list itself: other owners' taints kept byte for byte, the ones it set last time
  (annotation ``gpuprov.io/taints``) and no longer wants removed, its own added. A ``test`` op
  first checks the list is still what was read, so a taint another controller added meanwhile
  makes the patch fail instead of being dropped.

Not ``kubectl apply --server-side`` for Nodes: on a Node that was ever client-side applied
(annotation ``kubectl.kubernetes.io/last-applied-configuration``), kubectl hands every field
that client-side apply owned to the new field manager (KEP-3517, kubectl's
``migrateToSSAIfNecessary``), and the server then removes the labels and taints that gpuprov's
object leaves out. Seen against the lab's kube-apiserver 1.34 (tests/test_kube_apply_apiserver.py).

>>> current = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}
>>> want = NodeState("n1", "h1", {}, (Taint("gpuprov.io/pool", "mig", "NoSchedule"),))
>>> [str(t) for t in taint_change(want, current).after]
['x:NoSchedule', 'gpuprov.io/pool=mig:NoSchedule']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprov.core.cluster.manifests import NodeState
from gpuprov.core.cluster.pools import Taint
from gpuprov.host.contract import OWNED_LABELS_ANNOTATION, OWNED_TAINTS_ANNOTATION


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

    def json_patch(self) -> list[dict[str, Any]]:
        """Replace the list if it still is what was read."""
        ops: list[dict[str, Any]] = []
        if self.raw_before:
            ops.append({"op": "test", "path": "/spec/taints", "value": list(self.raw_before)})
        ops.append({"op": "add", "path": "/spec/taints", "value": list(self.raw_after)})
        return ops


@dataclass(frozen=True)
class NodeChange:
    """Everything gpuprov changes on one node: labels and annotations to set (value) or remove
    (None), and the new taint list.

    >>> node = {"metadata": {"name": "n1", "labels": {"a": "1"}}}
    >>> change = node_change(NodeState("n1", "h1", {"gpuprov.io/pool": "mig"}, ()), node)
    >>> change.json_patch()[0]
    {'op': 'add', 'path': '/metadata/labels/gpuprov.io~1pool', 'value': 'mig'}
    """

    node: str
    labels: dict[str, str | None]
    annotations: dict[str, str | None]
    taints: TaintChange | None
    # Whether the node has a labels / annotations map at all (JSON patch adds into a map only).
    has_labels: bool
    has_annotations: bool

    def json_patch(self) -> list[dict[str, Any]]:
        ops = _map_ops("/metadata/labels", self.labels, self.has_labels)
        ops += _map_ops("/metadata/annotations", self.annotations, self.has_annotations)
        return ops + (self.taints.json_patch() if self.taints else [])

    def summary(self) -> list[str]:
        """What changes, as ``key=value``, ``label -key``, ``taint +t`` and ``taint -t``."""
        out = [f"{k}={v}" for k, v in self.labels.items() if v is not None]
        out += [f"label -{k}" for k, v in self.labels.items() if v is None]
        if self.taints is not None:
            out += [f"taint +{t}" for t in self.taints.added]
            out += [f"taint -{t}" for t in self.taints.removed]
        return out or [f"annotations {', '.join(self.annotations)}"]


def _map_ops(path: str, changes: dict[str, str | None], exists: bool) -> list[dict[str, Any]]:
    if not changes:
        return []
    if not exists:
        added = {k: v for k, v in changes.items() if v is not None}
        return [{"op": "add", "path": path, "value": added}] if added else []
    ops = []
    for key, value in changes.items():
        member = f"{path}/{_pointer(key)}"
        if value is None:
            ops.append({"op": "remove", "path": member})
        else:
            ops.append({"op": "add", "path": member, "value": value})
    return ops


def _pointer(key: str) -> str:
    """``key`` as one JSON pointer token (RFC 6901: ``~`` is ``~0``, ``/`` is ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def owned_taints(node: dict[str, Any]) -> set[tuple[str, str]]:
    """(key, effect) of the taints gpuprov set on ``node`` last time."""
    text = _annotations(node).get(OWNED_TAINTS_ANNOTATION, "")
    return {tuple(item.rsplit(":", 1)) for item in text.split(",") if ":" in item}


def owned_labels(node: dict[str, Any]) -> set[str]:
    """The label keys gpuprov set on ``node`` last time."""
    return {key for key in _annotations(node).get(OWNED_LABELS_ANNOTATION, "").split(",") if key}


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def taint_change(want: NodeState, node: dict[str, Any]) -> TaintChange | None:
    """The new taint list of ``node``, or None when it already holds exactly what it should."""
    before = tuple(node.get("spec", {}).get("taints") or [])
    ours = {t.identity for t in want.taints} | owned_taints(node)
    kept = tuple(t for t in before if Taint.from_api(t).identity not in ours)
    after = kept + tuple(t.as_api() for t in want.taints)
    if {Taint.from_api(t) for t in after} == {Taint.from_api(t) for t in before}:
        return None
    return TaintChange(want.name, before, after)


def node_change(want: NodeState, node: dict[str, Any]) -> NodeChange | None:
    """What ``node`` (as listed) must change to hold ``want``; None when nothing."""
    metadata = node.get("metadata", {})
    labels = metadata.get("labels")
    annotations = metadata.get("annotations")
    label_changes = _differing(labels or {}, want.labels)
    for key in sorted(owned_labels(node) - set(want.labels)):
        if key in (labels or {}):
            label_changes[key] = None
    annotation_changes = _differing(annotations or {}, want.annotations)
    taints = taint_change(want, node)
    if not (label_changes or annotation_changes or taints):
        return None
    return NodeChange(
        want.name,
        label_changes,
        annotation_changes,
        taints,
        labels is not None,
        annotations is not None,
    )


def _differing(have: dict[str, str], wanted: dict[str, str]) -> dict[str, str | None]:
    return {key: value for key, value in wanted.items() if have.get(key) != value}
