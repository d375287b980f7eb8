"""How long the pure CLI commands take to start and finish, against `python -c pass`.

    .venv/bin/python bench/cli_start.py                # 15 runs of each command, interleaved
    .venv/bin/python bench/cli_start.py --repeat 31
    /work/main/.venv/bin/python bench/cli_start.py --checkout /work/main   # another checkout

Each command runs as a new process (`python -m gpuprov ...`), as a user runs it; the rounds
interleave the commands so machine noise hits all alike. Prints, per command, the median wall and
CPU time, each minus the interpreter's own start (the median of `python -c pass`), the target
(issue #26: `mig check` under 0.3 s, `plan` of the example under 0.8 s, both minus the
interpreter) and which of pyinfra, paramiko and gevent were imported. Writes bench/results/cli_start.json (every sample).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# name -> (arguments of `python -m gpuprov`, target in seconds or None)
COMMANDS = {
    "mig check": (["mig", "check", "A100-80GB", "3g.40gb=1"], 0.3),
    "mig profiles": (["mig", "profiles", "A100-80GB"], None),
    "variables": (["variables"], None),
    "plan (example)": (["plan", "inventories/example.py"], 0.8),
    "kube render (example)": (["kube", "render", "inventories/example.py", "--out", "{out}"], None),
}
HEAVY = ("pyinfra", "paramiko", "gevent")
PROBE = f"""
import runpy, sys
sys.argv = ["gpuprov", *sys.argv[1:]]
try:
    runpy.run_module("gpuprov", run_name="__main__")
except SystemExit:
    pass
print(" ".join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run: CPU time is what a busy machine inflates least."""
    start, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.decode()[-2000:]}")
    return time.perf_counter() - start, _children_cpu() - cpu


def heavy_imports(args: list[str], cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, check=True
    )
    return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--checkout",
        type=Path,
        default=ROOT,
        help="the checkout whose gpuprov runs (`python -m` imports the one in the current "
        "directory); run with that checkout's interpreter",
    )
    options = parser.parse_args()
    checkout = options.checkout.resolve()
    out = tempfile.mkdtemp(prefix="gpuprov-cli-start-")
    argvs = {"python -c pass": [sys.executable, "-c", "pass"]}
    for name, (args, _) in COMMANDS.items():
        argvs[name] = [sys.executable, "-m", "gpuprov", *(a.format(out=out) for a in args)]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in argvs}
    for argv in argvs.values():  # warm the page cache and the bytecode first
        timed(argv, checkout)
    for _ in range(options.repeat):
        for name, argv in argvs.items():
            samples[name].append(timed(argv, checkout))

    def median(name: str, which: int) -> float:
        return statistics.median(s[which] for s in samples[name])

    wall, cpu = median("python -c pass", 0), median("python -c pass", 1)
    rows = [["python -c pass", f"{wall:.3f}", "", f"{cpu:.3f}", "", "", ""]]
    for name, (args, target) in COMMANDS.items():
        rows.append(
            [
                name,
                f"{median(name, 0):.3f}",
                f"{median(name, 0) - wall:.3f}",
                f"{median(name, 1):.3f}",
                f"{median(name, 1) - cpu:.3f}",
                f"< {target}" if target else "",
                heavy_imports([a.format(out=out) for a in args], checkout) or "none",
            ]
        )
    load = os.getloadavg()[0]
    print(
        f"{options.repeat} runs each, medians in seconds, Python {sys.version.split()[0]}, "
        f"load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    headers = ["command", "wall", "- python", "CPU", "- python", "target", "heavy imports"]
    print(tabulate(rows, headers))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cli_start.json").write_text(json.dumps({"samples": samples}, indent=1) + "\n")


if __name__ == "__main__":
    main()
