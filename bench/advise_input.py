"""`gpuprov advise` input speed and memory: a week of 15-second samples of 200 GPUs.

    python bench/advise_input.py [--days 7] [--step 15] [--formats prometheus-text,...]

For each format it writes the synthetic week of tests/advise_week.py (the first article's
cluster: 200 A100-80GB, FB_USED and GR_ENGINE_ACTIVE per GPU and scrape) to a temporary
directory, runs the real command (`gpuprov advise FILE --format json`) in a child process and
reports its wall time, its CPU time, the samples it read per second of each, and its peak
resident memory (the child's ru_maxrss). With --days 1,7 it runs both lengths, so the memory
of a day and of a week can be compared: it should not grow with the samples. Results go to
bench/results/advise_input.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import advise_week  # noqa: E402  (the test helper that shapes the week)

FORMATS = ("prometheus-text", "prometheus-json", "prometheus-csv", "nvidia-smi")


def write(fmt: str, directory: Path, scrapes: int, step: float) -> list[Path]:
    cluster = advise_week.article_cluster()
    if fmt == "prometheus-text":
        path = directory / "week.prom"
        advise_week.write_prometheus(path, cluster, scrapes, step, others=False)
        return [path]
    if fmt == "prometheus-json":
        path = directory / "range.json"
        advise_week.write_range_json(path, cluster, scrapes, step)
        return [path]
    if fmt == "prometheus-csv":
        path = directory / "range.csv"
        advise_week.write_range_csv(path, cluster, scrapes, step)
        return [path]
    smi = directory / "smi"
    smi.mkdir()
    advise_week.write_nvidia_smi(smi, cluster, scrapes, step)
    return sorted(smi.iterdir())


def measure(paths: list[Path]) -> dict:
    """One child run of the command; its wall and CPU time and peak memory."""
    code = (
        "import resource, sys, time\n"
        "from gpuprov.cli import main\n"
        "t = time.perf_counter()\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(f'{wall} {u.ru_utime + u.ru_stime} {u.ru_maxrss}', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "advise", *map(str, paths), "--format", "json"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"gpuprov advise failed: {out.stderr[-2000:]}")
    wall, cpu, rss = out.stderr.strip().splitlines()[-1].split()
    report = json.loads(out.stdout)
    samples = sum(i["samples"] for i in report["inputs"])
    return {
        "samples": samples,
        "bytes": sum(p.stat().st_size for p in paths),
        "wall_s": round(float(wall), 2),
        "cpu_s": round(float(cpu), 2),
        "samples_per_wall_s": round(samples / float(wall)),
        "samples_per_cpu_s": round(samples / float(cpu)),
        "peak_rss_mib": round(int(rss) / 1024, 1),
        "workloads": len(report["workloads"]),
        "gpus_proposed": report["summary"]["gpus"]["proposed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", default="7", help="comma-separated lengths in days")
    parser.add_argument("--step", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--dir", help="where to write the inputs (default: a temporary one)")
    args = parser.parse_args()
    rows, results = [], []
    base = Path(args.dir or tempfile.mkdtemp(prefix="advise-bench-"))
    try:
        for fmt in args.formats.split(","):
            for days in (float(d) for d in args.days.split(",")):
                scrapes = int(days * 86400 / args.step) + 1
                directory = base / f"{fmt}-{days:g}d"
                directory.mkdir(parents=True, exist_ok=True)
                started = time.perf_counter()
                paths = write(fmt, directory, scrapes, args.step)
                written = time.perf_counter() - started
                result = {"format": fmt, "days": days, "gpus": 200, "step_s": args.step}
                result |= measure(paths)
                result["write_s"] = round(written, 1)
                results.append(result)
                rows.append(
                    [
                        fmt,
                        f"{days:g}",
                        f"{result['samples']:,}",
                        f"{result['bytes'] / 2**20:,.0f}",
                        result["wall_s"],
                        result["cpu_s"],
                        f"{result['samples_per_cpu_s']:,}",
                        result["peak_rss_mib"],
                    ]
                )
                shutil.rmtree(directory)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(
        tabulate(
            rows,
            [
                "format",
                "days",
                "samples",
                "MiB",
                "wall s",
                "CPU s",
                "samples/CPU s",
                "peak RSS MiB",
            ],
        )
    )
    machine = {
        "cpus": os.cpu_count(),
        "load_1m": os.getloadavg()[0],
        "python": sys.version.split()[0],
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "advise_input.json").write_text(
        json.dumps({"machine": machine, "runs": results}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
