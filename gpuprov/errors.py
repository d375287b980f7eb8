"""Domain errors: bad input that names where it came from, so the CLI can say it in one line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input.

    >>> str(Problem("inv.py", "bad value", host="gpu-1", source="group mig", key="mig_layout"))
    'inv.py: host gpu-1 (group mig): mig_layout: bad value'
    """

    file: str
    message: str
    host: str | None = None
    source: str | None = None  # "group mig (group_data/mig.py)", "host data", ...
    key: str | None = None

    def __str__(self) -> str:
        where = self.file
        if self.host:
            where += f": host {self.host}"
            if self.source:
                where += f" ({self.source})"
        elif self.source:
            where += f": {self.source}"
        if self.key:
            where += f": {self.key}"
        return f"{where}: {self.message}"


class InputError(Exception):
    """The inventory or a command line is wrong; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
