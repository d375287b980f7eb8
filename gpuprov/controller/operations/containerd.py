"""containerd with the nvidia runtime: gpuprov's drop-in and the main file's ``imports``,
swapped in only after containerd itself has shown that the result changes nothing else, and
rolled back when the CRI plugin does not load after the restart."""

from __future__ import annotations

import io
import posixpath
import shlex
import time

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from gpuprov.controller.facts.containerd import ContainerdState
from gpuprov.controller.facts.files import FileStates
from gpuprov.controller.operations.files import commit, is_current, temp_path
from gpuprov.controller.operations.refuse import refuse
from gpuprov.controller.operations.upload import Upload
from gpuprov.core.hostfiles import containerd as hostfile
from gpuprov.core.hostfiles.documents import ParseError, parse
from gpuprov.host import containerd_state
from gpuprov.host.contract import (
    CONTAINERD_CONFIG_PATH,
    CONTAINERD_DROP_IN,
    CONTAINERD_ROLLBACK_DIR,
    CONTAINERD_UNIT,
    FILE_MODE,
    containerd_drop_in_path,
)

# How long the restarted containerd gets to list its CRI plugin.
RESTART_WAIT_S = 20


def candidate_path(path: str) -> str:
    """Where the new drop-in waits (beside the main file, so no ``*.toml`` glob sees it)."""
    return temp_path(posixpath.join(posixpath.dirname(path), CONTAINERD_DROP_IN))


def candidate_dump_command(path: str) -> str:
    """``config dump`` of the uploaded candidates, mounted over the real files in a private
    mount namespace: what containerd will run, read before anything is replaced."""
    directory = posixpath.dirname(path)
    drop_in = containerd_drop_in_path(path)
    relative = posixpath.relpath(drop_in, directory)
    inner = (
        'set -e; mount --make-rprivate /; t="$1"; mount -t tmpfs gpuprov $t; '
        f"cp -a {shlex.quote(directory)}/. $t/; "
        f"mkdir -p $t/{shlex.quote(posixpath.dirname(relative))}; "
        f"cp $t/{shlex.quote(posixpath.basename(temp_path(path)))} $t/{shlex.quote(posixpath.basename(path))}; "
        f"cp $t/{shlex.quote(posixpath.basename(candidate_path(path)))} $t/{shlex.quote(relative)}; "
        f"mount --bind $t {shlex.quote(directory)}; containerd --config {shlex.quote(path)} config dump"
    )
    return containerd_state.in_namespace(inner)


@operation()
def nvidia_runtime(path: str = CONTAINERD_CONFIG_PATH, default: bool = True):
    """
    Ensure containerd runs the nvidia runtime as runc's twin, changing nothing else.

    The drop-in is rendered from containerd's own dump of the config without it, under this
    containerd's merge rules; the main file gets the ``imports`` line. Before either replaces
    anything, the host's containerd dumps the candidates: any difference from the current
    config other than the nvidia runtime (and the default runtime when asked) fails the host
    with the keys named. After the restart the CRI plugin must load, else the previous files
    come back and containerd restarts on them.

    + path: containerd's main config (``containerd_config_path``)
    + default: make ``nvidia`` the default runtime (otherwise the current default stays)

    **Example:**

    .. code:: python

        nvidia_runtime(path="/etc/containerd/config.toml", default=True)
    """
    drop_in = containerd_drop_in_path(path)
    files = host.get_fact(FileStates, paths=[path, drop_in], read=[path, drop_in])
    current_main, current_drop_in = files.get(path), files.get(drop_in)
    state = host.get_fact(ContainerdState, path=path)
    try:
        main_text, drop_in_text = hostfile.render_files(
            path, current_main["text"] if current_main else None, state, default
        )
    except hostfile.Refused as e:
        yield refuse(f"{e}; nothing was changed")
        return
    if is_current(current_main, main_text.encode(), FILE_MODE) and is_current(
        current_drop_in, drop_in_text.encode(), FILE_MODE
    ):
        host.noop(f"{path} already runs the nvidia runtime")
        return
    connector = {
        k: v
        for k, v in (host.current_op_global_arguments or {}).items()
        if k in CONNECTOR_ARGUMENT_KEYS
    }
    source = parse("toml", state["source"]["text"])
    release = hostfile.runtime_version(state["version"]["text"])
    for text, temp in ((main_text, temp_path(path)), (drop_in_text, candidate_path(path))):
        yield Upload(
            io.BytesIO(text.encode()), temp, remote_temp_filename=host.get_temp_filename(temp)
        )
    yield FunctionCommand(_prove, (path, source, list(release), default, connector), {})
    yield StringCommand(_keep_previous(path))
    yield StringCommand(f"mkdir -p {shlex.quote(posixpath.dirname(drop_in))}")
    yield StringCommand(
        f"mv -f {shlex.quote(candidate_path(path))} {shlex.quote(temp_path(drop_in))}"
    )
    yield commit(drop_in, FILE_MODE)
    yield commit(path, FILE_MODE)
    yield FunctionCommand(_restart_with_cri, (path, connector), {})


