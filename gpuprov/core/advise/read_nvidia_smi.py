"""``nvidia-smi --query-gpu=... --format=csv`` and ``--query-compute-apps=... --format=csv``
logs (``-l 15`` appends a block every 15 s), with or without ``noheader`` and ``nounits``.

The header names each field with its unit (``memory.used [MiB]``, ``utilization.gpu [%]``);
``nounits`` drops the units from the values (``7234`` for ``7234 MiB``); ``noheader`` drops the
header, and then ``ReadOptions.columns`` must name the fields as the ``--query-*`` option did.
Unsupported values print as ``[N/A]`` or ``[Not Supported]``: a GPU's utilisation is then not
measured (MIG mode), its memory must be. ``process_name`` is printed unquoted and may hold
commas: the cells beyond the header's count belong to it. The output "is not guaranteed to be
backwards compatible" (nvidia-smi(1)), so it is read as an import format only; the live probe
uses NVML.

nvidia-smi names no host: it is ``ReadOptions.host``, or the file's name up to its first dot
(``gpu-07.csv`` is host ``gpu-07``). A ``--query-gpu`` log makes each GPU a workload; with a
``--query-compute-apps`` log each process is one (``gpu-07/python3[4242]``), its compute
estimated from its GPU's utilisation.

>>> import io
>>> from gpuprov.core.advise.usage import UsageCollector
>>> log = ('timestamp, name, index, uuid, utilization.gpu [%], memory.used [MiB]\\n'
...        '2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 0, GPU-1, 35 %, 7234 MiB\\n')
>>> read(io.StringIO(log), "gpu-07.csv", UsageCollector()).samples
2
"""

from __future__ import annotations

import csv
import datetime
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
from gpuprov.core.advise.series import GPU_UTIL, MEMORY, SeriesIdentity, bad_name
from gpuprov.core.advise.usage import InputProblem, UsageCollector
from gpuprov.core.errors import shown

FORMAT_GPU = "nvidia-smi-query-gpu"
FORMAT_APPS = "nvidia-smi-query-compute-apps"
UNTIMESTAMPED_STEP = 15.0  # seconds between blocks of a log without timestamps (-l 15)
NOT_AVAILABLE = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]")

# The fields advise reads; any other well-formed field is read past.
GPU_FIELDS = ("timestamp", "name", "index", "uuid", "pci.bus_id", "utilization.gpu", "memory.used")
APP_FIELDS = ("timestamp", "gpu_name", "gpu_uuid", "gpu_bus_id", "pid", "process_name")
# The header shows --query-compute-apps' used_memory as used_gpu_memory.
APP_MEMORY = ("used_gpu_memory", "used_memory")
_FIELD = re.compile(r"[a-z][a-z0-9_.]*(?: \[[^\]]+\])?\Z")
_TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


def field_of(column: str) -> str:
    """``memory.used [MiB]`` -> ``memory.used``."""
    return column.split(" [", 1)[0].strip()


def looks_like(header: list[str]) -> bool:
    """Whether a CSV header is nvidia-smi's (a GPU or process query with its memory field)."""
    fields = {field_of(c) for c in header}
    return "memory.used" in fields or bool(fields & set(APP_MEMORY))


def read(
    lines: Iterable[str],
    name: str,
    collector: UsageCollector,
    options: ReadOptions = DEFAULT_OPTIONS,
    progress: Progress | None = None,
) -> ReadSummary:
    """Feed every sample of the nvidia-smi CSV ``lines`` (the file ``name``) to ``collector``."""
    rows = csv.reader(lines, skipinitialspace=True)
    reader = _Reader(name, collector, options)
    try:
        if options.columns:
            reader.header(list(options.columns), 0)
        else:
            first = next(rows, None)
            if first is None:
                raise bad_line(name, None, "empty")
            reader.header(first, 1)
        reader.run(rows, progress)
    except InputProblem as e:
        raise bad_line(name, reader.lineno, str(e)) from None
    except UnicodeDecodeError:
        raise  # the command line finds the line (the decoder reads ahead)
    except ValueError as e:
        raise bad_line(name, reader.lineno, f"not a number or time: {shown(str(e))}") from None
    except csv.Error as e:
        raise bad_line(name, reader.lineno, f"not CSV: {e}") from None
    return ReadSummary(name, reader.format, reader.samples, reader.skipped, len(reader.series))


def host_of(name: str) -> str:
    """The host a file is named for: its base name up to the first dot.

    >>> host_of("/logs/gpu-07.smi.csv.gz")
    'gpu-07'
    """
    return name.replace("\\", "/").rsplit("/", 1)[-1].split(".", 1)[0]


