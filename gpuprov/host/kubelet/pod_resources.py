"""The kubelet's pod-resources API, read on the host: which devices each container was given.

The kubelet serves the gRPC service ``v1.PodResourcesLister`` on the unix socket
``/var/lib/kubelet/pod-resources/kubelet.sock`` (contract ``POD_RESOURCES_SOCKET``: kubernetes
v1.34.4 ``pkg/kubelet/kubelet.go`` ``ListenAndServePodResources`` listens on
``util.LocalEndpoint(kl.getPodResourcesDir(), podresources.Socket)``, the directory being
``<root-dir>/pod-resources`` by ``config.DefaultKubeletPodResourcesDirName`` in
``pkg/kubelet/config/defaults.go``). ``List`` answers for every pod the kubelet runs, not only
gpuprov's: its devices per container and resource, as the device plugin's ids (``GPU-<uuid>``,
``MIG-<uuid>``, ``GPU-<uuid>::<replica>`` when time-sliced).

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
protobuf parser skips what it does not know. Stdlib plus the bundle's ``h2`` (through
``gpuprov.host.kubelet.grpc_unary``).

>>> section("/nonexistent/kubelet.sock")
{'socket': '/nonexistent/kubelet.sock', 'containers': None}
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from gpuprov.host.contract import POD_RESOURCES_CONTAINERS_MAX, POD_RESOURCES_TIMEOUT_S
from gpuprov.host.kubelet import grpc_unary

LIST = "/v1.PodResourcesLister/List"
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MAX_RESPONSE = 16 << 20  # the kubelet's own limit for a pod-resources answer is 16 MiB


class PodResourcesError(ValueError):
    """The answer is not a ``ListPodResourcesResponse``; the message says where."""


def section(path: str, timeout: float = POD_RESOURCES_TIMEOUT_S) -> dict[str, Any]:
    """The probe's ``pod_resources`` section: the socket, and one row per container and
    resource with devices (``pod``, ``namespace``, ``container``, ``resource``, ``device_ids``);
    ``containers`` is None when there is no socket (no kubelet), ``{"error": why}`` when the
    call failed or the answer did not decode or held more than
    ``POD_RESOURCES_CONTAINERS_MAX`` rows."""
    if not os.path.exists(path):
        return {"socket": path, "containers": None}
    try:
        answer = grpc_unary.call(path, LIST, b"", timeout, _MAX_RESPONSE)
        rows = list_response(answer)
    except (grpc_unary.GrpcError, PodResourcesError) as e:
        return {"socket": path, "containers": {"error": str(e)}}
    if len(rows) > POD_RESOURCES_CONTAINERS_MAX:
        return {
            "socket": path,
            "containers": {"error": f"more than {POD_RESOURCES_CONTAINERS_MAX} rows"},
        }
    return {"socket": path, "containers": rows}


def list_response(message: bytes) -> list[dict[str, Any]]:
    """The rows of a serialized ``ListPodResourcesResponse``: one per container and resource
    that has devices, in the kubelet's order.

    >>> device = b"\\x0a\\x0envidia.com/gpu" + b"\\x12\\x05GPU-a"
    >>> container = b"\\x0a\\x01c" + b"\\x12" + bytes([len(device)]) + device
    >>> pod = b"\\x0a\\x01p\\x12\\x02ns\\x1a" + bytes([len(container)]) + container
    >>> list_response(b"\\x0a" + bytes([len(pod)]) + pod)
    [{'pod': 'p', 'namespace': 'ns', 'container': 'c', 'resource': 'nvidia.com/gpu', 'device_ids': ['GPU-a']}]
    """
    rows = []
    for pod in _repeated(message, 1, "ListPodResourcesResponse"):
        name = _text(pod, 1, "PodResources.name")
        namespace = _text(pod, 2, "PodResources.namespace")
        for container in _repeated(pod, 3, "PodResources"):
            container_name = _text(container, 1, "ContainerResources.name")
            for devices in _repeated(container, 2, "ContainerResources"):
                resource = _text(devices, 1, "ContainerDevices.resource_name")
                ids = [
                    _decoded(i, "ContainerDevices.device_ids")
                    for i in _repeated(devices, 2, "ContainerDevices")
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
    return rows


def _repeated(message: bytes, number: int, where: str) -> list[bytes]:
    """Every length-delimited value of field ``number`` in ``message``."""
    values = []
    for field, wire, value in _fields(message, where):
        if field == number:
            if wire != _LEN:
                raise PodResourcesError(f"{where} field {number}: wire type {wire}, not bytes")
            values.append(value)
    return values


def _text(message: bytes, number: int, where: str) -> str:
    """A proto3 string field: its last value (proto's rule for a repeated scalar), '' if absent."""
    values = _repeated(message, number, where)
    return _decoded(values[-1], where) if values else ""


def _decoded(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise PodResourcesError(f"{where}: not UTF-8") from None


def _fields(message: bytes, where: str) -> Iterator[tuple[int, int, bytes]]:
    """``(number, wire type, value)`` of each field; a length-delimited value as its bytes, the
    others as their raw bytes (not read here)."""
    at = 0
    while at < len(message):
        key, at = _varint(message, at, where)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise PodResourcesError(f"{where}: field number 0")
        if wire == _VARINT:
            start = at
            _, at = _varint(message, at, where)
        elif wire in (_I64, _I32):
            start, at = at, at + (8 if wire == _I64 else 4)
        elif wire == _LEN:
            length, start = _varint(message, at, where)
            at = start + length
        else:  # groups (3, 4) are proto2 only; 6, 7 do not exist
            raise PodResourcesError(f"{where}: wire type {wire}")
        if at > len(message):
            raise PodResourcesError(f"{where}: field {number} runs past the message")
        yield number, wire, message[start:at]


def _varint(message: bytes, at: int, where: str) -> tuple[int, int]:
    """The base-128 varint at ``at`` and the offset after it (at most 10 bytes: 64 bits)."""
    value = 0
    for shift in range(0, 70, 7):
        if at >= len(message):
            raise PodResourcesError(f"{where}: a varint runs past the message")
        byte = message[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
    raise PodResourcesError(f"{where}: a varint longer than 10 bytes")
