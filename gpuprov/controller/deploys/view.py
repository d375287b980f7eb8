"""What one host's deploy knows before it changes anything: its plan and its current state.

The state is read once per host, in one round trip (``HostState``: the agent probe, files,
packages, units and the hardware). A deploy step schedules an operation only for what the
state shows differs from the plan; the scheduled operation reads its own fact again when it
runs, so the change itself is still decided on the state of that moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyinfra import host
from pyinfra.api.operation import OperationMeta

from gpuprov.controller.facts.files import FileState
from gpuprov.controller.facts.hardware import GpuHardware, Hardware
from gpuprov.controller.facts.host import HostState
from gpuprov.controller.operations.files import config_file, is_current
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import FILE_MODE


@dataclass(frozen=True)
class Watch:
    """What a deploy step wants to read."""

    paths: tuple[str, ...] = ()
    read: tuple[str, ...] = ()  # paths whose text is needed (edited in place)
    packages: tuple[str, ...] = ()
    units: tuple[str, ...] = ()

    def __add__(self, other: Watch) -> Watch:
        return Watch(
            *(
                tuple(dict.fromkeys(a + b))
                for a, b in zip(
                    (self.paths, self.read, self.packages, self.units),
                    (other.paths, other.read, other.packages, other.units),
                    strict=True,
                )
            )
        )


@dataclass
class HostView:
    plan: HostPlan
    hardware: Hardware = field(default_factory=GpuHardware.default)
    files: dict[str, FileState | None] = field(default_factory=dict)
    packages: dict[str, Any] = field(default_factory=dict)
    units: dict[str, Any] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    containerd: dict[str, Any] = field(default_factory=dict)  # ContainerdState's sections

    def text(self, path: str) -> str | None:
        state = self.files.get(path)
        return state["text"] if state else None

    def read(self, watch: Watch) -> None:
        """Fill in the hardware, the agent probe and the managed state (files, packages, units)."""
        state = host.get_fact(
            HostState,
            agent_path=self.plan.agent.gpuprov_agent_path,
            paths=list(watch.paths),
            read=list(watch.read),
            packages=list(watch.packages),
            units=list(watch.units),
            python=self.plan.agent.gpuprov_python,
            containerd=self.plan.runtime.containerd_config_path
            if self.plan.runtime.container_runtime == "containerd"
            else None,
        )
        self.hardware, self.probe = state["hardware"], state["probe"]
        self.containerd = state["containerd"]
        managed = state["managed"]
        self.files, self.packages, self.units = (
            managed["files"],
            managed["packages"],
            managed["units"],
        )


def ensure_file(
    view: HostView,
    name: str,
    dest: str,
    content: str | bytes = "",
    validate: str | None = None,
    present: bool = True,
) -> OperationMeta | None:
    """Schedule ``config_file`` for ``dest`` unless the host state shows it already as wanted."""
    if dest in view.files:
        current = view.files[dest]
        data = content.encode() if isinstance(content, str) else content
        if is_current(current, data, FILE_MODE) if present else current is None:
            return None
    return config_file(
        name=name, dest=dest, content=content, mode=FILE_MODE, validate=validate, present=present
    )


def changed(*ops: OperationMeta | None):
    """An ``_if=`` callable: did any of the scheduled operations change something?"""
    scheduled = [op for op in ops if op is not None]
    return lambda: any(op.did_change() for op in scheduled)
