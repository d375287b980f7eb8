"""Plan + observed host state -> findings: the thin orchestration of verify's checks.

``observed`` is a host's probe document (``gpuprov.probe/v1``) with the ``files`` that
``wanted_files(plan)`` named and the ``packages`` and ``units`` the deploy manages. It is checked
against its schema first (``gpuprov.core.checks.probe_document``); then the GPUs
(``gpuprov.core.checks.gpus``), each managed file (one module per file in
``gpuprov/core/hostfiles/``, each ``check(plan, files)``; ``FILE_CHECKS`` lists every one), the
packages (``gpuprov.core.checks.packages``) and the units (``gpuprov.core.checks.units``) are
compared: what the deploy writes, installs or enables, verify reads back. A check that fails on input it
did not foresee becomes a finding for that host, so one host never aborts the fleet's report, and
a host is "ok" only when every check ran and found nothing.

>>> from gpuprov.controller.inventory import load                      # doctest: +SKIP
>>> plan = build(load("inventories/example.py")).host("gpu-h100-01")   # doctest: +SKIP
>>> [f.check for f in compare(plan, {"schema": PROBE_SCHEMA, "nvml": "agent-missing",
...                                  "error": "no agent", "gpus": []})]  # doctest: +SKIP
['agent']
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

from gpuprov.core.checks import (
    gpus,
    kubelet_devices,
    kubelet_pods,
    packages,
    shares_in_use,
    units,
)
from gpuprov.core.checks import health as health_check
from gpuprov.core.checks.probe_document import ProbeDocument, missing_files, read
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import (
    Wanted,
    apt_preferences,
    apt_source,
    device_plugin,
    kubelet,
    mig_layout,
    mig_unit,
    mps_root,
    nouveau_blacklist,
)
from gpuprov.core.hostfiles import containerd as containerd_file
from gpuprov.core.hostfiles import docker as docker_file
from gpuprov.core.hostfiles.documents import one_line
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import KUBELET_DEVICE_PLUGIN_DIR

FileCheck = Callable[[HostPlan, ProbeDocument], list[Finding]]


def containerd_main(plan: HostPlan) -> str | None:
    """The containerd main config whose effective result the probe reads (``--containerd``);
    None on a docker host."""
    if plan.runtime.container_runtime == "containerd":
        return plan.runtime.containerd_config_path
    return None


def kubelet_devices_dir(plan: HostPlan) -> str | None:
    """The kubelet's device-plugin directory the probe reads (``--kubelet-devices``); None when
    the host's ``verify_kubelet_devices`` is off."""
    return KUBELET_DEVICE_PLUGIN_DIR if plan.kubelet.verify_kubelet_devices else None


def critical_xids(plan: HostPlan) -> str:
    """The host's ``health_critical_xids`` as the probe's ``--critical-xids`` takes them: the
    codes it must keep whole however many others the kernel logged.

    >>> critical_xids(plan)                                     # doctest: +SKIP
    '48,64,74,75,79,95,119,120,140'
    """
    return ",".join(map(str, plan.health.health_critical_xids))


def _files(check: Callable[[HostPlan, Mapping[str, Any]], list[Finding]]) -> FileCheck:
    return lambda plan, probe: check(plan, probe.files)


def _runtime_paths(plan: HostPlan) -> Wanted:
    module = containerd_file if plan.runtime.container_runtime == "containerd" else docker_file
    return module.paths(plan)


def _runtime_check(plan: HostPlan, probe: ProbeDocument) -> list[Finding]:
    if plan.runtime.container_runtime == "containerd":
        return containerd_file.check(plan, probe.files, probe.containerd)
    return docker_file.check(plan, probe.files)


