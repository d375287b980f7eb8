"""The kubelet's pod-resources API, read on the host: which devices each container was given.

The kubelet serves the gRPC service ``v1.PodResourcesLister`` on the unix socket
``/var/lib/kubelet/pod-resources/kubelet.sock`` (contract ``POD_RESOURCES_SOCKET``: kubernetes
v1.34.4 ``pkg/kubelet/kubelet.go`` ``ListenAndServePodResources`` listens on
``util.LocalEndpoint(kl.getPodResourcesDir(), podresources.Socket)``, the directory being
``<root-dir>/pod-resources`` by ``config.DefaultKubeletPodResourcesDirName`` in
``pkg/kubelet/config/defaults.go``). ``List`` answers for every pod the kubelet runs, not only
gpuprov's: its devices per container and resource, as the device plugin's ids (``GPU-<uuid>``,
``MIG-<uuid>``, ``GPU-<uuid>::<replica>`` when time-sliced).

Right after a kubelet restart that answer names no pod for a moment, though every pod still
runs: given the container runtime's CRI socket, the section waits (``POD_RESOURCES_SYNC_S`` at
most) until the kubelet names every pod the runtime runs, and says which it still does not
(``unlisted``; ``gpuprov.host.kubelet.runtime_pods``).

The messages are those of ``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` (v0.34.4)::

    message ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    message PodResources { string name = 1; string namespace = 2;
                           repeated ContainerResources containers = 3; }
    message ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ... }
    message ContainerDevices { string resource_name = 1; repeated string device_ids = 2; ... }

The request (``ListPodResourcesRequest {}``) is empty. The answer is decoded by the protobuf
wire format (https://protobuf.dev/programming-guides/encoding/): each field a varint key
(number << 3 | wire type), the fields read here all length-delimited; the fields gpuprov does
not read (CPU ids, memory, topology, dynamic resources) are skipped by their wire type, as any
protobuf parser skips what it does not know (``gpuprov.host.kubelet.protowire``). Stdlib
plus the bundle's ``h2`` (through ``gpuprov.host.kubelet.grpc_unary``).

>>> section("/nonexistent/kubelet.sock")
{'socket': '/nonexistent/kubelet.sock', 'containers': None}
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

from gpuprov.host.contract import (
    POD_RESOURCES_CONTAINERS_MAX,
    POD_RESOURCES_SYNC_S,
    POD_RESOURCES_TIMEOUT_S,
)
from gpuprov.host.kubelet import grpc_unary, protowire, runtime_pods

LIST = "/v1.PodResourcesLister/List"
_MAX_RESPONSE = 16 << 20  # the kubelet's own limit for a pod-resources answer is 16 MiB
_POLL_S = 0.5


class Listed(NamedTuple):
    """A ``ListPodResourcesResponse``: every pod it names (``namespace/name``), and one row per
    container and resource that has devices."""

    pods: list[str]
    rows: list[dict[str, Any]]


def section(
    path: str,
    runtime: str | None = None,
    timeout: float = POD_RESOURCES_TIMEOUT_S,
    sync: float = POD_RESOURCES_SYNC_S,
) -> dict[str, Any]:
    """The probe's ``pod_resources`` section: the socket, and one row per container and
    resource with devices (``pod``, ``namespace``, ``container``, ``resource``, ``device_ids``);
    ``containers`` is None when there is no socket (no kubelet), ``{"error": why}`` when the
    call failed or the answer did not decode or held more than
    ``POD_RESOURCES_CONTAINERS_MAX`` rows.

    With ``runtime`` (the container runtime's CRI socket) also ``unlisted``: the pods the
    runtime runs that the kubelet does not name, after waiting up to ``sync`` seconds for them
    ([] when it names them all); None when there is no such socket, ``{"error": why}`` when the
    runtime did not answer."""
    if not os.path.exists(path):
        return {"socket": path, "containers": None}
    deadline = time.monotonic() + sync
    while True:
        try:
            listed = read(path, timeout)
        except (grpc_unary.GrpcError, protowire.WireError) as e:
            return {"socket": path, "containers": {"error": str(e)}}
        unlisted = not_listed(runtime, listed.pods, timeout)
        if not unlisted or not isinstance(unlisted, list) or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    if len(listed.rows) > POD_RESOURCES_CONTAINERS_MAX:
        rows: Any = {"error": f"more than {POD_RESOURCES_CONTAINERS_MAX} rows"}
    else:
        rows = listed.rows
    out: dict[str, Any] = {"socket": path, "containers": rows}
    if runtime is not None:
        out["unlisted"] = unlisted
    return out


def read(path: str, timeout: float = POD_RESOURCES_TIMEOUT_S) -> Listed:
    """The kubelet's ``List`` at ``path``; GrpcError or WireError when there is none."""
    return listed(grpc_unary.call(path, LIST, b"", timeout, _MAX_RESPONSE))


def not_listed(runtime: str | None, pods: list[str], timeout: float) -> Any:
    """The pods (``namespace/name``) the container runtime at ``runtime`` runs that ``pods``
    (the kubelet's list) does not name, sorted; None without a runtime socket, ``{"error": why}``
    when the runtime does not answer."""
    if runtime is None or not os.path.exists(runtime):
        return None
    try:
        running = runtime_pods.running(runtime, timeout)
    except (grpc_unary.GrpcError, protowire.WireError) as e:
        return {"error": f"{runtime}: {e}"}
    return sorted(set(running) - set(pods))[:POD_RESOURCES_CONTAINERS_MAX]


def listed(message: bytes) -> Listed:
    """The pods and rows of a serialized ``ListPodResourcesResponse``, in the kubelet's order.

    >>> device = b"\\x0a\\x0envidia.com/gpu" + b"\\x12\\x05GPU-a"
    >>> container = b"\\x0a\\x01c" + b"\\x12" + bytes([len(device)]) + device
    >>> pod = b"\\x0a\\x01p\\x12\\x02ns\\x1a" + bytes([len(container)]) + container
    >>> idle = b"\\x0a\\x01q\\x12\\x02ns"
    >>> listed(b"\\x0a" + bytes([len(pod)]) + pod + b"\\x0a" + bytes([len(idle)]) + idle)
    Listed(pods=['ns/p', 'ns/q'], rows=[{'pod': 'p', 'namespace': 'ns', 'container': 'c', 'resource': 'nvidia.com/gpu', 'device_ids': ['GPU-a']}])
    """
    pods, rows = [], []
    for pod in protowire.repeated(message, 1, "ListPodResourcesResponse"):
        name = protowire.text(pod, 1, "PodResources.name")
        namespace = protowire.text(pod, 2, "PodResources.namespace")
        pods.append(f"{namespace}/{name}")
        for container in protowire.repeated(pod, 3, "PodResources"):
            container_name = protowire.text(container, 1, "ContainerResources.name")
            for devices in protowire.repeated(container, 2, "ContainerResources"):
                resource = protowire.text(devices, 1, "ContainerDevices.resource_name")
                ids = [
                    protowire.decoded(i, "ContainerDevices.device_ids")
                    for i in protowire.repeated(devices, 2, "ContainerDevices")
                ]
                rows.append(
                    {
                        "pod": name,
                        "namespace": namespace,
                        "container": container_name,
                        "resource": resource,
                        "device_ids": ids,
                    }
                )
    return Listed(pods, rows)
