"""Pods the container runtime runs that the kubelet does not list: a kubelet whose view of its
own node is not whole, so what verify reads of the pods' devices is not whole either.

Right after a restart the kubelet's pod-resources ``List`` names no pod for a moment; the probe
waits for it (``POD_RESOURCES_SYNC_S``) and says which pods the kubelet still does not name
(the ``pod_resources`` section's ``unlisted``: ``gpuprov.host.kubelet.runtime_pods``). Past that
wait it is a kubelet that has not taken its pods from the API server, or sandboxes the kubelet
does not own; either way the devices those pods hold are not counted. One finding,
``kubelet-pods-unlisted``, naming them. Pure: no I/O.

>>> check(plan, probe)[0].found                                       # doctest: +SKIP
'2 pods unlisted: ml/train-0, ml/train-1'
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import POD_RESOURCES_SYNC_S

CHECK = "kubelet-pods-unlisted"
_NAMED = 8  # pods named in the finding; the rest counted


def check(plan: HostPlan, probe: ProbeDocument) -> list[Finding]:
    """The finding when the kubelet does not list pods the runtime runs; [] otherwise (also
    when the probe did not compare them)."""
    section = probe.pod_resources
    unlisted = section.get("unlisted") if isinstance(section, Mapping) else None
    if not isinstance(unlisted, list) or not unlisted:
        return []
    named = ", ".join(unlisted[:_NAMED])
    more = f", and {len(unlisted) - _NAMED} more" if len(unlisted) > _NAMED else ""
    return [
        Finding(
            plan.name,
            None,
            CHECK,
            "the kubelet lists every pod the container runtime runs",
            f"{len(unlisted)} pods unlisted after {POD_RESOURCES_SYNC_S:.0f} s: {named}{more}",
            "the kubelet has not taken its pods from the API server (restarted and not "
            "synced: see `journalctl -u kubelet`), or the runtime runs sandboxes the kubelet "
            "does not own (`crictl pods`); the devices those pods hold are not counted",
        )
    ]
