"""Plan + observed host state -> findings: the thin orchestration of verify's checks.

``observed`` is a host's probe document (``gpuprov.probe/v1``) with the ``files`` that
``wanted_files(plan)`` named. It is checked against its schema first (``gpuprov.probe_document``);
then the GPUs (``gpuprov.checks.gpus``) and each managed file (one module per file in
``gpuprov/hostfiles/``, each ``check(plan, files)``) are compared. A check that fails on input it
did not foresee becomes a finding for that host, so one host never aborts the fleet's report, and
a host is "ok" only when every check ran and found nothing.

>>> from gpuprov.inventory import load                      # doctest: +SKIP
>>> plan = build(load("inventories/example.py")).host("gpu-h100-01")   # doctest: +SKIP
>>> [f.check for f in compare(plan, {"schema": PROBE_SCHEMA, "nvml": "agent-missing",
...                                  "error": "no agent", "gpus": []})]  # doctest: +SKIP
['agent']
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from gpuprov.checks import gpus
from gpuprov.contract import (
    CRI_PLUGIN,
    DOCKER_DAEMON_PATH,
    DOCKER_NVIDIA_RUNTIME_PATH,
    NVIDIA_RUNTIME_BINARY,
    NVIDIA_RUNTIME_TYPE,
    containerd_drop_in_glob,
)
from gpuprov.findings import Finding
from gpuprov.hostfiles import Wanted, device_plugin, kubelet, mig_layout, mig_unit
from gpuprov.hostfiles.documents import ParseError, deep_merge, dig, one_line, parse, scalar
from gpuprov.plan import HostPlan
from gpuprov.probe_document import missing_files, read

FileCheck = Callable[[HostPlan, Mapping[str, str | None]], list[Finding]]


def _runtime_paths(plan: HostPlan) -> Wanted:
    # Moves to gpuprov.hostfiles.containerd / docker (issue #9).
    if plan.container_runtime == "containerd":
        path = plan.settings["containerd_config_path"]
        return Wanted(files=(path,), globs=(containerd_drop_in_glob(path),))
    return Wanted(files=(DOCKER_DAEMON_PATH,))


def _runtime_check(plan: HostPlan, files: Mapping[str, str | None]) -> list[Finding]:
    comparison = _Comparison(plan, files)
    if plan.container_runtime == "containerd":
        comparison.containerd()
    else:
        comparison.docker()
    return comparison.findings


# Each managed file's check, in report order, with what the probe must read for it.
FILE_CHECKS: tuple[tuple[str, Callable[[HostPlan], Wanted], FileCheck], ...] = (
    ("device plugin config", device_plugin.paths, device_plugin.check),
    ("kubelet config", kubelet.paths, kubelet.check),
    ("container runtime config", _runtime_paths, _runtime_check),
    ("MIG layout file", mig_layout.paths, mig_layout.check),
    ("MIG boot unit", mig_unit.paths, mig_unit.check),
)


def wanted_files(plan: HostPlan) -> Wanted:
    """The files and glob patterns the probe must read for ``compare`` to check ``plan``.

    Every host reads every mode's files, so a file left from another mode is seen.

    >>> wanted_files(plan).globs                                # doctest: +SKIP
    ('/etc/kubernetes/kubelet.conf.d/*.conf', '/etc/containerd/conf.d/*.toml')
    """
    wanted = Wanted()
    for _, paths, _ in FILE_CHECKS:
        wanted += paths(plan)
    return wanted


def probe_command(plan: HostPlan) -> str:
    """The shell command that prints this host's probe document with every file it needs.

    >>> probe_command(plan)                                      # doctest: +SKIP
    "python3 /usr/lib/gpuprov/agent.pyz probe --file ... --glob '/etc/containerd/conf.d/*.toml'"
    """
    wanted = wanted_files(plan)
    words = [plan.settings["gpuprov_python"], plan.settings["gpuprov_agent_path"], "probe"]
    for path in wanted.files:
        words += ["--file", path]
    for pattern in wanted.globs:
        words += ["--glob", pattern]
    return shlex.join(words)


def compare(plan: HostPlan, observed: Any) -> list[Finding]:
    """Every difference between ``plan`` and ``observed`` (a probe document); [] when it matches."""
    settings = plan.settings
    probe, findings = read(
        plan.name, observed, settings["gpuprov_agent_path"], settings["gpuprov_python"]
    )
    if probe is None:
        return findings
    findings += _guarded(plan, "GPU", lambda: gpus.check(plan, probe))
    missing = missing_files(plan.name, probe, wanted_files(plan), probe_command(plan))
    if missing or probe.files is None:
        # Unread files would look absent, and "absent" passes some checks: no file verdict
        # without the files.
        return findings + missing
    files = probe.files
    for name, _, check in FILE_CHECKS:
        findings += _guarded(plan, name, lambda check=check: check(plan, files))
    return findings


def _guarded(plan: HostPlan, name: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    """``run()``, or one finding naming the check when it fails on something it did not foresee:
    that host is reported as not ok, and the other hosts are still compared."""
    try:
        return run()
    except Exception as e:  # noqa: BLE001 - any failure of one check is that host's finding
        found = one_line(f"{type(e).__name__}: {e}")
        return [
            Finding(
                plan.name,
                None,
                "check-failed",
                f"the {name} check to finish",
                found[:200],
                "a file or probe value has a shape gpuprov does not handle: look at the file, "
                "and report this to gpuprov with it",
            )
        ]


class _Comparison:
    """The container runtime and MIG boot file checks, until they move to their modules in
    ``gpuprov/hostfiles/`` (issue #9)."""

    def __init__(self, plan: HostPlan, files: Mapping[str, str | None]):
        self.plan = plan
        self.settings = plan.settings
        self.files = files
        self.findings: list[Finding] = []

    def add(self, check: str, expected: str, found: str, hint: str, gpu: int | None = None) -> None:
        self.findings.append(Finding(self.plan.name, gpu, check, expected, found, hint))

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

    def containerd(self) -> None:
        main_path = self.settings["containerd_config_path"]
        present, main = self.read("toml", main_path, "container-runtime")
        main = main if present else {}
        # Missing key: version 1 in a non-empty file, 2 for an empty one (k8s.md 3.2).
        version = main.get("version", 1 if main else 2)
        plugin = CRI_PLUGIN.get(version)
        hint = "run the deploy (then containerd restarts)"
        if plugin is None:
            self.add(
                "container-runtime",
                "containerd config version 2 or 3",
                f"version {scalar(version)} in {main_path}",
                hint,
            )
            return
        imports = main.get("imports") or []
        drop_ins = containerd_drop_in_glob(main_path)
        if drop_ins not in imports:
            self.add(
                "container-runtime",
                f"imports {drop_ins} in {main_path}",
                f"imports {scalar(imports)}",
                hint,
            )
        effective = main
        for pattern in imports:
            for path in sorted(p for p in self.files if fnmatch.fnmatch(p, pattern)):
                present, doc = self.read("toml", path, "container-runtime")
                if present:
                    effective = _merge_containerd(effective, doc, version)
        where = f"{main_path} + {drop_ins}"
        section = dig(effective, "plugins", plugin, "containerd") or {}
        nvidia = dig(section, "runtimes", "nvidia")
        if not isinstance(nvidia, Mapping):
            self.add("container-runtime", "runtime nvidia", f"no runtime nvidia in {where}", hint)
        else:
            for key, want, got in (
                ("runtime_type", NVIDIA_RUNTIME_TYPE, nvidia.get("runtime_type")),
                (
                    "options.BinaryName",
                    NVIDIA_RUNTIME_BINARY,
                    dig(nvidia, "options", "BinaryName"),
                ),
            ):
                if got != want:
                    self.add(
                        "container-runtime",
                        f"runtimes.nvidia.{key} {want}",
                        "unset" if got is None else f"{scalar(got)}",
                        hint,
                    )
        self.default_runtime("default_runtime_name", section.get("default_runtime_name"), hint)

    def docker(self) -> None:
        hint = "run the deploy (then docker restarts)"
        if self.files.get(DOCKER_DAEMON_PATH) is None:
            self.add(
                "container-runtime", f"runtime nvidia in {DOCKER_DAEMON_PATH}", "missing file", hint
            )
            return
        present, doc = self.read("json", DOCKER_DAEMON_PATH, "container-runtime")
        if not present:
            return
        path = dig(doc, "runtimes", "nvidia", "path")
        # docker resolves a bare name on PATH; nvidia-ctk writes the bare name (k8s.md 3.2).
        if path not in (DOCKER_NVIDIA_RUNTIME_PATH, NVIDIA_RUNTIME_BINARY):
            self.add(
                "container-runtime",
                "runtimes.nvidia.path nvidia-container-runtime",
                "unset" if path is None else scalar(path),
                hint,
            )
        self.default_runtime("default-runtime", dig(doc, "default-runtime"), hint)

    def default_runtime(self, key: str, got: Any, hint: str) -> None:
        """nvidia is the runtime's default when ``container_runtime_default`` asks for it."""
        if self.settings["container_runtime_default"] and got != "nvidia":
            self.add(
                "container-runtime",
                f'{key} "nvidia"',
                "unset" if got is None else f"{key} {scalar(got)}",
                hint,
            )


def _merge_containerd(main: dict, drop_in: Mapping, version: int) -> dict:
    """Merge one imported file into the config in effect.

    containerd 1.x (config version 2) replaces a whole plugin section with the imported one
    (containerd/containerd#5837); containerd 2.x (version 3) merges plugin sections key by key
    (containerd/containerd#9982).
    """
    if version == 3:
        return deep_merge(main, drop_in)
    out = {**main, **{k: v for k, v in drop_in.items() if k != "plugins"}}
    plugins = dict(main.get("plugins") or {})
    plugins.update(drop_in.get("plugins") or {})
    out["plugins"] = plugins
    return out
