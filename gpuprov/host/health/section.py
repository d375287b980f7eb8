"""The probe document's ``health`` section: NVML readings per GPU plus the XIDs of the kernel
log, matched to GPUs by PCI bus id (the kernel names a GPU by its bus, NVML by its index).

XIDs are counted per code with the last message, at most ``KERNEL_LOG_MAX_XIDS_PER_GPU`` codes
per GPU, so a flood of XIDs is a bounded document. An XID whose bus matches no GPU NVML lists
(a GPU that fell off the bus is often gone from NVML) is kept in ``other_xids``.

>>> from gpuprov.host.health.kernel_log import KernelLog
>>> log = KernelLog("/dev/kmsg", xids=[((0, 7, 0), 79, "NVRM: Xid (PCI:0000:07:00): 79, ...")])
>>> section([{"index": 0, "pci_bus_id": "00000000:07:00.0"}], {}, log)["gpus"][0]["xids"]
[{'code': 79, 'count': 1, 'last': 'NVRM: Xid (PCI:0000:07:00): 79, ...'}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprov.host.contract import KERNEL_LOG_MAX_XIDS_PER_GPU
from gpuprov.host.health import xid
from gpuprov.host.health.kernel_log import KernelLog

MAX_MESSAGE = 200  # characters of an XID's last message kept in the document


def section(
    gpus: Sequence[Mapping[str, Any]], counters: Mapping[int, Mapping[str, Any]], log: KernelLog
) -> dict[str, Any]:
    """The ``health`` section for the probe's ``gpus`` and each one's NVML ``counters``."""
    by_key = {xid.pci_key(gpu["pci_bus_id"]): gpu["index"] for gpu in gpus}
    per_gpu: dict[int, dict[int, dict[str, Any]]] = {gpu["index"]: {} for gpu in gpus}
    others: dict[tuple[xid.PciKey, int], dict[str, Any]] = {}
    for key, code, message in log.xids:
        index = by_key.get(key)
        if index is None:
            seen = others.setdefault(
                (key, code), {"pci_bus_id": xid.kernel_bus_id(key), "code": code, "count": 0}
            )
        elif code in per_gpu[index] or len(per_gpu[index]) < KERNEL_LOG_MAX_XIDS_PER_GPU:
            seen = per_gpu[index].setdefault(code, {"code": code, "count": 0})
        else:
            continue
        seen["count"] += 1
        seen["last"] = message[:MAX_MESSAGE]
    return {
        "kernel_log": {"path": log.path, "error": log.error, "truncated": log.truncated},
        "gpus": [
            {
                "index": gpu["index"],
                **counters.get(gpu["index"], {}),
                "xids": sorted(per_gpu[gpu["index"]].values(), key=lambda x: x["code"]),
            }
            for gpu in gpus
        ],
        "other_xids": list(others.values())[:KERNEL_LOG_MAX_XIDS_PER_GPU],
    }
