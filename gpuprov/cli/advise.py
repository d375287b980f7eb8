"""`gpuprov advise USAGE...`: from observed GPU usage to the inventory groups that would pack it;
`gpuprov advise --check INVENTORY USAGE...`: the usage replayed on an inventory's plan.

The edge of ``gpuprov.core.advise``: it opens the files (gzip or not, ``-`` for stdin), tells
each one's format from its content, shows progress on stderr, writes the proposed inventory
atomically, and prints the report. Exit 0 (``--check``: every workload fits), 1 (``--check``:
some do not), 2 bad input.
"""

from __future__ import annotations

import datetime
import gzip
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import click

from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.core.errors import InputError, Problem, printable
from gpuprov.host.contract import ADVISE_CHECK_SCHEMA, ADVISE_SCHEMA, BACKUP_INFIX, EXIT_DRIFT

SHARE_WITH = ("auto", "shared", "mig")
STRATEGIES = ("auto", "time-slicing", "mps")
# Seconds between two progress lines.
PROGRESS_SECONDS = 1.0


@click.command()
@click.argument("usage", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--check",
    metavar="INVENTORY",
    help="Replay USAGE on INVENTORY's plan: which workloads would not fit, how full each pool "
    "would be (exit 0 all fit, 1 some do not).",
)
@click.option(
    "--inventory",
    metavar="INVENTORY",
    help="Propose for this inventory's hosts of the usage's GPU model (names and GPU counts), "
    "not for the hosts the usage shows.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the proposed inventory here (atomically; a file it replaces is kept as "
    f"FILE{BACKUP_INFIX}TIME).",
)
@click.option(
    "--percentile",
    type=click.FloatRange(50, 100),
    default=99.0,
    show_default=True,
    help="The high percentile of memory and compute reported (and sized by with "
    "--allow-overcommit).",
)
@click.option(
    "--headroom",
    type=click.FloatRange(0, 100),
    default=10.0,
    show_default=True,
    help="Percent of memory each share keeps above a workload's peak (or percentile).",
)
@click.option(
    "--allow-overcommit",
    is_flag=True,
    help="Size shares by the percentile instead of the peak: peaks above it may run a GPU "
    "out of memory.",
)
@click.option(
    "--compute-limit",
    type=click.FloatRange(0.05, 1.0),
    default=0.8,
    show_default=True,
    help="Compute one shared GPU may carry: the sum of its workloads' mean activity (0-1).",
)
@click.option(
    "--share-with",
    type=click.Choice(SHARE_WITH),
    default="auto",
    show_default=True,
    help="How small workloads share GPUs: the way that needs the fewest GPUs, time-slicing "
    "or MPS replicas (shared), or MIG instances where a profile holds them (mig).",
)
@click.option(
    "--sharing-strategy",
    type=click.Choice(STRATEGIES),
    default="auto",
    show_default=True,
    help="For shared hosts: MPS where compute is the constraint (auto), or always one.",
)
@click.option("--gpu-model", help="The GPU model when the input does not name it.")
@click.option("--metric", help="The DCGM metric of series without __name__ (max_over_time(...)).")
@click.option(
    "--columns", help="The fields of headerless nvidia-smi CSV, as --query-gpu gave them."
)
@click.option("--host", help="The host of nvidia-smi CSV (default: the file's name).")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="A progress line on stderr (default: when stderr is a terminal).",
)
@format_option
@bad_input
def advise(
    usage: tuple[str, ...],
    check: str | None,
    inventory: str | None,
    output: str | None,
    percentile: float,
    headroom: float,
    allow_overcommit: bool,
    compute_limit: float,
    share_with: str,
    sharing_strategy: str,
    gpu_model: str | None,
    metric: str | None,
    columns: str | None,
    host: str | None,
    progress: bool | None,
    fmt: str,
) -> None:
    """Propose inventory groups for the GPU usage in USAGE files (DCGM exporter scrapes, a
    Prometheus range query's JSON or CSV, nvidia-smi CSV; gzip or not; - for stdin)."""
    from gpuprov.core.advise.demand import Sizing
    from gpuprov.core.advise.reading import ReadOptions

    if not usage:
        raise InputError([Problem("advise", "no usage file given (USAGE...)")])
    if check and (inventory or output):
        raise InputError(
            [
                Problem(
                    "advise",
                    "--check replays on its inventory: --inventory and --output do not apply",
                )
            ]
        )
    options = ReadOptions(
        gpu_model=gpu_model or "",
        metric=metric or "",
        columns=tuple(c.strip() for c in columns.split(",")) if columns else (),
        host=host or "",
    )
    sizing = Sizing(percentile, headroom, allow_overcommit, compute_limit)
    show = sys.stderr.isatty() if progress is None else progress
    observed, summaries = read_usage(usage, options, sizing.percentile, show)
    if check:
        _check(check, observed, summaries, sizing, fmt)
    else:
        _propose(observed, summaries, sizing, share_with, sharing_strategy, inventory, output, fmt)


