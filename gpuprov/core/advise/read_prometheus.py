"""DCGM exporter scrapes in the Prometheus text exposition format, many scrapes in one file.

Each sample line is ``name{labels} value [timestamp_ms]`` (Prometheus "Exposition formats",
text format 0.0.4). Scrapes saved one after another (``while sleep 15; do curl
host:9400/metrics; done >> week.prom``) carry no timestamps: a new scrape starts where a series
or a ``# TYPE`` family of the current one comes again, and scrapes are taken 15 s apart. A
file either timestamps every sample or none.

Parsing is written here, not taken from ``prometheus_client.parser``: that parser reads labels
character by character (~15 us a line), a week of 200 GPUs is 16 million lines, and the same
label text repeats in every scrape. Labels are parsed once per series, with the format's
escapes; every later line of the series is a dictionary lookup and a float.

>>> from gpuprov.core.advise.usage import UsageCollector
>>> lines = ['# TYPE DCGM_FI_DEV_FB_USED gauge',
...          'DCGM_FI_DEV_FB_USED{gpu="0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1",'
...          'pod="p",namespace="ns",container="c"} 20480 1700000000000']
>>> read(lines, "s.prom", UsageCollector()).samples
1
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuprov.core.advise.reading import (
    DEFAULT_OPTIONS,
    PROGRESS_EVERY,
    Progress,
    ReadOptions,
    ReadSummary,
    bad_line,
)
from gpuprov.core.advise.series import DCGM_METRICS, identity
from gpuprov.core.advise.usage import InputProblem, UsageCollector
from gpuprov.core.errors import shown

FORMAT = "prometheus-text"
# Seconds between scrapes saved without timestamps (the interval people scrape DCGM at).
UNTIMESTAMPED_STEP = 15.0

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,|\Z)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_SKIP = object()


def read(
    lines: Iterable[str],
    name: str,
    collector: UsageCollector,
    options: ReadOptions = DEFAULT_OPTIONS,
    progress: Progress | None = None,
) -> ReadSummary:
    """Feed every DCGM sample of ``lines`` (the file ``name``) to ``collector``."""
    reader = _Reader(name, collector, options)
    try:
        reader.run(lines, progress)
    except InputProblem as e:
        raise bad_line(name, reader.lineno, str(e)) from None
    except UnicodeDecodeError:
        raise  # the command line finds the line (the decoder reads ahead)
    except ValueError as e:  # float() or int() of something else
        raise bad_line(name, reader.lineno, f"not a number: {e}") from None
    return ReadSummary(name, FORMAT, reader.samples, reader.skipped, len(reader.series))


class _Reader:
    def __init__(self, name: str, collector: UsageCollector, options: ReadOptions):
        self.name = name
        self.collector = collector
        self.options = options
        # "name{labels" -> [recorder.add, last scrape], or _SKIP for another metric's series
        self.series: dict[str, object] = {}
        self.names: dict[str, object] = {}  # metric name -> _SKIP, or None when read
        self.families: set[str] = set()
        self.scrape = 0
        self.width = 0  # fields after the labels: 2 with timestamps, 1 without
        self.samples = self.skipped = self.lineno = 0

    def run(self, lines: Iterable[str], progress: Progress | None) -> None:
        series = self.series
        samples = skipped = 0
        mask = PROGRESS_EVERY - 1
        lineno = 0
        try:
            for lineno, line in enumerate(lines, 1):
                # The hot path: a line of a series seen before, "name{labels} value ts".
                head, _, rest = line.rpartition("}")
                entry = series.get(head)
                if entry is None:
                    self.lineno = lineno
                    entry = self.first_of_series(line)
                    if entry is None:
                        continue
                if entry is _SKIP:
                    skipped += 1
                    continue
                parts = rest.split()
                if len(parts) == 2 and self.width == 2:
                    entry[0](int(parts[1]) * 0.001, float(parts[0]))
                else:
                    self.lineno = lineno
                    entry[0](self.untimestamped(entry, parts, line), float(parts[0]))
                samples += 1
                if not samples & mask and progress is not None:
                    progress(samples)
        finally:
            self.lineno = lineno
            self.samples, self.skipped = samples, skipped

    def first_of_series(self, line: str) -> object:
        """A comment, a blank line, or the first sample of a series (parsed, checked, and
        given a recorder); None for lines that hold no sample."""
        if line[:1] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                if parts[2] in self.families:
                    self.scrape += 1
                    self.families.clear()
                self.families.add(parts[2])
            return None
        text = line.strip()
        if not text:
            return None
        brace = text.find("{")
        metric = text[:brace] if brace >= 0 else text.partition(" ")[0]
        known = self.names.get(metric)
        if known is None and metric not in self.names:
            known = self.names[metric] = _metric(metric, self.name, self.lineno)
        head = line.rpartition("}")[0]
        if known is _SKIP:
            _check_skipped(text, brace, self.name, self.lineno)
            if head:  # lines of unlabelled metrics are not cached: their heads differ
                self.series[head] = _SKIP
            return _SKIP
        recorder = _recorder(text, brace, self.name, self.lineno, self.collector, self.options)
        entry = [recorder.add, -1]
        self.series[head] = entry
        if not self.width:
            fields = line.rpartition("}")[2].split()
            self.width = 2 if len(fields) == 2 else 1
        return entry

    def untimestamped(self, entry: list, parts: list[str], line: str) -> float:
        """The time of a sample without a timestamp: its scrape's; or the error of a line
        that is no sample, or a timestamp where the file has none (or the other way round)."""
        if not parts or len(parts) > 2:
            raise bad_line(
                self.name,
                self.lineno,
                f"not a sample (name{{labels}} value [timestamp]): {shown(line.strip())}",
            )
        if len(parts) != self.width:
            raise bad_line(
                self.name,
                self.lineno,
                "this sample has no timestamp but others have one (or the other way round): "
                "a file either timestamps every sample or none",
            )
        if entry[1] == self.scrape:  # the series again: a new scrape began
            self.scrape += 1
            self.families.clear()
        entry[1] = self.scrape
        return self.scrape * UNTIMESTAMPED_STEP


def _check_skipped(text: str, brace: int, name: str, lineno: int) -> None:
    """Another metric's first line (or every line of an unlabelled one): well formed, or an
    error, so a file that only looks like exposition text is not read past silently."""
    close = text.rfind("}")
    if brace >= 0 and (close < brace or parse_labels(text[brace + 1 : close]) is None):
        raise bad_line(name, lineno, f"malformed labels: {shown(text[:120])}")
    fields = text[close + 1 :].split() if brace >= 0 else text.split()[1:]
    try:
        if not 1 <= len(fields) <= 2:
            raise ValueError
        float(fields[0])
        if len(fields) == 2:
            int(fields[1])
    except ValueError:
        raise bad_line(
            name,
            lineno,
            f"not Prometheus text exposition (name{{labels}} value [timestamp]): "
            f"{shown(text[:120])}",
        ) from None


def _metric(metric: str, name: str, lineno: int) -> object:
    """None for a metric advise reads, _SKIP for any other well-formed name."""
    if not _NAME.match(metric):
        raise bad_line(
            name, lineno, f"not Prometheus text exposition: {shown(metric)} is no metric name"
        )
    return None if DCGM_METRICS.get(metric) else _SKIP


def _recorder(
    text: str,
    brace: int,
    name: str,
    lineno: int,
    collector: UsageCollector,
    options: ReadOptions,
):
    close = text.rfind("}")
    if brace < 0 or close < brace:
        raise bad_line(name, lineno, "a DCGM sample without labels: no host or GPU to put it on")
    labels = parse_labels(text[brace + 1 : close])
    if labels is None:
        raise bad_line(name, lineno, f"malformed labels: {shown(text[brace : close + 1])}")
    ident = identity(labels, options.gpu_model)
    if isinstance(ident, str):
        raise bad_line(name, lineno, ident)
    kind = DCGM_METRICS[text[:brace]]
    try:
        return collector.series(ident, kind, f"{name}: line {lineno}")
    except InputProblem as e:
        raise bad_line(name, lineno, str(e)) from None


def parse_labels(text: str) -> dict[str, str] | None:
    """``a="1",b="x\\"y"`` -> ``{"a": "1", "b": 'x"y'}``; None when malformed.

    >>> parse_labels('gpu="0",pod="a\\\\"b",')
    {'gpu': '0', 'pod': 'a"b'}
    """
    labels: dict[str, str] = {}
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None:
            return None
        key, value = match.group(1), match.group(2)
        if "\\" in value:
            value = re.sub(r"\\.", lambda m: _ESCAPES.get(m.group(0), m.group(0)), value)
        labels[key] = value
        position = match.end()
    return labels
