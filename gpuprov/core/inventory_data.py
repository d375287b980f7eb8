"""An inventory as plain data: hosts, their groups, their merged data, and where a value came from.

The planner reads this and nothing else, so it never needs pyinfra: ``gpuprov/controller/inventory.py``
(the edge) loads a pyinfra inventory file and hands this over.

>>> host = InventoryHost("n1", ("mig",), {"gpu_count": 2}, {})
>>> inv = InventoryData("inv.py", [host], {"mig": {"gpu_count": 2}}, {"mig": "group_data/mig.py"})
>>> inv.source_of(host, "gpu_count")
'group mig, group_data/mig.py'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InventoryHost:
    """A host as the planner sees it: name, groups in pyinfra's order, merged data."""

    name: str
    groups: tuple[str, ...]
    data: dict[str, Any]
    host_data: dict[str, Any]


@dataclass(frozen=True)
class InventoryData:
    """Every host, plus each group's own data and the group-data file it came from."""

    path: str
    hosts: list[InventoryHost]
    group_data: dict[str, dict[str, Any]]
    group_files: dict[str, str]  # group -> "group_data/x.py", for groups that have one

    def source_of(self, host: InventoryHost, key: str) -> str:
        """Which layer set ``key`` for ``host``: host data, a group (and its file), or all."""
        if key in host.host_data:
            return "host data"
        for group in reversed(host.groups):
            if group != "all" and key in self.group_data.get(group, {}):
                return self.describe_group(group)
        return self.describe_group("all")

    def describe_group(self, group: str) -> str:
        file = self.group_files.get(group)
        return f"group {group}, {file}" if file else f"group {group}"
