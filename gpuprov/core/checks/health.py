"""Is each GPU fit to take work? Findings from the probe's ``health`` section (docs/health.md).

A GPU is unhealthy when the kernel logged a critical XID for it since boot (the host's
``health_critical_xids``), when it has uncorrectable ECC errors since the driver loaded, when a
row remapping waits for a GPU reset or has failed, or when a retired page waits for a driver
reload. Each finding names the GPU's index and UUID and the evidence; XID meanings come from
``gpuprov.host.health.xid`` (NVIDIA's Xid catalog).

>>> [f.found for f in check(plan, probe)]                  # doctest: +SKIP
['GPU-5d7e…: XID 79 (GPU has fallen off the bus), 1 time since boot']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprov.core import catalog
from gpuprov.core.checks.probe_document import HEALTH_READINGS, ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles.documents import Report, one_line
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import HEALTH_NOT_SUPPORTED
from gpuprov.host.health import xid

# Finding check names, one per kind of evidence.
XID, ECC, ROW_REMAPPING, RETIRED_PAGES, HEALTH = (
    "xid",
    "ecc",
    "row-remapping",
    "retired-pages",
    "health",
)
# Every check name a GPU health finding carries.
FINDINGS = frozenset({XID, ECC, ROW_REMAPPING, RETIRED_PAGES, HEALTH})
RESET_REQUIRED = "reset required for row remapping"


def check(plan: HostPlan, probe: ProbeDocument) -> list[Finding]:
    """The health findings of one host; [] when every GPU is fit or health was not read."""
    report = Report(plan.name)
    health = probe.health
    if health is None:
        return []  # an older agent or snapshot: health "not read", nothing to judge
    critical = set(plan.health.health_critical_xids)
    log = health["kernel_log"]
    if log["error"]:
        report.add(
            XID,
            f"the kernel log {log['path']} read",
            one_line(log["error"])[:200],
            "run the probe as root (reading the kernel log needs it, or CAP_SYSLOG)",
        )
    kept_whole = set(health.get("critical_xids", ()))  # an older probe kept none whole
    if log["truncated"] and not critical <= kept_whole:
        codes = ", ".join(map(str, sorted(critical - kept_whole)[:8]))
        report.add(
            XID,
            "every critical XID of the kernel log in the probe document",
            f"the probe left XIDs out (the kernel log's XIDs were truncated) without keeping "
            f"XID {codes} whole: a critical one may be missing",
            "probe with the host's critical XIDs (verify passes them: --critical-xids)",
        )
    uuids = {gpu["index"]: gpu["uuid"] for gpu in probe.gpus}
    model = catalog.find_model(plan.gpu_model)
    by_index = {gpu["index"]: gpu for gpu in probe.gpus}
    for gpu in health["gpus"]:
        _gpu(report, gpu, uuids.get(gpu["index"], "?"), critical)
        if model is not None:
            _unanswered(
                report, gpu, uuids.get(gpu["index"], "?"), model, by_index.get(gpu["index"])
            )
    for other in health["other_xids"]:
        if other["code"] in critical:
            report.add(
                XID,
                "no critical XID since boot",
                f"PCI {other['pci_bus_id']} (no GPU NVML lists): {_xid(other)}",
                "the GPU is gone from NVML: drain the node, reboot it; if the XID returns, "
                "service the GPU",
            )
    return report.findings


def _gpu(report: Report, gpu: Mapping[str, Any], uuid: str, critical: set[int]) -> None:
    index = gpu["index"]
    for seen in gpu["xids"]:
        if seen["code"] in critical:
            report.add(
                XID,
                "no critical XID since boot",
                f"{uuid}: {_xid(seen)}",
                f"drain the node; reset GPU {index} (nvidia-smi -r -i {index}) or reboot; if the "
                "XID returns, service the GPU (NVIDIA Xid catalog)",
                gpu=index,
            )
    for key in ("ecc_uncorrected", "remapped_rows", "retired_pages"):
        reading = gpu[key]
        if isinstance(reading, Mapping) and set(reading) == {"error"}:
            report.add(
                HEALTH,
                f"{key} read through NVML",
                f"{uuid}: {one_line(reading['error'])[:200]}",
                "run nvidia-smi -q on the host to see why NVML fails",
                gpu=index,
            )
    for key, fields in HEALTH_READINGS.items():
        reading = _reading(gpu[key])
        full = [
            f for f, most in fields.items() if most is not bool and reading and reading[f] == most
        ]
        if full:
            report.add(
                HEALTH,
                f"{key} counts below NVML's maximum",
                f"{uuid}: {key} {', '.join(full)} at {fields[full[0]]}, NVML's maximum: the "
                "count is saturated and the true count unknown",
                f"drain the node and run nvidia-smi -q -d ECC,ROW_REMAPPER -i {index}; "
                "service the GPU",
                gpu=index,
            )
    ecc = _reading(gpu["ecc_uncorrected"])
    if ecc and ecc["volatile"]:
        report.add(
            ECC,
            "no uncorrectable ECC errors since the driver loaded",
            f"{uuid}: {ecc['volatile']} uncorrectable ECC errors since the driver loaded "
            f"({ecc['aggregate']} in the GPU's life)",
            f"drain the node and reset GPU {index} or reboot; recurring errors need service",
            gpu=index,
        )
    rows = _reading(gpu["remapped_rows"])
    if rows and rows["failure"]:
        report.add(
            ROW_REMAPPING,
            "no failed row remapping",
            f"{uuid}: a row remapping failed ({rows['uncorrected']} rows remapped for "
            "uncorrectable errors)",
            "the GPU cannot repair its memory any more: drain the node and service the GPU",
            gpu=index,
        )
    if rows and rows["pending"]:
        report.add(
            ROW_REMAPPING,
            "no row remapping pending",
            f"{uuid}: {RESET_REQUIRED} ({rows['uncorrected']} uncorrectable, "
            f"{rows['corrected']} correctable rows remapped)",
            f"drain the node, then reset GPU {index} (nvidia-smi -r -i {index}) or reboot",
            gpu=index,
        )
    pages = _reading(gpu["retired_pages"])
    if pages and pages["pending"]:
        report.add(
            RETIRED_PAGES,
            "no page retirement pending",
            f"{uuid}: a retired page waits for a driver reload ({pages['double_bit']} double-bit, "
            f"{pages['single_bit']} single-bit pages retired)",
            "drain the node and reboot it (or reload the driver) to retire the page",
            gpu=index,
        )


def answers(model: catalog.GpuModel, gpu: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The readings a GPU of ``model`` in the probe's state ``gpu`` gives (docs/health.md):
    uncorrectable ECC counts on every catalog model (all have ECC memory); row remapping on
    row-remapping models, except on a MIG GPU with instances (NVML's note on
    nvmlDeviceGetRemappedRows); retired pages on page-retirement models.

    >>> answers(catalog.find_model("A100-80GB"), {"mig": {"current": False}, "gpu_instances": []})
    ('ecc_uncorrected', 'remapped_rows')
    """
    out = ["ecc_uncorrected"]
    mig = (gpu or {}).get("mig") or {}
    instances = mig.get("current") is True and bool((gpu or {}).get("gpu_instances"))
    if model.memory_repair == "row-remapping" and not instances:
        out.append("remapped_rows")
    if model.memory_repair == "page-retirement":
        out.append("retired_pages")
    return tuple(out)


