"""Load a pyinfra inventory file as pyinfra does, refusing every shape pyinfra would choke on.

pyinfra's own loader (``pyinfra_cli.inventory.make_inventory``) raises IndexError, ValueError,
UnicodeDecodeError or IsADirectoryError on a malformed file, exits with the file's
``sys.exit`` code, and silently ignores a group that is not a list. This module reads the same
files with the same rules (the inventory's module-level lists and ``(hosts, data)`` tuples,
``group_data/<group>.py`` beside it, the group named after the file), checks each shape on the
way, and only then builds pyinfra's ``Inventory``: every malformed input is one Problem naming
the file, group, host and value.

>>> inv = load("inventories/example.py")           # doctest: +SKIP
>>> [h.name for h in inv.hosts if "mig" in h.groups]  # doctest: +SKIP
['gpu-h100-01', 'gpu-h100-02']
"""

from __future__ import annotations

import ast
import stat
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprov.core.errors import InputError, Problem, has_control, merged, shown
from gpuprov.core.inventory_data import InventoryData, InventoryHost
from gpuprov.host.contract import MODES

if TYPE_CHECKING:
    from pyinfra.api import Inventory

__all__ = ["InventoryHost", "LoadedInventory", "from_pyinfra", "load"]

GROUP_DATA_DIR = "group_data"
# An inventory or group-data file is Python source a person wrote; anything larger is not one.
SOURCE_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class LoadedInventory(InventoryData):
    """The planner's plain view, plus the pyinfra Inventory that verify connects with.

    pyinfra (and with it gevent and paramiko) is imported only when that Inventory is asked
    for: a command that only plans (``plan``, ``kube render``) never needs it."""

    make_pyinfra: Callable[[], Inventory] = field(compare=False, repr=False)

    @cached_property
    def pyinfra(self) -> Inventory:
        return self.make_pyinfra()


def load(path: str, override_data: dict[str, Any] | None = None) -> LoadedInventory:
    """Load ``path`` and its ``group_data/`` the way ``pyinfra`` does; InputError if malformed.

    pyinfra itself is used only where its own code decides the result: a file that imports it
    runs inside pyinfra's context, as under ``pyinfra``, and a connector host (``@local``,
    ``@docker/...``) is expanded by pyinfra's connector. Otherwise the hosts' data is pyinfra's
    waterfall worked out here (``resolved``), and pyinfra is not imported."""
    file = Path(path)
    code, tree = _compile(path, inventory=True)
    directory = file.parent / GROUP_DATA_DIR
    in_pyinfra = _imports_pyinfra(tree) or _group_data_imports_pyinfra(directory)
    with ExitStack() as context:
        if in_pyinfra:
            from pyinfra.api import State
            from pyinfra.context import ctx_state

            context.enter_context(ctx_state.use(State(check_for_changes=False)))
        namespace = _run(path, code)
        groups, problems = _groups(path, namespace)
        if problems:
            raise InputError(merged(problems))
        all_hosts, all_data = groups.pop("all", (None, {}))
        if all_hosts is None:
            # As pyinfra: without an `all` group, every host of every group, first seen first.
            all_hosts = list(dict.fromkeys(n for hosts, _ in groups.values() for n, _ in hosts))
        # pyinfra puts every host in a group named after the inventory file too.
        groups.setdefault(file.stem, (list(all_hosts), {}))
        if in_pyinfra:
            from pyinfra.context import ctx_inventory

            fake = _pyinfra_inventory(path, (all_hosts, all_data), groups)
            context.enter_context(ctx_inventory.use(fake))
        group_data, group_files = _group_data(directory)
    all_data = {**all_data, **group_data.pop("all", {})}
    for name, data in group_data.items():
        hosts, own = groups.get(name, ([], {}))
        groups[name] = (hosts, {**own, **data})
    if in_pyinfra or any(_name(entry).startswith("@") for entry in all_hosts):
        inventory = _pyinfra_inventory(path, (all_hosts, all_data), groups, override_data)
        return from_pyinfra(inventory, path, group_files)
    hosts, groups_data = resolved((all_hosts, all_data), groups, override_data)
    return LoadedInventory(
        path,
        hosts,
        groups_data,
        group_files,
        lambda: _pyinfra_inventory(path, (all_hosts, all_data), groups, override_data),
    )


