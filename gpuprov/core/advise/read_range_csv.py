"""The CSV of a Prometheus range query in long form: one sample a row, with a time column, the
metric name, one column per label and the value.

That is the table ``prometheus-api-client``'s ``MetricRangeDataFrame(...).to_csv()`` writes
(``timestamp,__name__,<labels...>,value``) and what tools that flatten ``query_range`` output
produce. The time is Unix seconds (or milliseconds) or an ISO 8601 date; the metric column is
``__name__`` (or ``metric``, ``name``), absent when ``ReadOptions.metric`` names it. Every other
column is a label and must be named like one.

>>> import io
>>> from gpuprov.core.advise.usage import UsageCollector
>>> text = ('timestamp,__name__,Hostname,gpu,modelName,pod,value\\n'
...         '1700000000,DCGM_FI_DEV_FB_USED,n1,0,NVIDIA A100-SXM4-80GB,p,20480\\n')
>>> read(io.StringIO(text), "q.csv", UsageCollector()).samples
1
"""

from __future__ import annotations

import csv
import datetime
import operator
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

FORMAT = "prometheus-csv"
TIME_COLUMNS = ("timestamp", "time", "Time")
NAME_COLUMNS = ("__name__", "metric", "name")
VALUE_COLUMNS = ("value", "Value")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# A number this large is milliseconds since 1970, not seconds (1e11 s is the year 5138).
_MILLISECONDS_ABOVE = 1e11


def looks_like(header: list[str]) -> bool:
    """Whether a CSV header is this format's (a time and a value column)."""
    return any(c in header for c in TIME_COLUMNS) and any(c in header for c in VALUE_COLUMNS)


def read(
    lines: Iterable[str],
    name: str,
    collector: UsageCollector,
    options: ReadOptions = DEFAULT_OPTIONS,
    progress: Progress | None = None,
) -> ReadSummary:
    """Feed every DCGM sample of the CSV ``lines`` (the file ``name``) to ``collector``."""
    rows = csv.reader(lines)
    lineno = 1
    try:
        header = next(rows, None)
        if header is None:
            raise bad_line(name, None, "empty")
        time_at, value_at, name_at, label_at = _columns(header, name, options)
        labels_of = operator.itemgetter(*label_at) if label_at else lambda row: ()
        label_names = [header[i] for i in label_at]
        width = len(header)
        series: dict[tuple, object] = {}
        parse_time = _TimeParser()
        samples = skipped = 0
        mask = PROGRESS_EVERY - 1
        for lineno, row in enumerate(rows, 2):
            if len(row) != width:
                if not row:
                    continue
                raise bad_line(name, lineno, f"{len(row)} cells, the header has {width}")
            key = labels_of(row)
            metric = row[name_at] if name_at is not None else options.metric
            add = series.get((metric, key))
            if add is None:
                add = series[(metric, key)] = _recorder(
                    metric,
                    dict(zip(label_names, _tuple(key), strict=True)),
                    name,
                    lineno,
                    collector,
                    options,
                )
            if not add:
                skipped += 1
                continue
            value = row[value_at]
            if not value:
                raise bad_line(name, lineno, "missing value (an empty cell)")
            add(parse_time(row[time_at]), float(value))
            samples += 1
            if not samples & mask and progress is not None:
                progress(samples)
    except InputProblem as e:
        raise bad_line(name, lineno, str(e)) from None
    except UnicodeDecodeError:
        raise  # the command line finds the line (the decoder reads ahead)
    except ValueError as e:
        raise bad_line(name, lineno, f"not a number or time: {shown(str(e))}") from None
    except csv.Error as e:
        raise bad_line(name, lineno, f"not CSV: {e}") from None
    return ReadSummary(name, FORMAT, samples, skipped, len(series))


def _tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _columns(
    header: list[str], name: str, options: ReadOptions
) -> tuple[int, int, int | None, list[int]]:
    """Where the time, value, metric name and labels are; exit-2 errors for a header that is
    not this format's."""

    def find(names: tuple[str, ...]) -> int | None:
        return next((header.index(n) for n in names if n in header), None)

    time_at, value_at, name_at = find(TIME_COLUMNS), find(VALUE_COLUMNS), find(NAME_COLUMNS)
    if time_at is None or value_at is None:
        missing = "a time column (timestamp)" if time_at is None else "a value column"
        raise bad_line(name, 1, f"no {missing}: not the CSV of a Prometheus range query")
    if name_at is None and not options.metric:
        raise bad_line(
            name,
            1,
            "no __name__ column: give the metric of every row with --metric DCGM_FI_DEV_FB_USED",
        )
    if len(set(header)) != len(header):
        raise bad_line(name, 1, "a column name repeats")
    labels = []
    for i, column in enumerate(header):
        if i in (time_at, value_at, name_at):
            continue
        if not _LABEL_NAME.match(column):
            raise bad_line(
                name,
                1,
                f"unknown column {shown(column)}: columns are the time, __name__, the value and "
                "labels (named like Prometheus labels)",
            )
        labels.append(i)
    return time_at, value_at, name_at, labels


def _recorder(metric, labels, name, lineno, collector, options):
    kind = DCGM_METRICS.get(metric)
    if kind is None:
        return False
    ident = identity(labels, options.gpu_model)
    if isinstance(ident, str):
        raise bad_line(name, lineno, ident)
    return collector.series(ident, kind, f"{name}: line {lineno}").add


class _TimeParser:
    """Seconds since 1970 from Unix seconds, milliseconds or ISO 8601 (a date without a zone
    is UTC); the last text is cached, as every series of one step repeats it."""

    def __init__(self) -> None:
        self.text = ""
        self.value = 0.0

    def __call__(self, text: str) -> float:
        if text == self.text:
            return self.value
        try:
            value = float(text)
            if value > _MILLISECONDS_ABOVE:
                value /= 1000
        except ValueError:
            when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.timezone.utc)
            value = when.timestamp()
        self.text, self.value = text, value
        return value
