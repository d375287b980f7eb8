"""Plan + observed host state -> findings: where a host differs from what the plan decided.

``observed`` is the probe document of docs/architecture.md ("gpuprov.probe/v1"), with the
``files`` that ``wanted_files(plan)`` named. Config files are parsed (YAML, TOML, JSON), never
string-compared, so formatting and comments are not drift. MIG instances are compared by exact
placement, through the same ``gpuprov.mig.diff`` the host-side applier uses, so "verify says ok"
and "apply has nothing to do" are one rule.

>>> from gpuprov.inventory import load                      # doctest: +SKIP
>>> plan = build(load("inventories/example.py")).host("gpu-h100-01")   # doctest: +SKIP
>>> [f.check for f in compare(plan, {"schema": PROBE_SCHEMA, "nvml": "agent-missing",
...                                  "error": "no agent", "gpus": []})]  # doctest: +SKIP
['agent']
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

from gpuprov import catalog
from gpuprov.contract import (
    KUBELET_DEFAULT_MAX_PODS,
    KUBELET_DROP_IN,
    MIG_LAYOUT_PATH,
    MIG_UNIT_PATH,
    PROBE_SCHEMA,
    VERIFY_SCHEMA,
    kubelet_drop_in_glob,
)
from gpuprov.findings import Finding
from gpuprov.hostfiles import containerd as containerd_file
from gpuprov.hostfiles import docker as docker_file
from gpuprov.hostfiles.documents import ParseError, dig, parse, scalar
from gpuprov.mig.diff import MigDiffError, ObservedGi, diff
from gpuprov.mig.instance import Instance
from gpuprov.plan import GpuPlan, HostPlan

# Fixed paths of the host layout (docs/architecture.md, "Host layout written by the deploy").

# What `nvidia-ctk runtime configure` writes, and the deploy with it (k8s.md 3.2).
# containerd config version -> the CRI plugin that holds `containerd.runtimes` (k8s.md 3.2).


def wanted_files(plan: HostPlan) -> tuple[list[str], list[str]]:
    """The files and glob patterns the probe must read for ``compare`` to check ``plan``.

    Every host reads every mode's files, so a file left from another mode is seen.

    >>> files, globs = wanted_files(plan)                      # doctest: +SKIP
    >>> globs                                                   # doctest: +SKIP
    ['/etc/kubernetes/kubelet.conf.d/*.conf', '/etc/containerd/conf.d/*.toml']
    """
    s = plan.settings
    files = [
        s["device_plugin_config_path"],
        s["kubelet_config_path"],
        MIG_LAYOUT_PATH,
        MIG_UNIT_PATH,
    ]
    globs = []
    kubelet_glob = kubelet_drop_in_glob(s["kubelet_config_dir"])
    if kubelet_glob:
        globs.append(kubelet_glob)
    runtime = containerd_file if plan.container_runtime == "containerd" else docker_file
    runtime_files, runtime_globs = runtime.paths(plan)
    return files + list(runtime_files), globs + list(runtime_globs)


def compare(plan: HostPlan, observed: Mapping[str, Any]) -> list[Finding]:
    """Every difference between ``plan`` and ``observed`` (a probe document); [] when it matches."""
    return _Comparison(plan, observed).run()


def unreachable(host: str, reason: str, hint: str) -> Finding:
    """The finding for a host whose state could not be read at all."""
    return Finding(host, None, "unreachable", "reachable", reason, hint)


def host_status(findings: Iterable[Finding]) -> str:
    """``ok``, ``drift`` or ``unreachable`` for one host's findings."""
    findings = list(findings)
    if any(f.check == "unreachable" for f in findings):
        return "unreachable"
    return "drift" if findings else "ok"


def verify_report(results: Mapping[str, list[Finding]]) -> dict[str, Any]:
    """The ``gpuprov verify --format json`` document for ``{host: findings}``.

    >>> verify_report({"gpu-1": []})
    {'schema': 'gpuprov.verify/v1', 'hosts': [{'name': 'gpu-1', 'status': 'ok', 'findings': []}], 'ok': True}
    """
    hosts = [
        {"name": name, "status": host_status(findings), "findings": [f.as_dict() for f in findings]}
        for name, findings in results.items()
    ]
    return {"schema": VERIFY_SCHEMA, "hosts": hosts, "ok": all(h["status"] == "ok" for h in hosts)}


