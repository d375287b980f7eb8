"""The JSON of a Prometheus range query (``/api/v1/query_range``, a ``matrix`` result), or of an
instant query (a ``vector``), read as a stream.

The response is ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric":
{labels}, "values": [[t, "v"], ...]}, ...]}}`` (Prometheus "HTTP API", range queries). ijson
parses it event by event, so a week of 200 GPUs is never in memory at once: only one series'
labels are. Prometheus writes ``metric`` before ``values``; a file that does not has each
series' values held until its labels come.

A query of a function (``max_over_time(DCGM_FI_DEV_FB_USED[5m])``) drops ``__name__``: then
``ReadOptions.metric`` says which metric the series are.

>>> import io
>>> from gpuprov.core.advise.usage import UsageCollector
>>> body = ('{"status":"success","data":{"resultType":"matrix","result":[{"metric":'
...         '{"__name__":"DCGM_FI_DEV_FB_USED","Hostname":"n1","gpu":"0","modelName":'
...         '"NVIDIA A100-SXM4-80GB","pod":"p"},"values":[[1700000000,"20480"],[1700000015,'
...         '"20500"]]}]}}')
>>> read(io.BytesIO(body.encode()), "q.json", UsageCollector()).samples
2
"""

from __future__ import annotations

from typing import BinaryIO

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

FORMAT = "prometheus-json"
RESULT_TYPES = ("matrix", "vector")
# ijson prefixes: the items of a [t, "v"] pair, and the pair itself (matrix and vector, with
# the API's envelope or as its bare "data").
_PAIRS = {
    f"{envelope}result.item.{field}"
    for envelope in ("data.", "")
    for field in ("values.item", "value")
}
_PAIR_ITEMS = {f"{p}.item" for p in _PAIRS}


def read(
    stream: BinaryIO,
    name: str,
    collector: UsageCollector,
    options: ReadOptions = DEFAULT_OPTIONS,
    progress: Progress | None = None,
) -> ReadSummary:
    """Feed every DCGM sample of the JSON ``stream`` (the file ``name``) to ``collector``."""
    import ijson  # only this reader needs it; `gpuprov --help` should not load it

    reader = _Reader(name, collector, options)
    try:
        reader.run(ijson.parse(stream, use_float=True), progress)
    except ijson.JSONError as e:
        raise bad_line(name, None, f"not JSON ({_short(e)}) {reader.where()}") from None
    except InputProblem as e:
        raise bad_line(name, None, f"{reader.where()}: {e}") from None
    except UnicodeDecodeError:
        raise  # the command line finds the line (the decoder reads ahead)
    except (ValueError, TypeError) as e:
        raise bad_line(name, None, f"{reader.where()}: not a number: {_short(e)}") from None
    if not reader.result_type:
        raise bad_line(
            name,
            None,
            "no data.resultType: not the JSON of a Prometheus query (/api/v1/query_range)",
        )
    return ReadSummary(name, FORMAT, reader.samples, reader.skipped, reader.series)


class _Reader:
    def __init__(self, name: str, collector: UsageCollector, options: ReadOptions):
        self.name = name
        self.collector = collector
        self.options = options
        self.result_type = ""
        self.series = 0  # series seen (numbered from 1 in messages)
        self.index = 0  # the current sample of the current series
        self.samples = self.skipped = 0

    def where(self) -> str:
        if not self.series:
            return "at the start"
        return f"series {self.series}" + (f", sample {self.index}" if self.index else "")

    def run(self, events, progress: Progress | None) -> None:
        labels: dict[str, str] | None = None
        key = ""
        add = None  # the current series' recorder, or False for another metric's series
        pending: list[tuple[float, str]] = []  # values that came before their labels
        stamp = 0.0
        expect_stamp = True
        status = ""
        mask = PROGRESS_EVERY - 1
        for prefix, event, value in events:
            # The hot path: the two items of each [t, "v"] pair.
            if prefix in _PAIR_ITEMS:
                if expect_stamp:
                    stamp, expect_stamp = value, False
                    continue
                expect_stamp = True
                self.index += 1
                if add:
                    add(stamp, float(value))
                    self.samples += 1
                    if not self.samples & mask and progress is not None:
                        progress(self.samples)
                elif add is None:
                    pending.append((stamp, value))
                else:
                    self.skipped += 1
                continue
            if prefix in _PAIRS:
                if event == "end_array" and not expect_stamp:
                    raise InputProblem("a sample is not a [timestamp, value] pair")
                if event == "start_array":
                    expect_stamp = True
                continue
            path = prefix.removeprefix("data.")
            if prefix == "status" and event == "string":
                status = value
            elif prefix in ("error", "data.error") and event == "string":
                raise InputProblem(f"the query failed: {shown(value)}")
            elif path == "resultType":
                if value not in RESULT_TYPES:
                    raise InputProblem(
                        f"resultType {shown(value)}: advise reads matrix (query_range) or "
                        "vector results"
                    )
                self.result_type = value
            elif path == "result.item" and event == "start_map":
                self.series += 1
                self.index = 0
                labels, add, pending = None, None, []
            elif path == "result.item.metric" and event == "start_map":
                labels = {}
            elif path == "result.item.metric" and event == "map_key":
                key = value
            elif path.startswith("result.item.metric.") and event == "string":
                assert labels is not None
                labels[key] = value
            elif path == "result.item.metric" and event == "end_map":
                add = self.recorder(labels or {})
                for when, text in pending:
                    self.index += 1
                    if add:
                        add(when, float(text))
                        self.samples += 1
                    else:
                        self.skipped += 1
                pending = []
            elif path == "result.item" and event == "end_map" and labels is None:
                raise InputProblem("a result without metric labels")
        if status and status != "success":
            raise InputProblem(f"status {shown(status)}: the query did not succeed")

    def recorder(self, labels: dict[str, str]):
        """The recorder's ``add`` for a series of a DCGM metric advise reads, else False."""
        metric = labels.get("__name__") or self.options.metric
        if not metric:
            raise InputProblem(
                "a series without __name__ (a query of a function drops it): give the metric "
                "with --metric DCGM_FI_DEV_FB_USED (one file per metric)"
            )
        kind = DCGM_METRICS.get(metric)
        if kind is None:
            return False
        ident = identity(labels, self.options.gpu_model)
        if isinstance(ident, str):
            raise InputProblem(ident)
        return self.collector.series(ident, kind, f"{self.name}: series {self.series}").add


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return shown(text)[:200]
