"""Everything the cluster needs from the plan, as YAML files: ConfigMaps, node labels and
taints, Helm values. Derived only from the plan (gpuprov.core.plan.build), never a second source.

>>> rendered = render(plan, namespace="nvidia-device-plugin")      # doctest: +SKIP
>>> sorted(rendered.device_plugin_configs)                         # doctest: +SKIP
['mig-mixed', 'shared-r4', 'whole']
>>> rendered.nodes[0].labels["nvidia.com/device-plugin.config"]    # doctest: +SKIP
'shared-r4'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from gpuprov.core.cluster import helm, mig_parted, npd, vgpu
from gpuprov.core.cluster.plugin_configs import config_name, host_config, plugin_defaults
from gpuprov.core.cluster.pools import (
    Taint,
    node_name,
    node_name_problem,
    pool_labels,
    pool_taints,
)
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.hostfiles.device_plugin import DevicePluginConfig
from gpuprov.core.plan import ClusterPlan
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
    MIG_CONFIG_LABEL,
    MIG_PARTED_CONFIGMAP,
    MIG_PARTED_CONFIGMAP_KEY,
    MPS_CAPABLE_LABEL,
    NPD_CONDITION,
    NPD_CONFIGMAP_KEY,
    OWNED_LABELS_ANNOTATION,
    OWNED_TAINTS_ANNOTATION,
    VGPU_NAMESPACE,
)

# gpuprov.core.cluster.queue_files' files, in the order they apply (CRD objects after the
# namespaces they live in).
QUEUE_FILES = ("kueue-queues.yaml", "volcano-queues.yaml", "volcano-scheduler-configmap.yaml")
FLEET_FILE = "fleet.yaml"  # kube render --fleet: gpuprov.core.cluster.fleet's objects
MIG_MANAGERS = ("gpuprov", "operator")  # who applies MIG: gpuprov's agent or the GPU Operator
DEFAULT_NAMESPACE = "nvidia-device-plugin"  # the device plugin chart's usual namespace


@dataclass(frozen=True)
class NodeState:
    """What gpuprov owns on one Kubernetes node."""

    name: str
    host: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]

    @property
    def annotations(self) -> dict[str, str]:
        """Which labels and taints gpuprov set, so a later run can remove the ones it no longer
        wants and leave every other owner's alone."""
        return {
            OWNED_LABELS_ANNOTATION: ",".join(sorted(self.labels)),
            OWNED_TAINTS_ANNOTATION: ",".join(f"{t.key}:{t.effect}" for t in self.taints),
        }

    def labels_object(self) -> dict[str, Any]:
        """The Node object gpuprov applies server-side: its labels and annotation only."""
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels, "annotations": self.annotations},
        }


@dataclass(frozen=True)
class Rendered:
    device_plugin_configs: dict[str, DevicePluginConfig]
    nodes: tuple[NodeState, ...]
    mig: mig_parted.PartedExport | None
    files: dict[str, tuple[str, list[Any]]]  # file name -> (comment header, YAML documents)
    warnings: tuple[str, ...]

    def file_text(self, name: str) -> str:
        header, documents = self.files[name]
        comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return comment + dump(documents)

    def config_maps(self) -> list[dict[str, Any]]:
        """The ConfigMaps, which ``gpuprov kube apply`` applies server-side (Nodes get a JSON
        patch instead: gpuprov.core.cluster.nodes says why)."""
        out = list(self.files["device-plugin-configmap.yaml"][1])
        out += self.files.get("vgpu-node-configmaps.yaml", ("", []))[1]
        return out + self.files.get("mig-parted-configmap.yaml", ("", []))[1]

    def fleet_objects(self) -> list[dict[str, Any]]:
        """The in-cluster deploy's objects of ``--fleet`` (gpuprov.core.cluster.fleet), if any."""
        return list(self.files.get(FLEET_FILE, ("", []))[1])

    def queue_objects(self) -> list[dict[str, Any]]:
        """The queue objects of ``--queues`` (gpuprov.core.cluster.queue_files), if any."""
        return [d for name in QUEUE_FILES if name in self.files for d in self.files[name][1]]

    def stream(self) -> str:
        """Every file as one multi-document YAML stream, each document headed by its file."""
        return "".join(f"---\n# file: {name}\n{self.file_text(name)}" for name in self.files)


