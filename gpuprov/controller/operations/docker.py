"""Docker's ``daemon.json``: the nvidia runtime merged in, every other key kept."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpuprov.controller.facts.files import FileStates
from gpuprov.controller.operations.files import replace
from gpuprov.controller.operations.refuse import refuse
from gpuprov.core.hostfiles import docker as daemon_file
from gpuprov.host.contract import DOCKER_DAEMON_PATH

# dockerd >= 23 checks a config without starting; older ones get a JSON parse at least.
VALIDATE = (
    "if dockerd --help 2>/dev/null | grep -q -- --validate; then "
    "dockerd --validate --config-file {path} >/dev/null; "
    "else python3 -m json.tool {path} >/dev/null; fi"
)


@operation()
def daemon_json(path: str = DOCKER_DAEMON_PATH, default: bool = True):
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
    try:
        wanted = daemon_file.render_text(text, default, path)
    except daemon_file.Refused as e:
        yield refuse(str(e))
        return
    if daemon_file.is_configured(text, default):
        host.noop(f"{path} already has the nvidia runtime")
        return
    yield from replace(path, wanted, current, "644", VALIDATE)