class _Reader:
    def __init__(self, name: str, collector: UsageCollector, options: ReadOptions):
        self.name = name
        self.collector = collector
        self.options = options
        self.host = options.host or host_of(name)
        self.format = FORMAT_GPU
        self.fields: list[str] = []
        self.at: dict[str, int] = {}
        self.first_line = 1
        self.lineno = 0
        self.series: dict[tuple, tuple] = {}  # the row's identity -> (memory add, compute add)
        self.block = 0  # blocks of an untimestamped log
        self.seen: dict[tuple, int] = {}  # identity -> the last block it was in
        self.samples = self.skipped = 0

    def header(self, columns: list[str], lineno: int) -> None:
        self.lineno = lineno
        problem = bad_name(self.host)
        if not self.host or problem:
            raise InputProblem(f"no host name from the file's name ({problem}); use --host")
        for column in columns:
            if not _FIELD.match(column.strip()):
                what = "a data row where the header should be" if lineno else "a field"
                raise InputProblem(
                    f"unknown column {shown(column)}: nvidia-smi fields look like memory.used "
                    f"[MiB] (is this {what}? headerless logs need --columns)"
                )
        self.fields = [field_of(c) for c in columns]
        if len(set(self.fields)) != len(self.fields):
            raise InputProblem("a field repeats")
        self.at = {f: i for i, f in enumerate(self.fields)}
        memory = next((f for f in APP_MEMORY if f in self.at), None)
        if memory is not None or "pid" in self.at:
            self.format = FORMAT_APPS
            missing = [f for f in ("pid", "gpu_uuid") if f not in self.at]
            if memory is None or missing:
                raise InputProblem(
                    "a --query-compute-apps log needs pid, gpu_uuid and used_memory; missing "
                    + ", ".join(missing + ([] if memory else ["used_memory"]))
                )
            self.memory_at = self.at[memory]
        else:
            if "memory.used" not in self.at or not ({"index", "uuid"} & set(self.at)):
                raise InputProblem(
                    "a --query-gpu log needs memory.used and index or uuid (and name, or "
                    "--gpu-model)"
                )
            self.memory_at = self.at["memory.used"]
        self.first_line = lineno + 1

    def run(self, rows, progress: Progress | None) -> None:
        width = len(self.fields)
        apps = self.format == FORMAT_APPS
        process_at = self.at.get("process_name")
        time_at = self.at.get("timestamp")
        util_at = None if apps else self.at.get("utilization.gpu")
        parse_time = _TimeParser()
        mask = PROGRESS_EVERY - 1
        for lineno, row in enumerate(rows, self.first_line):
            self.lineno = lineno
            if len(row) != width:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) > width and process_at is not None:
                    # an unquoted process name with commas: its cells run to the rest
                    extra = len(row) - width
                    row[process_at : process_at + extra + 1] = [
                        ", ".join(row[process_at : process_at + extra + 1])
                    ]
                else:
                    raise InputProblem(f"{len(row)} cells, the header has {width}")
            key = self.identity_key(row, apps)
            adds = self.series.get(key)
            if adds is None:
                adds = self.series[key] = self.recorders(row, apps, util_at is not None)
            if time_at is not None:
                when = parse_time(row[time_at])
            else:
                if self.seen.get(key) == self.block:
                    self.block += 1
                self.seen[key] = self.block
                when = self.block * UNTIMESTAMPED_STEP
            adds[0](when, _number(row[self.memory_at], self.fields[self.memory_at]))
            self.samples += 1
            if util_at is not None:
                text = row[util_at]
                if text.strip() in NOT_AVAILABLE:
                    self.skipped += 1
                else:
                    adds[1](when, _number(text, "utilization.gpu"))
                    self.samples += 1
            if progress is not None and not self.samples & mask:
                progress(self.samples)

    def identity_key(self, row: list[str], apps: bool) -> tuple:
        if apps:
            return (row[self.at["gpu_uuid"]], row[self.at["pid"]], self.cell(row, "process_name"))
        return (self.cell(row, "uuid"), self.cell(row, "index"))

    def cell(self, row: list[str], field: str) -> str:
        at = self.at.get(field)
        return row[at].strip() if at is not None else ""

    def recorders(self, row: list[str], apps: bool, compute: bool) -> tuple:
        model = self.cell(row, "gpu_name" if apps else "name") or self.options.gpu_model
        if not model:
            raise InputProblem(
                f"no GPU model: add {'gpu_name' if apps else 'name'} to the query or give "
                "--gpu-model"
            )
        if apps:
            uuid, pid, process = (
                row[self.at["gpu_uuid"]].strip(),
                *self.identity_key(row, True)[1:],
            )
            if not pid.strip().isdigit():
                raise InputProblem(f"pid {shown(pid)} is not a process id")
            ident = SeriesIdentity(
                self.host,
                "",
                uuid,
                model,
                "",
                "",
                self.host,
                f"{process or 'pid'}[{pid.strip()}]",
                "",
            )
        else:
            uuid, index = self.identity_key(row, False)
            if index and not index.isdigit():
                raise InputProblem(f"index {shown(index)} is not a GPU index")
            ident = SeriesIdentity(self.host, index, uuid, model, "", "", "", "", "")
        for value in (ident.uuid, ident.pod, ident.model):
            problem = bad_name(value)
            if problem:
                raise InputProblem(problem)
        where = f"{self.name}: line {self.lineno}"
        memory = self.collector.series(ident, MEMORY, where).add
        util = self.collector.series(ident, GPU_UTIL, where).add if compute else None
        return memory, util


def _number(text: str, field: str) -> float:
    """``7234 MiB`` or ``7234`` -> 7234.0; a missing value is an error."""
    text = text.strip()
    if not text or text in NOT_AVAILABLE:
        raise InputProblem(f"{field} is missing ({shown(text) if text else 'an empty cell'})")
    return float(text.split(" ", 1)[0])


class _TimeParser:
    """nvidia-smi's ``2026/08/17 10:00:00.000`` (local time, taken as UTC: only differences
    matter) as seconds; the last text is cached, every GPU of one block repeats it."""

    def __init__(self) -> None:
        self.text = ""
        self.value = 0.0

    def __call__(self, text: str) -> float:
        if text != self.text:
            when = datetime.datetime.strptime(text.strip(), _TIME_FORMAT)
            self.value = when.replace(tzinfo=datetime.timezone.utc).timestamp()
            self.text = text
        return self.value
