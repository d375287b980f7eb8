"""Which PodDisruptionBudgets hold a pod, named when the Eviction API refuses to evict it.

The API server answers a refused eviction with 429 and "Cannot evict pod as it would violate
the pod's disruption budget." (kubernetes ``pkg/registry/core/pod/storage/eviction.go``); the
budget's name is only in the status' causes, which ``kubectl`` does not print. A budget covers
the pods of its namespace that its ``spec.selector`` matches (policy/v1: an empty selector
matches every pod of the namespace, a missing one none), by the label selector rules of
``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions`` with ``In``, ``NotIn``,
``Exists``, ``DoesNotExist``, all of them ANDed). Pure: the Pod and the budgets as the API
shows them in, one line per budget out.

>>> pod = {"metadata": {"namespace": "ml", "labels": {"app": "train"}}}
>>> pdb = {"metadata": {"name": "keep", "namespace": "ml"}, "spec": {"selector":
...     {"matchLabels": {"app": "train"}}}, "status": {"disruptionsAllowed": 0,
...     "currentHealthy": 1, "desiredHealthy": 1}}
>>> holding(pod, [pdb])
['PodDisruptionBudget ml/keep (0 disruptions allowed, 1 healthy of 1 desired)']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def holding(pod: Mapping[str, Any], budgets: Iterable[Mapping[str, Any]]) -> list[str]:
    """The budgets of the pod's namespace whose selector matches its labels, each described."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    out = []
    for budget in budgets:
        where = budget.get("metadata") or {}
        if where.get("namespace") != meta.get("namespace"):
            continue
        selector = (budget.get("spec") or {}).get("selector")
        if selector is None or not matches(selector, labels):
            continue
        status = budget.get("status") or {}
        out.append(
            f"PodDisruptionBudget {where.get('namespace')}/{where.get('name')} "
            f"({status.get('disruptionsAllowed', 0)} disruptions allowed, "
            f"{status.get('currentHealthy', 0)} healthy of {status.get('desiredHealthy', 0)} "
            "desired)"
        )
    return out


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a ``metav1.LabelSelector`` selects a pod with these labels.

    >>> matches({"matchExpressions": [{"key": "tier", "operator": "NotIn",
    ...     "values": ["batch"]}]}, {"tier": "web"})
    True
    >>> matches({}, {})
    True
    """
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or ()
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
