"""The state of the files gpuprov manages: mode, owner, SHA1 and (when asked) the text.

One remote command covers any number of files, so a deploy can learn the state of everything it
writes in a single round trip.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Sequence
from typing import TypedDict

from pyinfra.api import FactBase
from typing_extensions import override


class FileState(TypedDict):
    mode: str  # octal, as `stat %a` prints it ("644")
    user: str
    group: str
    sha1: str
    text: str | None  # the content, only for paths listed in ``read``


def files_command(paths: Sequence[str], read: Sequence[str] = ()) -> str:
    """One shell line per path: ``path TAB mode TAB user TAB group TAB sha1 TAB base64``."""
    clauses = []
    for path in paths:
        p = shlex.quote(path)
        content = f'"b64:$(base64 -w0 < {p})"' if path in read else "''"
        clauses.append(
            f"if [ -f {p} ]; then printf '%s\\t%s\\t%s\\t%s\\n' {p} "
            f"\"$(stat --printf '%a\\t%U\\t%G' {p})\" \"$(sha1sum < {p} | cut -d' ' -f1)\" "
            f"{content}; else printf '%s\\t-\\n' {p}; fi"
        )
    return "; ".join(clauses)


def parse_files(lines: Sequence[str]) -> dict[str, FileState | None]:
    out: dict[str, FileState | None] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) == 2 and fields[1] == "-":
            out[fields[0]] = None
        elif len(fields) == 6:
            path, mode, user, group, sha1, content = fields
            text = None
            if content.startswith("b64:"):
                text = base64.b64decode(content[4:]).decode("utf-8", "replace")
            out[path] = FileState(mode=mode, user=user, group=group, sha1=sha1, text=text)
    return out


class FileStates(FactBase[dict[str, "FileState | None"]]):
    """
    Mode, owner and SHA1 of each path (None when it is not a regular file); the text of the
    paths in ``read``.

    .. code:: python

        {
            "/etc/containerd/config.toml": {
                "mode": "644", "user": "root", "group": "root",
                "sha1": "5f8d...", "text": "version = 2\\n",
            },
            "/etc/containerd/conf.d/99-nvidia.toml": None,
        }
    """

    default = dict

    @override
    def command(self, paths: list[str], read: list[str] | None = None) -> str:
        return files_command(paths, read or ())

    @override
    def process(self, output: list[str]) -> dict[str, FileState | None]:
        return parse_files(output)
