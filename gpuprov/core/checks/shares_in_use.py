"""Pods running on devices the plan no longer has: capacity lowered under running pods.

When a change lowers what a node offers (time-slicing replicas 4 -> 2, a MIG profile taken off
a GPU by a layout that could not destroy the instance a pod holds), neither the kubelet nor the
device plugin stops the pods already given a device: the plugin advertises the new devices
only, the Node's allocatable drops, and the pods keep the allocation they were admitted with
(measured in the lab: docs/kubernetes.md, "What each change disrupts"). The scheduler then sees
more in use than allocatable and places nothing new there, which is right, but the node is
running beyond its plan until those pods end.

The probe's ``pod_resources`` section (the kubelet's pod-resources ``List``) says which device
each container holds. A held device of a planned resource that is not one of the plan's
devices is beyond the planned capacity: a time-sliced replica id ``<uuid>::<n>`` with ``n`` at
or past the planned replicas, a GPU the plan does not give that resource, a MIG device outside
the planned layout (the planned devices: ``gpuprov.core.checks.canary.planned_devices``). One
finding per resource, ``shares-beyond-capacity``, naming the pods. Pure: no I/O.

>>> check(plan, probe)[0].found                                       # doctest: +SKIP
'20 in use, 4 beyond it: ns/share-03 (GPU-…::2), …'
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuprov.core.checks.canary import planned_devices
from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import REPLICA_ID_SEPARATOR

CHECK = "shares-beyond-capacity"
_NAMED = 8  # pods named in a finding; the rest counted


def check(plan: HostPlan, probe: ProbeDocument) -> list[Finding]:
    """One finding per planned resource with devices in use that the plan does not have."""
    if plan.mode == "vgpu":
        return []  # HAMi's and Volcano's plugins name their devices in their own way
    section = probe.pod_resources
    rows = section.get("containers") if isinstance(section, Mapping) else None
    if not isinstance(rows, list):
        return []  # not read, no kubelet, or an error the canary reports
    planned = planned_devices(plan, probe)
    replicas = plan.sharing.replicas if plan.sharing is not None else None
    findings = []
    for resource, count in plan.resources.items():
        held = [
            (f"{row['namespace']}/{row['pod']}", device)
            for row in rows
            if row["resource"] == resource
            for device in row["device_ids"]
        ]
        beyond = [
            (pod, device)
            for pod, device in held
            if not _planned(device, planned.get(resource, set()), replicas)
        ]
        if not beyond:
            continue
        named = ", ".join(f"{pod} ({device})" for pod, device in beyond[:_NAMED])
        more = f", and {len(beyond) - _NAMED} more" if len(beyond) > _NAMED else ""
        findings.append(
            Finding(
                plan.name,
                None,
                CHECK,
                f"at most {count} {resource} in use, on the plan's devices",
                f"{len(held)} in use, {len(beyond)} beyond it: {named}{more}",
                "capacity was lowered under running pods, which keep their devices until they "
                "end: move those pods (delete them; their controllers place them again within "
                "the plan) or plan the capacity back",
            )
        )
    return findings


def _planned(device: str, devices: set[str], replicas: int | None) -> bool:
    base, separator, replica = device.partition(REPLICA_ID_SEPARATOR)
    if base not in devices:
        return False
    if not separator or replicas is None:
        return True
    return replica.isdigit() and int(replica) < replicas
