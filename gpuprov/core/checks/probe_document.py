"""The probe document (``gpuprov.probe/v1``) checked against its schema before anything compares it.

A probe document comes from a host (over SSH, or saved as a snapshot), so verify trusts nothing in
it: every field is checked for its type and range, GPU indices are unique integers numbered
0..N-1 as NVML numbers them, UUIDs and PCI bus ids are unique, GPU instances exist only where MIG
is on. A document that fails becomes findings for its host (never an exception, never "ok"); the
comparison only ever sees a ``ProbeDocument`` that passed.

>>> from gpuprov.host.contract import PROBE_SCHEMA
>>> probe, findings = read("gpu-1", {"schema": PROBE_SCHEMA, "nvml": "ok",
...     "gpus": [{"index": "0"}]}, "/usr/lib/gpuprov/agent.pyz", "python3")
>>> probe, [f.found for f in findings][:2]
(None, ['gpus[0]: missing uuid, name, memory_total_mib, pci_bus_id, mig, gpu_instances', 'gpus[0].index: "0" is not an integer'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import kind, one_line, shown
from gpuprov.host import containerd_state
from gpuprov.host.contract import (
    CRITICAL_XIDS_MAX,
    DEVICE_PLUGIN_SOCKETS_MAX,
    HEALTH_NOT_SUPPORTED,
    KERNEL_LOG_MAX_XIDS_PER_GPU,
    NVML_ECC_COUNT_MAX,
    NVML_UINT_MAX,
    POD_RESOURCES_CONTAINERS_MAX,
    PROBE_AGENT_MISSING,
    PROBE_NVML_OK,
    PROBE_NVML_STATES,
    PROBE_SCHEMA,
)

CHECK = "probe-document"
MAX_GPUS = 1024  # far above any host; bounds the work one document can ask for
MAX_GPU_INSTANCES = 64  # MIG allows at most 7 GIs per GPU today
MAX_SHOWN_PROBLEMS = 5  # per host; the rest is counted
# NVML's longest strings: a device name or UUID (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
# NVML_DEVICE_UUID_V2_BUFFER_SIZE: 96), the driver version (NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE:
# 80), in nvml.h.
MAX_NVML_STRING = 96

_TOP = {"schema", "nvml", "gpus"}
# ``containerd``: what containerd says about its effective config, on containerd hosts, checked
# here for its shape (the container runtime check judges its text). ``kubelet_devices``: what the
# kubelet registered (checkpoint text, socket names), checked here for its shape.
_TOP_OPTIONAL = {
    "error",
    "driver_version",
    "nvml_version",
    "files",
    "containerd",
    "kubelet_devices",
    "health",
    "packages",
    "units",
    "pod_resources",
}
_KUBELET_DEVICES = ("directory", "checkpoint", "sockets")
# A socket name is one directory entry: NAME_MAX of Linux file systems.
_NAME_MAX = 255
_GPU = ("index", "uuid", "name", "memory_total_mib", "pci_bus_id", "mig", "gpu_instances")
_GI = ("id", "profile_id", "profile", "start", "size", "compute_instances")
# A compute instance may also carry ``uuid``, its MIG device's UUID (probes before it had none).
_CI = ("id", "profile_id", "slice_count")
# The health section (gpuprov.host.health.section): each NVML reading is these fields, the text
# HEALTH_NOT_SUPPORTED, or {"error": why}.
_HEALTH_GPU = ("index", "ecc_uncorrected", "remapped_rows", "retired_pages", "xids")
# Each count is bounded by its NVML C type (bool: a flag).
HEALTH_READINGS: dict[str, dict[str, type | int]] = {
    "ecc_uncorrected": {"volatile": NVML_ECC_COUNT_MAX, "aggregate": NVML_ECC_COUNT_MAX},
    "remapped_rows": {
        "corrected": NVML_UINT_MAX,
        "uncorrected": NVML_UINT_MAX,
        "pending": bool,
        "failure": bool,
    },
    "retired_pages": {"single_bit": NVML_UINT_MAX, "double_bit": NVML_UINT_MAX, "pending": bool},
}
_OTHER_XID = ("pci_bus_id", "code", "count", "last")
# What the probe keeps (gpuprov.host.health.section): per GPU every critical code and at most
# KERNEL_LOG_MAX_XIDS_PER_GPU others; without a GPU, the critical codes of that many buses too.
MAX_XIDS = KERNEL_LOG_MAX_XIDS_PER_GPU + CRITICAL_XIDS_MAX
MAX_OTHER_XIDS = KERNEL_LOG_MAX_XIDS_PER_GPU * (1 + CRITICAL_XIDS_MAX)
MAX_XID_CODE = 65535
MAX_COUNT = 2**53  # XID counts: records of a 16 MiB log, far below
MAX_PATH = 4096
# The packages and units sections: dpkg's and systemd's view (gpuprov.host.packages, units).
MAX_PACKAGES = 4096  # the planned names and the matches of their patterns, with room
MAX_UNITS = 64
MAX_NAME = 255  # a Debian package or systemd unit name is one file name (NAME_MAX)
MAX_STATE = 64  # a Debian version (dpkg has no limit; real ones are < 64) or a systemctl word
_PACKAGE = {"version": (str, type(None)), "held": (bool,)}
# The pod_resources section (gpuprov.host.kubelet.pod_resources): the socket and one row per
# container and resource. Names are Kubernetes names (a pod's at most 253 characters, a
# resource's at most 63 + a 253-character prefix); a device id is the plugin's (no limit in the
# API; NVIDIA's are < 64), bounded here by MAX_DEVICE_ID, each row by MAX_DEVICE_IDS.
_POD_RESOURCES = ("socket", "containers")
# "unlisted": the pods (namespace/name) the container runtime runs that the kubelet's List does
# not name (gpuprov.host.kubelet.runtime_pods); absent when not asked, None without a runtime
# socket, {"error": why} when the runtime did not answer.
_POD_RESOURCES_OPTIONAL = ("unlisted",)
_POD_ROW = ("pod", "namespace", "container", "resource", "device_ids")
MAX_KUBE_NAME = 317
MAX_DEVICE_ID = 256
MAX_DEVICE_IDS = 1024
_UNIT = {"enabled": (str,), "active": (str,)}


@dataclass(frozen=True)
class ProbeDocument:
    """A probe document that passed the schema check.

    ``gpus`` keep the probe's own shape (``gpuprov.host.mig.diff`` reads them as the agent does);
    ``files`` is None when the probe was not asked for any; a file's entry is its text, None
    when it does not exist, or ``{"error": why}`` when the probe would not read it (too large,
    not a regular file), which the file's check reports."""

    nvml: str
    error: str | None
    driver_version: str | None
    gpus: tuple[Mapping[str, Any], ...]
    files: Mapping[str, str | Mapping[str, str] | None] | None
    containerd: Mapping[str, Any] | None = None
    # The ``health`` section (``gpuprov.host.health.section``); None when the probe did not read
    # health (an older agent, or a snapshot taken without ``--health``).
    health: Mapping[str, Any] | None = None
    # {"directory", "checkpoint": text | None | {"error"}, "sockets": [names] | None | {"error"}}
    kubelet_devices: Mapping[str, Any] | None = None
    # {name: {"version": str | None, "held": bool}} or {"error": why}; None when not read
    packages: Mapping[str, Any] | None = None
    # {unit: {"enabled": str, "active": str}} or {"error": why}; None when not read
    units: Mapping[str, Any] | None = None
    # {"socket": path, "containers": [{"pod", "namespace", "container", "resource",
    # "device_ids"}] | None (no socket) | {"error": why}, "unlisted": ["ns/pod"] | None |
    # {"error": why} (only when asked)}; None when not read
    pod_resources: Mapping[str, Any] | None = None


