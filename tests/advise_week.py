"""A synthetic week of GPU usage, seeded, written in every format `gpuprov advise` reads.

The cluster of the first article this product answers: 200 A100-80GB (25 hosts of 8) where
each workload holds a whole card, most of them 15-25 GB at low compute, some 2 GB inference
services, some 8-GPU training jobs. Some GPUs change hands mid-week (one pod ends, another
starts), a few are idle. Tests write a coarse week (hourly samples); bench/advise_input.py the
real one (every 15 s).

>>> cluster = article_cluster()
>>> len(cluster.gpus), sum(1 for w in cluster.workloads if len(w.gpus) == 8)
(200, 3)
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MODEL_NAME = "NVIDIA A100-SXM4-80GB"
MIB_PER_GB = 1e9 / 2**20  # the article's GB are 10^9 bytes
WEEK = 7 * 24 * 3600
START = 1_786_000_000  # a Monday in 2026, 00:00 UTC would do as well; only differences matter


@dataclass(frozen=True)
class Workload:
    namespace: str
    pod: str
    container: str
    gpus: tuple[tuple[str, int], ...]
    peak_mib: int
    base_mib: int
    compute: float  # mean GR_ENGINE_ACTIVE
    start: float  # share of the week it starts at
    end: float

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


@dataclass
class Cluster:
    gpus: list[tuple[str, int]]
    workloads: list[Workload] = field(default_factory=list)

    def uuid(self, host: str, index: int) -> str:
        n = self.gpus.index((host, index))
        return f"GPU-{n:08x}-5a1e-4c0f-9b1d-{n:012x}"


def _gpus(hosts: int, per_host: int = 8) -> list[tuple[str, int]]:
    return [(f"gpu-node-{h:02d}", i) for h in range(hosts) for i in range(per_host)]


def article_cluster(
    seed: int = 1, jobs: int = 3, mid: int = 110, churned: int = 20, services: int = 40
) -> Cluster:
    """3 training jobs of 8 GPUs, ``mid`` 15-25 GB workloads on a GPU each all week,
    ``churned`` GPUs that two such workloads hold one after the other, ``services`` 2 GB
    inference services, the rest idle."""
    rng = random.Random(seed)
    cluster = Cluster(_gpus(25))
    free = list(cluster.gpus)
    for j in range(jobs):
        gpus = tuple(free[:8])
        del free[:8]
        peak = int(rng.uniform(60, 72) * MIB_PER_GB)
        cluster.workloads.append(
            Workload(
                "ml-train",
                f"llm-pretrain-{j}-0",
                "trainer",
                gpus,
                peak,
                int(peak * 0.95),
                rng.uniform(0.85, 0.95),
                0.0,
                1.0,
            )
        )

    def mid_workload(k: int, gpu: tuple[str, int], start: float, end: float) -> Workload:
        peak = int(rng.uniform(15, 25) * MIB_PER_GB)
        return Workload(
            f"team-{k % 5}",
            f"notebook-{k:03d}-7d9f8b-x{k:03d}",
            "main",
            (gpu,),
            peak,
            int(peak * rng.uniform(0.8, 0.9)),
            rng.uniform(0.05, 0.2),
            start,
            end,
        )

    for k in range(mid):
        cluster.workloads.append(mid_workload(k, free.pop(0), 0.0, 1.0))
    for k in range(churned):
        gpu = free.pop(0)
        cluster.workloads.append(mid_workload(mid + 2 * k, gpu, 0.0, 0.45))
        cluster.workloads.append(mid_workload(mid + 2 * k + 1, gpu, 0.55, 1.0))
    for k in range(services):
        peak = int(rng.uniform(1.8, 2.0) * MIB_PER_GB)
        cluster.workloads.append(
            Workload(
                "serving",
                f"embedder-{k:02d}-5c6d7-q{k:02d}",
                "server",
                (free.pop(0),),
                peak,
                int(peak * 0.95),
                rng.uniform(0.02, 0.08),
                0.0,
                1.0,
            )
        )
    return cluster


def whole_card_cluster(seed: int = 2, gpus: int = 32) -> Cluster:
    """Every workload keeps a card busy: 60-75 GB at high compute, one per GPU."""
    rng = random.Random(seed)
    cluster = Cluster(_gpus(gpus // 8))
    for k, gpu in enumerate(cluster.gpus):
        peak = int(rng.uniform(60, 75) * MIB_PER_GB)
        cluster.workloads.append(
            Workload(
                "hpc",
                f"solver-{k:02d}",
                "main",
                (gpu,),
                peak,
                int(peak * 0.97),
                rng.uniform(0.85, 0.95),
                0.0,
                1.0,
            )
        )
    return cluster


@dataclass(frozen=True)
class Sample:
    time: float
    host: str
    index: int
    uuid: str
    workload: Workload | None
    memory: float  # MiB
    compute: float  # ratio


class _Series:
    """One GPU's values over time, the same whichever order they are asked in."""

    def __init__(self, cluster: Cluster, gpu: tuple[str, int], scrapes: int):
        self.rng = random.Random(f"{gpu}")
        self.on = [w for w in cluster.workloads if gpu in w.gpus]
        self.scrapes = scrapes

    def at(self, n: int) -> tuple[Workload | None, float, float]:
        share = n / max(self.scrapes - 1, 1)
        workload = next((w for w in self.on if w.start <= share <= w.end), None)
        noise, spike, busy = self.rng.random(), self.rng.random(), self.rng.random()
        if workload is None:
            return None, 0.0, 0.0
        first = round(workload.start * (self.scrapes - 1))
        last = round(workload.end * (self.scrapes - 1))
        memory = workload.base_mib * (0.97 + 0.03 * noise)
        if spike < 0.005 or n == (first + last) // 2:  # rare spikes, the peak reached once
            memory = workload.peak_mib
        compute = min(1.0, workload.compute * (0.5 + busy))
        return workload, round(memory), round(compute, 4)


