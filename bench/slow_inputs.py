"""Inputs that are not wrong, only large: how long gpuprov takes on them (issue #26).

    python bench/slow_inputs.py [--foreign-keys 10000] [--configs 20000] [--repeat 3]

- ``plan`` and ``plan --strict`` of a 3-host inventory whose ``group_data/all.py`` sets that
  many keys of other tools (Kubespray-like names, none a near miss of a gpuprov key: every one
  is compared with the registry for a suggestion);
- ``mig import`` of one config out of a mig-parted file holding that many configs.

Each is the whole CLI run (a new process, as a user runs it), median of ``--repeat``, wall and
CPU (the CPU time is what a shared machine's other work does not inflate); ``plan --strict``
exits 2 (every foreign key refused), the others 0. Prints a table and writes
bench/results/slow_inputs.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

RESULTS = Path(__file__).resolve().parent / "results"
WORDS = ["kube", "etcd", "calico", "containerd", "dns", "ingress", "metrics", "proxy", "node"]


def foreign_inventory(directory: Path, keys: int) -> Path:
    """Three hosts of three kinds, and ``keys`` keys of other tools in ``group_data/all.py``."""
    (directory / "group_data").mkdir()
    lines = [f"{WORDS[n % len(WORDS)]}_{'x' * (n % 17)}setting_{n} = {n}" for n in range(keys)]
    (directory / "group_data" / "all.py").write_text("\n".join(lines) + "\n")
    inventory = directory / "inventory.py"
    inventory.write_text(
        "shared = (['a1'], {'gpu_model': 'A100-80GB', 'gpu_count': 8, "
        "'time_slicing_replicas': 4})\n"
        "mig = (['h1'], {'gpu_model': 'H100-80GB', 'gpu_count': 8, 'mig_layout': {'7g.80gb': 1}})\n"
        "whole_card = (['w1'], {'gpu_model': 'H200-141GB', 'gpu_count': 4})\n"
    )
    return inventory


def parted_file(directory: Path, configs: int) -> Path:
    lines = ["version: v1", "mig-configs:"]
    for n in range(configs):
        lines += [
            f"  c{n}:",
            "    - devices: all",
            "      mig-enabled: true",
            "      mig-devices: {1g.10gb: 7}",
        ]
    path = directory / "parted.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def timed(argv: list[str], repeat: int, code: int) -> tuple[float, float]:
    """Median wall and CPU seconds (the process's user + system time: what other work on a
    shared machine does not inflate) of ``gpuprov ARGV``, which must exit ``code``."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "gpuprov", *argv], capture_output=True, text=True
        )
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        assert result.returncode == code, (argv, result.returncode, result.stderr[-500:])
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--foreign-keys", type=int, default=10_000)
    parser.add_argument("--configs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inventory = foreign_inventory(Path(tmp), args.foreign_keys)
        parted = parted_file(Path(tmp), args.configs)
        rows = {
            f"plan, {args.foreign_keys} foreign keys": timed(
                ["plan", str(inventory)], args.repeat, 0
            ),
            f"plan --strict, {args.foreign_keys} foreign keys": timed(
                ["plan", "--strict", str(inventory)], args.repeat, 2
            ),
            f"mig import, {args.configs} configs": timed(
                ["mig", "import", str(parted), "--config", "c7", "--model", "H100-80GB"],
                args.repeat,
                0,
            ),
            "mig import, 1 config (start-up)": timed(
                ["mig", "import", str(parted_file(Path(tmp), 1)), "--model", "H100-80GB"],
                args.repeat,
                0,
            ),
        }
    table = [[k, f"{wall:.2f} s", f"{cpu:.2f} s"] for k, (wall, cpu) in rows.items()]
    print(tabulate(table, ["input", "median wall", "median CPU"]))
    RESULTS.mkdir(exist_ok=True)
    document = {**vars(args), "seconds": {k: {"wall": w, "cpu": c} for k, (w, c) in rows.items()}}
    (RESULTS / "slow_inputs.json").write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
