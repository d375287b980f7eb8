"""What the cluster shows of each planned host, compared with the plan: pure, no I/O.

Input is the plan and the Node objects of one node list (``Kubectl.nodes``: each cut to the
fields compared here); output is findings per host. Checked per planned node: it exists; it carries gpuprov's labels (pool labels and the
``nvidia.com/device-plugin.config`` label, as ``gpuprov kube render`` plans them) and taints;
it is not left cordoned; ``status.allocatable`` holds each planned resource with the planned
count, no GPU resource the plan does not have, and ``pods`` equal to the planned maxPods. Where
verify read the host's GPU health (``health``), the planned counts are checked against
``status.capacity`` (every device the plugin lists) and the unhealthy ones (capacity −
allocatable) against gpuprov's unhealthy GPUs (``gpuprov.core.checks.plugin_health``). On a vgpu
node, the device plugin's register annotation (``gpuprov.core.checks.vgpu_register``).

>>> plan = build(load("inventories/example.py")).host("gpu-a100-01")      # doctest: +SKIP
>>> want = NodeState("gpu-a100-01", "gpu-a100-01", {}, ())                 # doctest: +SKIP
>>> compare_node(plan, want, None)[0].found                                # doctest: +SKIP
'no node gpu-a100-01'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuprov.core.checks import plugin_health, vgpu_register
from gpuprov.core.cluster.manifests import NodeState
from gpuprov.core.cluster.pools import Taint
from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    VGPU_RESOURCES,
)

APPLY_HINT = "run `gpuprov kube apply` with this inventory"
# Multipliers of a Kubernetes quantity's suffix (apimachinery resource.Quantity); the API server
# writes large counts canonically, e.g. pods "1k".
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^(\d+)(|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)$")


def count(quantity: Any) -> int | None:
    """A whole-number Kubernetes quantity as an int; None for anything else.

    >>> count("32"), count("1k"), count("100m"), count(None)
    (32, 1000, None, None)
    """
    match = _QUANTITY.match(str(quantity)) if quantity is not None else None
    return int(match[1]) * _SUFFIX[match[2]] if match else None


_VGPU_RESOURCES = frozenset(name for names in VGPU_RESOURCES.values() for name in names)


def is_gpu_resource(name: str) -> bool:
    """Whether ``name`` is a GPU resource a device plugin advertises: NVIDIA's (whole, shared or
    MIG) or a vGPU flavour's.

    >>> is_gpu_resource("nvidia.com/gpu.shared"), is_gpu_resource("nvidia.com/mig-1g.10gb")
    (True, True)
    >>> is_gpu_resource("volcano.sh/vgpu-memory"), is_gpu_resource("cpu")
    (True, False)
    """
    return (
        name == GPU_RESOURCE
        or name.startswith((GPU_RESOURCE + ".", MIG_RESOURCE_PREFIX))
        or name in _VGPU_RESOURCES
    )


def compare_nodes(
    plans: Sequence[HostPlan],
    wanted: Sequence[NodeState],
    nodes: Mapping[str, dict[str, Any]],
    health: Mapping[str, set[int]] | None = None,
) -> dict[str, list[Finding]]:
    """Findings per host name; ``wanted`` is ``render(...).nodes``, ``nodes`` name -> Node;
    ``health``: host -> the GPUs gpuprov finds unhealthy, for the hosts whose health it read."""
    by_host = {w.host: w for w in wanted}
    health = health or {}
    return {
        p.name: compare_node(
            p, by_host[p.name], nodes.get(by_host[p.name].name), health.get(p.name)
        )
        for p in plans
    }


def api_unreachable(plans: Sequence[HostPlan], reason: str) -> dict[str, list[Finding]]:
    """One finding per host when the node list could not be read at all."""
    return {
        p.name: [
            Finding(
                p.name,
                None,
                "kube-api",
                "the API server answers",
                reason,
                "check the API server and the kubeconfig's server address and credentials",
            )
        ]
        for p in plans
    }


def compare_node(
    plan: HostPlan, want: NodeState, node: dict[str, Any] | None, sick: set[int] | None = None
) -> list[Finding]:
    """Every way ``node`` (a Node object, None when absent) differs from ``plan``; ``sick``: the
    GPUs gpuprov finds unhealthy on the host, None when it did not read their health."""
    host = plan.name
    if node is None:
        return [
            Finding(
                host,
                None,
                "kube-node",
                f"node {want.name}",
                f"no node {want.name}",
                "join the host to the cluster (its kubelet registers the node), or set "
                "kube_node_name to the name it has",
            )
        ]
    return (
        _labels(host, want, node)
        + _no_nvidia_plugin_config(plan, node)
        + _taints(host, want, node)
        + _cordon(host, want, node)
        + _allocatable(plan, want.name, node, sick)
        + vgpu_register.check(plan, node, want.name)
    )


def _labels(host: str, want: NodeState, node: dict[str, Any]) -> list[Finding]:
    have = node.get("metadata", {}).get("labels") or {}
    return [
        Finding(
            host,
            None,
            "kube-label",
            f"{key}={value}",
            f"{key}={have[key]}" if key in have else f"no label {key}",
            APPLY_HINT,
        )
        for key, value in want.labels.items()
        if have.get(key) != value
    ]


def _no_nvidia_plugin_config(plan: HostPlan, node: dict[str, Any]) -> list[Finding]:
    """On a vgpu node the flavour's plugin serves the GPUs: a device plugin config label left
    from an earlier mode would start NVIDIA's plugin there too, advertising them twice."""
    have = (node.get("metadata", {}).get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)
    if plan.vgpu is None or have is None:
        return []
    return [
        Finding(
            plan.name,
            None,
            "kube-label",
            f"no label {DEVICE_PLUGIN_CONFIG_LABEL} (vgpu: NVIDIA's device plugin stays off)",
            f"{DEVICE_PLUGIN_CONFIG_LABEL}={have}",
            APPLY_HINT,
        )
    ]