def read_usage(paths, options, percentile: float, show_progress: bool):
    """Every file read into one collector; its statistics and each file's summary."""
    from gpuprov.core.advise import (
        formats,
        read_nvidia_smi,
        read_prometheus,
        read_range_csv,
        read_range_json,
    )
    from gpuprov.core.advise.usage import InputProblem, UsageCollector

    readers = {
        read_prometheus.FORMAT: (read_prometheus.read, "text"),
        read_range_json.FORMAT: (read_range_json.read, "binary"),
        read_range_csv.FORMAT: (read_range_csv.read, "csv"),
        read_nvidia_smi.FORMAT_GPU: (read_nvidia_smi.read, "csv"),
        read_nvidia_smi.FORMAT_APPS: (read_nvidia_smi.read, "csv"),
    }
    collector = UsageCollector()
    summaries = []
    for path in paths:
        name = "<stdin>" if path == "-" else path
        with _Opened(path) as opened:
            try:
                format_ = formats.detect(opened.head, options.columns)
            except formats.UnknownFormat as e:
                raise InputError([Problem(name, str(e))]) from None
            read, mode = readers[format_]
            if mode == "binary":
                stream = opened.stream
            else:
                newline = "" if mode == "csv" else None
                stream = io.TextIOWrapper(opened.stream, encoding="utf-8", newline=newline)
            meter = _Progress(name, opened) if show_progress else None
            try:
                summaries.append(read(stream, name, collector, options, meter))
            except (OSError, EOFError) as e:  # a truncated or corrupt gzip stream
                raise InputError([Problem(name, f"cannot read: {e}")]) from None
            except UnicodeDecodeError as e:
                line = _bad_utf8_line(path)
                where = f"line {line}: " if line else ""
                raise InputError([Problem(name, f"{where}not UTF-8 text ({e.reason})")]) from None
            finally:
                if meter:
                    meter.done()
    try:
        return collector.result(percentile), summaries
    except InputProblem as e:
        raise InputError([Problem(", ".join(paths), str(e))]) from None


def _bad_utf8_line(path: str) -> int | None:
    """The first line of ``path`` that is not UTF-8 (the decoder reads ahead of the reader, so
    the error alone does not say); None for stdin, which cannot be read again."""
    if path == "-":
        return None
    with _Opened(path) as opened:
        for number, line in enumerate(opened.stream, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return None


class _Opened:
    """A usage file opened for reading, gunzipped when it is gzip, with its first bytes."""

    def __init__(self, path: str):
        from gpuprov.core.advise.formats import GZIP_MAGIC, HEAD_BYTES

        self.name = "<stdin>" if path == "-" else path
        self.size = 0
        try:
            if path == "-":
                self.raw = sys.stdin.buffer
            else:
                self.raw = open(path, "rb")  # closed in __exit__
                self.size = os.fstat(self.raw.fileno()).st_size
        except FileNotFoundError:
            raise InputError([Problem(path, "not found")]) from None
        except OSError as e:
            raise InputError([Problem(path, f"cannot read: {e.strerror or e}")]) from None
        buffered = self.raw if hasattr(self.raw, "peek") else io.BufferedReader(self.raw)
        try:
            head = buffered.peek(HEAD_BYTES)
            self.stream = buffered
            if head[:2] == GZIP_MAGIC:
                self.stream = gzip.GzipFile(fileobj=buffered)
                head = self.stream.peek(HEAD_BYTES)
        except (OSError, EOFError) as e:
            raise InputError([Problem(path, f"cannot read: {e}")]) from None
        self.head = bytes(head[:HEAD_BYTES])

    def position(self) -> int:
        try:
            return self.raw.tell()
        except OSError:
            return 0

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc) -> None:
        if self.raw is not sys.stdin.buffer:
            self.raw.close()


