"""Helm values for NVIDIA's device plugin chart and for the GPU Operator, matching the plan.

Both read the device plugin configs from gpuprov's ConfigMap (one key per config, chosen per
node by label) and tolerate gpuprov's pool taints, or their DaemonSets would stay off the pools.

>>> tolerations([Taint("gpuprov.io/pool", "mig", "NoSchedule")])[-1]
{'key': 'gpuprov.io/pool', 'operator': 'Exists'}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuprov.core.cluster.pools import Taint
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
    GPU_RESOURCE,
    MIG_DISABLED_CONFIG,
    MIG_PARTED_CONFIGMAP,
)

# The tolerations both charts ship by default (k8s-device-plugin
# deployments/helm/nvidia-device-plugin/values.yaml, gpu-operator values.yaml `daemonsets`);
# setting `tolerations` replaces them, so they are kept.
_DEFAULT_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
]


def tolerations(taints: Iterable[Taint]) -> list[dict[str, str]]:
    """The charts' default tolerations plus one ``Exists`` per gpuprov taint key."""
    keys = sorted({t.key for t in taints} - {GPU_RESOURCE, "CriticalAddonsOnly"})
    return _DEFAULT_TOLERATIONS + [{"key": key, "operator": "Exists"} for key in keys]


def device_plugin_chart(taints: Iterable[Taint], mps_root: str | None = None) -> dict[str, Any]:
    """Values for the ``nvidia-device-plugin`` chart: gpuprov's ConfigMap, its default, and the
    plugin only on nodes gpuprov labelled (no Node Feature Discovery needed); with MPS hosts,
    the chart's ``mps.root`` (the host directory its MPS control daemon and the plugin mount at
    /mps) set to their ``mps_root``."""
    values: dict[str, Any] = {
        "config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": DEVICE_PLUGIN_DEFAULT_CONFIG},
        "affinity": _on_gpuprov_nodes(),
        "tolerations": tolerations(taints),
    }
    if mps_root is not None:
        values["mps"] = {"root": mps_root}
    return values


def gpu_operator(
    hosts: list[HostPlan], taints: Iterable[Taint], mig_manager: bool, mps_root: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Values for the ``gpu-operator`` chart, and warnings where the plan cannot be matched.

    Driver and toolkit installed by gpuprov (``driver_version``, ``container_toolkit_version``)
    are disabled in the operator; the MIG manager is on only when it, not gpuprov, applies MIG.
    With MPS hosts, the device plugin's ``mps.root`` (ClusterPolicy ``devicePlugin.mps.root``,
    gpu-operator api/nvidia/v1/clusterpolicy_types.go MPSConfig) is their ``mps_root``.
    """
    warnings: list[str] = []
    values: dict[str, Any] = {}
    versions = (
        ("driver", "driver_version", lambda h: h.driver.driver_version),
        ("toolkit", "container_toolkit_version", lambda h: h.runtime.container_toolkit_version),
    )
    for operand, key, version in versions:
        managed = [h.name for h in hosts if version(h)]
        if managed:
            values[operand] = {"enabled": False}
            unmanaged = [h.name for h in hosts if not version(h)]
            if unmanaged:
                warnings.append(
                    f"{operand} disabled in the GPU Operator because gpuprov installs it on "
                    f"{len(managed)} hosts, but {key} is unset on {', '.join(unmanaged)}: "
                    "nothing installs it there"
                )
    values["devicePlugin"] = {
        "config": {
            "create": False,
            "name": DEVICE_PLUGIN_CONFIGMAP,
            "default": DEVICE_PLUGIN_DEFAULT_CONFIG,
        }
    }
    if mps_root is not None:
        values["devicePlugin"]["mps"] = {"root": mps_root}
    values["migManager"] = {"enabled": mig_manager}
    if mig_manager:
        values["migManager"]["config"] = {
            "create": False,
            "name": MIG_PARTED_CONFIGMAP,
            "default": MIG_DISABLED_CONFIG,
        }
    # The operator passes one MIG strategy to every device plugin (MIG_STRATEGY, which wins
    # over the config file): per-node strategies cannot survive it.
    strategies = sorted({h.mig_strategy for h in hosts if h.mig_strategy})
    strategy = strategies[0] if len(strategies) == 1 else "mixed"
    if not strategies and mps_root is not None:
        # The plugin refuses MPS under mixed; single is full GPUs where MIG is off.
        strategy = "single"
    values["mig"] = {"strategy": strategy}
    if len(strategies) > 1:
        warnings.append(
            "the GPU Operator sets one MIG strategy for the whole cluster; the plan has "
            f"{' and '.join(strategies)}: every node gets mixed"
        )
    if mps_root is not None and strategy == "mixed":
        warnings.append(
            "the GPU Operator gives every device plugin MIG strategy mixed, and the plugin "
            "refuses MPS with it ('using --mig-strategy=mixed is not supported with MPS'): the "
            "MPS nodes need the device plugin chart, or every mig host mig_strategy single"
        )
    values["daemonsets"] = {"tolerations": tolerations(taints)}
    return values, warnings


def _on_gpuprov_nodes() -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": DEVICE_PLUGIN_CONFIG_LABEL, "operator": "Exists"}
                        ]
                    }
                ]
            }
        }
    }