def _taints(host: str, want: NodeState, node: dict[str, Any]) -> list[Finding]:
    have = {}
    for raw in node.get("spec", {}).get("taints") or []:
        if isinstance(raw, dict) and "key" in raw and "effect" in raw:
            taint = Taint.from_api(raw)
            have[taint.identity] = taint
    out = []
    for taint in want.taints:
        found = have.get(taint.identity)
        if found != taint:
            out.append(
                Finding(
                    host,
                    None,
                    "kube-taint",
                    str(taint),
                    str(found) if found else f"no taint {taint.key}:{taint.effect}",
                    APPLY_HINT,
                )
            )
    return out


def _cordon(host: str, want: NodeState, node: dict[str, Any]) -> list[Finding]:
    if not node.get("spec", {}).get("unschedulable"):
        return []
    return [
        Finding(
            host,
            None,
            "kube-cordon",
            "schedulable",
            "cordoned (spec.unschedulable)",
            f"finish or undo the change that cordoned it, then `kubectl uncordon {want.name}`",
        )
    ]


def _allocatable(
    plan: HostPlan, name: str, node: dict[str, Any], sick: set[int] | None
) -> list[Finding]:
    """Planned resources and pods against ``status.allocatable`` of node ``name``; with
    gpuprov's health view ``sick``, the planned resources against ``status.capacity`` and the
    unhealthy devices against ``sick`` (NVIDIA's plugin only: a vgpu flavour's plugin judges
    health its own way)."""
    allocatable = node.get("status", {}).get("allocatable") or {}
    capacity = node.get("status", {}).get("capacity") or {}
    judged = sick is not None and plan.vgpu is None
    out = []
    device_hint = (
        f"node {name}: check the device plugin on the host (running, its config) and that it "
        "registered with the kubelet"
    )
    # A resource with capacity but nothing allocatable is a plugin that stopped serving, not
    # sick GPUs: when a plugin's socket goes, the kubelet marks every device of its resource
    # unhealthy and keeps them in capacity for the endpoint's grace period (kubelet
    # pkg/kubelet/cm/devicemanager/manager.go, PluginDisconnected -> markResourceUnhealthy).
    # NVIDIA's plugin marks one device per GPU on an XID, never a whole resource of shares.
    silent = {
        r for r in plan.resources if count(allocatable.get(r)) == 0 and count(capacity.get(r))
    }
    judged_here = [r for r in plan.resources if r not in silent]
    if sick is not None and judged:
        out += plugin_health.compare(
            plan,
            sick,
            {r: count(capacity.get(r)) for r in judged_here},
            {r: count(allocatable.get(r)) for r in judged_here},
        )
    for resource, planned in plan.resources.items():
        have = allocatable.get(resource)
        if judged and resource in capacity and resource not in silent:
            have = capacity[resource]  # its unhealthy devices are judged above
        if count(have) != planned:
            out.append(
                Finding(
                    plan.name,
                    None,
                    "kube-allocatable",
                    f"{resource}: {planned}",
                    f"{resource}: {have}" if have is not None else f"no {resource}",
                    device_hint,
                )
            )
    for resource, have in sorted(allocatable.items()):
        # A resource left from an old config or MIG layout is advertised until the plugin restarts
        # (NVIDIA/k8s-device-plugin#992); at 0 it is only a leftover entry.
        if is_gpu_resource(resource) and resource not in plan.resources and count(have) != 0:
            out.append(
                Finding(
                    plan.name,
                    None,
                    "kube-allocatable",
                    f"{resource}: 0 (not planned)",
                    f"{resource}: {have}",
                    device_hint + " (restart it after a config or MIG change)",
                )
            )
    pods = allocatable.get("pods")
    if count(pods) != plan.kubelet.kubelet_max_pods:
        out.append(
            Finding(
                plan.name,
                None,
                "kube-pods",
                f"pods: {plan.kubelet.kubelet_max_pods}",
                f"pods: {pods}" if pods is not None else "no pods in status.allocatable",
                f"node {name}: check the kubelet's maxPods (kubelet_max_pods) and restart "
                "the kubelet",
            )
        )
    return out
