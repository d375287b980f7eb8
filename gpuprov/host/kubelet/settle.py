"""Wait, on the host, until the kubelet has registered what the device plugin should serve.

After the deploy restarts the device plugin (a new config, a MIG change) or the kubelet (a new
``maxPods``), the node advertises the new devices only once the plugin has registered again and
the kubelet has rewritten its device-manager checkpoint: about 2 s for a plugin restart, up to
12 s after a kubelet restart (measured in the lab: the kubelet first retries the old plugin
socket for 10 s). A ``gpuprov verify`` in that window reports drift that heals by itself, so the
deploy waits here, bounded, and fails the host naming what is still missing.

Done is what verify checks on the node (``gpuprov.core.checks.kubelet_devices``): per wanted resource,
that many device ids in the checkpoint and NVIDIA's plugin socket for it in the same directory;
and, since a socket exists before its registration succeeds, a checkpoint written after every
one of those sockets and after the kubelet's own socket. The kubelet writes it when a plugin's
first device list arrives (``genericDeviceUpdateCallback`` -> ``writeCheckpoint``, kubernetes
pkg/kubelet/cm/devicemanager/manager.go). Seen in the lab: a plugin that registers while the
kubelet restarts serves its socket for 5 s, fails (``context deadline exceeded``) and retries
only 30 s later, all that time beside a checkpoint that still lists the old devices.

After a kubelet restart, done also means the kubelet lists its pods again: for about a second
its pod-resources ``List`` names none while they all still run, and a verify then would count
no device in use (``unlisted``; ``gpuprov.host.kubelet.runtime_pods``).

Nothing to wait for where no device plugin runs on the host (yet): a node deployed before the
device plugin chart is installed (docs/kubernetes.md, step by step) has a kubelet but no plugin.
A plugin process is looked for, by its program name, for ``PLUGIN_GRACE_SECONDS`` first: a
restart leaves none for a moment (systemd's ``RestartSec``).

>>> main(["--dir", "/var/lib/kubelet/device-plugins", "--want", "nvidia.com/gpu=4",
...       "--timeout", "60"])                                       # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import stat
import sys
import time
from collections.abc import Mapping, Sequence

from gpuprov.host.contract import (
    AGENT_EXIT_BAD_INPUT,
    DEVICE_PLUGIN_PROGRAM,
    KUBELET_CHECKPOINT_MAX_BYTES,
    KUBELET_DEVICE_CHECKPOINT_NAME,
    KUBELET_SOCKET_NAME,
    device_plugin_socket,
)
from gpuprov.host.kubelet.checkpoint import CheckpointError, registered_devices
from gpuprov.host.kubelet.sockets import sockets

POLL_SECONDS = 0.5
PLUGIN_GRACE_SECONDS = 10.0
# The deploy passes gpuprov_timeout_service, at most a day (gpuprov.core.variables); a longer
# wait is a hung deploy.
TIMEOUT_MAX = 86400


def plugin_runs(proc: str = "/proc") -> bool:
    """Whether a process of NVIDIA's device plugin runs on this host (a DaemonSet's pods are
    host processes too): one whose first argument's file name is the plugin's program.

    >>> plugin_runs("/nonexistent")
    False
    """
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        argv0 = _read(os.path.join(proc, pid, "cmdline"), 4096).split(b"\0", 1)[0]
        if os.path.basename(argv0.decode(errors="replace")) == DEVICE_PLUGIN_PROGRAM:
            return True
    return False


def missing(directory: str, want: Mapping[str, int]) -> list[str]:
    """What the kubelet in ``directory`` does not have yet of ``want`` (resource -> device
    count); [] when it has all of it.

    >>> missing("/nonexistent", {"nvidia.com/gpu": 4})
    ['no checkpoint in /nonexistent']
    """
    path = os.path.join(directory, KUBELET_DEVICE_CHECKPOINT_NAME)
    try:
        data = _read(path, KUBELET_CHECKPOINT_MAX_BYTES + 1, strict=True)
    except FileNotFoundError:
        return [f"no checkpoint in {directory}"]
    except OSError as e:
        return [f"{path} unreadable: {e.strerror}"]
    text = data.decode("utf-8", errors="replace")
    try:
        registered = registered_devices(text)
    except CheckpointError as e:  # rewritten in place while read, or really malformed
        return [f"{path}: {e}"]
    listed = sockets(directory)
    served = set(listed) if isinstance(listed, list) else set()
    out = []
    needed = [KUBELET_SOCKET_NAME]
    for resource, count in sorted(want.items()):
        have = len(registered.get(resource, ()))
        if have != count:
            out.append(f"{resource}: {have} of {count} devices registered")
        socket = device_plugin_socket(resource)
        if socket is not None and socket not in served:
            out.append(f"no {socket} (the plugin does not serve {resource})")
        elif socket is not None:
            needed.append(socket)
    if not out:
        out += _unregistered(directory, path, needed)
    return out


def _read(path: str, limit: int, strict: bool = False) -> bytes:
    """Up to ``limit`` bytes of the regular file ``path``, opened non-blocking so that a FIFO in
    its place is refused at once instead of waiting for a writer; b"" when it cannot be read,
    unless ``strict`` (then OSError, ENOENT for a missing file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            chunks, size = [], 0
            while size < limit and (chunk := os.read(fd, min(1 << 16, limit - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    except OSError:
        if strict:
            raise
        return b""  # gone, not ours to read, or no regular file: not a plugin's


def _unregistered(directory: str, checkpoint: str, names: list[str]) -> list[str]:
    """The sockets of ``names`` made after the checkpoint was last written: a kubelet or a
    plugin (re)started whose registration the kubelet has not recorded yet."""
    try:
        written = os.stat(checkpoint).st_mtime_ns
        newer = [n for n in names if os.stat(os.path.join(directory, n)).st_mtime_ns > written]
    except FileNotFoundError as e:  # replaced between the listing and the stat
        return [f"{e.filename} gone"]
    return [f"{n} is newer than the checkpoint (not registered yet)" for n in newer]


def unlisted(pod_resources_socket: str, runtime: str, timeout: float = 10.0) -> list[str]:
    """Why the kubelet's pod list is not whole yet: its pod-resources API does not answer yet
    (it has just restarted), or it does not name every pod the container runtime at
    ``runtime`` runs (for about a second after a restart it names none); [] when it names them
    all, or when there is nothing to compare (no socket; a kubelet that answers without the v1
    ``List``; a runtime that does not answer: verify names those).

    >>> unlisted("/nonexistent/kubelet.sock", "/nonexistent/containerd.sock")
    []
    """
    # Imported here: the HTTP/2 stack the calls speak gRPC with costs about 0.1 CPU-s.
    from gpuprov.host.kubelet import grpc_unary, pod_resources, protowire

    if not os.path.exists(pod_resources_socket):
        return []
    try:
        pods = pod_resources.read(pod_resources_socket, timeout).pods
    except (grpc_unary.GrpcStatusError, protowire.WireError):
        return []
    except grpc_unary.GrpcError as e:  # a restarted kubelet's socket before it serves
        return [f"the kubelet's pod-resources API: {e}"]
    left = pod_resources.not_listed(runtime, pods, timeout)
    if not isinstance(left, list) or not left:
        return []
    more = f", and {len(left) - 8} more" if len(left) > 8 else ""
    return [f"the kubelet does not list pods the runtime runs: {', '.join(left[:8])}{more}"]


def wait(
    directory: str,
    want: Mapping[str, int],
    timeout: float,
    pods: tuple[str, str] | None = None,
) -> list[str]:
    """Poll until nothing is ``missing`` and, with ``pods`` (the kubelet's pod-resources
    socket and the runtime's CRI socket), nothing ``unlisted``, for at most ``timeout``
    seconds; what is still missing then ([] on success)."""
    deadline = time.monotonic() + timeout
    while True:
        left = missing(directory, want) or (unlisted(*pods) if pods else [])
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_SECONDS)


def _want(text: str) -> tuple[str, int]:
    resource, _, count = text.rpartition("=")
    if not resource or not count.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not RESOURCE=COUNT")
    return resource, int(count)


def _seconds(text: str) -> float:
    """A wait in seconds: a finite number from 0 to TIMEOUT_MAX (``nan`` or ``inf`` would make
    the deadline never arrive)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from 0 to {TIMEOUT_MAX} (a day), got {text[:40]!r}"
        )
    return value


def main(argv: Sequence[str]) -> int:
    """0 when the kubelet has every wanted resource, or no device plugin runs; 1 after the
    timeout (what is missing on stderr); 2 for a bad command line."""
    parser = argparse.ArgumentParser(prog="agent.pyz settle", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="the kubelet's device-plugin directory")
    parser.add_argument(
        "--want", type=_want, action="append", default=[], help="RESOURCE=COUNT (repeatable)"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=60.0,
        help=f"seconds to wait at most (0 to {TIMEOUT_MAX})",
    )
    parser.add_argument(
        "--proc", default="/proc", help="where the host's processes are listed (default /proc)"
    )
    parser.add_argument(
        "--pod-resources",
        metavar="SOCKET",
        help="with --runtime: also wait until the kubelet's pod-resources API at SOCKET lists "
        "every pod the container runtime runs (after a kubelet restart it lists none at first)",
    )
    parser.add_argument("--runtime", metavar="SOCKET", help="the container runtime's CRI socket")
    try:
        options = parser.parse_args(argv)
    except SystemExit as e:
        return AGENT_EXIT_BAD_INPUT if e.code else 0
    grace = time.monotonic() + min(PLUGIN_GRACE_SECONDS, options.timeout)
    while not plugin_runs(options.proc):
        if time.monotonic() >= grace:
            print(f"no {DEVICE_PLUGIN_PROGRAM} runs on this host: nothing to wait for")
            return 0
        time.sleep(POLL_SECONDS)
    pods = (
        (options.pod_resources, options.runtime)
        if options.pod_resources and options.runtime
        else None
    )
    left = wait(options.dir, dict(options.want), options.timeout, pods)
    if left:
        print(
            f"error: after {options.timeout:g} s the kubelet does not advertise the plan: "
            + "; ".join(left),
            file=sys.stderr,
        )
        return 1
    return 0
