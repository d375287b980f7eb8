"""Facts about a GPU node, gathered by gpuprov's host agent in one round trip."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyinfra.api import FactBase, QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

from gpuprov.host.contract import PROBE_SCHEMA


def _agent_missing(error: str) -> str:
    """The probe document that stands in for an agent that cannot run (docs/architecture.md)."""
    return json.dumps(
        {
            "schema": PROBE_SCHEMA,
            "nvml": "agent-missing",
            "error": error,
            "driver_version": None,
            "nvml_version": None,
            "gpus": [],
        }
    )


class AgentProbe(FactBase[dict[str, Any]]):
    """
    Returns the host's GPU state as the agent's probe reads it: NVML (driver, GPUs, MIG mode,
    GPU and compute instances with their placements) and the text of the files asked for.

    + agent_path: where the deploy installed the agent (``gpuprov_agent_path``)
    + python: interpreter that runs it (``gpuprov_python``)
    + files: paths to read (a missing one is ``None``)
    + globs: patterns whose every match is read

    When the agent or the interpreter is missing, ``nvml`` is ``"agent-missing"``.

    .. code:: python

        {
            "schema": "gpuprov.probe/v1",
            "nvml": "ok",
            "error": None,
            "driver_version": "535.261.03",
            "nvml_version": "12.535.261.03",
            "gpus": [{
                "index": 0, "uuid": "GPU-…", "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920, "pci_bus_id": "00000000:07:00.0",
                "mig": {"current": True, "pending": True},
                "gpu_instances": [{
                    "id": 1, "profile_id": 9, "profile": "3g.40gb", "start": 4, "size": 4,
                    "compute_instances": [{"id": 0, "profile_id": 2, "slice_count": 3}],
                }],
            }],
            "files": {"/etc/nvidia/device-plugin/config.yaml": "version: v1\\n…"},
        }
    """

    default = dict

    @override
    def command(
        self,
        agent_path: str,
        python: str = "python3",
        files: Sequence[str] = (),
        globs: Sequence[str] = (),
    ) -> StringCommand:
        return self._command(agent_path, python, files, globs)

    def _command(
        self,
        agent_path: str,
        python: str,
        files: Sequence[str],
        globs: Sequence[str],
        extra: Sequence[Any] = (),
    ) -> StringCommand:
        probe: list[Any] = [QuoteString(python), QuoteString(agent_path), "probe"]
        for path in files:
            probe += ["--file", QuoteString(path)]
        for pattern in globs:
            # Quoted: the probe expands the pattern itself, so a pattern with no match is fine.
            probe += ["--glob", QuoteString(pattern)]
        probe += list(extra)
        shell: list[Any] = ["if", "[", "!", "-f", QuoteString(agent_path), "];", "then"]
        shell += ["echo", QuoteString(_agent_missing(f"no agent at {agent_path}")), ";"]
        shell += ["elif", "!", "command", "-v", QuoteString(python), ">/dev/null", "2>&1;", "then"]
        shell += ["echo", QuoteString(_agent_missing(f"no {python} to run the agent")), ";"]
        shell += ["else", *probe, ";", "fi"]
        return StringCommand(*shell)

    @override
    def process(self, output: list[str]) -> dict[str, Any]:
        try:
            document = json.loads("\n".join(output))
        except ValueError as e:
            raise FactProcessError(f"the agent printed no JSON ({e}): {output[0][:200]}") from None
        if not isinstance(document, dict):
            raise FactProcessError(f"the agent printed {type(document).__name__}, not an object")
        return document


class VerifyProbe(AgentProbe):
    """
    ``AgentProbe`` plus, on a containerd host, what containerd says about its config: the
    ``containerd`` section (release, effective ``config dump``, CRI rows of ``ctr plugins ls``;
    ``gpuprov.host.containerd_state``), what the kubelet registered from device plugins:
    the ``kubelet_devices`` section (its checkpoint's text and the sockets beside it), and the
    ``packages`` and ``units`` sections (dpkg's and systemd's view, with the commands of
    ``PackageStates`` and ``UnitStates``), all read in the same round trip.

    + containerd: containerd's main config (``containerd_config_path``); None for docker hosts
    + health: also read each GPU's health (NVML error counters, the kernel log's XIDs)
    + critical_xids: with health, the XID codes the probe keeps whole (``48,79``)
    + kubelet_devices: the kubelet's device-plugin directory; None to leave the section out
    + packages: Debian package names or dpkg-query patterns: installed version and hold
    + units: systemd units: enabled and active
    + pod_resources: the kubelet's pod-resources socket: every pod's devices (``List``)
    + runtime: with pod_resources, the container runtime's CRI socket: the pods it runs that
      the kubelet does not list yet (``unlisted``), after waiting for them a while

    .. code:: python

        {..., "kubelet_devices": {"directory": "/var/lib/kubelet/device-plugins",
                                  "checkpoint": '{"Data": {...}, "Checksum": 3764097439}',
                                  "sockets": ["kubelet.sock", "nvidia-gpu.shared.sock"]},
              "packages": {"nvidia-driver": {"version": "535.216.03-2~bpo12+1", "held": True}},
              "units": {"gpuprov-mig.service": {"enabled": "enabled", "active": "inactive"}},
              "pod_resources": {"socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
                                "containers": [{"pod": "p", "namespace": "ns", "container": "c",
                                                "resource": "nvidia.com/gpu",
                                                "device_ids": ["GPU-…"]}],
                                "unlisted": []}}
    """

    @override
    def command(  # type: ignore[override]
        self,
        agent_path: str,
        python: str = "python3",
        files: Sequence[str] = (),
        globs: Sequence[str] = (),
        containerd: str | None = None,
        health: bool = False,
        kubelet_devices: str | None = None,
        packages: Sequence[str] = (),
        units: Sequence[str] = (),
        critical_xids: str | None = None,
        pod_resources: str | None = None,
        runtime: str | None = None,
    ) -> StringCommand:
        extra = ["--containerd", QuoteString(containerd)] if containerd else []
        if health:
            extra.append("--health")
            if critical_xids is not None:
                extra += ["--critical-xids", QuoteString(critical_xids)]
        if kubelet_devices:
            extra += ["--kubelet-devices", QuoteString(kubelet_devices)]
        for name in packages:
            extra += ["--package", QuoteString(name)]
        for unit in units:
            extra += ["--unit", QuoteString(unit)]
        if pod_resources:
            extra += ["--pod-resources", QuoteString(pod_resources)]
            if runtime:
                extra += ["--runtime", QuoteString(runtime)]
        return self._command(agent_path, python, files, globs, extra)
