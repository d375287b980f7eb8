"""The kubelet's pod-resources reader against a real gRPC server (grpcio) serving the v1 API,
and beside it a container runtime's CRI ``ListPodSandbox`` (what the kubelet must list too).

The messages are compiled by grpcio-tools from the v1 messages of
k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (v0.34.4) and of
k8s.io/cri-api/pkg/apis/runtime/v1/api.proto (v0.34.4, the messages ListPodSandbox uses), with
the field numbers there, so the bytes on the wire are the ones protobuf and gRPC make, not ours.
The servers are grpcio's C core; the lab's tests (tests/lab/test_canary.py, test_gpu_drain.py)
read the real kubelet's and containerd's sockets.
"""

from __future__ import annotations

import importlib
import json
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from gpuprov.controller import bundle
from gpuprov.host.kubelet import grpc_unary, pod_resources, protowire, settle

API = """
syntax = "proto3";
package v1;

service PodResourcesLister {
  rpc List(ListPodResourcesRequest) returns (ListPodResourcesResponse) {}
}
message ListPodResourcesRequest {}
message ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
message PodResources {
  string name = 1;
  string namespace = 2;
  repeated ContainerResources containers = 3;
}
message ContainerResources {
  string name = 1;
  repeated ContainerDevices devices = 2;
  repeated int64 cpu_ids = 3;
  repeated ContainerMemory memory = 4;
  repeated DynamicResource dynamic_resources = 5;
}
message ContainerMemory {
  string memory_type = 1;
  uint64 size = 2;
  TopologyInfo topology = 3;
}
message ContainerDevices {
  string resource_name = 1;
  repeated string device_ids = 2;
  TopologyInfo topology = 3;
}
message TopologyInfo { repeated NUMANode nodes = 1; }
message NUMANode { int64 ID = 1; }
message DynamicResource {
  string claim_name = 2;
  string claim_namespace = 3;
  repeated ClaimResource claim_resources = 4;
}
message ClaimResource {
  repeated CDIDevice cdi_devices = 1;
  string driver_name = 2;
  string pool_name = 3;
  string device_name = 4;
}
message CDIDevice { string name = 1; }
"""


def _compiled(directory: Path, name: str, text: str):
    """The messages and services of ``text`` (a .proto), compiled by grpcio-tools in
    ``directory`` (on sys.path) and imported."""
    from grpc_tools import protoc

    (directory / f"{name}.proto").write_text(text)
    status = protoc.main(
        ["protoc", f"-I{directory}", f"--python_out={directory}",
         f"--grpc_python_out={directory}", str(directory / f"{name}.proto")]
    )  # fmt: skip
    assert status == 0
    return (importlib.import_module(f"{name}_pb2"), importlib.import_module(f"{name}_pb2_grpc"))


class Kubelet:
    """A pod-resources server on a unix socket, answering List with ``self.answer``."""

    def __init__(self, api, path: Path):
        self.messages, services = api
        self.answer = self.messages.ListPodResourcesResponse()
        self.abort: tuple[grpc.StatusCode, str] | None = None
        kubelet = self

        class Lister(services.PodResourcesListerServicer):
            def List(self, request, context):  # noqa: N802 (the gRPC method's name)
                if kubelet.abort:
                    context.abort(*kubelet.abort)
                return kubelet.answer

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        services.add_PodResourcesListerServicer_to_server(Lister(), self.server)
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def pod(self, name: str, namespace: str, containers: dict[str, dict[str, list[str]]]):
        m = self.messages
        pod = self.answer.pod_resources.add(name=name, namespace=namespace)
        for container_name, resources in containers.items():
            container = pod.containers.add(name=container_name, cpu_ids=[2, 3])
            container.memory.add(memory_type="memory", size=1 << 30).topology.nodes.add(ID=0)
            container.dynamic_resources.add(claim_name="claim", claim_namespace=namespace)
            for resource, ids in resources.items():
                devices = container.devices.add(resource_name=resource, device_ids=ids)
                devices.topology.CopyFrom(m.TopologyInfo(nodes=[m.NUMANode(ID=1)]))


@pytest.fixture
def kubelet(api, tmp_path):
    path = tmp_path / "kubelet.sock"
    server = Kubelet(api, path)
    yield server, path
    server.server.stop(None)


CRI = """
syntax = "proto3";
package runtime.v1;

service RuntimeService {
  rpc ListPodSandbox(ListPodSandboxRequest) returns (ListPodSandboxResponse) {}
}
message PodSandboxMetadata {
  string name = 1;
  string uid = 2;
  string namespace = 3;
  uint32 attempt = 4;
}
enum PodSandboxState {
  SANDBOX_READY = 0;
  SANDBOX_NOTREADY = 1;
}
message PodSandboxStateValue { PodSandboxState state = 1; }
message PodSandboxFilter {
  string id = 1;
  PodSandboxStateValue state = 2;
  map<string, string> label_selector = 3;
}
message ListPodSandboxRequest { PodSandboxFilter filter = 1; }
message PodSandbox {
  string id = 1;
  PodSandboxMetadata metadata = 2;
  PodSandboxState state = 3;
  int64 created_at = 4;
  map<string, string> labels = 5;
  map<string, string> annotations = 6;
  string runtime_handler = 7;
}
message ListPodSandboxResponse { repeated PodSandbox items = 1; }
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Both APIs compiled into one directory on sys.path: name -> (messages, services)."""
    directory = tmp_path_factory.mktemp("protos")
    sys.path.insert(0, str(directory))
    try:
        yield {
            name: _compiled(directory, name, text)
            for name, text in (("podresources_v1", API), ("cri_v1", CRI))
        }
    finally:
        sys.path.remove(str(directory))


@pytest.fixture(scope="module")
def api(compiled):
    return compiled["podresources_v1"]


@pytest.fixture(scope="module")
def cri_api(compiled):
    return compiled["cri_v1"]


class Runtime:
    """A CRI runtime on a unix socket whose ListPodSandbox applies the request's state filter as
    containerd does, over ``self.sandboxes`` ((namespace, name, state) each)."""

    def __init__(self, api, path: Path):
        messages, services = api
        self.sandboxes: list[tuple[str, str, int]] = []
        self.abort: tuple[grpc.StatusCode, str] | None = None
        self.filters: list[bool] = []
        runtime = self

        class Service(services.RuntimeServiceServicer):
            def ListPodSandbox(self, request, context):  # noqa: N802 (the gRPC method's name)
                if runtime.abort:
                    context.abort(*runtime.abort)
                wanted = request.filter.state.state if request.filter.HasField("state") else None
                runtime.filters.append(wanted == messages.SANDBOX_READY)
                answer = messages.ListPodSandboxResponse()
                for n, (namespace, name, state) in enumerate(runtime.sandboxes):
                    if wanted is not None and state != wanted:
                        continue
                    item = answer.items.add(id=f"sandbox-{n}", state=state, created_at=n + 1)
                    item.metadata.CopyFrom(
                        messages.PodSandboxMetadata(name=name, namespace=namespace, uid=f"u{n}")
                    )
                    item.labels["io.kubernetes.pod.name"] = name
                return answer

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        services.add_RuntimeServiceServicer_to_server(Service(), self.server)
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()


@pytest.fixture
def runtime(cri_api, tmp_path):
    path = tmp_path / "containerd.sock"
    server = Runtime(cri_api, path)
    yield server, path
    server.server.stop(None)


def test_list_gives_every_pods_devices_per_container_and_resource(kubelet):
    server, path = kubelet
    server.pod("canary-a", "gpuprov-canary", {"c": {"nvidia.com/gpu.shared": ["GPU-1::3"]}})
    server.pod("train", "ml", {"main": {"nvidia.com/gpu": ["GPU-1", "GPU-2"]}, "side": {}})
    server.pod("web", "default", {"nginx": {}})

    section = pod_resources.section(str(path))

    assert section == {
        "socket": str(path),
        "containers": [
            {"pod": "canary-a", "namespace": "gpuprov-canary", "container": "c",
             "resource": "nvidia.com/gpu.shared", "device_ids": ["GPU-1::3"]},
            {"pod": "train", "namespace": "ml", "container": "main",
             "resource": "nvidia.com/gpu", "device_ids": ["GPU-1", "GPU-2"]},
        ],
    }  # fmt: skip


def test_an_empty_node_lists_no_rows(kubelet):
    _, path = kubelet
    assert pod_resources.section(str(path))["containers"] == []


def test_an_answer_past_the_http2_window_arrives_whole(kubelet):
    # 65,535 bytes is HTTP/2's initial flow-control window: the reader must acknowledge data.
    server, path = kubelet
    for n in range(1500):
        server.pod(f"pod-{n:04d}", "ml", {"c": {"nvidia.com/gpu": [f"GPU-{n:04d}" * 4]}})
    rows = pod_resources.section(str(path))["containers"]
    assert len(server.answer.SerializeToString()) > 2 * 65535
    assert [r["pod"] for r in rows] == [f"pod-{n:04d}" for n in range(1500)]
    assert rows[-1]["device_ids"] == ["GPU-1499" * 4]


def test_a_refused_call_is_the_sections_error_with_the_grpc_status(kubelet):
    server, path = kubelet
    server.abort = (grpc.StatusCode.PERMISSION_DENIED, "not for you")
    assert pod_resources.section(str(path))["containers"] == {
        "error": f"{path} answered gRPC status 7: not for you"
    }


def test_a_method_the_server_lacks_is_unimplemented(kubelet):
    _, path = kubelet
    with pytest.raises(grpc_unary.GrpcError, match="gRPC status 12"):
        grpc_unary.call(str(path), "/v1.PodResourcesLister/Watch", b"", timeout=5)


def test_no_socket_means_no_kubelet_not_an_error(tmp_path):
    assert pod_resources.section(str(tmp_path / "kubelet.sock")) == {
        "socket": str(tmp_path / "kubelet.sock"),
        "containers": None,
    }


def test_a_server_that_never_answers_is_an_error_within_the_timeout(tmp_path):
    path = tmp_path / "kubelet.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    thread.start()
    started = time.monotonic()
    section = pod_resources.section(str(path), timeout=1.0)
    assert time.monotonic() - started < 3
    assert section["containers"] == {"error": f"no answer from {path} in time"}
    listener.close()


def test_a_socket_that_is_not_http2_is_an_error(tmp_path):
    path = tmp_path / "kubelet.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()

    def answer_http1():
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        time.sleep(0.5)  # open until the client has read the answer
        conn.close()

    threading.Thread(target=answer_http1, daemon=True).start()
    error = pod_resources.section(str(path), timeout=5)["containers"]["error"]
    # h2 waits for a whole frame, so the HTTP/1 answer is a connection closed, not an answer
    assert error == f"{path} closed the connection before answering", error
    listener.close()


def test_bytes_cut_short_or_of_the_wrong_wire_type_are_refused_with_where(api):
    messages, _ = api
    answer = messages.ListPodResourcesResponse()
    pod = answer.pod_resources.add(name="p", namespace="ns")
    pod.containers.add(name="c").devices.add(resource_name="nvidia.com/gpu", device_ids=["GPU-a"])
    data = answer.SerializeToString()
    assert pod_resources.listed(data).rows[0]["device_ids"] == ["GPU-a"]
    with pytest.raises(protowire.WireError, match="runs past the message"):
        pod_resources.listed(data[:-2])
    # field 1 as a varint where the kubelet sends a PodResources message
    with pytest.raises(protowire.WireError, match="wire type 0, not bytes"):
        pod_resources.listed(b"\x08\x01")
    with pytest.raises(protowire.WireError, match="wire type 3"):
        pod_resources.listed(b"\x0b")
    with pytest.raises(protowire.WireError, match="not UTF-8"):
        bad = messages.PodResources(name="p").SerializeToString().replace(b"p", b"\xff")
        pod_resources.listed(b"\x0a" + bytes([len(bad)]) + bad)


def test_the_agent_bundle_alone_reads_the_socket(kubelet, tmp_path):
    # No site-packages: the HTTP/2 stack comes from the zip, as on a host.
    server, path = kubelet
    server.pod("canary", "gpuprov-canary", {"c": {"nvidia.com/mig-1g.10gb": ["MIG-x"]}})
    agent = tmp_path / "agent.pyz"
    bundle.write_bundle(str(agent))
    code = (
        f"import sys; sys.path[:0] = [{str(agent)!r}]\n"
        "from gpuprov.host.agent.main import main\n"
        "code = main(sys.argv[1:])\n"
        "import h2\n"
        f"assert h2.__file__.startswith({str(agent)!r}), h2.__file__\n"
        "sys.exit(code)\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, "probe", "--pod-resources", str(path)],
        capture_output=True,
        text=True,
        env={},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["pod_resources"]["containers"] == [
        {"pod": "canary", "namespace": "gpuprov-canary", "container": "c",
         "resource": "nvidia.com/mig-1g.10gb", "device_ids": ["MIG-x"]}
    ]  # fmt: skip


def test_the_runtime_ready_pods_the_kubelet_does_not_list_are_named(kubelet, runtime):
    server, path = kubelet
    cri, socket_path = runtime
    server.pod("train", "ml", {"main": {"nvidia.com/gpu": ["GPU-1"]}})
    cri.sandboxes = [("ml", "train", 0), ("ml", "eval", 0), ("ml", "old", 1)]
    started = time.monotonic()
    section = pod_resources.section(str(path), str(socket_path), sync=1.0)
    assert time.monotonic() - started >= 1.0  # it waited for the kubelet before saying so
    assert section["unlisted"] == ["ml/eval"]  # a sandbox that is not ready is no pod that runs
    assert cri.filters and all(cri.filters)  # asked for ready sandboxes only
    assert [r["pod"] for r in section["containers"]] == ["train"]


def test_a_kubelet_that_lists_its_pods_late_is_waited_for(kubelet, runtime):
    # As after a kubelet restart: its List names no pod at first, then all of them.
    server, path = kubelet
    cri, socket_path = runtime
    cri.sandboxes = [("ml", "train", 0), ("default", "web", 0)]
    timer = threading.Timer(
        1.0,
        lambda: (
            server.pod("train", "ml", {"main": {"nvidia.com/gpu": ["GPU-1"]}}),
            server.pod("web", "default", {"nginx": {}}),
        ),
    )
    timer.start()
    started = time.monotonic()
    section = pod_resources.section(str(path), str(socket_path), sync=20.0)
    assert 1.0 <= time.monotonic() - started < 10
    assert section["unlisted"] == []
    assert section["containers"][0]["device_ids"] == ["GPU-1"]


def test_no_runtime_socket_is_not_checked_and_a_refusing_runtime_is_the_error(
    kubelet, runtime, tmp_path
):
    _, path = kubelet
    cri, socket_path = runtime
    assert pod_resources.section(str(path), str(tmp_path / "none.sock"))["unlisted"] is None
    assert "unlisted" not in pod_resources.section(str(path))
    cri.abort = (grpc.StatusCode.UNIMPLEMENTED, "unknown service runtime.v1.RuntimeService")
    section = pod_resources.section(str(path), str(socket_path), sync=5.0)
    assert section["unlisted"] == {
        "error": f"{socket_path}: {socket_path} answered gRPC status 12: "
        "unknown service runtime.v1.RuntimeService"
    }


def test_the_settle_waits_while_the_kubelet_does_not_list_the_runtimes_pods(kubelet, runtime):
    server, path = kubelet
    cri, socket_path = runtime
    cri.sandboxes = [("ml", "train", 0)]
    assert settle.unlisted(str(path), str(socket_path)) == [
        "the kubelet does not list pods the runtime runs: ml/train"
    ]
    server.pod("train", "ml", {"main": {}})
    assert settle.unlisted(str(path), str(socket_path)) == []
    # A kubelet without the v1 API, or a runtime that does not answer: nothing to compare, no
    # wait (verify names the API that fails).
    server.abort = (grpc.StatusCode.UNIMPLEMENTED, "unknown service v1.PodResourcesLister")
    assert settle.unlisted(str(path), str(socket_path)) == []
    server.abort, cri.abort = None, (grpc.StatusCode.UNAVAILABLE, "starting")
    server.answer.Clear()
    assert settle.unlisted(str(path), str(socket_path)) == []


def test_the_settle_waits_for_a_restarted_kubelet_that_does_not_serve_yet(runtime, tmp_path):
    # Measured in the lab: the deploy's settle ran 0.3 s after a kubelet restart, while the
    # kubelet's pod-resources socket was there but refused connections.
    cri, socket_path = runtime
    cri.sandboxes = [("ml", "train", 0)]
    path = tmp_path / "pod-resources.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))  # the file, nobody accepting: a refused connection once closed
    listener.close()
    (said,) = settle.unlisted(str(path), str(socket_path), timeout=2.0)
    assert said.startswith(f"the kubelet's pod-resources API: cannot connect to {path}"), said