def samples(cluster: Cluster, scrapes: int, step: float) -> Iterator[list[Sample]]:
    """Every scrape, time-major: a list of one sample per GPU."""
    series = {gpu: _Series(cluster, gpu, scrapes) for gpu in cluster.gpus}
    for n in range(scrapes):
        t = START + n * step
        out = []
        for gpu, s in series.items():
            workload, memory, compute = s.at(n)
            out.append(Sample(t, gpu[0], gpu[1], cluster.uuid(*gpu), workload, memory, compute))
        yield out


def _labels(s: Sample) -> str:
    w = s.workload
    pod = (w.pod, w.namespace, w.container) if w else ("", "", "")
    return (
        f'gpu="{s.index}",UUID="{s.uuid}",pci_bus_id="00000000:{s.index + 7:02X}:00.0",'
        f'device="nvidia{s.index}",modelName="{MODEL_NAME}",Hostname="{s.host}",'
        f'DCGM_FI_DRIVER_VERSION="570.172.08",container="{pod[2]}",namespace="{pod[1]}",'
        f'pod="{pod[0]}"'
    )


def _open(path: Path, compress: bool):
    return gzip.open(path, "wt", compresslevel=1) if compress else open(path, "w")


def write_prometheus(
    path: Path,
    cluster: Cluster,
    scrapes: int,
    step: float,
    timestamps: bool = True,
    compress: bool = False,
    others: bool = True,
) -> int:
    """DCGM exporter scrapes one after another: FB_USED, GR_ENGINE_ACTIVE and (``others``)
    FB_FREE and a metric advise does not read (temperature). Returns the samples advise
    reads."""
    blocks = {
        "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", lambda s: f"{s.memory:g}"),
        "DCGM_FI_DEV_FB_FREE": (
            "Framebuffer memory free (in MiB).",
            lambda s: f"{81920 - s.memory:g}",
        ),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (
            "Ratio of time the graphics engine is active.",
            lambda s: f"{s.compute:g}",
        ),
        "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (in C).", lambda s: "41"),
    }
    if not others:
        del blocks["DCGM_FI_DEV_FB_FREE"], blocks["DCGM_FI_DEV_GPU_TEMP"]
    labels: dict[tuple, str] = {}
    count = 0
    with _open(path, compress) as f:
        for scrape in samples(cluster, scrapes, step):
            stamp = f" {int(scrape[0].time * 1000)}" if timestamps else ""
            for metric, (help_, value) in blocks.items():
                f.write(f"# HELP {metric} {help_}\n# TYPE {metric} gauge\n")
                lines = []
                for s in scrape:
                    key = (s.host, s.index, s.workload)
                    text = labels.get(key)
                    if text is None:
                        text = labels[key] = _labels(s)
                    lines.append(f"{metric}{{{text}}} {value(s)}{stamp}\n")
                f.write("".join(lines))
            count += 2 * len(scrape)
    return count