def hosts_summary(results: Mapping[str, list[Finding]]) -> str:
    """One line saying how many hosts are in each state, naming those that are not ok.

    >>> hosts_summary({"a": [], "b": [unreachable("b", "timeout", "check SSH")]})
    '2 hosts: 1 ok, 0 drift, 1 unreachable (b)'
    """
    by_status: dict[str, list[str]] = {"ok": [], "drift": [], "unreachable": []}
    for name, findings in results.items():
        by_status[host_status(findings)].append(name)
    parts = []
    for status, names in by_status.items():
        named = f" ({', '.join(names)})" if names and status != "ok" else ""
        parts.append(f"{len(names)} {status}{named}")
    count = len(results)
    return f"{count} host{'s' if count != 1 else ''}: {', '.join(parts)}"


def _slots(start: int, size: int) -> str:
    """Memory slots as people read them: ``slot 6`` or ``slots 4-7``."""
    return f"slot {start}" if size == 1 else f"slots {start}-{start + size - 1}"


def _planned_text(target: Instance) -> str:
    return f"{target.profile} at {_slots(target.start, target.size)}"


def _observed_text(gi: ObservedGi) -> str:
    return f"GI {gi.id}: {gi.profile or f'profile {gi.profile_id}'} at {_slots(gi.start, gi.size)}"


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _on_off(value: Any) -> str:
    return "enabled" if value else "disabled"