def dump(documents: list[Any]) -> str:
    """A multi-document YAML stream, multi-line strings as ``|`` blocks."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False)


def render(
    cluster: ClusterPlan,
    namespace: str,
    mig_manager: str = "gpuprov",
    only: set[str] | None = None,
    vgpu_namespace: str = VGPU_NAMESPACE,
    node_problem_detector: bool = False,
) -> Rendered:
    """The manifests for ``cluster``; ``mig_manager`` says who applies MIG layouts;
    ``vgpu_namespace`` holds the vGPU plugins' node configs; ``node_problem_detector`` adds
    NPD's config for the critical XIDs (``gpuprov.core.cluster.npd``).

    ``only`` (host names) limits the nodes; the ConfigMaps always hold the configs of every
    host, since applying one that lacks a config would take it from the nodes using it.
    """
    # The default is always there, for nodes without the label.
    configs: dict[str, DevicePluginConfig] = {DEVICE_PLUGIN_DEFAULT_CONFIG: plugin_defaults()}
    mig = mig_parted.export(cluster.hosts) if mig_manager == "operator" else None
    nodes = []
    seen: dict[str, str] = {}
    problems = []
    for host in cluster.hosts:
        node = node_name(host)
        unusable = node_name_problem(host)
        if unusable:
            problems.append(
                Problem(cluster.inventory, unusable, host=host.name, key="kube_node_name")
            )
        if node in seen:
            problems.append(
                Problem(
                    cluster.inventory,
                    f"node {node} is also host {seen[node]}'s node",
                    host=host.name,
                    key="kube_node_name",
                )
            )
        seen[node] = host.name
        labels = {**pool_labels(host), **vgpu.node_labels(host)}
        # A vgpu node gets no NVIDIA device plugin config: without the label, the plugin's
        # DaemonSet (helm.device_plugin_chart's affinity) stays off it.
        if host.vgpu is None:
            config = host_config(host)
            configs[config_name(config)] = config
            labels[DEVICE_PLUGIN_CONFIG_LABEL] = config_name(config)
            if config.mps is not None:
                labels[MPS_CAPABLE_LABEL] = "true"
        if mig is not None and host.name in mig.host_configs:
            labels[MIG_CONFIG_LABEL] = mig.host_configs[host.name]
        if only is None or host.name in only:
            nodes.append(NodeState(node, host.name, labels, pool_taints(host)))
    if problems:
        raise InputError(problems)
    configs = dict(sorted(configs.items()))
    all_taints = [t for n in nodes for t in n.taints]
    mps_roots = sorted({c.mps_root for c in configs.values() if c.mps is not None})
    operator_values, warnings = helm.gpu_operator(
        list(cluster.hosts),
        all_taints,
        mig_manager == "operator",
        mps_roots[0] if mps_roots else None,
    )
    if mig is not None and mig.host_configs:
        warnings.insert(0, mig_parted.PLACEMENT_WARNING)
    if len(mps_roots) > 1:
        # The chart mounts one host directory for every node's MPS daemon and plugin.
        warnings.append(
            f"the device plugin chart and the GPU Operator have one mps.root for the whole "
            "cluster; the plan has "
            f"mps_root {' and '.join(mps_roots)}: values set {mps_roots[0]}"
        )

    files: dict[str, tuple[str, list[Any]]] = {}
    files["device-plugin-configmap.yaml"] = (
        f"NVIDIA device plugin configs, one per kind of host, from {cluster.inventory}.\n"
        f"Each node picks one with its {DEVICE_PLUGIN_CONFIG_LABEL} label (nodes.yaml).",
        [_config_map(DEVICE_PLUGIN_CONFIGMAP, namespace, _texts(configs))],
    )
    if mig is not None:
        files["mig-parted-configmap.yaml"] = (
            "mig-parted config for the GPU Operator's MIG manager; each node picks one with its\n"
            f"{MIG_CONFIG_LABEL} label.\n{mig_parted.PLACEMENT_WARNING}.",
            [_config_map(MIG_PARTED_CONFIGMAP, namespace, {MIG_PARTED_CONFIGMAP_KEY: mig.text()})],
        )
    vgpu_maps = vgpu.config_maps(cluster.hosts, vgpu_namespace)
    if vgpu_maps:
        files["vgpu-node-configmaps.yaml"] = (
            "Per-node configs of the vGPU device plugins (HAMi's, Volcano's), one entry per\n"
            "vgpu host (docs/vgpu.md).",
            vgpu_maps,
        )
    files["nodes.yaml"] = (
        "The labels gpuprov owns on each node. `gpuprov kube apply` sets them and keeps the\n"
        "others; by hand: kubectl label node NODE KEY=VALUE --overwrite",
        [n.labels_object() for n in nodes],
    )
    files["node-taints.yaml"] = (
        "The taints gpuprov owns on each node. `gpuprov kube apply` sets them and keeps\n"
        "other taints; by hand: kubectl taint node NODE TAINT --overwrite",
        [{n.name: [str(t) for t in n.taints] for n in nodes}],
    )
    files["device-plugin-values.yaml"] = (
        "Helm values for NVIDIA's nvidia-device-plugin chart (docs/kubernetes.md).",
        [helm.device_plugin_chart(all_taints, mps_roots[0] if mps_roots else None)],
    )
    files["gpu-operator-values.yaml"] = (
        "Helm values for NVIDIA's gpu-operator chart (docs/kubernetes.md).",
        [operator_values],
    )
    chart_values, vgpu_warnings = vgpu.chart_values(list(cluster.hosts), all_taints)
    warnings += vgpu_warnings
    for flavour, values in chart_values.items():
        chart = {"hami": "HAMi's hami", "volcano": "volcano-vgpu-device-plugin"}[flavour]
        files[f"{flavour}-values.yaml"] = (
            f"Helm values for the {chart} chart (docs/vgpu.md).",
            [values],
        )
    if node_problem_detector:
        files["node-problem-detector-configmap.yaml"] = _npd(cluster, warnings)
    return Rendered(configs, tuple(nodes), mig, files, tuple(warnings))


def _npd(cluster: ClusterPlan, warnings: list[str]) -> tuple[str, list[Any]]:
    """NPD runs one config on every node: the union of the hosts' critical XIDs."""
    sets = {tuple(h.health.health_critical_xids) for h in cluster.hosts}
    if len(sets) > 1:
        warnings.append(
            "hosts differ in health_critical_xids; Node Problem Detector's one config takes "
            "every host's codes"
        )
    critical = sorted({code for codes in sets for code in codes})
    return (
        "Node Problem Detector system log monitor: a critical GPU XID in the kernel log sets\n"
        f"the node condition {NPD_CONDITION} (docs/health.md). Mount it into NPD's DaemonSet\n"
        f"and run it with --config.system-log-monitor=/config/{NPD_CONFIGMAP_KEY}.",
        [npd.config_map(critical)],
    )


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the configs inside ConfigMaps) as readable ``|`` blocks."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def _texts(configs: dict[str, DevicePluginConfig]) -> dict[str, str]:
    return {
        name: yaml.safe_dump(config.document(), sort_keys=False) for name, config in configs.items()
    }


def _config_map(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }
