"""The kubelet's pod-resources reader against a real gRPC server (grpcio) serving the v1 API.

The messages are compiled by grpcio-tools from the v1 messages of
k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (v0.34.4), with the field numbers there, so the
bytes on the wire are the ones protobuf and gRPC make, not ours. The server is grpcio's C core;
the lab's tests (tests/lab/test_canary.py) read the real kubelet's socket.
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
from gpuprov.host.kubelet import grpc_unary, pod_resources

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


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from grpc_tools import protoc

    directory = tmp_path_factory.mktemp("podresources")
    (directory / "podresources_v1.proto").write_text(API)
    status = protoc.main(
        ["protoc", f"-I{directory}", f"--python_out={directory}",
         f"--grpc_python_out={directory}", str(directory / "podresources_v1.proto")]
    )  # fmt: skip
    assert status == 0
    sys.path.insert(0, str(directory))
    try:
        yield (
            importlib.import_module("podresources_v1_pb2"),
            importlib.import_module("podresources_v1_pb2_grpc"),
        )
    finally:
        sys.path.remove(str(directory))


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
    assert pod_resources.list_response(data)[0]["device_ids"] == ["GPU-a"]
    with pytest.raises(pod_resources.PodResourcesError, match="runs past the message"):
        pod_resources.list_response(data[:-2])
    # field 1 as a varint where the kubelet sends a PodResources message
    with pytest.raises(pod_resources.PodResourcesError, match="wire type 0, not bytes"):
        pod_resources.list_response(b"\x08\x01")
    with pytest.raises(pod_resources.PodResourcesError, match="wire type 3"):
        pod_resources.list_response(b"\x0b")
    with pytest.raises(pod_resources.PodResourcesError, match="not UTF-8"):
        bad = messages.PodResources(name="p").SerializeToString().replace(b"p", b"\xff")
        pod_resources.list_response(b"\x0a" + bytes([len(bad)]) + bad)


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
