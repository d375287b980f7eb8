"""Load a pyinfra inventory file the way `pyinfra` itself does, and say where a value came from.

>>> inv = load("inventories/example.py")           # doctest: +SKIP
>>> [h.name for h in inv.hosts if "mig" in h.groups]  # doctest: +SKIP
['gpu-h100-01', 'gpu-h100-02']
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra.api import Inventory, State
from pyinfra.context import ctx_state
from pyinfra_cli.exceptions import UnexpectedExternalError
from pyinfra_cli.inventory import make_inventory

from gpuprov.errors import InputError, Problem


@dataclass(frozen=True)
class InventoryHost:
    """A host as the planner sees it: name, groups in pyinfra's order, merged data."""

    name: str
    groups: tuple[str, ...]
    data: dict[str, Any]
    host_data: dict[str, Any]


@dataclass(frozen=True)
class LoadedInventory:
    path: str
    hosts: list[InventoryHost]
    pyinfra: Inventory
    group_data_dir: Path

    def source_of(self, host: InventoryHost, key: str) -> str:
        """Which layer set ``key`` for ``host``: host data, a group (and its file), or all."""
        if key in host.host_data:
            return "host data"
        for group in reversed(host.groups):
            if group != "all" and key in self.pyinfra.get_group_data(group):
                return self.describe_group(group)
        return self.describe_group("all")

    def describe_group(self, group: str) -> str:
        file = self.group_data_dir / f"{group}.py"
        if file.exists():
            return f"group {group}, {self.group_data_dir.name}/{file.name}"
        return f"group {group}"


def load(path: str, override_data: dict[str, Any] | None = None) -> LoadedInventory:
    """Load ``path`` with pyinfra's own inventory loader (group_data/ beside it included)."""
    file = Path(path)
    if not file.is_file():
        raise InputError([Problem(path, "inventory file not found")])
    try:
        # pyinfra's loader records the file it executes on the current State.
        with ctx_state.use(State(check_for_changes=False)):
            inventory = make_inventory(
                str(file), override_data=override_data, cwd=str(file.parent.resolve())
            )
    except UnexpectedExternalError as e:
        raise InputError([_python_error(e.filename, e.exception)]) from None
    except SyntaxError as e:
        raise InputError(
            [Problem(e.filename or path, f"line {e.lineno}: SyntaxError: {e.msg}")]
        ) from None
    return from_pyinfra(inventory, path)


def from_pyinfra(inventory: Inventory, path: str) -> LoadedInventory:
    """The planner's view of a pyinfra inventory already loaded (by us, or by the pyinfra CLI)."""
    hosts = []
    for host in inventory:
        # pyinfra may list a group twice; connector groups (@local, @ssh) are never modes.
        groups = tuple(g for g in dict.fromkeys(host.groups) if not g.startswith("@"))
        hosts.append(
            InventoryHost(
                host.name, groups, host.data.dict(), dict(inventory.get_host_data(host.name))
            )
        )
    return LoadedInventory(path, hosts, inventory, Path(path).parent / "group_data")


def _python_error(filename: str, error: BaseException) -> Problem:
    """A Problem for an exception raised inside an inventory or group-data file."""
    line = None
    if isinstance(error, SyntaxError):
        line = error.lineno
    else:
        for frame in traceback.extract_tb(
            getattr(error, "_traceback", None) or error.__traceback__
        ):
            if frame.filename == filename:
                line = frame.lineno
    where = f"line {line}: " if line else ""
    return Problem(filename, f"{where}{type(error).__name__}: {error}")