def _unanswered(
    report: Report,
    gpu: Mapping[str, Any],
    uuid: str,
    model: catalog.GpuModel,
    state: Mapping[str, Any] | None,
) -> None:
    """A reading the model gives read back as not-supported: the GPU's memory health is then
    unknown, which is not healthy (ECC turned off, or a document that hides a reading)."""
    index = gpu["index"]
    for key in answers(model, state):
        if gpu[key] == HEALTH_NOT_SUPPORTED:
            hint = {
                "ecc_uncorrected": f"ECC may be disabled: nvidia-smi -q -d ECC -i {index} (turn "
                f"it on with nvidia-smi -e 1 -i {index} and a GPU reset)",
                "remapped_rows": f"nvidia-smi -q -d ROW_REMAPPER -i {index} on the host",
                "retired_pages": f"nvidia-smi -q -d PAGE_RETIREMENT -i {index} on the host",
            }[key]
            report.add(
                HEALTH,
                f"{key} read through NVML (a {model.alias} reports it)",
                f"{uuid}: {key} {HEALTH_NOT_SUPPORTED}",
                hint,
                gpu=index,
            )


def _reading(value: Any) -> Mapping[str, Any] | None:
    """A reading's numbers; None when the GPU lacks the feature or NVML failed."""
    if value == HEALTH_NOT_SUPPORTED or (isinstance(value, Mapping) and "error" in value):
        return None
    return value


def _xid(seen: Mapping[str, Any]) -> str:
    times = "1 time" if seen["count"] == 1 else f"{seen['count']} times"
    return f"XID {seen['code']} ({xid.meaning(seen['code'])}), {times} since boot"
