"""The probe: what NVML and a few files say about this host, as one JSON document.

Runs on GPU hosts inside the agent zipapp, so it needs only the standard library and
nvidia-ml-py's ``pynvml``. One ``nvmlInit`` per run, always matched by ``nvmlShutdown``. When NVML
cannot start (no library, no driver, no permission) the document says so in ``nvml``/``error``
and the exit code is still 0: "no driver" is an observation, not a failure of the probe.

Schema ``gpuprov.probe/v1`` (docs/architecture.md). The GPUs come from
``gpuprov.host.nvml_gpus``; the ``files`` section holds each requested file as
``gpuprov.host.files`` reads it (text, ``null`` when missing, ``{"error": why}`` when not read:
larger than ``PROBE_FILE_MAX_BYTES``, 1 MiB, or not a regular file). With
``--kubelet-devices DIR`` the ``kubelet_devices`` section holds the kubelet's device-manager
checkpoint (read the same way, up to ``KUBELET_CHECKPOINT_MAX_BYTES``) and the socket names in
DIR (``gpuprov.host.kubelet.sockets``). ``--package NAME`` adds a ``packages`` section (each
package dpkg knows: installed version and hold; ``gpuprov.host.packages``) and ``--unit NAME`` a
``units`` section (``systemctl is-enabled`` / ``is-active``; ``gpuprov.host.units``): the same
commands the deploy's facts run. ``--pod-resources SOCKET`` adds a ``pod_resources`` section:
every pod's devices as the kubelet's pod-resources API lists them
(``gpuprov.host.kubelet.pod_resources``). The containerd, dpkg and systemd commands run side
by side with the NVML and file reads (one thread each), so the probe's time is about its slowest
part's.

    $ python3 -m gpuprov.host.agent.probe --file /etc/nvidia/device-plugin/config.yaml
    {"schema": "gpuprov.probe/v1", "nvml": "ok", "driver_version": "535.261.03", ...}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gpuprov.host import containerd_state
from gpuprov.host import packages as dpkg
from gpuprov.host import units as systemd_units
from gpuprov.host.contract import (
    CRITICAL_XIDS_MAX,
    KERNEL_LOG_PATH,
    KUBELET_CHECKPOINT_MAX_BYTES,
    KUBELET_DEVICE_CHECKPOINT_NAME,
    PROBE_FILE_MAX_BYTES,
    PROBE_SCHEMA,
    containerd_drop_in_path,
)
from gpuprov.host.files import read_file, read_files
from gpuprov.host.health import kernel_log, nvml_counters, xid
from gpuprov.host.health import section as health_section
from gpuprov.host.kubelet import sockets
from gpuprov.host.nvml_gpus import read_gpu

# nvmlInit's failures that say what the host lacks: the document's ``nvml`` value.
_INIT_FAILURES = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library-not-found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver-not-loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "no-permission",
}


def probe(
    files: Sequence[str] = (),
    globs: Sequence[str] = (),
    containerd: str | None = None,
    health: bool = False,
    kernel_log_path: str = KERNEL_LOG_PATH,
    kubelet_devices_dir: str | None = None,
    packages: Sequence[str] = (),
    units: Sequence[str] = (),
    critical_xids: Sequence[int] = xid.DEFAULT_CRITICAL,
    pod_resources_socket: str | None = None,
    runtime_socket: str | None = None,
) -> dict[str, Any]:
    """The probe document for this host; ``files``/``globs`` add a ``files`` section,
    ``containerd`` (the main config's path) a ``containerd`` section: what containerd says
    about its effective config (``gpuprov.host.containerd_state``); ``health`` a ``health``
    section: each GPU's NVML error counters and the XIDs in the kernel log at
    ``kernel_log_path`` (``gpuprov.host.health``), ``critical_xids`` never capped;
    ``kubelet_devices_dir`` (the kubelet's device-plugin directory) a ``kubelet_devices``
    section (``read_kubelet_devices``); ``packages`` (names or dpkg-query patterns) a
    ``packages`` section and ``units`` a ``units`` section; ``pod_resources_socket`` (the
    kubelet's pod-resources socket) a ``pod_resources`` section (``pod_resources.section``),
    checked against the pods the container runtime at ``runtime_socket`` (its CRI socket) runs.

    >>> probe()["nvml"]            # on a machine without libnvidia-ml  # doctest: +SKIP
    'library-not-found'
    """
    document: dict[str, Any] = {
        "schema": PROBE_SCHEMA,
        "nvml": "ok",
        "error": None,
        "driver_version": None,
        "nvml_version": None,
        "gpus": [],
    }
    # The host's own commands (containerd's, dpkg's, systemd's) run beside NVML and the file
    # reads, each in a thread that waits for its processes: the probe takes about as long as
    # its slowest part, not the sum of them. Their sections keep the document's order.
    commands: dict[str, Callable[[], Any]] = {}
    if containerd:
        drop_in = containerd_drop_in_path(containerd)
        commands["containerd"] = _started(containerd_state.read, containerd, drop_in)
    if packages:
        commands["packages"] = _started(dpkg.read, packages)
    if units:
        commands["units"] = _started(systemd_units.read, units)
    counters: dict[int, dict[str, Any]] = {}
    document.update(_nvml(counters if health else None))
    if health:
        document["health"] = health_section.section(
            document["gpus"], counters, kernel_log.read(kernel_log_path), critical_xids
        )
    if files or globs:
        document["files"] = read_files(files, globs)
    if "containerd" in commands:
        document["containerd"] = commands["containerd"]()
    if kubelet_devices_dir:
        document["kubelet_devices"] = read_kubelet_devices(kubelet_devices_dir)
    for section in ("packages", "units"):
        if section in commands:
            document[section] = commands[section]()
    if pod_resources_socket:
        # Imported only when asked (verify --canary): the HTTP/2 stack it speaks gRPC with
        # costs every probe about 0.1 CPU-s to import.
        from gpuprov.host.kubelet import pod_resources

        document["pod_resources"] = pod_resources.section(pod_resources_socket, runtime_socket)
    return document


def _started(function: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """``function(*args)`` running in a thread of its own; calling the result waits for it and
    gives its value, or raises what it raised. (A plain thread: ``concurrent.futures`` would
    import ``logging``, a noticeable part of a probe's start.)

    >>> _started(sum, [1, 2])()
    3
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as e:  # handed to the caller, which raises it
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> Any:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return result


def read_kubelet_devices(directory: str) -> dict[str, Any]:
    """What the kubelet registered: its device-manager checkpoint's text (as ``read_file``
    reports a file, up to ``KUBELET_CHECKPOINT_MAX_BYTES``) and the sockets in ``directory``.

    >>> read_kubelet_devices("/nonexistent")
    {'directory': '/nonexistent', 'checkpoint': None, 'sockets': None}
    """
    checkpoint = os.path.join(directory, KUBELET_DEVICE_CHECKPOINT_NAME)
    return {
        "directory": directory,
        "checkpoint": read_file(checkpoint, KUBELET_CHECKPOINT_MAX_BYTES),
        "sockets": sockets.sockets(directory),
    }


def _nvml(counters: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """NVML's part of the document; fills ``counters`` (GPU index -> health readings) when
    given, inside the same ``nvmlInit``."""
    try:
        pynvml.nvmlInit()  # libnvidia-ml.so.1, by pynvml's own loader
    except pynvml.NVMLError as e:
        return {"nvml": _INIT_FAILURES.get(e.value, "error"), "error": str(e)}
    found: dict[str, Any] = {}
    try:
        found["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
        found["nvml_version"] = pynvml.nvmlSystemGetNVMLVersion()
        found["gpus"] = [read_gpu(index) for index in range(pynvml.nvmlDeviceGetCount())]
        if counters is not None:
            for gpu in found["gpus"]:
                device = pynvml.nvmlDeviceGetHandleByIndex(gpu["index"])
                counters[gpu["index"]] = nvml_counters.read(device)
    except pynvml.NVMLError as e:
        found.update(nvml="error", error=str(e), gpus=[])
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            found.setdefault("error", f"nvmlShutdown: {e}")
            found.setdefault("nvml", "error")
    return found


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuprov-probe", description="Print what NVML and some files say, as JSON."
    )
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help=f"include this file's text (repeatable; at most {PROBE_FILE_MAX_BYTES} bytes, "
        'else {"error": why})',
    )
    parser.add_argument(
        "--glob",
        action="append",
        default=[],
        metavar="PATTERN",
        help="include every file matching PATTERN (repeatable)",
    )
    parser.add_argument(
        "--containerd",
        metavar="PATH",
        help="include containerd's release, effective config and CRI plugin state for the "
        "main config at PATH",
    )
    parser.add_argument(
        "--health",
        action="store_true",
        help="include each GPU's ECC, row remapping and retired pages, and the kernel log's XIDs",
    )
    parser.add_argument(
        "--critical-xids",
        type=_codes,
        default=xid.DEFAULT_CRITICAL,
        metavar="CODES",
        help="with --health: XID codes always kept whole, comma-separated (verify passes the "
        "host's health_critical_xids; default: "
        + ",".join(map(str, xid.DEFAULT_CRITICAL))
        + "); other codes are capped per GPU",
    )
    parser.add_argument(
        "--kubelet-devices",
        metavar="DIR",
        help="include the kubelet's device-manager checkpoint and the socket names in DIR "
        "(the kubelet's device-plugin directory)",
    )
    parser.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="NAME",
        help="include this Debian package's installed version and hold state, if dpkg knows it "
        "(repeatable; a dpkg-query pattern such as 'nvidia-*' adds every match)",
    )
    parser.add_argument(
        "--unit",
        action="append",
        default=[],
        metavar="UNIT",
        help="include whether this systemd unit is enabled and active (repeatable)",
    )
    parser.add_argument(
        "--pod-resources",
        metavar="SOCKET",
        help="include every pod's devices as the kubelet's pod-resources API at SOCKET lists "
        "them (v1 List)",
    )
    parser.add_argument(
        "--runtime",
        metavar="SOCKET",
        help="with --pod-resources: wait until the kubelet lists every pod the container "
        "runtime's CRI at SOCKET runs, and name those it does not",
    )
    parser.add_argument("--format", choices=["json"], default="json", help="output format")
    return parser


def _codes(text: str) -> tuple[int, ...]:
    """``48,79`` as XID codes; ``""`` for none."""
    try:
        codes = tuple(int(c) for c in text.split(",") if c)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not comma-separated XID codes"
        ) from None
    if len(codes) > CRITICAL_XIDS_MAX or not all(0 <= c <= xid.CODE_MAX for c in codes):
        raise argparse.ArgumentTypeError(
            f"at most {CRITICAL_XIDS_MAX} codes, each 0 to {xid.CODE_MAX}"
        )
    return codes


def main(argv: Sequence[str] | None = None) -> int:
    """Print the probe document; 0 whatever NVML said, 2 for a bad command line."""
    try:
        options = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    document = probe(
        options.file,
        options.glob,
        options.containerd,
        options.health,
        kubelet_devices_dir=options.kubelet_devices,
        packages=options.package,
        units=options.unit,
        critical_xids=options.critical_xids,
        pod_resources_socket=options.pod_resources,
        runtime_socket=options.runtime,
    )
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