def _name(entry: Any) -> str:
    return entry[0] if isinstance(entry, tuple) else entry


def resolved(
    all_group: tuple[list, dict],
    groups: dict[str, tuple[list, dict]],
    override_data: dict[str, Any] | None = None,
) -> tuple[list[InventoryHost], dict[str, dict[str, Any]]]:
    """The hosts and group data pyinfra's ``Inventory(all_group, override_data, **groups)``
    gives, for hosts without a connector (pyinfra 3, ``api/inventory.py``
    ``make_hosts_and_groups`` and ``api/host.py`` ``HostData``): a host's own data is what its
    entries in the groups and then in ``all`` give, later entries winning; its data is all's,
    then each of its groups' in the order the groups were declared, then its own, then the
    overrides.

    >>> hosts, data = resolved((["a"], {"x": 0}), {"g": ([("a", {"y": 1})], {"x": 2})})
    >>> hosts[0].groups, hosts[0].data, hosts[0].host_data, sorted(data)
    (('g',), {'x': 2, 'y': 1}, {'y': 1}, ['all', 'g'])
    """
    names, all_data = all_group
    own: dict[str, dict[str, Any]] = {}
    member_of: dict[str, list[str]] = {}
    for group, (entries, _) in groups.items():
        for entry in entries:
            name, data = entry if isinstance(entry, tuple) else (entry, {})
            own.setdefault(name, {}).update(data)
            member_of.setdefault(name, []).append(group)
    for entry in names:
        name, data = entry if isinstance(entry, tuple) else (entry, {})
        own.setdefault(name, {}).update(data)
    hosts: dict[str, InventoryHost] = {}
    filled: dict[str, None] = {}  # groups with a host, in the order pyinfra fills them
    for name in dict.fromkeys(_name(entry) for entry in names):
        in_groups = tuple(dict.fromkeys(member_of.get(name, [])))
        data = dict(all_data)
        for group in member_of.get(name, []):
            data.update(groups[group][1])
        data.update(own[name])
        data.update(override_data or {})
        hosts[name] = InventoryHost(name, in_groups, data, dict(own[name]))
        filled.update(dict.fromkeys(in_groups))
    group_data = {g: dict(groups[g][1]) for g in filled}
    group_data["all"] = dict(all_data)
    return list(hosts.values()), group_data


def from_pyinfra(
    inventory: Inventory, path: str, group_files: dict[str, str] | None = None
) -> LoadedInventory:
    """The planner's view of a pyinfra inventory already loaded (by us, or by the pyinfra CLI)."""
    if group_files is None:
        directory = Path(path).parent / GROUP_DATA_DIR
        group_files = {
            g: f"{GROUP_DATA_DIR}/{g}.py"
            for g in [*inventory.groups, "all"]
            if (directory / f"{g}.py").is_file()
        }
    hosts = []
    for host in inventory:
        # pyinfra may list a group twice; connector groups (@local, @ssh) are never modes.
        groups = tuple(g for g in dict.fromkeys(host.groups) if not g.startswith("@"))
        hosts.append(
            InventoryHost(
                host.name, groups, host.data.dict(), dict(inventory.get_host_data(host.name))
            )
        )
    group_data = {g: dict(inventory.get_group_data(g)) for g in inventory.groups}
    group_data["all"] = dict(inventory.get_data())
    return LoadedInventory(path, hosts, group_data, group_files, lambda: inventory)


