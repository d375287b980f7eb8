"""Usage samples, as they stream, folded into fixed-size statistics per workload and per GPU.

A reader asks ``UsageCollector.series(identity, kind, where)`` once per series and gets a
recorder; it calls ``recorder.add(timestamp, value)`` for every sample. Memory stays bounded
by the number of workloads and GPUs, never by the number of samples: each keeps a ``Sketch``
per measure and, per GPU it ran on, the first and last time it was seen and a count.

A workload is a Kubernetes container (namespace, pod, container) on DCGM input, a process on
``nvidia-smi --query-compute-apps`` input, and the GPU itself when the input names no workload
(DCGM without the Kubernetes mapping, ``nvidia-smi --query-gpu``).

>>> c = UsageCollector()
>>> ident = SeriesIdentity("n1", "0", "", "A100-80GB", "", "", "ml", "train", "main")
>>> memory = c.series(ident, MEMORY, "week.prom: line 3")
>>> for t in range(0, 60, 15):
...     memory.add(t, 20000)
>>> usage = c.result(percentile=99)
>>> [(w.name, w.memory_peak, w.samples, w.duty) for w in usage.workloads]
[('ml/train/main', 20000, 4, 1.0)]
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from gpuprov.core import catalog
from gpuprov.core.advise.series import GPU_UTIL, GR_ACTIVE, MAXIMUM, MEMORY, SeriesIdentity
from gpuprov.core.advise.sketch import Sketch
from gpuprov.core.errors import shown

MEMORY_BUCKET_MIB = 64
COMPUTE_BUCKET = 0.01
# A GPU that no pod holds and that never used more than this, nor any compute, is idle: not a
# workload of its own on input without workload labels. (FB_USED of an idle GPU is a few MiB.)
IDLE_MEMORY_MIB = 64
# The compute source of a process whose compute is its GPU's utilisation, shared out.
ESTIMATED = "estimated"


class InputProblem(ValueError):
    """A sample or series the collector refuses; the reader adds the file and line."""


class Span:
    """One workload's memory samples on one GPU (or a GPU's samples no pod held): when it was
    seen first and last, how many, and their sum."""

    __slots__ = ("first", "last", "count", "memory_total")

    def __init__(self) -> None:
        self.first = math.inf
        self.last = -math.inf
        self.count = 0
        self.memory_total = 0.0

    @property
    def step(self) -> float | None:
        """The mean time between samples (0 samples apart: None)."""
        return (self.last - self.first) / (self.count - 1) if self.count > 1 else None


class _Stats:
    """A workload's or a GPU's sketches and spans."""

    def __init__(self, where: str):
        self.where = where  # the file and line it was first seen at
        self.memory = Sketch(MEMORY_BUCKET_MIB)
        self.compute = {GR_ACTIVE: Sketch(COMPUTE_BUCKET), GPU_UTIL: Sketch(COMPUTE_BUCKET)}
        self.spans: dict[tuple, Span] = {}
        self.mig_profiles: set[str] = set()


def _check(value: float) -> None:
    raise InputProblem(f"{_what(value)} sample {shown(value)}")


class MemoryRecorder:
    """Takes one series' memory samples (MiB): ``add(timestamp, value)``. The sketch update is
    written out here, not called: this runs once per sample, millions of times."""

    __slots__ = ("sketch", "span")

    def __init__(self, sketch: Sketch, span: Span):
        self.sketch = sketch
        self.span = span

    def add(self, timestamp: float, value: float) -> None:
        if not 0.0 <= value < _INF:  # NaN fails this too
            _check(value)
        sketch = self.sketch
        sketch.count += 1
        sketch.total += value
        if value > sketch.peak:
            sketch.peak = value
        bucket = int(value * sketch.inverse)
        buckets = sketch.buckets
        buckets[bucket] = buckets.get(bucket, 0) + 1
        span = self.span
        span.count += 1
        span.memory_total += value
        if timestamp > span.last:
            span.last = timestamp
        if timestamp < span.first:
            span.first = timestamp


class ComputeRecorder:
    """Takes one series' compute samples: a ratio (GR_ENGINE_ACTIVE) or a percentage
    (GPU_UTIL), kept as a share of the whole GPU (a MIG instance's scaled by its slices)."""

    __slots__ = ("sketch", "scale", "maximum", "total")

    def __init__(self, kind: str, sketch: Sketch, scale: float):
        self.sketch = sketch
        self.maximum = MAXIMUM[kind]
        self.scale = scale / self.maximum
        self.total = 0.0  # this series' own sum, for its GPU's mean

    def add(self, timestamp: float, value: float) -> None:
        if not 0.0 <= value <= self.maximum:
            if 0.0 <= value < _INF:
                raise InputProblem(f"{shown(value)} is above this metric's {self.maximum:g}")
            _check(value)
        value *= self.scale
        sketch = self.sketch
        sketch.count += 1
        sketch.total += value
        if value > sketch.peak:
            sketch.peak = value
        bucket = int(value * sketch.inverse)
        buckets = sketch.buckets
        buckets[bucket] = buckets.get(bucket, 0) + 1
        self.total += value


Recorder = MemoryRecorder | ComputeRecorder
_INF = math.inf


@dataclass(frozen=True)
class WorkloadUsage:
    """What one workload used. Memory in MiB per GPU; compute as a share of one whole GPU
    (None when the input has no compute measure for it)."""

    name: str
    host: str  # the host it was last seen on
    gpu_keys: tuple[tuple, ...]  # every (host, GPU[, MIG instance]) it was seen on
    gpus: int  # GPUs it held at the same time (8 for an 8-GPU training job)
    memory_peak: int
    memory_high: int  # at the chosen percentile
    memory_mean: float
    compute_mean: float | None
    compute_high: float | None
    compute_source: str | None  # GR_ACTIVE, GPU_UTIL, or None
    samples: int
    first: float
    last: float
    duty: float  # share of the window it was present (how often it runs)
    mig_profiles: tuple[str, ...]
    where: str

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "host": self.host,
            "gpus": self.gpus,
            "memory_peak_mib": self.memory_peak,
            "memory_high_mib": self.memory_high,
            "memory_mean_mib": round(self.memory_mean, 1),
            "compute_mean": _round(self.compute_mean),
            "compute_high": _round(self.compute_high),
            "compute_source": self.compute_source,
            "samples": self.samples,
            "first": self.first,
            "last": self.last,
            "duty": round(self.duty, 4),
            "mig_profiles": list(self.mig_profiles),
        }


