"""The canary pods of ``gpuprov verify --canary`` against the plan: did each start, on its node,
with a device of the node's planned GPUs or MIG instances?

Two inputs, both plain data: each canary pod as the API server showed it when its wait ended
(``outcome``: the Pod object and its events), and the node's probe document, read in the same
single probe round trip while the canaries still ran (its ``pod_resources`` section: the
kubelet's own record of the device ids it gave each container, and the GPUs with their MIG
devices' UUIDs). Findings:

- ``canary-pending``: the scheduler did not place the pod in time; found is its reason (the
  ``PodScheduled`` condition's message, "0/3 nodes are available: 1 Insufficient ...").
- ``canary-failed``: placed but not started (or ended): the container's reason, else the last
  warning event's (``FailedCreatePodSandBox`` with the runtime's error).
- ``canary-device``: started, but the kubelet lists no device for it, or a device that is not
  one of the plan's: a GPU the plan does not give that resource, a MIG device of another
  profile or outside the planned layout. A time-sliced replica id ``<uuid>::<n>`` is its GPU's
  (``REPLICA_ID_SEPARATOR``).

>>> planned_devices(plan, probe)["nvidia.com/mig-1g.10gb"]            # doctest: +SKIP
{'MIG-1b2c...', ...}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles.documents import one_line
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import CANARY_NAMESPACE, REPLICA_ID_SEPARATOR

PENDING, FAILED, DEVICE = "canary-pending", "canary-failed", "canary-device"
RUNNING, NOT_SCHEDULED, NOT_STARTED = "running", "not-scheduled", "not-started"
_MIG_RESOURCE = "nvidia.com/mig-"
_SHOWN = 400  # characters of a reason in a finding
CONTAINER = "canary"  # the canary pod's one container
# A waiting container's reasons that only say the kubelet is still at it (kubelet
# kuberuntime: the sandbox or the init containers first); why it is stuck is in the events.
_UNDER_WAY = ("ContainerCreating", "PodInitializing")


@dataclass(frozen=True)
class Canary:
    """One canary pod (``gpuprov.core.cluster.canary_pods``): which host and node it is for,
    which resource it asks one unit of, its name."""

    host: str
    node: str
    resource: str
    name: str


@dataclass(frozen=True)
class Outcome:
    """How a canary pod ended its wait: ``state`` (``running``, ``not-scheduled``,
    ``not-started``), the node it was placed on, and the reason in the API's words."""

    state: str
    node: str | None
    reason: str


def outcome(pod: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]] = ()) -> Outcome:
    """The outcome of a canary from its Pod object and the events about it.

    >>> outcome({"spec": {"nodeName": "n"}, "status": {"phase": "Running",
    ...     "containerStatuses": [{"state": {"running": {}}}]}})
    Outcome(state='running', node='n', reason='')
    >>> outcome({"spec": {}, "status": {"phase": "Pending", "conditions": [{"type":
    ...     "PodScheduled", "status": "False", "reason": "Unschedulable",
    ...     "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu."}]}}).reason
    'Unschedulable: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu.'
    """
    if not pod:
        return Outcome(NOT_SCHEDULED, None, "the pod is gone (deleted by someone else?)")
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    node = spec.get("nodeName") or None
    if node is None:
        scheduled = _condition(status, "PodScheduled")
        if scheduled and scheduled.get("message"):
            reason = f"{scheduled.get('reason') or 'Unschedulable'}: {scheduled['message']}"
        else:
            reason = _last_warning(events) or "the scheduler has not placed it (is it running?)"
        return Outcome(NOT_SCHEDULED, None, reason)
    statuses = status.get("containerStatuses") or []
    state = (statuses[0].get("state") if statuses else None) or {}
    if status.get("phase") == "Running" and "running" in state:
        return Outcome(RUNNING, node, "")
    for key in ("terminated", "waiting"):
        if key in state and (state[key] or {}).get("reason") not in (None, *_UNDER_WAY):
            detail = state[key]
            message = f": {detail['message']}" if detail.get("message") else ""
            return Outcome(NOT_STARTED, node, f"{detail['reason']}{message}")
    reason = _last_warning(events) or f"phase {status.get('phase') or 'unknown'}, not started"
    return Outcome(NOT_STARTED, node, reason)


def check(
    canary: Canary,
    result: Outcome,
    plan: HostPlan,
    probe: ProbeDocument | None,
    timeout: int,
) -> list[Finding]:
    """The findings for one canary of ``plan``'s host: none when it ran with a planned device."""
    asked = f"a pod asking for one {canary.resource}"
    if result.state == NOT_SCHEDULED:
        return [
            Finding(
                canary.host,
                None,
                PENDING,
                f"{asked} scheduled on {canary.node} within {timeout} s",
                _cut(result.reason),
                "check the node's allocatable, its taints and labels (`gpuprov verify "
                "--kubeconfig`) and that the device plugin runs on it",
            )
        ]
    if result.state == NOT_STARTED or result.node != canary.node:
        found = result.reason if result.node == canary.node else f"placed on {result.node}"
        return [
            Finding(
                canary.host,
                None,
                FAILED,
                f"{asked} running on {canary.node} within {timeout} s",
                _cut(found),
                f"`kubectl -n {CANARY_NAMESPACE} describe pod` shows the same; check the "
                "container runtime's nvidia entry and the image (canary_image)",
            )
        ]
    return _device_findings(canary, plan, probe)