def _compile(path: str, inventory: bool = False) -> tuple[Any, ast.Module]:
    """The code object and syntax tree of a Python file, or InputError saying why it is not
    one (missing, not a file, not .py, unreadable, not UTF-8, a NUL byte, a syntax error)."""
    file = Path(path)
    try:
        status = file.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(
            [Problem(path, "inventory file not found" if inventory else "not found")]
        ) from None
    except OSError as e:  # a name too long, a symlink loop, no permission on a directory
        raise InputError([Problem(path, f"cannot read: {e.strerror}")]) from None
    if not stat.S_ISREG(status.st_mode):
        raise InputError([Problem(path, "not a regular file (a pyinfra Python file is needed)")])
    if inventory and file.suffix != ".py":
        raise InputError(
            [
                Problem(
                    path,
                    "not a pyinfra inventory: inventories are Python files ending in .py "
                    "(hosts as lists, group data in group_data/<group>.py)",
                )
            ]
        )
    if status.st_size > SOURCE_MAX_BYTES:
        raise InputError([Problem(path, f"larger than {SOURCE_MAX_BYTES} bytes")])
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise InputError([Problem(path, f"cannot read: {e.strerror}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputError(
            [Problem(path, f"line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x})")]
        ) from None
    if "\0" in text:
        line = text[: text.index("\0")].count("\n") + 1
        raise InputError([Problem(path, f"line {line}: NUL byte (not Python source)")])
    try:
        tree = ast.parse(text, path)
        return compile(tree, path, "exec", dont_inherit=True), tree
    except SyntaxError as e:
        where = f"line {e.lineno}: " if e.lineno else ""
        raise InputError([Problem(path, f"{where}SyntaxError: {e.msg}")]) from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise InputError([Problem(path, f"not Python source: {type(e).__name__}")]) from None


def _run(path: str, code: Any) -> dict[str, Any]:
    """Execute a compiled inventory or group-data file; its module-level names."""
    namespace: dict[str, Any] = {"__file__": path}
    try:
        exec(code, namespace)
    except SystemExit as e:
        raise InputError(
            [Problem(path, f"the file exits while being loaded (sys.exit({shown(e.code)}))")]
        ) from None
    except Exception as e:
        raise InputError([_python_error(path, e)]) from None
    return namespace


def _groups(path: str, namespace: dict[str, Any]) -> tuple[dict[str, tuple], list[Problem]]:
    """The inventory's groups as ``name -> (hosts, data)``, and what is wrong with them.

    As in pyinfra, a group is a module-level list of hosts or a ``(hosts, data)`` tuple; other
    module-level names are ignored, except a mode group's name, which must be a group."""
    groups: dict[str, tuple] = {}
    problems: list[Problem] = []
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        if not isinstance(value, (list, tuple)):
            if name in MODES:
                problems.append(
                    Problem(
                        path,
                        "a mode group must be a list of hosts or a (hosts, data) tuple, "
                        f"got {shown(value)}",
                        source=f"group {name}",
                    )
                )
            continue
        where = f"group {name}"
        data: Any = {}
        hosts: Any = value
        if isinstance(value, tuple):
            if len(value) != 2 or not isinstance(value[0], (list, tuple)):
                problems.append(
                    Problem(
                        path,
                        "a group tuple must be (hosts, data): a list of hosts and a dict, "
                        f"got {shown(value)}",
                        source=where,
                    )
                )
                continue
            hosts, data = value
        found = _data_problems(path, where, data)
        entries = []
        for entry in hosts:
            entry_problems, host = _host(path, where, entry)
            found += entry_problems
            if host is not None:
                entries.append(host)
        problems += found
        if not found:
            groups[name] = (entries, dict(data))
    return groups, problems


def _host(path: str, where: str, entry: Any) -> tuple[list[Problem], tuple[str, dict] | None]:
    """One host entry of a group: a name, or a ``(name, data)`` tuple."""
    name, data = entry, {}
    if isinstance(entry, tuple):
        if len(entry) != 2:
            return [
                Problem(
                    path, f"a host must be a name or (name, data), got {shown(entry)}", source=where
                )
            ], None
        name, data = entry
    if not isinstance(name, str):
        return [
            Problem(path, f"a host name must be a string, got {shown(name)}", source=where)
        ], None
    if not name or name != name.strip() or any(c.isspace() for c in name) or has_control(name):
        return [
            Problem(
                path,
                f"host name {shown(name)} is empty or holds spaces or control characters",
                source=where,
            )
        ], None
    problems = _data_problems(path, where, data, host=name)
    return problems, None if problems else (name, dict(data))


def _data_problems(path: str, where: str, data: Any, host: str | None = None) -> list[Problem]:
    source = "host data" if host else where
    if not isinstance(data, dict):
        return [Problem(path, f"data must be a dict, got {shown(data)}", host=host, source=source)]
    return [
        Problem(path, f"data keys must be strings, got {shown(k)}", host=host, source=source)
        for k in data
        if not isinstance(k, str)
    ]


def _group_data(directory: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """``group_data/<group>.py`` files: group -> data, and group -> file as messages name it."""
    data: dict[str, dict] = {}
    files: dict[str, str] = {}
    if not directory.is_dir():
        return data, files
    problems = []
    try:
        entries = sorted(directory.iterdir())
    except OSError as e:
        raise InputError([Problem(str(directory), f"cannot read: {e.strerror}")]) from None
    for entry in entries:
        if entry.suffix != ".py":
            continue
        try:
            code, tree = _compile(str(entry))
            namespace = _run(str(entry), code)
            names = _exported(str(entry), tree, namespace)
        except InputError as e:
            problems += e.problems
            continue
        data[entry.stem] = {k: namespace[k] for k in names}
        files[entry.stem] = f"{GROUP_DATA_DIR}/{entry.name}"
    if problems:
        raise InputError(merged(problems))
    return data, files


def _exported(path: str, tree: ast.Module, namespace: dict[str, Any]) -> list[str]:
    """The names pyinfra takes from a group-data file: ``__all__`` when set, otherwise every
    name not bound by an import and not ``__dunder__`` (pyinfra issue #1297)."""
    if "__all__" in namespace:
        exported = namespace["__all__"]
        if not isinstance(exported, (list, tuple)) or not all(
            isinstance(k, str) and k in namespace for k in exported
        ):
            raise InputError(
                [Problem(path, f"__all__ must list names the file defines, got {shown(exported)}")]
            )
        return list(exported)
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    return [k for k in namespace if not k.startswith("__") and k not in imported]


def _imports_pyinfra(tree: ast.Module) -> bool:
    """Whether a file imports pyinfra (``from pyinfra import host``, ...) anywhere."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "pyinfra" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyinfra":
            return True
    return False


def _group_data_imports_pyinfra(directory: Path) -> bool:
    """Whether a group-data file imports pyinfra; a file that cannot be read or parsed is
    left for ``_group_data`` to name."""
    try:
        files = sorted(directory.glob("*.py")) if directory.is_dir() else []
    except OSError:
        return False
    for file in files:
        try:
            if _imports_pyinfra(_compile(str(file))[1]):
                return True
        except InputError:
            continue
    return False


def _pyinfra_inventory(
    path: str, all_group: tuple, groups: dict[str, tuple], override_data: dict | None = None
) -> Inventory:
    from pyinfra.api import Inventory

    try:
        return Inventory(all_group, override_data=override_data, **groups)
    except Exception as e:  # a connector pyinfra does not know (@nope), and its kin
        raise InputError(
            [Problem(path, f"pyinfra refuses the inventory: {type(e).__name__}: {e}")]
        ) from None


def _python_error(filename: str, error: BaseException) -> Problem:
    """A Problem for an exception raised inside an inventory or group-data file."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename == filename:
            line = frame.lineno
    where = f"line {line}: " if line else ""
    try:
        text = str(error)
    except Exception:  # an exception class of the user's whose __str__ fails
        text = "(message unavailable)"
    if len(text) > 200:
        text = text[:190] + "... (cut)"
    return Problem(filename, f"{where}{type(error).__name__}: {text}")
