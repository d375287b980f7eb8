"""Domain errors: bad input that names where it came from, so the CLI can say it in one line.

Everything a user wrote (file names, host names, keys, values) passes through ``printable``
before it is shown, so a newline in a host name cannot forge a second ``error:`` line and an
escape sequence cannot repaint the terminal.

>>> printable("gpu-1\\nerror: forged")
'gpu-1\\\\nerror: forged'
>>> shown(10**5000)
'an integer of about 5001 digits'
>>> clipped("k" * 10**6)[-14:]
'kkkkk... (cut)'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Longest rendering of a user's value inside a message; the rest is elided.
SHOWN_MAX = 80
# Longest rendering of the parts of a Problem: a file path (PATH_MAX on Linux is 4096, but no
# one reads a path that long), a host name (a DNS name is at most 253), a key, the message. A
# megabyte key or value then still makes one readable line.
FILE_SHOWN_MAX = 512
HOST_SHOWN_MAX = 256
KEY_SHOWN_MAX = 120
MESSAGE_SHOWN_MAX = 1000
_CUT = "... (cut)"

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every control, format or separator character escaped (``\\n``, ``\\x1b``,
    ``\\u202e``), so it is exactly one visible line."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char == " ":
            out.append(char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "".join(out)


def clipped(text: str, most: int = SHOWN_MAX) -> str:
    """``text`` made ``printable`` and cut to at most ``most`` characters, saying so.

    >>> clipped("gpu-01"), clipped("a\\nb" * 50, 12)
    ('gpu-01', 'a\\\\n... (cut)')
    """
    safe = printable(text[: most + 1])  # only what can be shown is escaped
    if len(safe) <= most and len(text) <= most:
        return safe
    return safe[: max(most - len(_CUT), 1)] + _CUT


def shown(value: object) -> str:
    """A short, safe rendering of a user's value for a message (``repr``, cut at SHOWN_MAX).

    >>> shown("x" * 200)[-12:]
    'xxx... (cut)'
    """
    if isinstance(value, int) and value.bit_length() > 128:
        # repr() of an integer past sys.get_int_max_str_digits() raises ValueError, and the
        # digits say nothing anyway: log10(2) ~ 0.30103.
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value)
    except Exception as e:  # a user's object whose __repr__ fails
        text = f"<{type(value).__name__}: repr failed: {type(e).__name__}>"
    return clipped(text)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input.

    ``hosts`` lists every host it affects when there is more than one (``host`` is the first);
    ``gpus`` counts the GPUs it affects when it is about GPUs.

    >>> str(Problem("inv.py", "bad value", host="gpu-1", source="group mig", key="mig_layout"))
    'inv.py: host gpu-1 (group mig): mig_layout: bad value'
    >>> str(Problem("inv.py", "bad", source="group mig", key="k", hosts=("a", "b", "c"), gpus=24))
    'inv.py: hosts a, b, c (group mig): k: bad [3 hosts, 24 GPUs]'
    """

    file: str
    message: str
    host: str | None = None
    source: str | None = None  # "group mig (group_data/mig.py)", "host data", ...
    key: str | None = None
    hosts: tuple[str, ...] = ()
    gpus: int = 0

    def __str__(self) -> str:
        where = clipped(self.file, FILE_SHOWN_MAX)
        if len(self.hosts) > 1:
            names = ", ".join(clipped(h, HOST_SHOWN_MAX) for h in self.hosts[:3])
            more = f" and {len(self.hosts) - 3} more" if len(self.hosts) > 3 else ""
            where += f": hosts {names}{more}"
        elif self.host:
            where += f": host {clipped(self.host, HOST_SHOWN_MAX)}"
        if self.source and (self.host or len(self.hosts) > 1):
            where += f" ({clipped(self.source, FILE_SHOWN_MAX)})"
        elif self.source:
            where += f": {clipped(self.source, FILE_SHOWN_MAX)}"
        if self.key:
            where += f": {clipped(self.key, KEY_SHOWN_MAX)}"
        counts = []
        if len(self.hosts) > 1:
            counts.append(f"{len(self.hosts)} hosts")
        if self.gpus > 1:
            counts.append(f"{self.gpus} GPUs")
        suffix = f" [{', '.join(counts)}]" if counts else ""
        return f"{where}: {clipped(self.message, MESSAGE_SHOWN_MAX)}{suffix}"


def merged(problems: list[Problem]) -> list[Problem]:
    """One Problem per distinct problem: those that differ only in their host become one naming
    every host (and summing their GPUs), exact repeats are dropped; first-seen order.

    >>> [str(p) for p in merged([Problem("i.py", "bad", host=h, key="k") for h in "abab"])]
    ['i.py: hosts a, b: k: bad [2 hosts]']
    """
    by_what: dict[tuple, tuple[Problem, dict[str, None], list[int]]] = {}
    for p in problems:
        first, names, gpus = by_what.setdefault((p.file, p.source, p.key, p.message), (p, {}, [0]))
        new = [h for h in p.hosts or (p.host,) if h and h not in names]
        if new or first is p:  # an exact repeat adds nothing
            gpus[0] += p.gpus
        names.update(dict.fromkeys(new))
    out = []
    for first, names, gpus in by_what.values():
        hosts = tuple(names)
        out.append(
            dataclasses.replace(
                first,
                host=hosts[0] if hosts else None,
                hosts=hosts if len(hosts) > 1 else (),
                gpus=gpus[0],
            )
        )
    return out


class InputError(Exception):
    """The inventory or a command line is wrong; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character ``printable`` would escape (a control, format or
    line-separator character).

    >>> has_control("a\x1bb"), has_control("a b")
    (True, False)
    """
    return not text.replace(" ", "").isprintable()
