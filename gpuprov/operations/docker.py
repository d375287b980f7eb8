"""Docker's ``daemon.json``: the nvidia runtime merged in, every other key kept."""

from __future__ import annotations

import json
from typing import Any

from pyinfra import host
from pyinfra.api import operation

from gpuprov.facts.files import FileStates
from gpuprov.operations.files import replace
from gpuprov.operations.refuse import refuse

# dockerd >= 23 checks a config without starting; older ones get a JSON parse at least.
VALIDATE = (
    "if dockerd --help 2>/dev/null | grep -q -- --validate; then "
    "dockerd --validate --config-file {path} >/dev/null; "
    "else python3 -m json.tool {path} >/dev/null; fi"
)
RUNTIME = {"path": "nvidia-container-runtime", "args": []}  # as nvidia-ctk writes it (k8s.md 3.2)


def merged(text: str | None, default: bool) -> dict[str, Any] | None:
    """The daemon.json settings with the nvidia runtime (and default-runtime) applied; None
    when the current text is not a JSON object."""
    try:
        config = json.loads(text) if text and text.strip() else {}
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    config = dict(config)
    config["runtimes"] = {**config.get("runtimes", {}), "nvidia": RUNTIME}
    if default:
        config["default-runtime"] = "nvidia"
    elif config.get("default-runtime") == "nvidia":
        del config["default-runtime"]
    return config


def is_configured(text: str | None, default: bool) -> bool:
    """Whether ``text`` (daemon.json) already has everything ``merged`` would add."""
    wanted = merged(text, default)
    return wanted is not None and bool(text and text.strip()) and json.loads(text) == wanted


@operation()
def daemon_json(path: str = "/etc/docker/daemon.json", default: bool = True):
    """
    Ensure docker knows the ``nvidia`` runtime (and uses it by default when ``default``).

    + path: docker's daemon config
    + default: make ``nvidia`` the ``default-runtime``

    **Example:**

    .. code:: python

        daemon_json(path="/etc/docker/daemon.json", default=True)
    """
    current = host.get_fact(FileStates, paths=[path], read=[path]).get(path)
    text = current["text"] if current else None
    wanted = merged(text, default)
    if wanted is None:
        yield refuse(f"{path} is not a JSON object; fix it by hand first")
        return
    if is_configured(text, default):
        host.noop(f"{path} already has the nvidia runtime")
        return
    yield from replace(path, json.dumps(wanted, indent=2) + "\n", current, "644", VALIDATE)
