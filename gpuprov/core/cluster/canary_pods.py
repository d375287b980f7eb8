"""The canary pods of ``gpuprov verify --canary``: one per node and planned resource.

Each asks for one unit of one resource the node's device plugin serves, and is placed by the
real scheduler through what ``gpuprov kube render`` gives the node's pool: a node selector on
the pool's labels, a toleration of each of its taints, plus a node affinity on the node's name
(``matchFields metadata.name``, which the scheduler evaluates; the pod is not bound by hand), so
each node gets its own canary. They live in their own namespace (``CANARY_NAMESPACE``) with
gpuprov's labels, the run's id in ``CANARY_LABEL``; the host and resource are annotations (a
resource name holds a ``/``, which a label value may not).

Only resources of NVIDIA's device plugin get a canary: a ``vgpu`` host's resources are
scheduled by HAMi's or Volcano's scheduler, which a lone pod cannot stand in for.

>>> found = canaries(cluster.hosts, manifests.render(cluster, "x").nodes)  # doctest: +SKIP
>>> pod(found[0], plan, node, "run-1", "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04",
...     ["sleep", "600"])["spec"]["containers"][0]["resources"]             # doctest: +SKIP
{'limits': {'nvidia.com/gpu.shared': 1}}
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gpuprov.core.checks.canary import CONTAINER, Canary
from gpuprov.core.cluster.manifests import NodeState
from gpuprov.core.cluster.pools import pool_labels
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    CANARY_HOST_ANNOTATION,
    CANARY_LABEL,
    CANARY_NAMESPACE,
    CANARY_RESOURCE_ANNOTATION,
    KUBE_FIELD_MANAGER,
    MANAGED_BY_LABEL,
    device_plugin_socket,
)

_NAME_MAX = 63  # a pod's name is its hostname: keep it a DNS label


def canaries(plans: list[HostPlan] | tuple[HostPlan, ...], nodes: list[NodeState]) -> list[Canary]:
    """The canaries for ``plans``, one per planned resource of NVIDIA's device plugin, on the
    nodes ``gpuprov kube render`` gives them (``nodes``)."""
    by_host = {n.host: n for n in nodes}
    found = []
    for plan in plans:
        node = by_host.get(plan.name)
        if node is None or plan.vgpu is not None:
            continue
        for resource in sorted(plan.resources):
            if device_plugin_socket(resource) is None or plan.resources[resource] < 1:
                continue
            found.append(Canary(plan.name, node.name, resource, pod_name(node.name, resource)))
    return found


def pod_name(node: str, resource: str) -> str:
    """A DNS-label pod name for ``resource`` on ``node``, unique by a short hash of both.

    >>> pod_name("lab-a100-01", "nvidia.com/gpu.shared")
    'lab-a100-01-gpu-shared-8538a4'
    """
    digest = hashlib.sha256(f"{node}\0{resource}".encode()).hexdigest()[:6]
    readable = re.sub(r"[^a-z0-9]+", "-", f"{node}-{resource.rpartition('/')[2]}".lower())
    return f"{readable[: _NAME_MAX - 7].strip('-')}-{digest}"


def pod(
    canary: Canary, plan: HostPlan, node: NodeState, run: str, image: str, command: list[str]
) -> dict[str, Any]:
    """The canary's Pod: one container asking for one unit of its resource, placed on its
    node's pool (``plan``'s pool labels, ``node``'s taints) by the scheduler, never restarted,
    gone a second after it is deleted."""
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(command),
        "resources": {"limits": {canary.resource: 1}},
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node.name]}
                        ]
                    }
                ]
            }
        }
    }
    tolerations = [
        {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
        if t.value
        else {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in node.taints
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": canary.name,
            "namespace": CANARY_NAMESPACE,
            "labels": {MANAGED_BY_LABEL: KUBE_FIELD_MANAGER, CANARY_LABEL: run},
            "annotations": {
                CANARY_HOST_ANNOTATION: canary.host,
                CANARY_RESOURCE_ANNOTATION: canary.resource,
            },
        },
        "spec": {
            "nodeSelector": pool_labels(plan),
            "affinity": affinity,
            "tolerations": tolerations,
            "restartPolicy": "Never",
            # The canary resolves no name: the node's resolver, not a cluster DNS it may lack.
            "dnsPolicy": "Default",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [container],
        },
    }


def namespace() -> dict[str, Any]:
    """The canaries' Namespace, with gpuprov's label."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": CANARY_NAMESPACE, "labels": {MANAGED_BY_LABEL: KUBE_FIELD_MANAGER}},
    }