class _Comparison:
    def __init__(self, plan: HostPlan, observed: Mapping[str, Any]):
        self.plan = plan
        self.observed = observed
        self.settings = plan.settings
        self.files: Mapping[str, str | None] = observed.get("files") or {}
        self.findings: list[Finding] = []

    def add(self, check: str, expected: str, found: str, hint: str, gpu: int | None = None) -> None:
        self.findings.append(Finding(self.plan.name, gpu, check, expected, found, hint))

    def run(self) -> list[Finding]:
        if not self.agent_ran():
            return self.findings
        if self.nvml_ok():
            self.hardware()
            self.driver_version()
            for gpu in self.plan.gpus:
                self.gpu(gpu)
        if "files" in self.observed:
            self.device_plugin()
            self.kubelet_max_pods()
            if self.plan.container_runtime == "containerd":
                self.findings += containerd_file.check(
                    self.plan, self.files, self.observed.get("containerd")
                )
            else:
                self.findings += docker_file.check(self.plan, self.files)
            self.mig_boot_files()
        return self.findings

    # --- the probe itself

    def agent_ran(self) -> bool:
        agent = self.settings["gpuprov_agent_path"]
        if self.observed.get("schema") != PROBE_SCHEMA:
            found = (
                "no probe document (the probe command failed; its output is on stderr)"
                if not self.observed
                else f"schema {self.observed.get('schema')!r}"
            )
            self.add(
                "agent",
                PROBE_SCHEMA,
                found,
                f"run the deploy (it installs the agent at "
                f"{agent}), then check `{self.settings['gpuprov_python']} {agent} probe` "
                "on the host",
            )
            return False
        if self.observed.get("nvml") == "agent-missing":
            self.add(
                "agent",
                f"agent at {agent}",
                self.observed.get("error") or "missing",
                "run the deploy (it installs the agent), or fix gpuprov_agent_path / "
                "gpuprov_python",
            )
            return False
        return True

    def nvml_ok(self) -> bool:
        state = self.observed.get("nvml")
        if state == "ok":
            return True
        driver = self.plan.driver_version
        hints = {
            "library-not-found": f"run the deploy (it installs driver {driver})"
            if driver
            else "install the NVIDIA driver, or set driver_version to let the deploy do it",
            "driver-not-loaded": "load the nvidia kernel module (modprobe nvidia) or reboot "
            "after the driver install",
            "no-permission": "connect as root (or give the SSH user access to /dev/nvidia*)",
        }
        found = state if not self.observed.get("error") else f"{state}: {self.observed['error']}"
        self.add(
            "nvml",
            "ok",
            found,
            hints.get(state, "run nvidia-smi on the host to see why NVML fails"),
        )
        return False

    # --- host-wide

    def hardware(self) -> None:
        gpus = self.observed.get("gpus") or []
        plan = self.plan
        if len(gpus) != plan.gpu_count:
            self.add(
                "hardware",
                _gpus(plan.gpu_count),
                _gpus(len(gpus)),
                "fix gpu_count in the inventory, or check the host (a GPU fell off the bus?)",
            )
        wrong: dict[str, list[int]] = {}
        for gpu in gpus:
            model = catalog.find_model(gpu.get("name", ""))
            if model is None or model.alias != plan.gpu_model:
                alias = model.alias if model else "not in the catalog"
                wrong.setdefault(f"{gpu.get('name')} ({alias})", []).append(gpu["index"])
        for name, indices in wrong.items():
            self.add(
                "hardware",
                plan.gpu_model,
                f"GPU {', '.join(map(str, indices))}: {name}",
                "fix gpu_model in the inventory, or move the host to the right group",
            )

    def driver_version(self) -> None:
        want = self.plan.driver_version
        found = self.observed.get("driver_version")
        if want and found != want:
            self.add(
                "driver-version",
                want,
                str(found),
                "run the deploy (a driver change may need a reboot: driver_reboot)",
            )

    # --- per GPU

    def gpu(self, gpu_plan: GpuPlan) -> None:
        observed = next(
            (g for g in self.observed.get("gpus") or [] if g.get("index") == gpu_plan.index), None
        )
        if observed is None:
            return  # the hardware check names the missing GPU
        index = gpu_plan.index
        try:
            actions = diff(gpu_plan, observed)
        except MigDiffError:
            self.add(
                "mig-mode",
                "MIG enabled",
                "not MIG capable",
                f"check gpu_model: GPU {index} cannot run MIG",
                gpu=index,
            )
            return
        mig = observed.get("mig") or {"current": False, "pending": False}
        leftover = self.plan.mode != "mig"
        if actions.reset or actions.mig_mode is not None:
            self.mig_mode(index, gpu_plan.mig_enabled, mig, actions.reset, leftover)
        if not mig["current"]:
            return  # no instance can exist; a planned one follows the mode change
        if leftover:
            if observed.get("gpu_instances"):
                ids = ", ".join(str(g["id"]) for g in observed["gpu_instances"])
                self.add(
                    "leftover",
                    "no MIG instances",
                    f"GI {ids}",
                    "run the deploy (it destroys them and disables MIG)",
                    gpu=index,
                )
            return
        self.instances(index, actions.destroy, actions.create)

    def mig_mode(
        self, index: int, want: bool, mig: Mapping[str, Any], reset: bool, leftover: bool
    ) -> None:
        current, pending = bool(mig["current"]), bool(mig["pending"])
        check = "leftover" if leftover and (current or pending) else "mig-mode"
        expected = f"MIG {_on_off(want)}"
        if reset and pending == want:
            self.add(
                check,
                expected,
                f"MIG {_on_off(current)} (pending {_on_off(pending)})",
                f"reboot or reset GPU {index} to apply the pending MIG mode",
                gpu=index,
            )
        elif reset:
            self.add(check, expected, f"MIG {_on_off(current)}", "run the deploy", gpu=index)
        else:
            self.add(
                check,
                expected,
                f"MIG {_on_off(current)}, pending {_on_off(pending)}",
                f"run the deploy (a reset or reboot now would leave MIG "
                f"{_on_off(pending)} on GPU {index})",
                gpu=index,
            )

    def instances(
        self, index: int, destroy: tuple[ObservedGi, ...], create: tuple[Instance, ...]
    ) -> None:
        missing = sorted(create, key=lambda t: t.start)
        for gi in destroy:
            same_place = next(
                (
                    t
                    for t in missing
                    if (t.profile_id, t.start, t.size) == (gi.profile_id, gi.start, gi.size)
                ),
                None,
            )
            if same_place is not None:
                # Right GI at the right slots; only its compute instance is wrong.
                missing.remove(same_place)
                self.add(
                    "compute-instances",
                    f"GI {gi.id}: 1 CI of {same_place.compute_slices} slices",
                    f"GI {gi.id}: {self.ci_text(gi.ci_slices)}",
                    f"run the deploy (it recreates GI {gi.id} with its full compute instance)",
                    gpu=index,
                )
                continue
            elsewhere = next((t for t in missing if t.profile_id == gi.profile_id), None)
            if elsewhere is not None:
                missing.remove(elsewhere)
                self.add(
                    "gpu-instances",
                    _planned_text(elsewhere),
                    _observed_text(gi),
                    f"run the deploy (it re-creates GI {gi.id} at "
                    f"{_slots(elsewhere.start, elsewhere.size)})",
                    gpu=index,
                )
            else:
                self.add(
                    "gpu-instances",
                    f"nothing at {_slots(gi.start, gi.size)}",
                    _observed_text(gi),
                    f"run the deploy (it destroys GI {gi.id})",
                    gpu=index,
                )
        for target in missing:
            self.add(
                "gpu-instances",
                _planned_text(target),
                "missing",
                f"run the deploy (it creates {target.profile} at "
                f"{_slots(target.start, target.size)})",
                gpu=index,
            )

    @staticmethod
    def ci_text(slices: tuple[int, ...]) -> str:
        if not slices:
            return "no compute instance"
        if len(slices) == 1:
            return f"1 CI of {slices[0]} slices"
        return f"{len(slices)} CIs of {'+'.join(map(str, slices))} slices"

    # --- files

    def read(self, kind: str, path: str, check: str) -> tuple[bool, Any]:
        """(present, parsed document); an unparsable file is a finding and counts as absent."""
        text = self.files.get(path)
        if text is None:
            return False, None
        try:
            return True, parse(kind, text)
        except ParseError as e:
            self.add(
                check,
                f"valid {kind.upper()} in {path}",
                str(e),
                f"fix or remove {path}, then run the deploy",
            )
            return False, None

    def device_plugin(self) -> None:
        path = self.settings["device_plugin_config_path"]
        mode = self.plan.mode
        if mode == "whole_card":
            if self.files.get(path) is not None:
                self.add(
                    "leftover",
                    f"no device plugin config at {path}",
                    "a config file",
                    "run the deploy (it removes the file, keeping a backup)",
                )
            return
        if self.files.get(path) is None:
            self.add("device-plugin", f"config at {path}", "missing", "run the deploy")
            return
        present, doc = self.read("yaml", path, "device-plugin")
        if not present:
            return
        if not isinstance(doc, Mapping):
            self.add(
                "device-plugin",
                "a YAML mapping",
                type(doc).__name__,
                f"run the deploy (it rewrites {path})",
            )
            return
        hint = f"run the deploy (it rewrites {path})"
        want = {
            "version": "v1",
            "flags.migStrategy": self.plan.mig_strategy if mode == "mig" else "none",
        }
        # An empty version means v1, an absent migStrategy means none (k8s.md 1.1).
        got = {
            "version": doc.get("version") or "v1",
            "flags.migStrategy": dig(doc, "flags", "migStrategy") or "none",
        }
        sharing = doc.get("sharing")
        if mode == "shared":
            ts = self.plan.time_slicing
            want.update(
                {
                    "sharing.timeSlicing.renameByDefault": ts.rename,
                    "sharing.timeSlicing.failRequestsGreaterThanOne": ts.fail_requests_greater_than_one,
                    "nvidia.com/gpu replicas": ts.replicas,
                }
            )
            slicing = dig(doc, "sharing", "timeSlicing") or {}
            # Both default to false when unset (k8s.md 1.2).
            got["sharing.timeSlicing.renameByDefault"] = slicing.get("renameByDefault", False)
            got["sharing.timeSlicing.failRequestsGreaterThanOne"] = slicing.get(
                "failRequestsGreaterThanOne", False
            )
            resources = slicing.get("resources") or []
            # The plugin adds the nvidia.com/ prefix to a bare name (k8s.md 1.2).
            gpu = next(
                (
                    r
                    for r in resources
                    if isinstance(r, Mapping) and r.get("name") in ("nvidia.com/gpu", "gpu")
                ),
                None,
            )
            got["nvidia.com/gpu replicas"] = gpu.get("replicas") if gpu else None
            if dig(doc, "sharing", "mps") is not None:
                self.add(
                    "device-plugin",
                    "sharing.timeSlicing only",
                    "sharing.mps is set (MPS wins over time-slicing)",
                    hint,
                )
        elif sharing:
            shown = ", ".join(sharing) if isinstance(sharing, Mapping) else scalar(sharing)
            self.add("leftover", "no sharing section (MIG host)", f"sharing: {shown}", hint)
        for key, value in want.items():
            found = got[key]
            # `true` and "true" differ: the plugin's strict parser rejects a quoted bool.
            if found != value or type(found) is not type(value):
                self.add(
                    "device-plugin",
                    f"{key}: {scalar(value)}",
                    "unset" if found is None else f"{key}: {scalar(found)}",
                    hint,
                )

    def kubelet_max_pods(self) -> None:
        main = self.settings["kubelet_config_path"]
        directory = self.settings["kubelet_config_dir"]
        pattern = kubelet_drop_in_glob(directory)
        sources = [main]
        if pattern:
            # The kubelet applies drop-ins in file name order, after the main file (k8s.md 5).
            sources += sorted(
                p
                for p in self.files
                if fnmatch.fnmatch(p, pattern) and posixpath.dirname(p) == directory.rstrip("/")
            )
        value: Any = KUBELET_DEFAULT_MAX_PODS
        origin = "kubelet default"
        for path in sources:
            present, doc = self.read("yaml", path, "kubelet-max-pods")
            if present and isinstance(doc, Mapping) and "maxPods" in doc:
                value, origin = doc["maxPods"], path
        want = self.plan.kubelet_max_pods
        if value == want and type(value) is int:
            return
        ours = posixpath.join(directory, KUBELET_DROP_IN) if directory else main
        hint = "run the deploy (then the kubelet restarts)"
        if origin not in (ours, main, "kubelet default") and self.files.get(ours) is not None:
            hint = (
                f"{posixpath.basename(origin)} comes after {KUBELET_DROP_IN} and wins: "
                "remove maxPods from it"
            )
        self.add("kubelet-max-pods", f"maxPods {want}", f"maxPods {scalar(value)} ({origin})", hint)

    def mig_boot_files(self) -> None:
        if self.plan.mode != "mig":
            for path in (MIG_LAYOUT_PATH, MIG_UNIT_PATH):
                if self.files.get(path) is not None:
                    self.add(
                        "leftover",
                        f"no {path} (not a MIG host)",
                        "present",
                        "run the deploy (it disables the boot unit and removes the file)",
                    )
            return
        present, layout = self.read("json", MIG_LAYOUT_PATH, "mig-layout")
        if not present:
            return
        # A stale layout file is drift a reboot would expose: the boot unit applies it.
        saved = {g.get("index"): g for g in (dig(layout, "gpus") or []) if isinstance(g, Mapping)}
        for gpu in self.plan.gpus:
            entry = saved.get(gpu.index)
            want = (gpu.mig_enabled, sorted((i.profile_id, i.start, i.size) for i in gpu.instances))
            got = (
                None
                if entry is None
                else (
                    bool(entry.get("mig_enabled")),
                    sorted(
                        (i.get("profile_id"), i.get("start"), i.get("size"))
                        for i in entry.get("instances") or []
                    ),
                )
            )
            if got != want:
                self.add(
                    "mig-layout",
                    "the planned layout in " + MIG_LAYOUT_PATH,
                    "no entry" if entry is None else "another layout",
                    "run the deploy (the boot unit would apply the old layout)",
                    gpu=gpu.index,
                )
