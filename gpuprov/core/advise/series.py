"""What a usage series measures and whose it is: DCGM metric names and the labels that name
the host, the GPU, the MIG instance and the Kubernetes workload.

Labels as the DCGM exporter writes them (internal/pkg/rendermetrics/render_metrics.go and
internal/pkg/transformation/const.go of NVIDIA/dcgm-exporter): ``Hostname``, ``gpu``, ``UUID``,
``modelName``, ``GPU_I_PROFILE`` and ``GPU_I_ID`` on MIG instances, and ``pod``, ``namespace``,
``container`` with the Kubernetes mapping (``pod_name``, ``pod_namespace``, ``container_name``
before 2.x). When Prometheus scrapes the exporter without ``honor_labels``, the exporter's own
``pod`` label wins and the workload's becomes ``exported_pod``: that one is the workload's.

>>> identity({"Hostname": "n1", "gpu": "0", "modelName": "NVIDIA A100-SXM4-80GB",
...           "pod": "dcgm-exporter-x", "exported_pod": "train-1", "exported_namespace": "ml"})
SeriesIdentity(host='n1', gpu='0', uuid='', model='NVIDIA A100-SXM4-80GB', mig_profile='', mig_instance='', namespace='ml', pod='train-1', container='')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuprov.core.errors import has_control, shown

# What a sample measures.
MEMORY = "memory"  # framebuffer used, MiB
GR_ACTIVE = "gr_active"  # ratio of time the graphics engine is active, 0-1
GPU_UTIL = "gpu_util"  # GPU utilisation, percent
COMPUTE_KINDS = (GR_ACTIVE, GPU_UTIL)

# DCGM exporter metric -> what it measures; None: read and ignored (known, not needed).
DCGM_METRICS: dict[str, str | None] = {
    "DCGM_FI_DEV_FB_USED": MEMORY,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": GR_ACTIVE,
    "DCGM_FI_DEV_GPU_UTIL": GPU_UTIL,
    "DCGM_FI_DEV_FB_FREE": None,
    "DCGM_FI_DEV_FB_RESERVED": None,
    "DCGM_FI_DEV_FB_TOTAL": None,
}
# The largest value each kind can take: a ratio past 1 or a percentage past 100 is not DCGM's.
MAXIMUM = {GR_ACTIVE: 1.0, GPU_UTIL: 100.0}

HOST_LABELS = ("Hostname", "hostname")
_WORKLOAD_LABELS = {
    "pod": ("exported_pod", "pod", "pod_name"),
    "namespace": ("exported_namespace", "namespace", "pod_namespace"),
    "container": ("exported_container", "container", "container_name"),
}
# Longest label value gpuprov keeps (Kubernetes names are at most 253 characters).
LABEL_MAX = 253


@dataclass(frozen=True)
class SeriesIdentity:
    """Whose a series is: a GPU (or MIG instance) of a host, and the workload on it, if any."""

    host: str
    gpu: str  # the GPU's index on its host, as text
    uuid: str
    model: str  # as the input names it: NVML product name or catalog alias
    mig_profile: str
    mig_instance: str
    namespace: str
    pod: str
    container: str

    @property
    def gpu_key(self) -> tuple[str, str]:
        """One physical GPU: (host, UUID or index)."""
        return (self.host, self.uuid or self.gpu)

    @property
    def workload(self) -> tuple[str, str, str] | None:
        """(namespace, pod, container), or None on a GPU no pod holds."""
        return (self.namespace, self.pod, self.container) if self.pod else None


def identity(labels: Mapping[str, str], default_model: str = "") -> SeriesIdentity | str:
    """The identity a series' labels give, or why they give none (a message)."""
    host = next((labels[k] for k in HOST_LABELS if labels.get(k)), "")
    if not host:
        return "no Hostname label: gpuprov needs to know each GPU's host"
    gpu = labels.get("gpu", "")
    if not gpu and labels.get("device", "").startswith("nvidia"):
        gpu = labels["device"].removeprefix("nvidia")
    uuid = labels.get("UUID", "") or labels.get("uuid", "")
    if not gpu and not uuid:
        return "no gpu or UUID label: gpuprov needs to know which GPU a series is"
    values = {
        "host": host,
        "gpu": gpu,
        "uuid": uuid,
        "model": labels.get("modelName", "") or default_model,
        "mig_profile": labels.get("GPU_I_PROFILE", ""),
        "mig_instance": labels.get("GPU_I_ID", ""),
    }
    for field, names in _WORKLOAD_LABELS.items():
        values[field] = next((labels[k] for k in names if k in labels), "")
    for field, value in values.items():
        problem = bad_name(value)
        if problem:
            return f"label {field}: {problem}"
    if gpu and not gpu.isdigit():
        return f"label gpu: must be the GPU's index, got {shown(gpu)}"
    if not values["model"]:
        return "no modelName label: name the GPU model with --gpu-model"
    return SeriesIdentity(**values)


def bad_name(value: str) -> str | None:
    """Why ``value`` cannot name a host, GPU or workload in an inventory or a message."""
    if len(value) > LABEL_MAX:
        return f"longer than {LABEL_MAX} characters"
    if has_control(value) or value != value.strip():
        return f"holds control characters or surrounding spaces: {shown(value)}"
    return None
