"""Planner scale: `gpuprov plan` on a generated inventory of N hosts with 8 GPUs each.

    python bench/plan_scale.py [--hosts 10000] [--repeat 5]

Prints a table (wall time of the whole CLI run, of loading, of planning, time per host) and
writes bench/results/plan_scale.json. The inventory is ``gpuprov_lab.fleet``'s: hosts spread
over the three mode groups; MIG hosts use a handful of layouts and per-host overrides, as a real
fleet would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuprov_lab.fleet import write_inventory
from tabulate import tabulate

from gpuprov.controller.inventory import load
from gpuprov.core.plan import build


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_inventory(Path(tmp), args.hosts)
        cli, loading, planning = [], [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "gpuprov", "plan", str(path), "--format", "json"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            cli.append(time.perf_counter() - start)
            start = time.perf_counter()
            inventory = load(str(path))
            loading.append(time.perf_counter() - start)
            start = time.perf_counter()
            plan = build(inventory)
            planning.append(time.perf_counter() - start)
        gpus = sum(h.gpu_count for h in plan.hosts)
    result = {
        "hosts": args.hosts,
        "gpus": gpus,
        "repeat": args.repeat,
        "cli_median_s": statistics.median(cli),
        "load_median_s": statistics.median(loading),
        "plan_median_s": statistics.median(planning),
    }
    result["cli_per_host_us"] = result["cli_median_s"] / args.hosts * 1e6
    print(
        tabulate(
            [
                [
                    f"gpuprov plan --format json ({args.hosts} hosts, {gpus} GPUs)",
                    f"{result['cli_median_s']:.2f}",
                    f"{result['cli_per_host_us']:.0f}",
                ],
                ["  of which: inventory load", f"{result['load_median_s']:.2f}", ""],
                [
                    "  of which: plan build",
                    f"{result['plan_median_s']:.2f}",
                    f"{result['plan_median_s'] / args.hosts * 1e6:.0f}",
                ],
            ],
            headers=[f"step (median of {args.repeat})", "seconds", "us/host"],
        )
    )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "plan_scale.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
