"""A stand-in kubelet that follows ListAndWatch: every update a device plugin sends, as it comes.

``kubelet_stub.py`` takes the first answer of each registration; a health check shows in the
later ones (the plugin sends the whole list again when a device turns unhealthy). Run as a
program in a process of its own:

    kubelet_watch.py DIRECTORY RESOURCES SECONDS WORKDIR

prints "ready", then one JSON line per ListAndWatch answer, ``{"resource": NAME, "devices":
{ID: "Healthy" | "Unhealthy"}}``, for SECONDS seconds after the RESOURCES registrations.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import grpc
from kubelet_stub import StubKubelet, protocol


def _follow(kubelet: StubKubelet, request, until: float, lock: threading.Lock) -> None:
    with grpc.insecure_channel(f"unix://{kubelet.directory / request.endpoint}") as channel:
        stream = kubelet.services.DevicePluginStub(channel).ListAndWatch(
            kubelet.messages.Empty(), timeout=max(until - time.monotonic(), 1)
        )
        try:
            for answer in stream:
                line = {
                    "resource": request.resource_name,
                    "devices": {device.ID: device.health for device in answer.devices},
                }
                with lock:
                    print(json.dumps(line, sort_keys=True), flush=True)
        except grpc.RpcError:
            return  # the deadline, or the plugin stopped


def main(argv: list[str]) -> int:
    directory, resources, seconds, workdir = Path(argv[1]), int(argv[2]), float(argv[3]), argv[4]
    lock = threading.Lock()
    with StubKubelet(directory, *protocol(Path(workdir))) as kubelet:
        print("ready", flush=True)
        followers = []
        for _ in range(resources):
            request = kubelet.registrations.get(timeout=seconds)
            until = time.monotonic() + seconds
            follower = threading.Thread(
                target=_follow, args=(kubelet, request, until, lock), daemon=True
            )
            follower.start()
            followers.append(follower)
        for follower in followers:
            follower.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