class _Progress:
    """``name: 1,234,567 samples, 120 of 4,100 MB (3%)`` on stderr, at most once a second: one
    line rewritten on a terminal, a line each otherwise (only with --progress)."""

    def __init__(self, name: str, opened: _Opened):
        self.name = printable(name)
        self.opened = opened
        self.last = time.monotonic()
        self.shown = False
        self.terminal = sys.stderr.isatty()

    def __call__(self, samples: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_SECONDS:
            return
        self.last = now
        text = f"{self.name}: {samples:,} samples"
        if self.opened.size:
            done = self.opened.position()
            text += (
                f", {done // 2**20:,} of {self.opened.size // 2**20:,} MB "
                f"({100 * done // self.opened.size}%)"
            )
        click.echo(f"\r{text}\x1b[K" if self.terminal else text, err=True, nl=not self.terminal)
        self.shown = True

    def done(self) -> None:
        if self.shown and self.terminal:
            click.echo("\r\x1b[K", err=True, nl=False)


def _window(usage) -> str:
    def day(t: float) -> str:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")

    span = usage.end - usage.start
    step = f", a sample every {usage.step:g} s" if usage.step else ""
    return f"{day(usage.start)} to {day(usage.end)} UTC ({span / 86400:.1f} days{step})"


def _usage_line(usage, summaries) -> str:
    samples = sum(s.samples for s in summaries)
    names = ", ".join(printable(s.name) for s in summaries)
    return (
        f"{len(usage.workloads)} workloads on {usage.gpus_busy} of {len(usage.gpus)} "
        f"{usage.model.alias} GPUs ({len(usage.hosts)} hosts), {_window(usage)}; "
        f"{samples:,} samples from {names}"
    )


def _propose(usage, summaries, sizing, share_with, strategy, inventory, output, fmt) -> None:
    from gpuprov.core.advise import bounds as bounds_
    from gpuprov.core.advise import inventory_text, report
    from gpuprov.core.advise.proposal import propose

    hosts = _inventory_hosts(inventory, usage) if inventory else None
    proposal = propose(usage, sizing, share_with, strategy, hosts)
    mig = share_with != "shared"
    bounds = [
        bounds_.simple_bound(proposal.demands, usage.model, sizing.compute_limit),
        bounds_.lp_bound(proposal.demands, usage.model, sizing.compute_limit, mig),
    ]
    numbers = report.summary(usage, proposal, bounds)
    text = inventory_text.render(proposal, f"Usage: {_usage_line(usage, summaries)}.")
    if output:
        _write(output, text)
    if fmt == "json":
        emit_json(
            {
                "schema": ADVISE_SCHEMA,
                "inputs": [s.as_dict() for s in summaries],
                "window": {"start": usage.start, "end": usage.end, "step": usage.step},
                "model": usage.model.alias,
                "sizing": sizing.as_dict(),
                "summary": numbers,
                "hosts": [h.as_dict() for h in proposal.hosts],
                "workloads": report.workload_rows(usage, proposal),
                "inventory": text,
                "output": output,
            }
        )
        return
    _print_report(usage, summaries, proposal, numbers, sizing)
    if output:
        click.echo(
            f"\nProposed inventory written to {printable(output)}; check it with: "
            f"gpuprov plan {printable(output)}"
        )
    else:
        click.echo("\nProposed inventory (save it with --output FILE):\n")
        click.echo(text, nl=False)


def _inventory_hosts(inventory: str, usage) -> dict[str, int]:
    from gpuprov.cli.plan import load_plan

    _, plan = load_plan(inventory, ())
    hosts = {h.name: h.gpu_count for h in plan.hosts if h.gpu_model == usage.model.alias}
    if not hosts:
        raise InputError(
            [
                Problem(
                    inventory,
                    f"no host of the usage's GPU model {usage.model.alias} to propose for",
                )
            ]
        )
    return hosts


def _print_report(usage, summaries, proposal, numbers, sizing) -> None:
    from gpuprov.core.memory_budget import gib

    click.echo(f"Usage: {_usage_line(usage, summaries)}")
    gpus = numbers["gpus"]
    memory, compute = numbers["memory_per_gpu_percent"], numbers["compute_per_gpu_percent"]
    by_mode = ", ".join(f"{m} {gpus[m]}" for m in ("whole_card", "shared", "mig") if gpus[m])
    rows = [
        ["GPUs", gpus["now"], gpus["proposed"], by_mode],
        [
            "memory per GPU",
            _pc(memory["before"]),
            _pc(memory["after"]),
            f"reserved {_pc(memory['reserved_after'])}",
        ],
        [
            "compute per GPU",
            _pc(compute["before"]),
            _pc(compute["after"]),
            f"{compute['workloads_unmeasured']} workloads without a compute measure"
            if compute["workloads_unmeasured"]
            else "",
        ],
    ]
    click.echo()
    click.echo(table(rows, ["", "now", "proposed", ""]))
    parts = []
    for bound in numbers["bounds"]:
        if bound["note"]:
            parts.append(f"{bound['method']}: {bound['note']}")
        else:
            parts.append(f"{bound['gpus']} GPUs ({bound['method']})")
    gap = numbers["gap_to_bound_percent"]
    click.echo(
        f"\nLower bound: {'; '.join(parts)}. The proposal uses {gpus['proposed']}"
        + (f", {gap}% above the best bound." if gap is not None else ".")
    )
    if gpus["free_hosts"]:
        click.echo(f"Free hosts (no observed workload needs them): {', '.join(gpus['free_hosts'])}")
    host_rows = []
    for host in proposal.hosts:
        if host.free:
            continue
        what = ""
        if host.mode == "shared":
            what = f"{host.strategy} x{host.replicas}, {gib(host.share_gib * 1024)} GiB/share"
        elif host.mode == "mig":
            layouts = {}
            for gpu in host.gpus:
                text = " ".join(f"{i.profile.name}@{i.start}" for i in gpu.instances) or "(spare)"
                layouts.setdefault(text, []).append(str(gpu.index))
            what = "\n".join(f"GPU {','.join(ix)}: {t}" for t, ix in layouts.items())
        host_rows.append([host.name, host.mode, f"{host.gpus_used}/{host.gpu_count}", what])
    if host_rows:
        click.echo()
        click.echo(table(host_rows, ["host", "mode", "GPUs used", "sharing"]))
    whole = [d for d in proposal.demands if d.whole]
    if whole:
        click.echo("\nWorkloads that fit no share (whole cards):")
        for demand in whole:
            click.echo(f"  {printable(demand.name)}: {demand.whole}")
    if proposal.unplaced:
        click.echo("\nWorkloads not placed:")
        for lost in proposal.unplaced:
            click.echo(f"  {printable(lost.demand.name)}: {lost.reason}")
    where = {p.demand.name: p for p in proposal.placements}
    rows = []
    for demand in proposal.demands:
        w = demand.usage
        placement = where.get(demand.name)
        rows.append(
            [
                printable(w.name),
                w.gpus,
                gib(w.memory_peak),
                gib(w.memory_high),
                gib(demand.memory_mib),
                "-" if w.compute_mean is None else f"{w.compute_mean:.0%}",
                f"{w.duty:.0%}",
                f"{placement.host} GPU {','.join(map(str, placement.gpus))} {placement.slot}"
                if placement
                else "not placed",
            ]
        )
    click.echo()
    click.echo(
        table(
            rows,
            [
                "workload",
                "GPUs",
                "peak GiB",
                f"p{sizing.percentile:g} GiB",
                "demand GiB",
                "compute",
                "runs",
                "placed on",
            ],
        )
    )


def _pc(value) -> str:
    return "-" if value is None else f"{value:g}%"


def _check(inventory: str, usage, summaries, sizing, fmt: str) -> None:
    from gpuprov.cli.plan import load_plan, warn
    from gpuprov.core.advise.replay import replay

    _, plan = load_plan(inventory, ())
    warn(plan)
    result = replay(plan, usage, sizing)
    if fmt == "json":
        emit_json(
            {
                "schema": ADVISE_CHECK_SCHEMA,
                "inventory": inventory,
                "inputs": [s.as_dict() for s in summaries],
                "model": usage.model.alias,
                "sizing": sizing.as_dict(),
                "fits": result.fits,
                "pools": [p.as_dict() for p in result.pools],
                "misfits": [m.as_dict() for m in result.misfits],
                "placements": [p.as_dict() for p in result.placements],
                "other_hosts": list(result.other_hosts),
            }
        )
    else:
        click.echo(f"Usage: {_usage_line(usage, summaries)}")
        click.echo(f"Replayed on {printable(inventory)}'s plan ({usage.model.alias} hosts).\n")
        rows = [
            [
                p.mode,
                p.hosts,
                f"{p.gpus_used}/{p.gpus}",
                f"{p.slots_peak}/{p.slots}",
                f"{p.memory_peak_percent:.0f}%",
            ]
            for p in result.pools
        ]
        click.echo(table(rows, ["pool", "hosts", "GPUs used", "slots at peak", "memory at peak"]))
        if result.misfits:
            click.echo(f"\n{len(result.misfits)} workloads would not fit:")
            for misfit in result.misfits:
                click.echo(f"  {printable(misfit.demand.name)}: {misfit.reason}")
        else:
            click.echo(f"\nEvery one of the {len(result.placements)} workloads fits.")
        if result.other_hosts:
            click.echo(
                f"Left out (another GPU model): {', '.join(map(printable, result.other_hosts))}"
            )
    if not result.fits:
        sys.exit(EXIT_DRIFT)


def _write(path: str, text: str) -> None:
    """Write ``path`` atomically, mode 0644; a file it replaces is kept as a backup."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError([Problem(path, f"directory {directory} does not exist")])
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            if target.exists():
                stamp = time.strftime("%Y%m%dT%H%M%S")
                os.link(target, f"{target}{BACKUP_INFIX}{stamp}")
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise InputError([Problem(path, f"cannot write: {e.strerror or e}")]) from None
