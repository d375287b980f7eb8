"""Do NVIDIA's device plugin and gpuprov agree on which GPUs are unhealthy? Pure: no I/O.

Two views of one host's GPUs (docs/health.md, "Two views"):

- **gpuprov's**: the health findings of verify's probe (``gpuprov.core.checks.health``): the GPUs
  with a critical XID in the kernel log since boot, uncorrectable ECC errors, a pending or failed
  row remapping, a pending retired page.
- **the device plugin's**, as the kubelet reports it on the Node: for every extended resource the
  kubelet's ``status.capacity`` counts all the devices a plugin listed and ``status.allocatable``
  only the healthy ones (kubelet ``pkg/kubelet/cm/devicemanager/manager.go``, ``GetCapacity``:
  capacity from healthy plus unhealthy devices, allocatable from healthy ones), so
  capacity − allocatable is the number of devices the plugin marked unhealthy. The plugin marks a
  GPU's devices unhealthy on an XID event it does not skip (NVIDIA/k8s-device-plugin
  ``internal/rm/health.go``).

The counts name no GPU, so they are mapped to GPUs through the plan: a GPU gpuprov finds
unhealthy should cost the node exactly that GPU's devices (``gpu_resources``: its shares, MIG
instances or the card). Any other count, per resource, is a ``health-disagreement`` finding;
NVIDIA's plugin v0.20.0 marks only one device per GPU and resource (one of a GPU's time-slicing
shares, measured in the lab), which this names as the GPU's other devices still offered.

>>> plan = build(load("inventories/lab.py")).host("lab-a100-01")           # doctest: +SKIP
>>> compare(plan, {2}, {"nvidia.com/gpu.shared": 32}, {"nvidia.com/gpu.shared": 28})  # doctest: +SKIP
[]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpuprov.core.checks import health, probe_document
from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan, gpu_resources

CHECK = "health-disagreement"
# Findings that mean verify has no reading of the host's GPUs, so no view of their health.
NO_READING = frozenset({"unreachable", "nvml", probe_document.CHECK})


def unhealthy_gpus(findings: Sequence[Finding]) -> set[int] | None:
    """The GPU indices gpuprov finds unhealthy on one host; None when it cannot tell which
    (no reading of the host, or a health finding of the host as a whole, e.g. an XID on a bus
    NVML no longer lists).

    >>> unhealthy_gpus([Finding("h", 2, "xid", "", "", ""), Finding("h", 0, "mig-mode", "", "", "")])
    {2}
    >>> unhealthy_gpus([Finding("h", None, "unreachable", "", "", "")]) is None
    True
    """
    if any(f.check in NO_READING for f in findings):
        return None
    sick = [f for f in findings if f.check in health.FINDINGS]
    if any(f.gpu is None for f in sick):
        return None
    return {f.gpu for f in sick if f.gpu is not None}


def compare(
    plan: HostPlan,
    sick: set[int],
    capacity: Mapping[str, int | None],
    allocatable: Mapping[str, int | None],
) -> list[Finding]:
    """The disagreements between gpuprov's unhealthy GPUs ``sick`` and the device plugin's
    unhealthy devices (``capacity`` − ``allocatable`` of the Node, counts per resource).

    >>> [f.found for f in compare(plan, set(), {"nvidia.com/gpu.shared": 32},
    ...                           {"nvidia.com/gpu.shared": 28})]          # doctest: +SKIP
    ['nvidia.com/gpu.shared: 4 of 32 unhealthy per the device plugin (Node capacity 32, allocatable 28)']
    """
    expected: Counter[str] = Counter()
    for gpu in plan.gpus:
        if gpu.index in sick:
            expected.update(gpu_resources(plan.mode, gpu, plan.sharing, plan.mig_strategy))
    found = {
        name: capacity[name] - (allocatable.get(name) or 0)
        for name in plan.resources
        if capacity.get(name) is not None
    }
    out = []
    for name in sorted(set(found) | set(expected)):
        want, have = expected.get(name, 0), found.get(name, 0)
        if want == have or name not in found:
            continue  # equal, or the kubelet lists no such resource (kube-allocatable says so)
        gpus = sorted(sick)
        out.append(
            Finding(
                plan.name,
                gpus[0] if len(gpus) == 1 and have < want else None,
                CHECK,
                f"{name}: {want} unhealthy ({_whose(gpus)}, as gpuprov's health finds)",
                f"{name}: {have} of {capacity[name]} unhealthy per the device plugin "
                f"(Node capacity {capacity[name]}, allocatable {allocatable.get(name)})",
                _hint(have > want, gpus),
            )
        )
    return out


def _whose(gpus: Sequence[int]) -> str:
    if not gpus:
        return "every GPU healthy"
    return "GPU " + ", ".join(map(str, gpus))


def _hint(plugin_sees_more: bool, gpus: Sequence[int]) -> str:
    if plugin_sees_more:
        return (
            "the device plugin marked devices unhealthy that gpuprov finds healthy: an XID it "
            "does not skip but health_critical_xids leaves out (e.g. 94), or NVML failing its "
            "event wait; read its log for 'marking device as unhealthy' or 'marking all devices', "
            "add the XID to health_critical_xids if it should count; the plugin keeps the devices "
            "unhealthy until it restarts"
        )
    return (
        f"the device plugin still offers {_whose(gpus)}: it judges only the XID events it saw "
        "while running (not ECC counts, row remapping, retired pages, nor XIDs from before it "
        "started); cordon the node (gpuprov verify --cordon-unhealthy) and drain it"
    )
