"""Composite facts print several outputs in one command, each after a marker line."""

from __future__ import annotations

from collections.abc import Iterable


def split_sections(
    output: Iterable[str], marker: str, names: Iterable[str]
) -> dict[str, list[str]]:
    """Lines grouped by the ``<marker><name>`` line before them; unknown markers are content.

    >>> split_sections(["@@ a", "1", "@@ b", "2", "@@ x"], "@@ ", ["a", "b"])
    {'a': ['1'], 'b': ['2', '@@ x']}
    """
    sections: dict[str, list[str]] = {name: [] for name in names}
    current: list[str] | None = None
    for line in output:
        name = line[len(marker) :] if line.startswith(marker) else None
        if name in sections:
            current = sections[name]
        elif current is not None:
            current.append(line)
    return sections