# Each managed file's check, in report order, with what the probe must read for it: every module
# of gpuprov/core/hostfiles/ with a ``check`` (tests/test_verify_reads_back.py fails on one that
# verify never runs).
FILE_CHECKS: tuple[tuple[str, Callable[[HostPlan], Wanted], FileCheck], ...] = (
    ("device plugin config", device_plugin.paths, _files(device_plugin.check)),
    ("MPS root", mps_root.paths, _files(mps_root.check)),
    ("kubelet config", kubelet.paths, _files(kubelet.check)),
    ("container runtime config", _runtime_paths, _runtime_check),
    ("MIG layout file", mig_layout.paths, _files(mig_layout.check)),
    ("MIG boot unit", mig_unit.paths, _files(mig_unit.check)),
    ("apt sources", apt_source.paths, _files(apt_source.check)),
    ("apt pin file", apt_preferences.paths, _files(apt_preferences.check)),
    ("nouveau blacklist", nouveau_blacklist.paths, _files(nouveau_blacklist.check)),
)


def wanted_files(plan: HostPlan) -> Wanted:
    """The files and glob patterns the probe must read for ``compare`` to check ``plan``.

    Every host reads every mode's files, so a file left from another mode is seen.

    >>> wanted_files(plan).globs                                # doctest: +SKIP
    ('/etc/kubernetes/kubelet.conf.d/*.conf', '/etc/containerd/conf.d/*.toml')
    """
    wanted = packages.paths(plan)
    for _, paths, _ in FILE_CHECKS:
        wanted += paths(plan)
    return wanted


def wanted_packages(plan: HostPlan) -> tuple[str, ...]:
    """The packages (names and dpkg-query patterns) the probe reads (``--package``)."""
    return packages.names(plan)


def wanted_units(plan: HostPlan) -> tuple[str, ...]:
    """The systemd units the probe reads (``--unit``)."""
    return tuple(units.wanted(plan))


def probe_command(plan: HostPlan, health: bool = True) -> str:
    """The shell command that prints this host's probe document with every file it needs.

    >>> probe_command(plan)                                      # doctest: +SKIP
    "python3 /usr/lib/gpuprov/agent.pyz probe --file ... --glob '/etc/containerd/conf.d/*.toml'"
    """
    wanted = wanted_files(plan)
    words = [plan.agent.gpuprov_python, plan.agent.gpuprov_agent_path, "probe"]
    for path in wanted.files:
        words += ["--file", path]
    for pattern in wanted.globs:
        words += ["--glob", pattern]
    if containerd_main(plan):
        words += ["--containerd", containerd_main(plan)]
    if health:
        words += ["--health", "--critical-xids", critical_xids(plan)]
    if kubelet_devices_dir(plan):
        words += ["--kubelet-devices", kubelet_devices_dir(plan)]
    for name in wanted_packages(plan):
        words += ["--package", name]
    for unit in wanted_units(plan):
        words += ["--unit", unit]
    return shlex.join(words)


def compare(plan: HostPlan, observed: Any, health: bool = True) -> list[Finding]:
    """Every difference between ``plan`` and ``observed`` (a probe document); [] when it matches.

    ``health``: also judge the GPUs' health (``gpuprov.core.checks.health``) when the document has
    a ``health`` section; ``gpuprov verify --health off`` passes False."""
    probe, findings = read(
        plan.name, observed, plan.agent.gpuprov_agent_path, plan.agent.gpuprov_python
    )
    if probe is None:
        return findings
    command = probe_command(plan, health)
    findings += _guarded(plan, "GPU", lambda: gpus.check(plan, probe))
    if health:
        findings += _guarded(plan, "GPU health", lambda: health_check.check(plan, probe))
    if kubelet_devices_dir(plan):
        findings += _guarded(
            plan, "kubelet devices", lambda: kubelet_devices.check(plan, probe, command)
        )
    findings += _guarded(plan, "shares in use", lambda: shares_in_use.check(plan, probe))
    findings += _guarded(plan, "kubelet pods", lambda: kubelet_pods.check(plan, probe))
    findings += _guarded(plan, "packages", lambda: packages.check(plan, probe, command))
    findings += _guarded(plan, "units", lambda: units.check(plan, probe, command))
    missing = missing_files(plan.name, probe, wanted_files(plan), command)
    if missing or probe.files is None:
        # Unread files would look absent, and "absent" passes some checks: no file verdict
        # without the files.
        return findings + missing
    for name, _, check in FILE_CHECKS:
        findings += _guarded(plan, name, lambda check=check: check(plan, probe))
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