def _series_labels(cluster: Cluster, scrapes: int, step: float):
    """Range-query series, series-major: per GPU, per pod that held it, its samples. One
    GPU's week at a time is in memory, never the cluster's."""
    for gpu in cluster.gpus:
        series = _Series(cluster, gpu, scrapes)
        uuid = cluster.uuid(*gpu)
        rows: dict[tuple, list] = {}
        for n in range(scrapes):
            w, memory, compute = series.at(n)
            key = (
                *gpu,
                uuid,
                w.pod if w else "",
                w.namespace if w else "",
                w.container if w else "",
            )
            rows.setdefault(key, []).append((START + n * step, memory, compute))
        yield from rows.items()


def write_range_json(
    path: Path, cluster: Cluster, scrapes: int, step: float, compress: bool = False
) -> int:
    """The JSON of query_range for {__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_PROF_GR_ENGINE_ACTIVE"},
    written series by series."""
    count = 0
    with _open(path, compress) as f:
        f.write('{"status":"success","data":{"resultType":"matrix","result":[')
        first = True
        for (host, index, uuid, pod, namespace, container), values in _series_labels(
            cluster, scrapes, step
        ):
            for metric, at in (("DCGM_FI_DEV_FB_USED", 1), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 2)):
                labels = {
                    "__name__": metric,
                    "Hostname": host,
                    "gpu": str(index),
                    "UUID": uuid,
                    "modelName": MODEL_NAME,
                    "instance": "10.0.0.9:9400",
                    "job": "dcgm-exporter",
                    "pod": pod,
                    "namespace": namespace,
                    "container": container,
                }
                f.write(("" if first else ",") + '{"metric":' + json.dumps(labels) + ',"values":[')
                f.write(",".join(f'[{v[0]:.0f},"{v[at]:g}"]' for v in values) + "]}")
                first = False
                count += len(values)
        f.write("]}}")
    return count


def write_range_csv(path: Path, cluster: Cluster, scrapes: int, step: float) -> int:
    """The same query as long CSV (timestamp, __name__, labels..., value)."""
    count = 0
    with open(path, "w") as f:
        f.write("timestamp,__name__,Hostname,gpu,UUID,modelName,pod,namespace,container,value\n")
        for (host, index, uuid, pod, namespace, container), values in _series_labels(
            cluster, scrapes, step
        ):
            for metric, at in (("DCGM_FI_DEV_FB_USED", 1), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 2)):
                for v in values:
                    f.write(
                        f"{v[0]:.0f},{metric},{host},{index},{uuid},{MODEL_NAME},{pod},{namespace},{container},{v[at]:g}\n"
                    )
                    count += 1
    return count


def write_nvidia_smi(
    directory: Path, cluster: Cluster, scrapes: int, step: float, units: bool = True
) -> int:
    """Per host, ``nvidia-smi --query-gpu=timestamp,name,index,uuid,utilization.gpu,
    memory.used,memory.total --format=csv -l STEP`` (``nounits`` when not ``units``)."""
    import datetime

    files = {}
    count = 0
    header = (
        "timestamp, name, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    )
    for scrape in samples(cluster, scrapes, step):
        when = datetime.datetime.fromtimestamp(scrape[0].time, datetime.timezone.utc)
        stamp = when.strftime("%Y/%m/%d %H:%M:%S.000")
        for s in scrape:
            f = files.get(s.host)
            if f is None:
                f = files[s.host] = open(directory / f"{s.host}.csv", "w")
                f.write(header)
            pct, mib = (" %", " MiB") if units else ("", "")
            f.write(
                f"{stamp}, {MODEL_NAME}, {s.index}, {s.uuid}, {round(s.compute * 100)}{pct}, "
                f"{s.memory:g}{mib}, 81920{mib}\n"
            )
            count += 2
    for f in files.values():
        f.close()
    return count
