"""``gpuprov-sim``: set up and steer a simulated host's GPUs (the lab's "hardware" switches).

The state file is ``--state PATH``, else ``$GPUPROV_NVML_SIM``, else the lab default.

    gpuprov-sim init --model A100-80GB --count 8 --seed gpu-node-1   # a new host, MIG off
    gpuprov-sim driver --version 535.261.03 --unloaded               # nvmlInit now fails
    gpuprov-sim boot                                                 # what a reboot does
    gpuprov-sim fault -i 0 --busy                                    # a process holds GPU 0
    gpuprov-sim fault --fail-after nvmlDeviceCreateGpuInstanceWithPlacement 2
    gpuprov-sim inject xid 79 --gpu 0                                # NVRM: Xid line, kernel log
    gpuprov-sim set-ecc --gpu 0 --uncorrected 2                      # ECC error counts
    gpuprov-sim remap-pending --gpu 0                                # a row waits for a reset
    gpuprov-sim retire-page --gpu 0 --double-bit --pending           # page-retirement models
    gpuprov-sim show                                                 # print the state

Bad input is one message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

import pynvml

from gpuprov.host.contract import SIM_ENV, SIM_STATE_PATH
from gpuprov.host.health import xid
from gpuprov_lab.sim import kernel_log
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.nvml import FUNCTIONS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuprov-sim", description=__doc__.splitlines()[0])
    parser.add_argument("--state", help=f"state file (default: ${SIM_ENV} or {SIM_STATE_PATH})")
    commands = parser.add_subparsers(dest="command", required=True)

    init = commands.add_parser("init", help="create a host's GPUs (MIG off, no instances)")
    init.add_argument("--model", required=True, help="catalog model, e.g. A100-80GB")
    init.add_argument("--count", type=int, default=1, help="number of GPUs")
    init.add_argument("--seed", default="gpuprov-sim", help="makes UUIDs (use the host name)")
    init.add_argument("--driver-version", default=sim_state.DEFAULT_DRIVER_VERSION)

    driver = commands.add_parser("driver", help="set the driver version / load state")
    driver.add_argument("--version", help="driver version, e.g. 535.261.03")
    loaded = driver.add_mutually_exclusive_group()
    loaded.add_argument("--loaded", dest="loaded", action="store_true", default=None)
    loaded.add_argument("--unloaded", dest="loaded", action="store_false")

    commands.add_parser("boot", help="apply a reboot: pending MIG mode current, instances gone")

    fault = commands.add_parser("fault", help="inject or clear faults")
    fault.add_argument(
        "-i",
        "--index",
        type=int,
        action="append",
        help="GPU index for --busy/--idle/--held-by (repeatable; default all)",
    )
    busy = fault.add_mutually_exclusive_group()
    busy.add_argument(
        "--busy",
        dest="busy",
        action="store_true",
        default=None,
        help="a process holds the GPU: resets are refused",
    )
    busy.add_argument("--idle", dest="busy", action="store_false")
    fault.add_argument(
        "--held-by",
        action="append",
        metavar="UNIT",
        help="a systemd unit that holds the GPU while active (repeatable)",
    )
    fault.add_argument("--clear-held-by", action="store_true")
    fault.add_argument(
        "--fail-after",
        nargs=2,
        metavar=("FUNCTION", "N"),
        help="make NVML FUNCTION fail after N more successful calls",
    )
    fault.add_argument(
        "--error",
        default="NVML_ERROR_UNKNOWN",
        help="NVML error the failing function returns (with --fail-after)",
    )
    fault.add_argument("--clear-fail-after", action="store_true")

    inject = commands.add_parser("inject", help="log a driver event in the kernel log")
    inject.add_argument("event", choices=["xid"])
    inject.add_argument("code", type=int, help="XID code, e.g. 79")
    inject.add_argument("--gpu", type=int, required=True, help="GPU index")
    inject.add_argument("--pid", type=int, default=0, help="process the driver names")
    inject.add_argument("--name", default="", help="that process's name")

    ecc = commands.add_parser("set-ecc", help="set a GPU's ECC error counts")
    ecc.add_argument("--gpu", type=int, required=True, help="GPU index")
    for kind in ("uncorrected", "corrected"):
        ecc.add_argument(
            f"--{kind}", type=int, help=f"{kind} errors, volatile and (at least) aggregate"
        )
        ecc.add_argument(f"--{kind}-aggregate", type=int, help=f"aggregate {kind} errors")

    remap = commands.add_parser("remap-pending", help="a row remapping waits for a GPU reset")
    remap.add_argument("--gpu", type=int, required=True, help="GPU index")
    remap.add_argument("--failure", action="store_true", help="a remapping also failed")
    remap.add_argument("--clear", action="store_true", help="nothing pending, no failure")

    retire = commands.add_parser("retire-page", help="retire a page (page-retirement models)")
    retire.add_argument("--gpu", type=int, required=True, help="GPU index")
    retire.add_argument("--double-bit", action="store_true", help="cause: a double-bit error")
    retire.add_argument("--pending", action="store_true", help="waits for a driver reload")

    commands.add_parser("show", help="print the state file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``gpuprov-sim`` command line; returns the exit code."""
    try:
        options = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    path = options.state or os.environ.get(SIM_ENV) or SIM_STATE_PATH
    try:
        if options.command == "init":
            sim_state.write_new(
                path,
                sim_state.new_state(
                    options.model, options.count, options.seed, options.driver_version
                ),
            )
        elif options.command == "show":
            print(json.dumps(sim_state.load(path), indent=2))
        elif options.command == "inject":
            gpu = _gpu(sim_state.load(path), options.gpu)
            kernel_log.append(
                path, xid.line(gpu["pci_bus_id"], options.code, options.pid, options.name)
            )
            _raise_xid_event(path, options.gpu, options.code)
        elif options.command == "boot":
            with sim_state.transaction(path) as current:
                sim_state.reboot(current)
            kernel_log.clear(path)
        else:
            with sim_state.transaction(path) as current:
                {
                    "driver": _driver,
                    "fault": _fault,
                    "set-ecc": _set_ecc,
                    "remap-pending": _remap_pending,
                    "retire-page": _retire_page,
                }[options.command](current, options)
                sim_state.check(path, current)  # raised inside: nothing is written
    except sim_state.StateError as e:
        print(f"gpuprov-sim: error: {e}", file=sys.stderr)
        return 2
    return 0


