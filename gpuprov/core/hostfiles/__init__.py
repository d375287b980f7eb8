"""One module per file gpuprov manages on a host, each with a typed model of that file and both
directions: ``render`` what the plan wants (the deploy writes it) and ``check`` what a host has
against the plan (verify reports the findings). Pure core: no pyinfra, paramiko or pynvml.

Every module follows the same shape::

    paths(plan) -> Wanted                       # the files and globs the probe must read
    render(plan, ...) -> str                    # the text the deploy writes
    check(plan, files) -> list[Finding]         # files: {path: text | None} as the probe read them

>>> Wanted(files=("/a",)) + Wanted(files=("/a", "/b"), globs=("/d/*.conf",))
Wanted(files=('/a', '/b'), globs=('/d/*.conf',))
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wanted:
    """What the probe must read for a check: exact paths (a missing one reads as None) and glob
    patterns (every match is read)."""

    files: tuple[str, ...] = ()
    globs: tuple[str, ...] = ()

    def __add__(self, other: Wanted) -> Wanted:
        return Wanted(
            tuple(dict.fromkeys(self.files + other.files)),
            tuple(dict.fromkeys(self.globs + other.globs)),
        )
