"""containerd's main config: the ``imports`` line that pulls in gpuprov's drop-in."""

from __future__ import annotations

import tomlkit
from pyinfra import host
from pyinfra.api import operation
from tomlkit.exceptions import ParseError

from gpuprov.contract import CRI_PLUGIN
from gpuprov.facts.files import FileStates
from gpuprov.operations.files import replace
from gpuprov.operations.refuse import refuse

VALIDATE = "containerd --config {path} config dump >/dev/null"


def config_version(text: str | None) -> int | None:
    """The main config's schema version: a missing or empty file counts as 2 (as nvidia-ctk
    does); None for what gpuprov cannot extend: version 1 (a non-empty file without
    ``version``, containerd 1.x's old schema, which has no ``imports``), unknown versions and
    text that is not TOML."""
    if not text or not text.strip():
        return 2
    try:
        version = tomlkit.parse(text).get("version")
    except ParseError:
        return None
    return int(version) if version in CRI_PLUGIN else None


def unsupported(path: str) -> str:
    return (
        f"{path}: not a containerd config of version 2 or 3 (version 1 has no imports: "
        "run `containerd config migrate`; or fix the TOML by hand)"
    )


def with_import(text: str | None, pattern: str) -> str:
    """``text`` with ``pattern`` in its top-level ``imports`` (added, never reordered); every
    other key, comment and blank line is kept as it was."""
    document = tomlkit.parse(text or "")
    if "version" not in document:
        document.add("version", 2)
    imports = document.get("imports")
    if imports is None:
        document["imports"] = [pattern]
    elif pattern not in imports:
        imports.append(pattern)
    return tomlkit.dumps(document)


@operation()
def imports(
    path: str = "/etc/containerd/config.toml", pattern: str = "/etc/containerd/conf.d/*.toml"
):
    """
    Ensure containerd's main config imports ``pattern``, keeping everything else in the file.

    A missing file is created as a minimal ``version = 2`` config. The new file must pass
    ``containerd config dump`` before it replaces the old one.

    + path: containerd's main config (``containerd_config_path``)
    + pattern: the drop-in glob to import

    **Example:**

    .. code:: python

        imports(path="/etc/containerd/config.toml", pattern="/etc/containerd/conf.d/*.toml")
    """
    current = host.get_fact(FileStates, paths=[path], read=[path]).get(path)
    text = current["text"] if current else None
    if config_version(text) is None:
        yield refuse(unsupported(path))
        return
    wanted = with_import(text, pattern)
    if current is not None and wanted == text:
        host.noop(f"{path} already imports {pattern}")
        return
    yield from replace(path, wanted, current, "644", VALIDATE)