@dataclass(frozen=True)
class GpuUsage:
    """One physical GPU as the input saw it: the mean of its memory and compute over its
    samples, and whether any workload ran on it."""

    host: str
    index: str
    uuid: str
    memory_mean: float
    compute_mean: float | None
    busy: bool


@dataclass(frozen=True)
class Usage:
    """Everything the proposal needs from the input."""

    model: catalog.GpuModel
    workloads: tuple[WorkloadUsage, ...]
    gpus: tuple[GpuUsage, ...]
    hosts: dict[str, int]  # host -> GPUs it has (as far as the input shows)
    start: float
    end: float
    step: float
    percentile: float
    attributed: bool  # whether the input names workloads (pods or processes)

    @property
    def gpus_busy(self) -> int:
        return sum(1 for g in self.gpus if g.busy)


@dataclass
class UsageCollector:
    """Collects series from any number of readers; ``result`` summarises them."""

    _model: catalog.GpuModel | None = None
    _model_where: str = ""
    _workloads: dict[tuple, _Stats] = field(default_factory=dict)
    _gpus: dict[tuple, _Stats] = field(default_factory=dict)
    _gpu_index: dict[tuple, str] = field(default_factory=dict)
    # For each physical GPU's means: its memory spans, its compute recorders per kind.
    _memory_of_gpu: dict[tuple, list[Span]] = field(default_factory=dict)
    _compute_of_gpu: dict[tuple, list[ComputeRecorder]] = field(default_factory=dict)
    _workloads_on: dict[tuple, int] = field(default_factory=dict)

    def series(self, ident: SeriesIdentity, kind: str, where: str) -> Recorder:
        """A recorder for one series of ``kind``; InputProblem when the series cannot be
        used (unknown or second GPU model, GPU utilisation on a MIG instance)."""
        model = self._check_model(ident.model, where)
        scale = 1.0
        if ident.mig_profile:
            profile = model.profile(ident.mig_profile)
            if profile is None:
                raise InputProblem(
                    f"GPU_I_PROFILE {shown(ident.mig_profile)} is not a MIG profile of "
                    f"{model.alias} (gpuprov mig profiles {model.alias})"
                )
            if kind == GPU_UTIL:
                raise InputProblem(
                    "DCGM_FI_DEV_GPU_UTIL is not measured per MIG instance (dcgm-exporter "
                    "#216); use DCGM_FI_PROF_GR_ENGINE_ACTIVE for MIG series"
                )
            scale = profile.compute_slices / model.compute_slices
        gpu_key = (*ident.gpu_key, ident.mig_instance)
        gpu = self._gpus.get(gpu_key)
        if gpu is None:
            gpu = self._gpus[gpu_key] = _Stats(where)
            self._gpu_index[gpu_key] = ident.gpu
        if ident.mig_profile:
            gpu.mig_profiles.add(ident.mig_profile)
        stats, span_key = gpu, ()
        workload = ident.workload
        if workload is not None:
            stats = self._workloads.get(workload)
            if stats is None:
                stats = self._workloads[workload] = _Stats(where)
            if ident.mig_profile:
                stats.mig_profiles.add(ident.mig_profile)
            span_key = gpu_key
        if kind == MEMORY:
            span = stats.spans.get(span_key)
            if span is None:
                span = stats.spans[span_key] = Span()
                self._memory_of_gpu.setdefault(gpu_key[:2], []).append(span)
            return MemoryRecorder(stats.memory, span)
        recorder = ComputeRecorder(kind, stats.compute[kind], scale)
        self._compute_of_gpu.setdefault((gpu_key[:2], kind), []).append(recorder)
        return recorder

    def _check_model(self, name: str, where: str) -> catalog.GpuModel:
        model = catalog.find_model(name)
        if model is None:
            raise InputProblem(catalog.load().unknown_model(name))
        if self._model is None:
            self._model, self._model_where = model, where
        elif model is not self._model:
            raise InputProblem(
                f"GPU model {model.alias}, but {self._model_where} is {self._model.alias}: "
                "advise sizes one pool of one GPU model at a time (filter the input by "
                "modelName)"
            )
        return model

    def result(self, percentile: float) -> Usage:
        """The statistics of everything collected; InputProblem when nothing usable came."""
        if self._model is None:
            raise InputProblem(
                "no GPU memory samples (DCGM_FI_DEV_FB_USED, memory.used or used_gpu_memory)"
            )
        spans = [
            s
            for table in (self._gpus, self._workloads)
            for stats in table.values()
            for s in stats.spans.values()
            if s.count
        ]
        if not spans:
            raise InputProblem("no GPU memory samples: memory is what advise sizes by")
        start = min(s.first for s in spans)
        end = max(s.last for s in spans)
        steps = [s.step for s in spans if s.step]
        step = statistics.median(steps) if steps else 0.0
        expected = round((end - start) / step) + 1 if step else 1
        attributed = bool(self._workloads)
        self._workloads_on = {}
        for stats in self._workloads.values():
            for key in stats.spans:
                self._workloads_on[key] = self._workloads_on.get(key, 0) + 1
        named = self._named_workloads() if attributed else self._gpu_workloads()
        workloads = []
        for key, (stats, spans) in named.items():
            workload = self._workload(key, stats, spans, percentile, expected)
            if workload is not None:
                workloads.append(workload)
        busy = {gk[:2] for w in workloads for gk in w.gpu_keys}
        return Usage(
            model=self._model,
            workloads=tuple(sorted(workloads, key=lambda w: w.name)),
            gpus=self._gpu_usage(busy, expected),
            hosts=self._hosts(),
            start=start,
            end=end,
            step=step,
            percentile=percentile,
            attributed=attributed,
        )

    def _named_workloads(self) -> dict[tuple, tuple[_Stats, dict[tuple, Span]]]:
        return {key: (stats, stats.spans) for key, stats in self._workloads.items()}

    def _gpu_workloads(self) -> dict[tuple, tuple[_Stats, dict[tuple, Span]]]:
        """Without workload labels each GPU (or MIG instance) that did anything is one."""
        out = {}
        for key, stats in self._gpus.items():
            computed = any(s.peak > 0 for s in stats.compute.values())
            if stats.memory.peak >= IDLE_MEMORY_MIB or computed:
                out[key] = (stats, {key: stats.spans[()]})
        return out

    def _workload(
        self,
        key: tuple,
        stats: _Stats,
        spans: dict[tuple, Span],
        percentile: float,
        expected: int,
    ) -> WorkloadUsage | None:
        spans = {k: s for k, s in spans.items() if s.count}
        if not spans or not stats.memory.count:
            # compute without memory: InputProblem would name no line; the readers' own
            # checks refuse series without a memory metric where the format allows it.
            return None
        gr, util = stats.compute[GR_ACTIVE], stats.compute[GPU_UTIL]
        compute = gr if gr.count else util if util.count else None
        compute_mean = compute.mean if compute else None
        compute_high = compute.percentile(percentile) if compute else None
        source = (GR_ACTIVE if gr.count else GPU_UTIL) if compute else None
        if compute is None and spans:
            compute_mean, compute_high = self._estimated_compute(spans, percentile)
            source = ESTIMATED if compute_mean is not None else None
        if self._workloads:
            namespace, pod, container = key
            name = "/".join(p for p in (namespace, pod, container) if p)
        else:
            host, gpu, instance = key
            name = f"{host}/gpu{self._gpu_index[key] or gpu}" + (
                f"/mig{instance}" if instance else ""
            )
        last_span = max(spans.items(), key=lambda kv: kv[1].last)
        return WorkloadUsage(
            name=name,
            host=last_span[0][0],
            gpu_keys=tuple(sorted(spans)),
            gpus=_concurrent(spans),
            memory_peak=math.ceil(stats.memory.peak),
            memory_high=math.ceil(stats.memory.percentile(percentile)),
            memory_mean=stats.memory.mean,
            compute_mean=compute_mean,
            compute_high=compute_high,
            compute_source=source,
            samples=max(s.count for s in spans.values()),
            first=min(s.first for s in spans.values()),
            last=max(s.last for s in spans.values()),
            duty=min(1.0, max(s.count for s in spans.values()) / expected),
            mig_profiles=tuple(sorted(stats.mig_profiles)),
            where=stats.where,
        )

    def _estimated_compute(
        self, spans: dict[tuple, Span], percentile: float
    ) -> tuple[float | None, float | None]:
        """A process's compute from its GPUs' utilisation (nvidia-smi measures no compute per
        process), split evenly among the processes seen on each GPU: the busiest GPU's."""
        best: tuple[float, float] | None = None
        for key in spans:
            gpu = self._gpus.get(key)
            if gpu is None:
                continue
            compute = next((c for c in gpu.compute.values() if c.count), None)
            if compute is None:
                continue
            sharing = max(1, self._workloads_on.get(key, 1))
            share = (compute.mean / sharing, compute.percentile(percentile) / sharing)
            best = share if best is None or share > best else best
        return best if best is not None else (None, None)

    def _gpu_usage(self, busy: set[tuple], expected: int) -> tuple[GpuUsage, ...]:
        """Physical GPUs, each its mean over the whole window (absent is idle): a MIG GPU's
        instances add up (memory, and compute already scaled to the whole GPU)."""
        index_of = {key[:2]: index for key, index in self._gpu_index.items()}
        out = []
        for (host, gpu), spans in sorted(self._memory_of_gpu.items()):
            compute = self._compute_of_gpu.get(((host, gpu), GR_ACTIVE)) or (
                self._compute_of_gpu.get(((host, gpu), GPU_UTIL))
            )
            index = index_of[(host, gpu)]
            out.append(
                GpuUsage(
                    host=host,
                    index=index,
                    uuid=gpu if gpu != index else "",
                    memory_mean=sum(s.memory_total for s in spans) / expected,
                    compute_mean=sum(r.total for r in compute) / expected if compute else None,
                    busy=(host, gpu) in busy,
                )
            )
        return tuple(out)

    def _hosts(self) -> dict[str, int]:
        """GPUs per host: the highest index seen plus one (DCGM reports idle GPUs too), or the
        GPUs seen when the input has no indices."""
        gpus: dict[str, set[str]] = {}
        highest: dict[str, int] = {}
        for key, index in self._gpu_index.items():
            gpus.setdefault(key[0], set()).add(key[1])
            if index.isdigit():
                highest[key[0]] = max(highest.get(key[0], -1), int(index))
        return {h: max(highest.get(h, -1) + 1, len(g)) for h, g in sorted(gpus.items())}


def _concurrent(spans: dict[tuple, Span]) -> int:
    """The most GPUs of one host a workload held at once (a pod never spans hosts)."""
    best = 0
    by_host: dict[str, list[tuple[float, int]]] = {}
    for key, span in spans.items():
        events = by_host.setdefault(key[0], [])
        events += [(span.first, 1), (span.last, 2)]
    for events in by_host.values():
        now = 0
        # At one instant, a span that starts counts before one that ends (both were there).
        for _, kind in sorted(events):
            now += 1 if kind == 1 else -1
            best = max(best, now)
    physical = {key[:2] for key in spans}
    return min(best, len(physical))


def _what(value: float) -> str:
    if value != value:
        return "missing (NaN)"
    return "negative" if value < 0 else "infinite"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
