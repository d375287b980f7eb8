"""The cluster side of ``vgpu`` hosts: the per-node config each flavour's device plugin reads,
the node labels its DaemonSet selects, and Helm values for its chart.

Both flavours' plugins read a ConfigMap whose ``config.json`` holds a ``nodeconfig`` list, one
entry per node by name (HAMi chart templates/device-plugin/configmap.yaml and values
`devicePlugin.nodeConfiguration.externalConfigName`,
https://github.com/Project-HAMi/HAMi/blob/06e9e80522e7077658a6bcd290df390d18a0217e/charts/hami/templates/device-plugin/configmap.yaml;
Volcano's `volcano-vgpu-node-config`, "Node Configs" in
https://github.com/Project-HAMi/volcano-vgpu-device-plugin/blob/422418665d03b06dc54a2aa511f511b462258852/doc/config.md).
A plugin takes a value from its node's entry only when it is > 0, so gpuprov writes every one.

>>> node_entry(plan.host("gpu-a800-01"))["devicesplitcount"]      # doctest: +SKIP
10
>>> node_labels(plan.host("gpu-a800-01"))["gpu"]                  # doctest: +SKIP
'on'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from gpuprov.core.cluster.helm import tolerations
from gpuprov.core.cluster.pools import Taint, node_name
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    HAMI_NODE_CONFIGMAP,
    HAMI_NODE_LABEL,
    KUBELET_PLUGIN_MESSAGE_LIMIT,
    OPERATOR_DEVICE_PLUGIN_LABEL,
    VGPU_FLAVOUR_LABEL,
    VGPU_NODE_CONFIGMAP_KEY,
    VGPU_OPERATING_MODE,
    VOLCANO_COUNT_RESOURCE,
    VOLCANO_MEMORY_DEVICE_BYTES,
    VOLCANO_MEMORY_RESOURCE,
    VOLCANO_NODE_CONFIGMAP,
)

CONFIGMAPS = {"hami": HAMI_NODE_CONFIGMAP, "volcano": VOLCANO_NODE_CONFIGMAP}


def node_labels(plan: HostPlan) -> dict[str, str]:
    """The labels a ``vgpu`` node needs: the flavour (Volcano's chart selects it, see
    ``chart_values``), HAMi's ``gpu=on`` (its chart's `devicePlugin.nvidiaNodeSelector`), and
    the GPU Operator's device plugin gate off, so NVIDIA's plugin does not advertise the same
    GPUs a second time. {} for other hosts."""
    if plan.vgpu is None:
        return {}
    labels = {VGPU_FLAVOUR_LABEL: plan.vgpu.flavour, OPERATOR_DEVICE_PLUGIN_LABEL: "false"}
    if plan.vgpu.flavour == "hami":
        key, value = HAMI_NODE_LABEL
        labels[key] = value
    return labels


def node_entry(plan: HostPlan) -> dict[str, Any]:
    """The host's ``nodeconfig`` entry: HAMi-core mode (MIG stays off on vgpu hosts), its split
    count and scalings, no GPU filtered out."""
    assert plan.vgpu is not None
    return {
        "name": node_name(plan),
        "operatingmode": VGPU_OPERATING_MODE,
        "devicesplitcount": plan.vgpu.split_count,
        "devicememoryscaling": plan.vgpu.memory_scaling,
        "devicecorescaling": plan.vgpu.core_scaling,
        "migstrategy": "none",
        "filterdevices": {"uuid": [], "index": []},
    }


def config_maps(hosts: Iterable[HostPlan], namespace: str) -> list[dict[str, Any]]:
    """One node-config ConfigMap per flavour in use, entries sorted by node name."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        if host.vgpu is not None:
            entries.setdefault(host.vgpu.flavour, []).append(node_entry(host))
    out = []
    for flavour, nodes in sorted(entries.items()):
        text = json.dumps({"nodeconfig": sorted(nodes, key=lambda e: e["name"])}, indent=2)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAPS[flavour], "namespace": namespace},
                "data": {VGPU_NODE_CONFIGMAP_KEY: text + "\n"},
            }
        )
    return out


def chart_values(
    hosts: Sequence[HostPlan], taints: Iterable[Taint]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Helm values per flavour in use (``hami`` chart, ``volcano-vgpu-device-plugin`` chart),
    and warnings where one chart-wide value cannot match every host."""
    taints = list(taints)
    values: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    flavours = sorted({h.vgpu.flavour for h in hosts if h.vgpu})
    if "hami" in flavours:
        key, value = HAMI_NODE_LABEL
        values["hami"] = {
            "devicePlugin": {
                "nodeConfiguration": {"externalConfigName": HAMI_NODE_CONFIGMAP},
                "nvidiaNodeSelector": {key: value},
                "tolerations": tolerations(taints),
            }
        }
    if "volcano" in flavours:
        volcano = [h for h in hosts if h.vgpu and h.vgpu.flavour == "volcano"]
        # The planner refuses volcano hosts with different memory factors.
        factor = volcano[0].vgpu.memory_factor
        splits = sorted({h.vgpu.split_count for h in volcano})
        nvidia: dict[str, int] = {"gpuMemoryFactor": factor}
        if len(splits) == 1:
            nvidia["deviceSplitCount"] = splits[0]
        values["volcano"] = {
            "deviceConfig": {"nvidia": nvidia},
            # gpuprov renders volcano-vgpu-node-config itself (vgpu-node-configmaps.yaml).
            "nodeConfig": {"enabled": False},
            "nodeSelector": {VGPU_FLAVOUR_LABEL: "volcano"},
            "tolerations": tolerations(taints),
        }
        warnings += _memory_list_warnings(volcano)
        if len(splits) > 1:
            warnings.append(
                f"volcano hosts plan split counts {', '.join(map(str, splits))}: Volcano's "
                f"plugin registers {VOLCANO_COUNT_RESOURCE} from its one --device-split-count flag, "
                "so nodes planned with another count will show a different number in verify"
            )
    return values, warnings


def _memory_list_warnings(volcano: Sequence[HostPlan]) -> list[str]:
    """One warning per volcano host whose ``volcano.sh/vgpu-memory`` device list is more than the
    kubelet reads of one message: Volcano's plugin sends one device per memory unit at once, and
    the kubelet refuses the whole message (``ResourceExhausted``), so the node shows no vGPU
    memory at all.

    >>> _memory_list_warnings([])
    []
    """
    out = []
    most = KUBELET_PLUGIN_MESSAGE_LIMIT // VOLCANO_MEMORY_DEVICE_BYTES
    for host in volcano:
        assert host.vgpu is not None
        units = host.vgpu.advertised[VOLCANO_MEMORY_RESOURCE]
        if units > most:
            mib = units * host.vgpu.memory_factor
            need = -(-mib // most)  # the smallest factor that fits
            out.append(
                f"{host.name}: {units} {VOLCANO_MEMORY_RESOURCE} devices make a ListAndWatch "
                f"message of about {units * VOLCANO_MEMORY_DEVICE_BYTES} bytes, over the "
                f"kubelet's {KUBELET_PLUGIN_MESSAGE_LIMIT}-byte limit; set vgpu_memory_factor to "
                f"{need} or more (docs/vgpu.md)"
            )
    return out