def _driver(current: sim_state.State, options: argparse.Namespace) -> None:
    if options.version is not None:
        current["driver"]["version"] = options.version
    if options.loaded is not None:
        current["driver"]["loaded"] = options.loaded


# nvmlEventTypeXidCriticalError (nvml.h); 0xFFFFFFFF: the whole GPU, not a MIG instance.
_XID_EVENT, _WHOLE_GPU = 8, 0xFFFFFFFF


def _raise_xid_event(path: str, gpu: int, code: int) -> None:
    """The NVML event of an XID, as the C library raises it (``events_raise`` in
    libnvml/events.c): one line ``<gpu> <type> <data> <gi> <ci>`` appended to ``<state>.events``
    with one write, which every waiting event set (the device plugin's health check) reads."""
    line = f"{gpu} {_XID_EVENT} {code} {_WHOLE_GPU} {_WHOLE_GPU}\n".encode()
    fd = os.open(f"{path}.events", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, line)
    finally:
        os.close(fd)


def _gpu(current: sim_state.State, index: int) -> dict:
    gpus = current["gpus"]
    if not 0 <= index < len(gpus):
        raise sim_state.StateError(f"no GPU {index} (the host has {len(gpus)})")
    return gpus[index]


def _health(current: sim_state.State, index: int) -> dict:
    gpu = _gpu(current, index)
    gpu["health"] = sim_state.health(gpu)
    return gpu["health"]


def _set_ecc(current: sim_state.State, options: argparse.Namespace) -> None:
    ecc = _health(current, options.gpu)["ecc"]
    for kind in ("uncorrected", "corrected"):
        volatile = getattr(options, kind)
        aggregate = getattr(options, f"{kind}_aggregate")
        if volatile is not None:
            ecc[kind]["volatile"] = volatile
            ecc[kind]["aggregate"] = max(ecc[kind]["aggregate"], volatile)
        if aggregate is not None:
            ecc[kind]["aggregate"] = aggregate
        if min(ecc[kind].values()) < 0:
            raise sim_state.StateError(f"--{kind} counts cannot be negative")


def _remap_pending(current: sim_state.State, options: argparse.Namespace) -> None:
    rows = _health(current, options.gpu)["remapped_rows"]
    if options.clear:
        rows.update(pending=False, failure=False)
        return
    # A pending remapping follows an uncorrectable error in that row (row remapping docs).
    rows.update(pending=True, uncorrected=rows["uncorrected"] + 1)
    if options.failure:
        rows["failure"] = True


def _retire_page(current: sim_state.State, options: argparse.Namespace) -> None:
    pages = _health(current, options.gpu)["retired_pages"]
    cause = "double_bit" if options.double_bit else "single_bit"
    taken = len(pages["single_bit"]) + len(pages["double_bit"])
    # Page-sized, distinct addresses; the timestamp is seconds since the epoch, as NVML's.
    pages[cause].append({"address": 0x1000 * (taken + 1), "timestamp": 1_700_000_000 + taken})
    if options.pending:
        pages["pending"] = True


def _fault(current: sim_state.State, options: argparse.Namespace) -> None:
    gpus = current["gpus"]
    indices = options.index if options.index is not None else range(len(gpus))
    for index in indices:
        if not 0 <= index < len(gpus):
            raise sim_state.StateError(f"no GPU {index} (the host has {len(gpus)})")
        gpu = gpus[index]
        if options.busy is not None:
            gpu["busy"] = options.busy
        if options.clear_held_by:
            gpu["held_by"] = []
        for unit in options.held_by or []:
            if unit not in gpu["held_by"]:
                gpu["held_by"].append(unit)
    if options.clear_fail_after:
        current["faults"]["fail_after"] = None
    if options.fail_after:
        function, successes = options.fail_after
        if function not in FUNCTIONS:
            raise sim_state.StateError(f"the simulated driver has no function {function!r}")
        if not successes.isdigit():
            raise sim_state.StateError(f"--fail-after N must be a count, not {successes!r}")
        if not isinstance(
            getattr(pynvml, options.error, None), int
        ) or not options.error.startswith("NVML_ERROR_"):
            raise sim_state.StateError(f"unknown NVML error {options.error!r}")
        current["faults"]["fail_after"] = {
            "function": function,
            "successes": int(successes),
            "error": options.error,
            "succeeded": 0,
        }


def run() -> None:
    """Console-script entry point (``gpuprov-sim``)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
