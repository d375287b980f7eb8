"""Debian version strings: dpkg's ordering, the upstream part, and the pick of the one version a
plan means among those a repository has. Pure: no I/O.

>>> compare("535.261.03-1", "535.216.03-2~bpo12+1") > 0
True
>>> upstream("1:550.127.05-0ubuntu0.22.04.1")
'550.127.05'
>>> pick("535.216.03", ["535.261.03-1", "535.216.03-2~bpo12+1"])
'535.216.03-2~bpo12+1'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cmp_to_key

_DIGITS = "0123456789"


def split(version: str) -> tuple[int, str, str]:
    """(epoch, upstream, revision) of a Debian version (deb-version(7)).

    >>> split("2:1.0~rc1-3")
    (2, '1.0~rc1', '3')
    """
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream_part, dash, revision = rest.rpartition("-")
    if not dash:
        upstream_part, revision = rest, ""
    return int(epoch or 0), upstream_part, revision


def upstream(version: str) -> str:
    """The upstream version inside a Debian version (no epoch, no Debian revision)."""
    return split(version)[1]


def _order(text: str, i: int) -> int:
    # dpkg's lib/dpkg/version.c order(): "~" sorts before everything, even the end of the string.
    if i >= len(text) or text[i] in _DIGITS:
        return 0
    if text[i].isalpha():
        return ord(text[i])
    if text[i] == "~":
        return -1
    return ord(text[i]) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and a[i] not in _DIGITS) or (j < len(b) and b[j] not in _DIGITS):
            ac, bc = _order(a, i), _order(b, j)
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        first_diff = 0
        while i < len(a) and a[i] in _DIGITS and j < len(b) and b[j] in _DIGITS:
            first_diff = first_diff or ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i] in _DIGITS:
            return 1
        if j < len(b) and b[j] in _DIGITS:
            return -1
        if first_diff:
            return first_diff
    return 0


def compare(a: str, b: str) -> int:
    """<0, 0 or >0 as ``a`` sorts before, with or after ``b`` in dpkg's order.

    >>> compare("1.0~rc1-1", "1.0-1") < 0, compare("1:0.1-1", "9.9-1") > 0
    (True, True)
    """
    ea, ua, ra = split(a)
    eb, ub, rb = split(b)
    if ea != eb:
        return ea - eb
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


def newest_first(versions: Iterable[str]) -> list[str]:
    """``versions`` without duplicates, newest first."""
    return sorted(set(versions), key=cmp_to_key(compare), reverse=True)


def pick(planned: str, available: Iterable[str], revision: str = ".*") -> str | None:
    """The version ``planned`` means among ``available``, or None.

    ``planned`` is an upstream version (``535.216.03``: the newest available Debian version of
    it whose revision matches the source's spelling ``revision``, a regular expression) or a
    full Debian version (``1.17.8-1``: exactly that one).

    >>> pick("535.261.03", ["535.261.03-0ubuntu0.22.04.1"], r"0ubuntu0\\.[\\d.]+")
    '535.261.03-0ubuntu0.22.04.1'
    >>> pick("535.261.03", ["535.261.03-1"], r"0ubuntu0\\.[\\d.]+") is None
    True
    """
    available = list(available)
    if "-" in planned:
        return planned if planned in available else None
    spelled = re.compile(revision)
    matching = [v for v in available if upstream(v) == planned and spelled.fullmatch(split(v)[2])]
    return newest_first(matching)[0] if matching else None