def _run(host, connector: dict, command: str) -> tuple[bool, str]:
    ok, output = host.run_shell_command(StringCommand(command), print_output=False, **connector)
    return ok, "\n".join(output.stdout_lines) if ok else "\n".join(output.output_lines)


def _fail(host, message: str) -> bool:
    host.log_styled(f"gpuprov: {message}", fg="red", log_func=logger.error)
    return False


def _prove(state, host, path: str, source: dict, release, default: bool, connector: dict) -> bool:
    """Dump the candidates with the host's containerd; fail (removing them) unless the only
    changes are the planned ones."""
    ok, output = _run(host, connector, candidate_dump_command(path))
    problems: list[str] = []
    if not ok:
        problems = [f"containerd cannot read the new config: {hostfile.last_line(output)}"]
    else:
        try:
            candidate = parse("toml", output)
        except ParseError as e:
            problems = [f"containerd's config dump is not TOML: {e}"]
        else:
            problems = hostfile.unexpected_changes(source, candidate, tuple(release), default)
    if not problems:
        return True
    _run(
        host, connector, f"rm -f {shlex.quote(temp_path(path))} {shlex.quote(candidate_path(path))}"
    )
    shown = "; ".join(problems[:8]) + (
        f"; and {len(problems) - 8} more" if len(problems) > 8 else ""
    )
    return _fail(
        host,
        f"{path}: the new config would change more than the nvidia runtime ({shown}); nothing was replaced",
    )


def _keep_previous(path: str) -> str:
    """Copy the files about to be replaced where ``_restart_with_cri`` can put them back."""
    keep = shlex.quote(CONTAINERD_ROLLBACK_DIR)
    lines = [f"rm -rf {keep}", f"mkdir -p {keep}"]
    for name, target in (("main", path), ("drop-in", containerd_drop_in_path(path))):
        t = shlex.quote(target)
        lines.append(f"if [ -e {t} ]; then cp -p {t} {keep}/{name}; fi")
    return "; ".join(lines)


def _rollback_command(path: str) -> str:
    keep = CONTAINERD_ROLLBACK_DIR
    lines = []
    for name, target in (("main", path), ("drop-in", containerd_drop_in_path(path))):
        saved, t = shlex.quote(f"{keep}/{name}"), shlex.quote(target)
        lines.append(f"if [ -e {saved} ]; then cp -p {saved} {t}; else rm -f {t}; fi")
    lines.append(f"systemctl restart {CONTAINERD_UNIT}")
    return "; ".join(lines)


def _restart_with_cri(state, host, path: str, connector: dict) -> bool:
    """Restart containerd and wait for its CRI plugin; roll back when it does not load."""
    ok, output = _run(host, connector, f"systemctl restart {CONTAINERD_UNIT}")
    said = hostfile.last_line(output)
    if ok:
        command = containerd_state.command(path, containerd_drop_in_path(path), ("dump", "plugins"))
        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            _, output = _run(host, connector, command)
            loaded, said = hostfile.cri_loaded(
                containerd_state.parse(output.splitlines()).get("plugins", {}).get("text", "")
            )
            if loaded or time.monotonic() > deadline:
                break
            gevent.sleep(1)  # other hosts' greenlets run meanwhile
        if loaded:
            _run(host, connector, f"rm -rf {shlex.quote(CONTAINERD_ROLLBACK_DIR)}")
            return True
    _, log = _run(
        host,
        connector,
        f"journalctl -u {CONTAINERD_UNIT} -n 30 --no-pager 2>/dev/null | grep -i error | tail -n 1",
    )
    _run(host, connector, _rollback_command(path))
    return _fail(
        host,
        f"{path}: containerd's CRI plugin did not load with the new config ({said}"
        f"{'; ' + log.strip() if log.strip() else ''}); the previous files are back and "
        "containerd was restarted on them",
    )
