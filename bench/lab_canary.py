"""What `gpuprov verify --canary` costs in the lab: `verify --kubeconfig` with and without it.

    sudo GPUPROV_LAB_SLOT=N .venv/bin/python bench/lab_canary.py            # 3 runs of each
    sudo GPUPROV_LAB_SLOT=N .venv/bin/python bench/lab_canary.py --runs 5

On the default three-host lab (warm caches), after the lab's deploy and `gpuprov kube apply`,
once every planned resource is in allocatable: `--runs` times, interleaved, the wall time of
`gpuprov verify inventories/lab.py --kubeconfig K` and of the same with `--canary` (five canary
pods: created, scheduled, started, read back through the kubelets' pod-resources in the probe's
round trip, deleted and confirmed gone). Both must exit 0. Writes
bench/results/lab_canary.json. Needs root and a lab that is down.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from gpuprov_lab import lifecycle
from gpuprov_lab.rundir import RunDir, default_dir
from gpuprov_lab.testing import Lab
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def timed(lab: Lab, *args: str) -> float:
    started = time.monotonic()
    result = lab.verify(None, "--kubeconfig", str(lab.kubeconfig), *args)
    took = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"verify {' '.join(args)} exited {result.returncode}:\n{result.stdout}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each (default 3)")
    options = parser.parse_args()
    if lifecycle.status(RunDir(default_dir()))["state"] != "down":
        raise SystemExit("a lab is running and this benchmark did not start it: left alone")
    lab = Lab.start(hosts=3)
    try:
        lab.deploy()
        lab.kube_apply()
        lab.wait_planned_allocatable(90, "the planned resources")
        plain, canary = [], []
        for _ in range(options.runs):
            plain.append(timed(lab))
            canary.append(timed(lab, "--canary"))
        load = Path("/proc/loadavg").read_text().split()[:3]
    finally:
        lab.stop()
    result = {
        "verify_kubeconfig_s": plain,
        "verify_kubeconfig_canary_s": canary,
        "median_s": {"plain": statistics.median(plain), "canary": statistics.median(canary)},
        "loadavg_after": load,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lab_canary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        tabulate(
            [
                ["verify --kubeconfig", f"{statistics.median(plain):.1f} s", plain],
                ["verify --kubeconfig --canary", f"{statistics.median(canary):.1f} s", canary],
            ],
            ["command", "median", "runs (s)"],
        )
    )
    print(f"load average after: {' '.join(load)}", file=sys.stderr)


if __name__ == "__main__":
    main()
