"""What the kubelet registered from the device plugin, on the node, against the plan.

The probe's ``kubelet_devices`` section carries the kubelet's device-manager checkpoint (device
ids per resource; ``gpuprov.host.kubelet.checkpoint`` reads it) and the names of the sockets in its
device-plugin directory. Each planned resource (``HostPlan.resources``: time-sliced GPUs x
replicas under the planned name, each ``nvidia.com/mig-<profile>`` in MIG ``mixed``,
``nvidia.com/gpu`` for ``single`` and whole cards) must be *served*:

- the checkpoint lists that many device ids for it, and
- NVIDIA's plugin has its socket for it (``nvidia-<name>.sock``, ``device_plugin_socket``).

Both, because the checkpoint alone lies for a while: the kubelet keeps a stopped plugin's
devices for ``endpointStopGracePeriod`` (5 minutes, kubernetes pkg/kubelet/cm/devicemanager
types.go) without rewriting the file, while the plugin's socket goes with the plugin
(docs/kubernetes.md, measured with the real kubelet).

Resources the plan does not have: one that a live socket serves is drift (the plugin still
advertises an old config or MIG layout, NVIDIA/k8s-device-plugin#992). One that is only in the
checkpoint is the previous config's leftover: after a config or MIG change the kubelet keeps the
replaced resource for the same grace period, so it is not reported. Sockets and resources
outside ``nvidia.com`` (other vendors' plugins) are not gpuprov's business.

On a ``vgpu`` host the flavour's own plugin (HAMi's or Volcano's) serves the planned resources,
under socket names of its own, so there only the checkpoint's counts are compared; a socket of
NVIDIA's plugin for a resource the plan does not have is still drift (the GPUs advertised twice).
Volcano's plugin names its sockets as NVIDIA's would (``VOLCANO_PLUGIN_SOCKETS``), so on a
volcano host those three are its own, not a leftover.

Every problem is a finding naming the host and, where there is one, the resource: no checkpoint,
a malformed one, no ``kubelet.sock`` (no kubelet device manager running), a section the probe
did not write. Nothing here raises on what a host sends.

>>> from gpuprov.core.findings import Finding                               # doctest: +SKIP
>>> [f.check for f in check(plan, probe, "python3 agent.pyz probe ...")]  # doctest: +SKIP
['device-plugin-socket']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles.documents import one_line
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    KUBELET_DEVICE_CHECKPOINT_NAME,
    KUBELET_DEVICE_PLUGIN_DIR,
    KUBELET_SOCKET_NAME,
    VOLCANO_PLUGIN_SOCKETS,
    device_plugin_resource,
    device_plugin_socket,
)
from gpuprov.host.kubelet.checkpoint import CheckpointError, registered_devices

NOT_YET = (
    "or, for a host whose kubelet or device plugin does not run yet, set "
    "verify_kubelet_devices: False"
)


def check(plan: HostPlan, probe: ProbeDocument, command: str) -> list[Finding]:
    """Findings for ``plan``'s resources against the probe's ``kubelet_devices`` section;
    ``command`` is the probe command that writes the section (for the hint when it is missing)."""
    section = probe.kubelet_devices
    if section is None:
        return [
            Finding(
                plan.name,
                None,
                "kubelet-devices",
                "the probe's kubelet_devices section",
                "not in the probe document",
                f"probe with the kubelet's device-plugin directory: {command}",
            )
        ]
    directory = section["directory"]
    if directory != KUBELET_DEVICE_PLUGIN_DIR:
        # The kubelet's device manager uses this one directory (its --root-dir is not
        # gpuprov's to move): a section read elsewhere says nothing about what it registered.
        return [
            Finding(
                plan.name,
                None,
                "kubelet-devices",
                f"the probe's kubelet_devices section read from {KUBELET_DEVICE_PLUGIN_DIR}",
                f"read from {one_line(directory)[:200]}",
                f"probe the kubelet's device-plugin directory: {command}",
            )
        ]
    sockets = section["sockets"]
    out = _sockets_findings(plan.name, directory, sockets)
    served = set(sockets) if isinstance(sockets, list) else set()
    registered, problem = _registered(section["checkpoint"])
    path = f"{directory}/{KUBELET_DEVICE_CHECKPOINT_NAME}"
    for resource, planned in plan.resources.items():
        want = f"{resource}: {planned} devices registered with the kubelet"
        if registered is None:
            out.append(_finding(plan, "kubelet-checkpoint", want, f"{path}: {problem}", resource))
            continue
        have = len(registered.get(resource, ()))
        if have != planned:
            found = f"{resource}: {have}" if resource in registered else f"no {resource}"
            out.append(_finding(plan, "kubelet-devices", want, found, resource))
        socket = None if plan.vgpu else device_plugin_socket(resource)
        if socket is not None and socket not in served and isinstance(sockets, list):
            out.append(
                Finding(
                    plan.name,
                    None,
                    "device-plugin-socket",
                    f"{resource} served by the device plugin ({socket} in {directory})",
                    f"no {socket}" + (f" (the kubelet still lists {have} devices)" if have else ""),
                    "start the device plugin (the kubelet keeps a stopped plugin's devices "
                    "for 5 minutes after its socket is gone)",
                )
            )
    if plan.vgpu is not None and plan.vgpu.flavour == "volcano":
        served -= set(VOLCANO_PLUGIN_SOCKETS)  # Volcano's own plugin, not NVIDIA's
    for socket in sorted(served):
        resource = device_plugin_resource(socket)
        if resource is not None and resource not in plan.resources:
            out.append(
                Finding(
                    plan.name,
                    None,
                    "device-plugin-socket",
                    f"no {resource} (not planned)",
                    f"{socket} in {directory}: the device plugin serves {resource}",
                    "restart the device plugin (device_plugin_reload_command): it still "
                    "advertises an old config or MIG layout (NVIDIA/k8s-device-plugin#992)",
                )
            )
    return out


def _sockets_findings(host: str, directory: str, sockets: Any) -> list[Finding]:
    """The kubelet's own socket, or why the sockets could not be listed."""
    if isinstance(sockets, list) and KUBELET_SOCKET_NAME in sockets:
        return []
    if sockets is None:
        found = f"no directory {directory}"
    elif isinstance(sockets, list):
        found = f"no {KUBELET_SOCKET_NAME} in {directory}"
    else:
        found = f"{directory} not listed: {one_line(sockets['error'])}"
    return [
        Finding(
            host,
            None,
            "kubelet-socket",
            f"the kubelet's device manager ({directory}/{KUBELET_SOCKET_NAME})",
            found,
            f"start the kubelet (systemctl status kubelet), {NOT_YET}",
        )
    ]


def _registered(checkpoint: Any) -> tuple[dict[str, list[str]] | None, str]:
    """(resource -> device ids, "") or (None, why there are none to compare)."""
    if checkpoint is None:
        return None, "no such file (the kubelet writes it once a device plugin registers)"
    if isinstance(checkpoint, Mapping):
        return None, f"not read: {one_line(checkpoint['error'])}"
    try:
        return registered_devices(checkpoint), ""
    except CheckpointError as e:
        return None, f"malformed: {one_line(str(e))[:200]}"


def _finding(plan: HostPlan, check: str, expected: str, found: str, resource: str) -> Finding:
    hints = {
        "kubelet-checkpoint": f"check that the kubelet and the device plugin run, {NOT_YET}",
        "kubelet-devices": "check the device plugin's config "
        f"({plan.device_plugin.device_plugin_config_path}) and the GPUs' MIG state, then restart "
        f"the plugin (device_plugin_reload_command) so it registers {resource} again",
    }
    return Finding(plan.name, None, check, expected, found, hints[check])
