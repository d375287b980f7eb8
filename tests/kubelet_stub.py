"""A stand-in kubelet for NVIDIA's real device plugin: its Registration service, then ListAndWatch.

The messages are the subset of the kubelet's device-plugin API v1beta1 that registration and
ListAndWatch use, with the field numbers of k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto
(as printed in kubernetes/enhancements KEP-3573). ``protocol()`` compiles them with grpcio-tools
into a temporary directory once per test session.

>>> kubelet = StubKubelet(directory, *protocol(tmp))   # doctest: +SKIP
>>> kubelet.advertised(resources=1, timeout=30)         # doctest: +SKIP
{'nvidia.com/gpu.shared': ['GPU-...::0', ...]}

Run as a program (``main``) it does the same in a process of its own.
"""

from __future__ import annotations

import importlib
import json
import queue
import sys
from concurrent import futures
from pathlib import Path
from types import ModuleType

import grpc

API = """
syntax = "proto3";
package v1beta1;

service Registration {
  rpc Register(RegisterRequest) returns (Empty) {}
}
service DevicePlugin {
  rpc GetDevicePluginOptions(Empty) returns (DevicePluginOptions) {}
  rpc ListAndWatch(Empty) returns (stream ListAndWatchResponse) {}
}
message DevicePluginOptions {
  bool pre_start_required = 1;
  bool get_preferred_allocation_available = 2;
}
message RegisterRequest {
  string version = 1;
  string endpoint = 2;
  string resource_name = 3;
  DevicePluginOptions options = 4;
}
message Empty {}
message ListAndWatchResponse {
  repeated Device devices = 1;
}
message TopologyInfo {
  repeated NUMANode nodes = 1;
}
message NUMANode {
  int64 ID = 1;
}
message Device {
  string ID = 1;
  string health = 2;
  TopologyInfo topology = 3;
}
"""


def protocol(directory: Path) -> tuple[ModuleType, ModuleType]:
    """The compiled messages and services (``api_pb2``, ``api_pb2_grpc``), built in ``directory``."""
    from grpc_tools import protoc

    (directory / "api.proto").write_text(API)
    status = protoc.main(
        ["protoc", f"-I{directory}", f"--python_out={directory}",
         f"--grpc_python_out={directory}", str(directory / "api.proto")]
    )  # fmt: skip
    if status != 0:
        raise RuntimeError(f"protoc failed on the device-plugin API subset ({status})")
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
    finally:
        sys.path.remove(str(directory))


class StubKubelet:
    """Serves Registration on ``<directory>/kubelet.sock`` and lists what registered plugins offer."""

    def __init__(self, directory: Path, messages: ModuleType, services: ModuleType):
        self.directory = directory
        self.messages = messages
        self.services = services
        self.registrations: queue.Queue = queue.Queue()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        kubelet = self

        class Registration(services.RegistrationServicer):
            def Register(self, request, context):  # noqa: N802 (the gRPC method's name)
                kubelet.registrations.put(request)
                return messages.Empty()

        services.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")

    def __enter__(self) -> StubKubelet:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)

    def advertised(self, resources: int, timeout: float) -> dict[str, list[str]]:
        """Resource name -> device ids, from the first ListAndWatch answer of each registration.

        Waits for ``resources`` registrations; raises ``queue.Empty`` after ``timeout`` seconds.
        """
        found: dict[str, list[str]] = {}
        while len(found) < resources:
            request = self.registrations.get(timeout=timeout)
            found[request.resource_name] = self._devices(request.endpoint, timeout)
        return found

    def _devices(self, endpoint: str, timeout: float) -> list[str]:
        with grpc.insecure_channel(f"unix://{self.directory / endpoint}") as channel:
            stream = self.services.DevicePluginStub(channel).ListAndWatch(
                self.messages.Empty(), timeout=timeout
            )
            try:
                return sorted(device.ID for device in next(stream).devices)
            finally:
                stream.cancel()


def main(argv: list[str]) -> int:
    """``kubelet_stub.py DIRECTORY RESOURCES TIMEOUT WORKDIR [RESOURCES ...]``: print "ready",
    then the JSON offer; with more RESOURCES, one more offer per registration round (a plugin
    that restarts registers every resource again), each on its own line.

    The tests run the stand-in kubelet in its own process, so gRPC's threads never share the
    test process and a stuck plugin costs a bounded wait, not a hung test session.
    """
    directory, timeout, workdir = Path(argv[1]), float(argv[3]), argv[4]
    rounds = [int(argv[2]), *(int(n) for n in argv[5:])]
    with StubKubelet(directory, *protocol(Path(workdir))) as kubelet:
        print("ready", flush=True)
        for resources in rounds:
            print(json.dumps(kubelet.advertised(resources, timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
