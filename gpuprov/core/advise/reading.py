"""What every usage reader shares: its options, its summary, and how it names a bad line.

>>> str(bad_line("week.prom", 12, "negative sample -1.0").problems[0])
'week.prom: line 12: negative sample -1.0'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuprov.core.errors import InputError, Problem

# Readers report progress every this many lines (or values): often enough for a progress line
# that moves every second, rarely enough to cost nothing.
PROGRESS_EVERY = 1 << 16

Progress = Callable[[int], None]  # called with the samples read so far


@dataclass(frozen=True)
class ReadOptions:
    """What the input cannot say for itself."""

    gpu_model: str = ""  # the model when the input does not name it (nvidia-smi without name)
    metric: str = ""  # the DCGM metric of series without __name__ (max_over_time(...) drops it)
    columns: tuple[str, ...] = ()  # the fields of headerless nvidia-smi CSV, in order
    host: str = ""  # the host of nvidia-smi CSV (which names none)


DEFAULT_OPTIONS = ReadOptions()


@dataclass(frozen=True)
class ReadSummary:
    """What one file held."""

    name: str
    format: str
    samples: int  # values recorded
    skipped: int  # values of metrics or fields advise does not use
    series: int

    def as_dict(self) -> dict:
        return {
            "file": self.name,
            "format": self.format,
            "samples": self.samples,
            "skipped": self.skipped,
            "series": self.series,
        }


def bad_line(name: str, line: int | None, message: str) -> InputError:
    """The error for a bad ``line`` of file ``name`` (None: the file as a whole)."""
    where = f"line {line}: " if line else ""
    return InputError([Problem(name, f"{where}{message}")])
