"""Write config files so that nothing is lost: atomically, root-owned, checked, backed up.

pyinfra's SSH connector writes an upload straight onto its destination over SFTP (or ``cp``s it
there under sudo), so a daemon, or a crash, can meet a half-written file. Here every upload goes
to a temp file in the destination's directory, is given its owner and mode, is checked by the
``validate`` command, and only then renamed over the old file. Before replacing (or removing) a
file whose content gpuprov did not write itself, a copy is kept beside it as
``<file>.gpuprov-backup-<time>``; what gpuprov wrote is recorded as a SHA1 under FILE_RECORDS_DIR.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shlex
from collections.abc import Iterable, Iterator

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, OperationValueError, StringCommand, operation
from pyinfra.api.command import PyinfraCommand
from pyinfra.api.util import format_text
from pyinfra.operations.util.files import generate_color_diff

from gpuprov.controller.facts.files import FileState, FileStates
from gpuprov.controller.operations.upload import Upload
from gpuprov.host.contract import file_record_path

OWNER = "root"


def temp_path(dest: str) -> str:
    """A temp name in the same directory (so the rename is atomic) that no glob like
    ``*.toml`` or ``*.conf`` picks up."""
    directory, name = posixpath.split(dest)
    return posixpath.join(directory, f".{name}.gpuprov-tmp")


def is_current(current: FileState | None, content: bytes, mode: str) -> bool:
    """Whether a file in ``current`` state already has ``content``, ``mode`` and root owner."""
    return (
        current is not None
        and current["sha1"] == hashlib.sha1(content).hexdigest()
        and _same_mode(current["mode"], mode)
        and (current["user"], current["group"]) == (OWNER, OWNER)
    )


def commit(dest: str, mode: str, validate: str | None = None) -> StringCommand:
    """Move the uploaded temp file over ``dest``: owner, mode, check, backup, rename, record."""
    t, d, r = (shlex.quote(p) for p in (temp_path(dest), dest, file_record_path(dest)))
    lines = [f"chown {OWNER}:{OWNER} {t}", f"chmod {_octal(mode)} {t}"]
    if validate:
        check = validate.format(path=t)
        message = shlex.quote(
            f"gpuprov: {dest}: the new file fails `{validate.format(path='FILE')}`"
            "; the old file is kept"
        )
        lines.append(f"if ! {{ {check}; }}; then rm -f {t}; echo {message} >&2; exit 1; fi")
    lines += [
        f"if [ -e {d} ] && ! sha1sum -c --status {r} 2>/dev/null; "
        f"then {_backup(d, move=False)}; fi",
        f"mv -f {t} {d}",
        f"mkdir -p {shlex.quote(posixpath.dirname(file_record_path(dest)))}",
        f"sha1sum {d} > {r}",
    ]
    return StringCommand("set -e; " + "; ".join(lines))


def remove(dest: str) -> StringCommand:
    """Remove ``dest``; a file gpuprov did not write is moved aside instead."""
    d, r = shlex.quote(dest), shlex.quote(file_record_path(dest))
    return StringCommand(
        f"if [ -e {d} ]; then if sha1sum -c --status {r} 2>/dev/null; "
        f"then rm -f {d}; else {_backup(d, move=True)}; fi; fi; rm -f {r}"
    )


def atomic(
    commands: Iterable[PyinfraCommand | str], mode: str, validate: str | None = None
) -> Iterator[PyinfraCommand | str]:
    """Pass a pyinfra file operation's commands through, with each upload made atomic.

    ``yield from atomic(apt.sources_file._inner(...), mode="644")`` keeps that operation's own
    comparison and ``--diff`` output and changes only how the file lands.
    """
    for command in commands:
        if isinstance(command, FileUploadCommand):
            yield Upload(
                command.src,
                temp_path(command.dest),
                remote_temp_filename=command.remote_temp_filename,
            )
            yield commit(command.dest, mode)
        else:
            yield command


@operation()
def config_file(
    dest: str,
    content: str | bytes = "",
    mode: str = "644",
    validate: str | None = None,
    present: bool = True,
):
    """
    Ensure a root-owned file has exactly ``content`` (or is absent), replacing it atomically.

    + dest: remote path
    + content: the whole file (text is written as UTF-8)
    + mode: octal permissions, given explicitly (pyinfra's default can be 0600)
    + validate: shell command that must succeed on the candidate before it replaces the old
      file; ``{path}`` is the candidate's path
    + present: False removes the file (a file gpuprov did not write is moved aside instead)

    **Example:**

    .. code:: python

        config_file(
            name="containerd: nvidia runtime drop-in",
            dest="/etc/containerd/conf.d/99-nvidia.toml",
            content=toml_text,
            validate="containerd --config {path} config dump >/dev/null",
        )
    """
    if present and validate is not None and "{path}" not in validate:
        raise OperationValueError("validate must name the candidate file as {path}")
    data = content.encode() if isinstance(content, str) else content
    text = isinstance(content, str)
    current = host.get_fact(
        FileStates, paths=[dest], read=[dest] if text and state.config.DIFF else None
    ).get(dest)

    if not present:
        if current is None:
            host.noop(f"{dest} already absent")
            return
        yield remove(dest)
        return

    if is_current(current, data, mode):
        host.noop(f"{dest} already up to date")
        return
    if current is not None and current["sha1"] == hashlib.sha1(data).hexdigest():
        # Same content, wrong owner or mode: fix them in place.
        yield StringCommand("chown", f"{OWNER}:{OWNER}", shlex.quote(dest))
        yield StringCommand("chmod", _octal(mode), shlex.quote(dest))
        return

    yield from replace(dest, content, current, mode, validate)


def replace(
    dest: str,
    content: str | bytes,
    current: FileState | None,
    mode: str,
    validate: str | None = None,
) -> Iterator[PyinfraCommand]:
    """Upload ``content`` beside ``dest`` and commit it (showing the diff under ``--diff``)."""
    if state.config.DIFF:
        _log_diff(dest, current, content)
    data = content.encode() if isinstance(content, str) else content
    if current is None:
        yield StringCommand("mkdir", "-p", shlex.quote(posixpath.dirname(dest)))
    yield Upload(
        io.BytesIO(data), temp_path(dest), remote_temp_filename=host.get_temp_filename(dest)
    )
    yield commit(dest, mode, validate)


def _log_diff(dest: str, current: FileState | None, content: str | bytes) -> None:
    verb = "create" if current is None else "modify"
    host.log(f"Will {verb} {format_text(dest, bold=True)}", logger.info)
    if isinstance(content, bytes):
        logger.info("  Binary file uploaded")
        return
    old = (current or {}).get("text") or ""
    for line in generate_color_diff(
        old.splitlines(keepends=True), content.splitlines(keepends=True)
    ):
        logger.info("  %s", line)
    logger.info("")


def _backup(quoted_dest: str, move: bool) -> str:
    verb = "mv -f" if move else "cp -p"
    return f'{verb} {quoted_dest} {quoted_dest}.gpuprov-backup-"$(date +%Y%m%dT%H%M%S)"'


def _octal(mode: str) -> str:
    return f"{int(str(mode), 8):04o}"


def _same_mode(current: str, wanted: str) -> bool:
    return int(current, 8) == int(str(wanted), 8)
