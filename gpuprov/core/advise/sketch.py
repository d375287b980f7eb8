"""A fixed-size summary of a stream of values: count, mean, exact peak and a histogram for
high percentiles, so a week of samples costs the same memory as an hour.

The histogram has fixed-width buckets kept sparsely (a workload's memory sits in a few of
them); a percentile is the upper edge of the bucket it falls in, capped at the exact peak, so it
never reads lower than the truth and at most one bucket higher.

>>> s = Sketch(64)
>>> for v in [1000] * 98 + [5000, 20000]:
...     s.add(v)
>>> s.count, s.peak, s.mean, s.percentile(50), s.percentile(99), s.percentile(100)
(100, 20000, 1230.0, 1024, 5056, 20000)
"""

from __future__ import annotations

import math


class Sketch:
    """Values >= 0 in buckets of ``width`` (64 MiB for memory, 0.01 for a ratio)."""

    __slots__ = ("width", "inverse", "count", "total", "peak", "buckets")

    def __init__(self, width: float):
        self.width = width
        self.inverse = 1 / width
        self.count = 0
        self.total = 0.0
        self.peak = 0.0
        self.buckets: dict[int, int] = {}

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value > self.peak:
            self.peak = value
        bucket = int(value * self.inverse)
        buckets = self.buckets
        buckets[bucket] = buckets.get(bucket, 0) + 1

    def merge(self, other: Sketch) -> None:
        """Add ``other``'s values (same width) to this sketch."""
        self.count += other.count
        self.total += other.total
        self.peak = max(self.peak, other.peak)
        for bucket, n in other.buckets.items():
            self.buckets[bucket] = self.buckets.get(bucket, 0) + n

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def percentile(self, p: float) -> float:
        """The smallest bucket edge at or above ``p`` percent of the values (0 < p <= 100),
        capped at the exact peak; 0 for an empty sketch."""
        if not self.count:
            return 0.0
        if p >= 100:
            return self.peak
        rank = math.ceil(self.count * p / 100)
        seen = 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                edge = (bucket + 1) * self.width
                return min(edge, self.peak)
        return self.peak
