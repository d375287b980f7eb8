"""The pods the container runtime runs, as its CRI ``ListPodSandbox`` names them: what the
kubelet's pod-resources ``List`` must name too before its answer is the node's whole story.

Right after the kubelet (re)starts, its pod-resources ``List`` answers from a pod manager that
has not yet taken the API server's pods: it names no pod at all while every container still
runs and holds its devices (measured in the lab: about 1 s after a restart for ``maxPods``;
kubernetes v1.34.4 ``pkg/kubelet/apis/podresources/server_v1.go`` lists
``GetActivePods()``, which ``HandlePodAdditions`` fills only once the config source delivers).
A reader that took that answer for the truth would find no pod on a GPU it is about to change.
The runtime does not restart with the kubelet, so its ready sandboxes are the pods that run.

The call is ``/runtime.v1.RuntimeService/ListPodSandbox`` with the filter ``state:
SANDBOX_READY`` (k8s.io/cri-api v0.34.4 ``pkg/apis/runtime/v1/api.proto``)::

    message ListPodSandboxRequest { PodSandboxFilter filter = 1; }
    message PodSandboxFilter { string id = 1; PodSandboxStateValue state = 2; ... }
    message PodSandboxStateValue { PodSandboxState state = 1; }   // SANDBOX_READY = 0
    message ListPodSandboxResponse { repeated PodSandbox items = 1; }
    message PodSandbox { string id = 1; PodSandboxMetadata metadata = 2;
                         PodSandboxState state = 3; ... }
    message PodSandboxMetadata { string name = 1; string uid = 2; string namespace = 3; ... }

The sandbox's metadata carries the pod's own name and namespace (the kubelet makes it from the
Pod's ObjectMeta), the same names pod-resources gives.

>>> running("/nonexistent/containerd.sock", timeout=1.0)
Traceback (most recent call last):
...
gpuprov.host.kubelet.grpc_unary.GrpcError: cannot connect to /nonexistent/containerd.sock: No such file or directory
"""

from __future__ import annotations

from gpuprov.host.kubelet import grpc_unary, protowire

LIST_POD_SANDBOX = "/runtime.v1.RuntimeService/ListPodSandbox"
# ListPodSandboxRequest{filter: {state: {state: SANDBOX_READY}}}: SANDBOX_READY is 0, proto3's
# default, so the innermost message is empty but present (the runtime filters on its presence).
READY_ONLY = b"\x0a\x02\x12\x00"
SANDBOX_READY = 0
_MAX_RESPONSE = 16 << 20


def running(socket: str, timeout: float) -> list[str]:
    """``namespace/name`` of every pod whose sandbox is ready, sorted; GrpcError when the
    runtime at ``socket`` does not answer, protowire.WireError when the answer is no
    ``ListPodSandboxResponse``."""
    answer = grpc_unary.call(socket, LIST_POD_SANDBOX, READY_ONLY, timeout, _MAX_RESPONSE)
    return ready_pods(answer)


def ready_pods(message: bytes) -> list[str]:
    """The ready sandboxes' pods of a serialized ``ListPodSandboxResponse``, sorted, each once
    (a pod has one ready sandbox; an older attempt is not ready).

    >>> meta = b"\\x0a\\x03web\\x12\\x01u\\x1a\\x02ml"
    >>> ready = b"\\x0a\\x01a\\x12" + bytes([len(meta)]) + meta
    >>> gone = ready + b"\\x18\\x01"                      # state SANDBOX_NOTREADY
    >>> ready_pods(b"\\x0a" + bytes([len(ready)]) + ready + b"\\x0a" + bytes([len(gone)]) + gone)
    ['ml/web']
    """
    pods = set()
    for item in protowire.repeated(message, 1, "ListPodSandboxResponse"):
        if protowire.number(item, 3, "PodSandbox.state") != SANDBOX_READY:
            continue
        for metadata in protowire.repeated(item, 2, "PodSandbox")[-1:]:
            name = protowire.text(metadata, 1, "PodSandboxMetadata.name")
            namespace = protowire.text(metadata, 3, "PodSandboxMetadata.namespace")
            pods.add(f"{namespace}/{name}")
    return sorted(pods)
