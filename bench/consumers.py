"""Warm start time and memory of the lab's queue and fleet consumers.

    python bench/consumers.py [--repeat 3] [--idle 30]

For each of Kueue, Volcano, system-upgrade-controller and kwok: start it against a fresh
control plane on 127.0.0.1 (``gpuprov_lab.<module>.start``: CRDs, webhook configurations,
processes, until it answers), ``--repeat`` times with warm caches, and read the resident memory
of each of its processes right after the start and after ``--idle`` seconds. Prints a table
(medians) and writes bench/results/consumers.json; ends everything it started.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from gpuprov_lab import consumer, kubebuild, kueue, kwok, upgrade_controller, volcano
from gpuprov_lab.controlplane import ControlPlane
from tabulate import tabulate

RESULTS = Path(__file__).parent / "results" / "consumers.json"
ADDRESS = "127.0.0.1"
STARTS = {
    "kueue": lambda kc, wd: kueue.start(kc, ADDRESS, wd),
    "volcano": lambda kc, wd: volcano.start(kc, ADDRESS, wd),
    "system-upgrade-controller": lambda kc, wd: upgrade_controller.start(kc, wd),
    "kwok": lambda kc, wd: kwok.start(kc, wd),
}


def measure(name: str, idle: float) -> dict:
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="gpuprov-bench-kube-")), ADDRESS, None)
    plane.start(kubebuild.binaries())
    workdir = Path(tempfile.mkdtemp(prefix=f"gpuprov-bench-{name}-"))
    try:
        started = time.monotonic()
        handle = STARTS[name](plane.admin_kubeconfig, workdir)
        seconds = time.monotonic() - started
        at_start = handle.rss_kib()
        time.sleep(idle)
        return {"start_s": seconds, "rss_kib_start": at_start, "rss_kib_idle": handle.rss_kib()}
    finally:
        consumer.stop(workdir)
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    kubebuild.ensure()
    kueue.ensure()
    kwok.ensure()
    volcano.binaries()
    upgrade_controller.binary()
    samples = {name: [measure(name, args.idle) for _ in range(args.repeat)] for name in STARTS}
    rows = []
    for name, runs in samples.items():
        for process in sorted(runs[0]["rss_kib_idle"]):
            rows.append(
                [
                    name,
                    process,
                    round(statistics.median(r["start_s"] for r in runs), 1),
                    round(statistics.median(r["rss_kib_start"][process] for r in runs) / 1024),
                    round(statistics.median(r["rss_kib_idle"][process] for r in runs) / 1024),
                ]
            )
    print(
        tabulate(
            rows,
            headers=["consumer", "process", "start s", "RSS MiB", f"RSS MiB +{args.idle:.0f} s"],
        )
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(samples, indent=2) + "\n")


if __name__ == "__main__":
    main()
