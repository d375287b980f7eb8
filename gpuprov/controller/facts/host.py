"""Everything a deploy compares with its plan, in one remote command: the agent's probe (NVML),
the state of the files, packages and units gpuprov manages, and the GPU hardware.

Each fact is a round trip of its own, and a no-op run is nothing but facts; one command per host
is the floor's own cost. The hardware is read from the probe when NVML answers; ``nvidia-smi``
(or ``lspci``) runs only when it does not (no driver yet, no agent yet).
"""

from __future__ import annotations

from typing import Any, TypedDict

from pyinfra.api import FactBase
from typing_extensions import override

from gpuprov.controller.facts.hardware import Gpu, GpuHardware, Hardware
from gpuprov.controller.facts.managed import Managed, ManagedState
from gpuprov.controller.facts.probe import AgentProbe
from gpuprov.controller.facts.sections import split_sections
from gpuprov.host import containerd_state
from gpuprov.host.contract import containerd_drop_in_path

_SECTIONS = ("probe", "managed", "hardware", "containerd")
# What the probe prints when NVML answers (`json.dumps(..., indent=2)` in gpuprov/host/agent/probe.py).
_NVML_OK = '"nvml": "ok"'


class State(TypedDict):
    probe: dict[str, Any]
    managed: Managed
    hardware: Hardware
    containerd: dict[str, Any]  # ContainerdState's sections, {} when not asked


class HostState(FactBase[State]):
    """
    The agent's probe (as ``AgentProbe``), the managed files, packages and units (as ``ManagedState``) and the GPU
    hardware (as ``GpuHardware``; ``source`` is ``"nvml"`` when it comes from the probe), and,
    for a containerd host, containerd's release, its config without gpuprov's drop-in and the
    text of the files that config imports (as ``ContainerdState``).

    .. code:: python

        {
            "probe": {"schema": "gpuprov.probe/v1", "nvml": "ok", "driver_version": "535.261.03",
                     "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", ...}], ...},
            "managed": {"files": {...}, "packages": {...}, "units": {...}},
            "hardware": {"source": "nvml", "gpus": [
                {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_device_id": None,
                 "pci_bus_id": "00000000:07:00.0", "driver_version": "535.261.03"}]},
        }
    """

    @staticmethod
    def default() -> State:
        return State(
            probe={}, managed=ManagedState.default(), hardware=GpuHardware.default(), containerd={}
        )

    @override
    def command(
        self,
        agent_path: str,
        paths: list[str],
        read: list[str] | None = None,
        packages: list[str] | None = None,
        units: list[str] | None = None,
        python: str = "python3",
        containerd: str | None = None,
    ) -> str:
        node = AgentProbe().command(agent_path, python).get_raw_value()
        snapshot = ManagedState().command(paths, read, packages, units)
        runtime = ""
        if containerd:
            runtime = (
                "echo '@@ host:containerd'; "
                + containerd_state.command(
                    containerd,
                    containerd_drop_in_path(containerd),
                    ("version", "source", "imports"),
                )
                + "; "
            )
        return (
            # The probe's exit status is the command's, as when it ran as a fact of its own.
            f"probe=$({node}); rc=$?; echo '@@ host:probe'; printf '%s\\n' \"$probe\"; "
            f"echo '@@ host:managed'; {snapshot}; echo '@@ host:hardware'; "
            f"case \"$probe\" in *'{_NVML_OK}'*) ;; *) {GpuHardware.command} ;; esac; "
            f"{runtime}exit $rc"
        )

    @override
    def process(self, output: list[str]) -> State:
        # The inner facts' own markers (`@@ files`, `@@ lspci`) stay in their section.
        sections = split_sections(output, "@@ host:", _SECTIONS)
        node = AgentProbe().process(sections["probe"])
        if node.get("nvml") == "ok":
            hardware = _from_probe(node)
        else:
            hardware = GpuHardware().process(sections["hardware"])
        return State(
            probe=node,
            managed=ManagedState().process(sections["managed"]),
            hardware=hardware,
            containerd=containerd_state.parse(sections["containerd"]),
        )


def _from_probe(node: dict[str, Any]) -> Hardware:
    """The GPUs as nvidia-smi would list them: NVML is what nvidia-smi reads too."""
    return Hardware(
        source="nvml",
        gpus=[
            Gpu(
                index=gpu["index"],
                name=gpu.get("name"),
                pci_device_id=None,
                pci_bus_id=gpu.get("pci_bus_id"),
                driver_version=node.get("driver_version"),
            )
            for gpu in node.get("gpus", [])
        ],
    )