def read(
    host: str, document: Any, agent: str, python: str
) -> tuple[ProbeDocument | None, list[Finding]]:
    """(the checked document, []) or (None, the findings that say why it cannot be compared).

    ``agent`` and ``python`` are the plan's agent path and interpreter, for the hints when the
    probe did not run.
    """
    if isinstance(document, Mapping) and document.get("schema") != PROBE_SCHEMA:
        found = (
            "no probe document (the probe command failed; its output is on stderr)"
            if not document
            else f"schema {shown(document.get('schema'))}"
        )
        hint = (
            f"run the deploy (it installs the agent at {agent}), then check "
            f"`{python} {agent} probe` on the host"
        )
        return None, [Finding(host, None, "agent", PROBE_SCHEMA, found, hint)]
    problems = schema_problems(document)
    if problems:
        hint = (
            "the probe's output is malformed: run the deploy (it updates the agent), then probe "
            "again; a snapshot must be the probe's output as it printed it"
        )
        shown_problems = problems[:MAX_SHOWN_PROBLEMS]
        if len(problems) > MAX_SHOWN_PROBLEMS:
            shown_problems.append(f"... and {len(problems) - MAX_SHOWN_PROBLEMS} more problems")
        return None, [
            Finding(host, None, CHECK, f"a {PROBE_SCHEMA} document", problem, hint)
            for problem in shown_problems
        ]
    if document["nvml"] == PROBE_AGENT_MISSING:
        return None, [
            Finding(
                host,
                None,
                "agent",
                f"agent at {agent}",
                document.get("error") or "missing",
                "run the deploy (it installs the agent), or fix gpuprov_agent_path / "
                "gpuprov_python",
            )
        ]
    return ProbeDocument(
        nvml=document["nvml"],
        error=document.get("error"),
        driver_version=document.get("driver_version"),
        gpus=tuple(document["gpus"]),
        files=document.get("files"),
        containerd=document.get("containerd"),
        health=document.get("health"),
        kubelet_devices=document.get("kubelet_devices"),
        packages=document.get("packages"),
        units=document.get("units"),
        pod_resources=document.get("pod_resources"),
    ), []


