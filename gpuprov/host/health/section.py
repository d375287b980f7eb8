"""The probe document's ``health`` section: NVML readings per GPU plus the XIDs of the kernel
log, matched to GPUs by PCI bus id (the kernel names a GPU by its bus, NVML by its index).

XIDs are counted per code with the last message. A critical code (``critical``: the host's
``health_critical_xids``, which verify passes with ``--critical-xids``) is always kept; the
others, at most ``KERNEL_LOG_MAX_XIDS_PER_GPU`` codes per GPU, so a flood of XIDs is a bounded
document that still holds every critical one. An XID whose bus matches no GPU NVML lists (a GPU
that fell off the bus is often gone from NVML) is kept in ``other_xids``, critical ones for at
most ``KERNEL_LOG_MAX_XIDS_PER_GPU`` buses. When anything is left out, ``kernel_log.truncated``
says so, and ``critical_xids`` says which codes were kept whole.

>>> from gpuprov.host.health.kernel_log import KernelLog
>>> log = KernelLog("/dev/kmsg", xids=[((0, 7, 0), 79, "NVRM: Xid (PCI:0000:07:00): 79, ...")])
>>> section([{"index": 0, "pci_bus_id": "00000000:07:00.0"}], {}, log)["gpus"][0]["xids"]
[{'code': 79, 'count': 1, 'last': 'NVRM: Xid (PCI:0000:07:00): 79, ...'}]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuprov.host.contract import KERNEL_LOG_MAX_XIDS_PER_GPU
from gpuprov.host.health import xid
from gpuprov.host.health.kernel_log import KernelLog

MAX_MESSAGE = 200  # characters of an XID's last message kept in the document


def section(
    gpus: Sequence[Mapping[str, Any]],
    counters: Mapping[int, Mapping[str, Any]],
    log: KernelLog,
    critical: Iterable[int] = xid.DEFAULT_CRITICAL,
) -> dict[str, Any]:
    """The ``health`` section for the probe's ``gpus`` and each one's NVML ``counters``;
    ``critical`` codes are never left out."""
    critical = frozenset(critical)
    cap = KERNEL_LOG_MAX_XIDS_PER_GPU
    by_key = {xid.pci_key(gpu["pci_bus_id"]): gpu["index"] for gpu in gpus}
    per_gpu: dict[int | None, dict[Any, dict[str, Any]]] = {gpu["index"]: {} for gpu in gpus}
    per_gpu[None] = {}  # other_xids, by (bus, code)
    uncritical = dict.fromkeys(per_gpu, 0)  # non-critical codes kept, per table
    other_buses: set[xid.PciKey] = set()  # buses without a GPU whose critical XIDs are kept
    dropped = False
    for key, code, message in log.xids:
        index = by_key.get(key)
        entry = code if index is not None else (key, code)
        table = per_gpu[index]
        if entry not in table:
            if code not in critical and uncritical[index] >= cap:
                dropped = True
                continue
            if code in critical and index is None and key not in other_buses:
                if len(other_buses) >= cap:
                    dropped = True  # the host is judged unhealthy by those kept already
                    continue
                other_buses.add(key)
            uncritical[index] += code not in critical
            table[entry] = {"code": code, "count": 0}
            if index is None:
                table[entry] = {"pci_bus_id": xid.kernel_bus_id(key), **table[entry]}
        seen = table[entry]
        seen["count"] += 1
        seen["last"] = message[:MAX_MESSAGE]
    return {
        "kernel_log": {
            "path": log.path,
            "error": log.error,
            "truncated": log.truncated or dropped,
        },
        "critical_xids": sorted(critical),
        "gpus": [
            {
                "index": gpu["index"],
                **counters.get(gpu["index"], {}),
                "xids": sorted(per_gpu[gpu["index"]].values(), key=lambda x: x["code"]),
            }
            for gpu in gpus
        ],
        "other_xids": list(per_gpu[None].values()),
    }