def planned_devices(plan: HostPlan, probe: ProbeDocument) -> dict[str, set[str]]:
    """Resource -> the device UUIDs the plan gives it on this host, matched by UUID against
    the probe: a whole or time-sliced GPU's UUID; a planned MIG instance's MIG device UUIDs
    under ``nvidia.com/mig-<profile>`` (``mixed``) or every planned resource (``single``)."""
    by_index = {gpu["index"]: gpu for gpu in probe.gpus}
    gpus: set[str] = set()
    mig: dict[str, set[str]] = {}
    for planned in plan.gpus:
        gpu = by_index.get(planned.index)
        if gpu is None:
            continue
        if not planned.mig_enabled:
            gpus.add(gpu["uuid"])
            continue
        wanted = {(i.profile, i.start) for i in planned.instances}
        for gi in gpu.get("gpu_instances") or ():
            if (gi["profile"], gi["start"]) not in wanted:
                continue
            # NVIDIA's plugin names a profile's resource with "." for "+" (1g.10gb+me).
            name = gi["profile"].replace("+", ".")
            for ci in gi["compute_instances"]:
                if ci.get("uuid"):
                    mig.setdefault(name, set()).add(ci["uuid"])
    devices: dict[str, set[str]] = {}
    for resource in plan.resources:
        if resource.startswith(_MIG_RESOURCE):
            devices[resource] = mig.get(resource.removeprefix(_MIG_RESOURCE), set())
        elif plan.mig_strategy == "single" and mig:
            devices[resource] = set().union(*mig.values())
        else:
            devices[resource] = set(gpus)
    return devices


def _device_findings(canary: Canary, plan: HostPlan, probe: ProbeDocument | None) -> list[Finding]:
    def finding(found: str, hint: str) -> list[Finding]:
        expected = f"{canary.name} given one {canary.resource} device of the plan"
        return [Finding(canary.host, None, DEVICE, expected, _cut(found), hint)]

    if probe is None:
        return finding(
            "no probe document to read the kubelet's pod-resources from",
            "see the host's other findings (unreachable, agent, probe-document)",
        )
    section = probe.pod_resources
    if section is None:
        return finding(
            "the probe has no pod_resources section",
            "the host's agent predates pod-resources: run the deploy, then verify again",
        )
    rows = section.get("containers")
    if not isinstance(rows, list):
        why = rows["error"] if isinstance(rows, Mapping) else f"no socket {section['socket']}"
        return finding(
            f"the kubelet's pod-resources API: {why}",
            "check that the kubelet runs (its pod-resources socket is there while it does)",
        )
    given = [
        device
        for row in rows
        if (row["namespace"], row["pod"], row["container"], row["resource"])
        == (CANARY_NAMESPACE, canary.name, CONTAINER, canary.resource)
        for device in row["device_ids"]
    ]
    if len(given) != 1:
        return finding(
            f"the kubelet lists {len(given)} devices for it: {', '.join(given[:4]) or 'none'}",
            "the kubelet's device manager did not record the allocation; check its log",
        )
    planned = planned_devices(plan, probe)
    device = given[0].partition(REPLICA_ID_SEPARATOR)[0]
    if device not in planned.get(canary.resource, set()):
        return finding(
            f"{one_line(given[0])}, not a planned device of {canary.resource}",
            "the device plugin serves devices the plan does not give this resource (an old "
            "config or MIG layout?): run the deploy, then `gpuprov verify`",
        )
    return []


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return None


def _last_warning(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The newest warning event's ``reason: message``, a failure's (``Failed...``: the
    kubelet's reasons for what it could not do) before any other warning's."""
    warnings = [e for e in events if e.get("type") == "Warning"]
    failures = [e for e in warnings if str(e.get("reason", "")).startswith("Failed")]
    warnings = failures or warnings
    if not warnings:
        return None
    last = max(warnings, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f"{last.get('reason')}: {last.get('message', '')}".strip()


def _cut(text: str) -> str:
    """``text`` on one line, its middle cut past ``_SHOWN`` characters: a runtime's error
    wraps its cause (``fork/exec ...: no such file or directory``) at the end."""
    text = one_line(text)
    if len(text) <= _SHOWN:
        return text
    head = _SHOWN // 3
    return f"{text[:head]} ... {text[-(_SHOWN - head - 5) :]}"