def missing_files(host: str, probe: ProbeDocument, wanted: Wanted, command: str) -> list[Finding]:
    """A finding when the probe did not read a file the checks need: a probe without them would
    otherwise pass every file check. ``command`` is the probe command that reads them all."""
    if probe.files is None:
        missing = list(wanted.files)
        found = "no files section"
    else:
        missing = [path for path in wanted.files if path not in probe.files]
        found = f"not read: {', '.join(one_line(p) for p in missing[:3])}"
        if len(missing) > 3:
            found += f" and {len(missing) - 3} more"
    if not missing:
        return []
    return [
        Finding(
            host,
            None,
            CHECK,
            f"the {len(wanted.files)} files the plan's checks read",
            found,
            f"probe with every file the plan needs: {command}",
        )
    ]


def schema_problems(document: Any) -> list[str]:
    """Every way ``document`` breaks ``gpuprov.probe/v1``, as ``where: what`` lines; [] if none.

    >>> schema_problems([])
    ['the document: a list, not a JSON object']
    """
    check = _Schema()
    check.document(document)
    return check.problems


class _Schema:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def keys(self, where: str, value: Any, required: Sequence[str], optional=()) -> bool:
        """A mapping with every required key and no other; False when it is not a mapping."""
        if not isinstance(value, Mapping):
            self.fail(where, f"{kind(value)}, not a JSON object")
            return False
        missing = [k for k in required if k not in value]
        if missing:
            self.fail(where, f"missing {', '.join(missing)}")
        unknown = [k for k in value if k not in required and k not in optional]
        if unknown:
            self.fail(where, f"unknown key {', '.join(shown(k) for k in unknown[:3])}")
        return True

    def integer(self, where: str, value: Any, low: int = 0, high: int | None = None) -> bool:
        # bool is an int in Python, not in JSON's schema.
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(where, f"{shown(value)} is not an integer")
            return False
        if value < low or (high is not None and value > high):
            bounds = f"{low}..{high}" if high is not None else f">= {low}"
            self.fail(where, f"{shown(value)} is not in {bounds}")
            return False
        return True

    def string(
        self,
        where: str,
        value: Any,
        optional: bool = False,
        empty: bool = True,
        longest: int | None = MAX_NVML_STRING,
    ) -> bool:
        if value is None and optional:
            return True
        if not isinstance(value, str) or (not empty and not value):
            self.fail(where, f"{shown(value)} is not a{'' if empty else ' non-empty'} string")
            return False
        if longest is not None and len(value) > longest:
            self.fail(where, f"{len(value)} characters, more than NVML's {longest}")
            return False
        return True

    def boolean(self, where: str, value: Any) -> None:
        if not isinstance(value, bool):
            self.fail(where, f"{shown(value)} is not true or false")

    def listed(self, where: str, value: Any, most: int) -> bool:
        if not isinstance(value, list):
            self.fail(where, f"{kind(value)}, not a list")
            return False
        if len(value) > most:
            self.fail(where, f"{len(value)} entries, more than {most}")
            return False
        return True

    def document(self, doc: Any) -> None:
        if not isinstance(doc, Mapping):
            self.fail("the document", f"{kind(doc)}, not a JSON object")
            return
        self.keys("the document", doc, sorted(_TOP), sorted(_TOP_OPTIONAL))
        nvml = doc.get("nvml")
        if nvml not in PROBE_NVML_STATES:
            self.fail("nvml", f"{shown(nvml)} is not one of {', '.join(PROBE_NVML_STATES)}")
        self.string("error", doc.get("error"), optional=True, longest=None)
        for key in ("driver_version", "nvml_version"):
            self.string(key, doc.get(key), optional=True)
        if "gpus" in doc and self.listed("gpus", doc["gpus"], MAX_GPUS):
            if doc["gpus"] and nvml != PROBE_NVML_OK:
                self.fail("gpus", f"{len(doc['gpus'])} GPUs although nvml is {shown(nvml)}")
            self.gpus(doc["gpus"])
        if "files" in doc:
            self.files(doc["files"])
        if doc.get("containerd") is not None:
            self.containerd(doc["containerd"])
        if "health" in doc:
            gpus = doc.get("gpus") if isinstance(doc.get("gpus"), list) else []
            indices = {gpu.get("index") for gpu in gpus if isinstance(gpu, Mapping)}
            self.health(doc["health"], indices)
        if "kubelet_devices" in doc:
            self.kubelet_devices(doc["kubelet_devices"])
        if "packages" in doc:
            self.states("packages", doc["packages"], _PACKAGE, MAX_PACKAGES)
        if "units" in doc:
            self.states("units", doc["units"], _UNIT, MAX_UNITS)
        if "pod_resources" in doc:
            self.pod_resources(doc["pod_resources"])

    def pod_resources(self, section: Any) -> None:
        """The kubelet's pod-resources List as the probe reports it."""
        where = "pod_resources"
        if not self.keys(where, section, _POD_RESOURCES, _POD_RESOURCES_OPTIONAL):
            return
        self.string(f"{where}.socket", section.get("socket"), empty=False, longest=MAX_PATH)
        unlisted = section.get("unlisted")
        if (
            unlisted is not None
            and not _unread(unlisted)
            and self.listed(f"{where}.unlisted", unlisted, POD_RESOURCES_CONTAINERS_MAX)
        ):
            for n, pod in enumerate(unlisted):
                self.string(f"{where}.unlisted[{n}]", pod, empty=False, longest=2 * MAX_KUBE_NAME)
        rows = section.get("containers")
        if rows is None or _unread(rows):
            return
        if not self.listed(f"{where}.containers", rows, POD_RESOURCES_CONTAINERS_MAX):
            return
        for n, row in enumerate(rows):
            at = f"{where}.containers[{n}]"
            if not self.keys(at, row, _POD_ROW):
                continue
            for key in _POD_ROW[:4]:
                self.string(f"{at}.{key}", row.get(key), longest=MAX_KUBE_NAME)
            ids = row.get("device_ids")
            if "device_ids" in row and self.listed(f"{at}.device_ids", ids, MAX_DEVICE_IDS):
                for i, device in enumerate(ids):
                    self.string(f"{at}.device_ids[{i}]", device, empty=False, longest=MAX_DEVICE_ID)

    def states(
        self, where: str, section: Any, fields: Mapping[str, tuple[type, ...]], most: int
    ) -> None:
        """A name -> state section (``packages``, ``units``), or ``{"error": why}``."""
        if _unread(section):
            return
        if not isinstance(section, Mapping):
            self.fail(where, f"{kind(section)}, not a JSON object")
            return
        if len(section) > most:
            self.fail(where, f"{len(section)} entries, more than {most}")
            return
        for name, state in section.items():
            at = f"{where}[{shown(name)}]"
            if not isinstance(name, str) or not name or len(name) > MAX_NAME:
                self.fail(at, "not a name")
                continue
            if not self.keys(at, state, tuple(fields)):
                continue
            for key, types in fields.items():
                value = state.get(key)
                if key in state and (
                    not isinstance(value, types)
                    or (isinstance(value, str) and len(value) > MAX_STATE)
                ):
                    self.fail(f"{at}.{key}", f"{shown(value)} is not {_spelled(types)}")

    def containerd(self, section: Any) -> None:
        """What containerd said (``gpuprov.host.containerd_state.parse``): each section read is
        ``{"ok": true|false, "text": ...}``; the container runtime check judges the text."""
        if not self.keys("containerd", section, (), containerd_state.SECTIONS):
            return
        for name in containerd_state.SECTIONS:
            if name not in section:
                continue
            where, part = f"containerd.{name}", section[name]
            if self.keys(where, part, ("ok", "text")):
                self.boolean(f"{where}.ok", part.get("ok"))
                self.string(f"{where}.text", part.get("text"), longest=None)

    def health(self, health: Any, indices: set) -> None:
        """The ``health`` section: one entry per GPU of ``gpus``, readings of the right shape;
        ``critical_xids`` (the codes the probe kept whole) is absent from older probes."""
        if not self.keys(
            "health", health, ("kernel_log", "gpus", "other_xids"), ("critical_xids",)
        ):
            return
        if "critical_xids" in health and self.listed(
            "health.critical_xids", health["critical_xids"], CRITICAL_XIDS_MAX
        ):
            for n, code in enumerate(health["critical_xids"]):
                self.integer(f"health.critical_xids[{n}]", code, 0, MAX_XID_CODE)
        log = health.get("kernel_log")
        if self.keys("health.kernel_log", log, ("path", "error", "truncated")):
            self.string("health.kernel_log.path", log.get("path"), longest=MAX_PATH)
            self.string("health.kernel_log.error", log.get("error"), optional=True, longest=None)
            self.boolean("health.kernel_log.truncated", log.get("truncated"))
        gpus = health.get("gpus")
        if "gpus" in health and self.listed("health.gpus", gpus, MAX_GPUS):
            seen = set()
            for n, gpu in enumerate(gpus):
                where = f"health.gpus[{n}]"
                if not self.keys(where, gpu, _HEALTH_GPU):
                    continue
                if self.integer(f"{where}.index", gpu.get("index"), 0, MAX_GPUS - 1):
                    if gpu["index"] in seen:
                        # Two readings for one GPU: which one is the GPU's cannot be told.
                        self.fail(f"{where}.index", f"{gpu['index']} again")
                    seen.add(gpu["index"])
                for key, fields in HEALTH_READINGS.items():
                    self.reading(f"{where}.{key}", gpu.get(key), fields)
                self.xids(f"{where}.xids", gpu.get("xids"), ("code", "count", "last"), MAX_XIDS)
            if seen != indices:
                self.fail("health.gpus", f"GPU indices {sorted(seen)[:8]}, not those of gpus")
        self.xids("health.other_xids", health.get("other_xids"), _OTHER_XID, MAX_OTHER_XIDS)

    def reading(self, where: str, value: Any, fields: Mapping[str, type | int]) -> None:
        if value == HEALTH_NOT_SUPPORTED:
            return
        if isinstance(value, Mapping) and set(value) == {"error"}:
            self.string(f"{where}.error", value["error"], longest=None)
            return
        if not self.keys(where, value, tuple(fields)):
            return
        for key, most in fields.items():
            if most is bool:
                self.boolean(f"{where}.{key}", value.get(key))
            else:
                self.integer(f"{where}.{key}", value.get(key), 0, most)

    def xids(self, where: str, value: Any, keys: Sequence[str], most: int) -> None:
        """XIDs counted per code (per bus and code in ``other_xids``): each code once, since a
        code listed twice has two counts of which neither is the log's."""
        if not self.listed(where, value, most):
            return
        seen: dict[tuple, int] = {}
        for n, entry in enumerate(value):
            at = f"{where}[{n}]"
            if self.keys(at, entry, keys):
                code_ok = self.integer(f"{at}.code", entry.get("code"), 0, MAX_XID_CODE)
                self.integer(f"{at}.count", entry.get("count"), 1, MAX_COUNT)
                self.string(f"{at}.last", entry.get("last"), longest=None)
                bus = entry.get("pci_bus_id")
                if "pci_bus_id" in keys and not self.string(f"{at}.pci_bus_id", bus, empty=False):
                    continue
                if code_ok:
                    key = (bus, entry["code"]) if "pci_bus_id" in keys else (entry["code"],)
                    if key in seen:
                        self.fail(f"{at}.code", f"{entry['code']} again ({where}[{seen[key]}])")
                    seen.setdefault(key, n)

    def gpus(self, gpus: list) -> None:
        indices: dict[int, int] = {}
        seen: dict[tuple[str, str], int] = {}
        for n, gpu in enumerate(gpus):
            where = f"gpus[{n}]"
            if not self.keys(where, gpu, _GPU):
                continue
            index = gpu.get("index")
            if self.integer(f"{where}.index", index, 0, MAX_GPUS - 1):
                if index in indices:
                    self.fail(f"{where}.index", f"{index} again (gpus[{indices[index]}] has it)")
                indices.setdefault(index, n)
            for key in ("uuid", "pci_bus_id"):
                value = gpu.get(key)
                if self.string(f"{where}.{key}", value, empty=False):
                    if (key, value) in seen:
                        self.fail(
                            f"{where}.{key}", f"{shown(value)} again (gpus[{seen[key, value]}])"
                        )
                    seen.setdefault((key, value), n)
            self.string(f"{where}.name", gpu.get("name"))
            self.integer(f"{where}.memory_total_mib", gpu.get("memory_total_mib"))
            self.gpu_mig(where, gpu)
        # NVML numbers the GPUs it sees 0..N-1 (nvmlDeviceGetHandleByIndex): a gap or an extra
        # number means a GPU whose state would not be compared.
        if indices and len(indices) == len(gpus) and sorted(indices) != list(range(len(gpus))):
            numbers = ", ".join(map(str, sorted(indices)[:8]))
            self.fail(
                "gpus", f"indices {numbers}: NVML numbers {len(gpus)} GPUs 0..{len(gpus) - 1}"
            )

    def gpu_mig(self, where: str, gpu: Mapping) -> None:
        mig = gpu.get("mig")
        mig_on = False
        if mig is not None and self.keys(f"{where}.mig", mig, ("current", "pending")):
            for key in ("current", "pending"):
                self.boolean(f"{where}.mig.{key}", mig.get(key))
            mig_on = mig.get("current") is True
        gis = gpu.get("gpu_instances")
        if "gpu_instances" not in gpu or not self.listed(
            f"{where}.gpu_instances", gis, MAX_GPU_INSTANCES
        ):
            return
        if gis and not mig_on:
            self.fail(f"{where}.gpu_instances", f"{len(gis)} GPU instances while MIG is off")
        ids: set[int] = set()
        for n, gi in enumerate(gis):
            at = f"{where}.gpu_instances[{n}]"
            if not self.keys(at, gi, _GI):
                continue
            if self.integer(f"{at}.id", gi.get("id")):
                if gi["id"] in ids:
                    self.fail(f"{at}.id", f"{gi['id']} again")
                ids.add(gi["id"])
            self.integer(f"{at}.profile_id", gi.get("profile_id"))
            self.string(f"{at}.profile", gi.get("profile"), optional=True)
            self.integer(f"{at}.start", gi.get("start"))
            self.integer(f"{at}.size", gi.get("size"), 1)
            cis = gi.get("compute_instances")
            if "compute_instances" in gi and self.listed(
                f"{at}.compute_instances", cis, MAX_GPU_INSTANCES
            ):
                for m, ci in enumerate(cis):
                    ci_at = f"{at}.compute_instances[{m}]"
                    if self.keys(ci_at, ci, _CI, ("uuid",)):
                        self.integer(f"{ci_at}.id", ci.get("id"))
                        self.integer(f"{ci_at}.profile_id", ci.get("profile_id"))
                        self.integer(f"{ci_at}.slice_count", ci.get("slice_count"), 1)
                        self.string(f"{ci_at}.uuid", ci.get("uuid"), optional=True, empty=False)

    def kubelet_devices(self, section: Any) -> None:
        where = "kubelet_devices"
        if not self.keys(where, section, _KUBELET_DEVICES):
            return
        self.string(f"{where}.directory", section.get("directory"), empty=False, longest=None)
        self.file_entry(f"{where}.checkpoint", section.get("checkpoint"))
        sockets = section.get("sockets")
        if sockets is None or _unread(sockets):
            return
        if self.listed(f"{where}.sockets", sockets, DEVICE_PLUGIN_SOCKETS_MAX):
            for n, name in enumerate(sockets):
                if self.string(f"{where}.sockets[{n}]", name, empty=False, longest=_NAME_MAX):
                    if "/" in name or name in (".", ".."):
                        self.fail(f"{where}.sockets[{n}]", f"{shown(name)} is not a file name")

    def file_entry(self, where: str, text: Any) -> None:
        """A file as the probe reports it: its text, null (absent) or ``{"error": why}``."""
        if not isinstance(text, str) and text is not None and not _unread(text):
            self.fail(where, f"{kind(text)}, not a file's text, null or an error")

    def files(self, files: Any) -> None:
        if not isinstance(files, Mapping):
            self.fail("files", f"{kind(files)}, not a JSON object")
            return
        for path, text in files.items():
            self.file_entry(f"files[{shown(path)}]", text)


def _spelled(types: tuple[type, ...]) -> str:
    names = {str: f"a string of at most {MAX_STATE} characters", bool: "true or false"}
    return " or ".join(names.get(t, "null") for t in types)


def _unread(entry: Any) -> bool:
    """``{"error": why}``: what the probe says in place of something it did not read."""
    return (
        isinstance(entry, Mapping) and set(entry) == {"error"} and isinstance(entry["error"], str)
    )
