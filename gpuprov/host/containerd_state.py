"""What containerd itself says about its configuration, read in one shell command on the host.

The deploy (``HostState``) and the probe (``gpuprov verify``) both run this command, so they
read the same things the same way:

- ``version``: ``containerd --version``;
- ``source``: ``config dump`` of the configuration with gpuprov's drop-in left out (what the
  node would run without gpuprov): in a private mount namespace, a copy of the main file's
  directory with the drop-in emptied is mounted over the real one, so every path (relative
  imports, other drop-ins) resolves as containerd would resolve it and nothing on the host
  changes;
- ``imports``: the text of each file the ``source`` dump names in its ``imports`` (containerd
  1.x lists there every file it loaded; 2.x the import patterns, expanded here, relative ones
  beside the main file), one ``path TAB base64`` line each: what the files themselves state;
- ``dump``: ``config dump`` of the configuration in effect;
- ``plugins``: the CRI rows of ``ctr plugins ls`` (containerd 2.x splits CRI into several).

Each section starts with ``ok`` or ``error`` on its own line, then the text (or the error).
Stdlib only: the agent bundle carries this module.

>>> parse(["@@ containerd:version", "ok", "containerd 1.6.20", "@@ containerd:dump", "error",
...        "containerd: not found"])["dump"]
{'ok': False, 'text': 'containerd: not found'}
"""

from __future__ import annotations

import posixpath
import shlex
import subprocess
from collections.abc import Iterable, Sequence

MARKER = "@@ containerd:"
SECTIONS = ("version", "source", "imports", "dump", "plugins")

# The socket ctr must talk to: `[grpc] address`, in config version 4 (containerd 2.3) the
# `io.containerd.server.v1.grpc` plugin's; 2.x indents its tables.
_ADDRESS = (
    r"""awk '/^[ \t]*\[(grpc|plugins\.["\047]io\.containerd\.server\.v1\.grpc["\047])\]/{g=1;next}"""
    r""" /^[ \t]*\[/{g=0} g && $1=="address"{sub(/^[^=]*=[ \t]*["\047]/,"");"""
    r""" sub(/["\047][ \t]*$/,""); print; exit}'"""
)
# The strings of the dump's one-line `imports = [...]`, one a line: 1.x quotes them "..." (with
# backslash escapes), 2.x '...' (literal).
_IMPORTS = (
    r"""awk '/^imports = \[/{s=substr($0,12); while(s!=""){c=substr(s,1,1); s=substr(s,2);"""
    r""" if(c=="\047"){i=index(s,"\047"); print substr(s,1,i-1); s=substr(s,i+1)}"""
    r""" else if(c=="\""){v=""; while(s!="" && substr(s,1,1)!="\""){if(substr(s,1,1)=="\\")"""
    r""" s=substr(s,2); v=v substr(s,1,1); s=substr(s,2)} print v; s=substr(s,2)}} exit}'"""
)

# Each entry printed by _IMPORTS, read: an absolute one globbed, a relative one tried beside the
# main file and every file found so far (2.x lists a file's relative imports, as written, after
# the entry that matched the file). IFS is a newline: fields split on it only, each globbed.
_READ_IMPORTS = (
    "nl='\n'; dirs=DIRECTORY; IFS=$nl; while IFS= read -r p; do case $p in /*) c=$p;; "
    '*) c=; for b in $dirs; do c="$c$nl$b/$p"; done;; esac; for f in $c; do '
    'if [ -f "$f" ]; then printf \'%s\\t%s\\n\' "$f" "$(base64 -w0 < "$f")"; '
    'case "$nl$dirs$nl" in *"$nl${f%/*}$nl"*) ;; *) dirs="$dirs$nl${f%/*}";; esac; fi; '
    "done; done"
)


def _section(name: str, body: str) -> str:
    """``body``'s stdout after ``ok`` when it succeeds; ``error`` and its stderr otherwise
    (containerd 2.x logs migration warnings on stderr even when the dump works)."""
    return (
        f"echo '{MARKER}{name}'; e=$(mktemp); if out=$( {{ {body}; }} 2>\"$e\" ); then echo ok; "
        'else echo error; out="$out$(cat "$e")"; fi; rm -f "$e"; printf \'%s\\n\' "$out"'
    )


def in_namespace(script: str) -> str:
    """``script`` run in a private mount namespace with an empty directory as ``$1`` (made
    here, on the host, and removed after: what is mounted there stays in the namespace)."""
    return (
        f't=$(mktemp -d) && {{ unshare -m sh -c {shlex.quote(script)} gpuprov "$t"; r=$?; '
        'rmdir "$t"; [ "$r" -eq 0 ]; }'
    )


def command(main: str, drop_in: str, sections: Sequence[str] = SECTIONS) -> str:
    """The shell command that prints ``sections`` for the containerd config ``main``.

    >>> "unshare -m" in command("/etc/containerd/config.toml",
    ...                         "/etc/containerd/conf.d/99-nvidia.toml", ["source"])
    True
    """
    m, directory = shlex.quote(main), shlex.quote(posixpath.dirname(main))
    # containerd runs on its defaults without a main file; `config dump` would fail instead.
    config = f'"$([ -e {m} ] && echo {m} || echo /dev/null)"'
    ours = shlex.quote(posixpath.relpath(drop_in, posixpath.dirname(main)))
    parts = []
    if "version" in sections:
        parts.append(_section("version", "containerd --version"))
    if "source" in sections:
        # The copy lives in the namespace's own tmpfs; --make-rprivate keeps every mount there.
        inner = (
            'set -e; mount --make-rprivate /; t="$1"; '
            f"if [ -d {directory} ]; then mount -t tmpfs gpuprov $t; "
            f"cp -a {directory}/. $t/; if [ -e $t/{ours} ]; then : > $t/{ours}; fi; "
            f"mount --bind $t {directory}; fi; "
            f"containerd --config {config} config dump"
        )
        parts.append(_section("source", in_namespace(inner)))
    if "imports" in sections and "source" in sections:
        loop = _READ_IMPORTS.replace("DIRECTORY", directory)
        parts.append(_section("imports", f"printf '%s\\n' \"$out\" | {_IMPORTS} | {{ {loop}; }}"))
    if "dump" in sections or "plugins" in sections:
        parts.append(_section("dump", f"containerd --config {config} config dump"))
    if "plugins" in sections:
        address = f'"$(printf \'%s\\n\' "$out" | {_ADDRESS})"'
        parts.append(
            _section(
                "plugins",
                f"l=$(ctr --connect-timeout 2s --address {address} plugins ls) && "
                "printf '%s\\n' \"$l\" | awk 'NR==1 || $1 ~ /^io\\.containerd\\.cri\\./ || "
                '($1 == "io.containerd.grpc.v1" && $2 == "cri")\'',
            )
        )
    return "; ".join(parts)


def parse(lines: Iterable[str]) -> dict[str, dict[str, object]]:
    """``{section: {"ok": bool, "text": str}}`` for each section the command printed."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith(MARKER) and line[len(MARKER) :] in SECTIONS:
            current = found.setdefault(line[len(MARKER) :], [])
        elif current is not None:
            current.append(line)
    return {
        name: {"ok": bool(body) and body[0] == "ok", "text": "\n".join(body[1:]).strip()}
        for name, body in found.items()
    }


def read(main: str, drop_in: str, sections: Sequence[str] = ("version", "dump", "plugins")):
    """Run the command here (the probe on the host) and parse what it printed."""
    result = subprocess.run(
        ["sh", "-c", command(main, drop_in, sections)],
        capture_output=True,
        text=True,
        check=False,
    )
    return parse(result.stdout.splitlines())
