"""Pools: the labels and taints gpuprov owns on each node, from the host's mode group.

Defaults (docs/variables.md): label ``gpuprov.io/pool=<mode>`` and taint
``gpuprov.io/pool=<mode>:NoSchedule``, so a pod lands on a pool only with a node selector and a
toleration for it, and a pod asking for a time-sliced GPU cannot land on a training node.

>>> Taint.parse("gpuprov.io/pool=mig:NoSchedule")
Taint(key='gpuprov.io/pool', value='mig', effect='NoSchedule')
>>> str(Taint.parse("dedicated:NoExecute"))
'dedicated:NoExecute'
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprov.core.kube_names import subdomain_problem
from gpuprov.core.plan import HostPlan
from gpuprov.core.variables import with_mode


@dataclass(frozen=True, order=True)
class Taint:
    """A node taint; Kubernetes tells taints apart by key and effect."""

    key: str
    value: str
    effect: str

    @classmethod
    def parse(cls, text: str) -> Taint:
        """``KEY[=VALUE]:EFFECT`` (kubectl taint's syntax), already checked by the variables."""
        head, _, effect = text.rpartition(":")
        key, _, value = head.partition("=")
        return cls(key, value, effect)

    @classmethod
    def from_api(cls, raw: dict) -> Taint:
        """A taint as the API server lists it (``{"key", "value"?, "effect"}``)."""
        return cls(raw["key"], raw.get("value", ""), raw["effect"])

    @property
    def identity(self) -> tuple[str, str]:
        return self.key, self.effect

    def as_api(self) -> dict[str, str]:
        out = {"key": self.key}
        if self.value:
            out["value"] = self.value
        out["effect"] = self.effect
        return out

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


def node_name(plan: HostPlan) -> str:
    """The host's Kubernetes node name (``kube_node_name``, else the inventory name)."""
    return plan.node.kube_node_name or plan.name


def node_name_problem(plan: HostPlan) -> str | None:
    """Why the inventory name of a host without ``kube_node_name`` cannot be its node's name
    (``gpu_01``: Kubernetes takes RFC 1123 subdomains only), or None. ``kube_node_name`` itself
    is checked with the other variables."""
    if plan.node.kube_node_name:
        return None
    why = subdomain_problem(plan.name)
    if why is None:
        return None
    return (
        f"the host name is its node name (kube_node_name is not set), and a node name {why}; "
        "set kube_node_name to the host's Kubernetes node name"
    )


def pool_labels(plan: HostPlan) -> dict[str, str]:
    """``kube_node_labels`` with ``{mode}`` filled in."""
    return {key: with_mode(value, plan.mode) for key, value in plan.pool.kube_node_labels.items()}


def pool_taints(plan: HostPlan) -> tuple[Taint, ...]:
    """``kube_node_taints`` with ``{mode}`` filled in, in the order given."""
    return tuple(Taint.parse(with_mode(text, plan.mode)) for text in plan.pool.kube_node_taints)
