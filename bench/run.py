"""gpuprov against the SSH round-trip floor, on the lab: one command, a table, a JSON file.

    sudo .venv/bin/python bench/run.py                  # 1, 4 and 16 lab hosts, 5 runs each
    sudo .venv/bin/python bench/run.py --hosts 1,4 --repeat 5 --plan-hosts 10000
    sudo .venv/bin/python bench/run.py --hosts 16,32 --repeat 3 --plan-hosts 0

For each lab size the harness starts the lab (`gpuprov lab up --hosts N`), deploys it once
(the first deploy, every host at once, as an operator would run it), then runs in rounds, so that machine noise hits all three alike:
- floor: `pyinfra -y inventories/lab.py exec -- true` (connect + one command per host);
- verify: `gpuprov verify inventories/lab.py`;
- no-op: `pyinfra -y inventories/lab.py deploys/gpu_node.py` on the converged hosts.
It then runs the no-op and verify once more under bench/counted.py, which counts each host's
remote commands and the operations that changed something, and takes the lab down. Last come
NVML initialisations per probe and per MIG apply (bench/nvml_inits.py), the probe's added CPU
time for GPU health (bench/probe_health.py) and the planner at 10,000 hosts
(bench/plan_scale.py). Medians; ratios to the floor of the same lab size.

Writes bench/results/run.json (every sample) and bench/results/logs/ (the last output of each
step). Needs root and a lab that is down: a lab someone else started is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
LOGS = RESULTS / "logs"
INVENTORY = "inventories/lab.py"
DEPLOY = "deploys/gpu_node.py"

# Targets of the performance issue: ratios to the floor, and 16 hosts against 1.
VERIFY_MAX_RATIO = 1.5
NOOP_MAX_RATIO = 3.0
SCALING_MAX_RATIO = 2.0
FLOOR = [str(BIN / "pyinfra"), "-y", INVENTORY, "exec", "--", "true"]
NOOP = [str(BIN / "pyinfra"), "-y", INVENTORY, DEPLOY]
VERIFY = [str(BIN / "gpuprov"), "verify", INVENTORY]


class BenchError(Exception):
    """The benchmark cannot go on (the message says why and what to do)."""


def timed(name: str, argv: Sequence[str], timeout: float = 300) -> float:
    """Run ``argv`` in the repository; its wall time. Fails on a non-zero exit."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        result = subprocess.run(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise BenchError(f"`{' '.join(argv)}` exited {result.returncode} ({log}):\n{tail}")
    return seconds


def lab_state() -> str:
    out = subprocess.run(
        [str(BIN / "gpuprov"), "lab", "status", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)["state"]


def counted(name: str, argv: Sequence[str]) -> dict[str, Any]:
    """Run ``argv`` (pyinfra or gpuprov, by its path) under bench/counted.py; what it counted."""
    out = LOGS / f"{name}.json"
    program = Path(argv[0]).name
    timed(name, [sys.executable, "bench/counted.py", str(out), program, *argv[1:]])
    hosts = json.loads(out.read_text())["hosts"]
    return {
        "commands_per_host": sorted({len(h["commands"]) for h in hosts.values()}),
        "uploads": sum(len(h["uploads"]) for h in hosts.values()),
        "operations": sum(h.get("operations", 0) for h in hosts.values()),
        "changed": sum(h.get("changed", 0) for h in hosts.values()),
        "per_host": hosts,
    }


def measure_lab(hosts: int, repeat: int) -> dict[str, Any]:
    """Everything measured on a lab of ``hosts`` hosts; the lab is down again afterwards."""
    if lab_state() != "down":
        raise BenchError(
            "a lab is already running and this benchmark did not start it; it is left alone. "
            "When its owner is done (`gpuprov lab down`), run the benchmark again."
        )
    result: dict[str, Any] = {"hosts": hosts}
    print(f"\n== {hosts} lab host(s)", file=sys.stderr, flush=True)
    up = [str(BIN / "gpuprov"), "lab", "up", "--hosts", str(hosts)]
    try:
        result["lab_up_s"] = timed(f"lab-up-{hosts}", up)
    except BenchError as e:
        # 16 systemd hosts booting at once on 2 cores once left one without an SSH answer
        # after the lab's 90 s; a failed `up` has taken its hosts down, so start once more.
        print(f"   lab up failed, starting it once more: {e}", file=sys.stderr, flush=True)
        result["lab_up_retried"] = True
        result["lab_up_s"] = timed(f"lab-up-{hosts}", up)
    try:
        result["first_deploy_s"] = timed(f"first-deploy-{hosts}", NOOP, timeout=900)
        print(f"   first deploy {result['first_deploy_s']:.1f} s", file=sys.stderr, flush=True)
        samples: dict[str, list[float]] = {"floor": [], "verify": [], "noop": []}
        for i in range(repeat):
            for kind, argv in (("floor", FLOOR), ("verify", VERIFY), ("noop", NOOP)):
                samples[kind].append(timed(f"{kind}-{hosts}", argv))
            print(
                f"   round {i + 1}/{repeat}: "
                + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in samples.items()),
                file=sys.stderr,
                flush=True,
            )
        result["samples"] = samples
        result["median"] = {k: statistics.median(v) for k, v in samples.items()}
        result["counted"] = {
            "floor": counted(f"counted-floor-{hosts}", FLOOR),
            "verify": counted(f"counted-verify-{hosts}", VERIFY),
            "noop": counted(f"counted-noop-{hosts}", NOOP),
        }
    finally:
        timed(f"lab-down-{hosts}", [str(BIN / "gpuprov"), "lab", "down"])
    return result


def plan_scale(hosts: int, repeat: int) -> dict[str, Any]:
    timed(
        "plan-scale",
        [sys.executable, "bench/plan_scale.py", "--hosts", str(hosts), "--repeat", str(repeat)],
        timeout=600,
    )
    return json.loads((RESULTS / "plan_scale.json").read_text())


def nvml_inits() -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "bench/nvml_inits.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def probe_health() -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "bench/probe_health.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def report(
    labs: list[dict[str, Any]],
    nvml: dict[str, Any],
    plan: dict[str, Any] | None,
    health: dict[str, Any] | None = None,
) -> str:
    rows = []
    for lab in labs:
        m, c = lab["median"], lab["counted"]
        rows.append(
            [
                lab["hosts"],
                f"{m['floor']:.2f}",
                f"{m['verify']:.2f}",
                f"{m['verify'] / m['floor']:.2f}x",
                f"{m['noop']:.2f}",
                f"{m['noop'] / m['floor']:.2f}x",
                "/".join(map(str, c["verify"]["commands_per_host"])),
                "/".join(map(str, c["noop"]["commands_per_host"])),
                f"{c['noop']['operations']}/{c['noop']['changed']}",
                f"{lab['first_deploy_s']:.1f} ({lab['first_deploy_s'] / lab['hosts']:.1f}/host)",
            ]
        )
    lines = [
        tabulate(
            rows,
            headers=[
                "hosts",
                "floor s",
                "verify s",
                f"verify/floor (<= {VERIFY_MAX_RATIO})",
                "no-op s",
                f"no-op/floor (<= {NOOP_MAX_RATIO})",
                "cmds/host verify",
                "cmds/host no-op",
                "no-op ops/changed",
                "first deploy s",
            ],
        )
    ]
    by_hosts = {lab["hosts"]: lab["median"] for lab in labs}
    if len(by_hosts) > 1:
        small, big = min(by_hosts), max(by_hosts)
        lines.append("")
        for kind in ("floor", "verify", "noop"):
            ratio = by_hosts[big][kind] / by_hosts[small][kind]
            target = "" if kind == "floor" else f" (target <= {SCALING_MAX_RATIO})"
            lines.append(f"{kind}: {big} hosts / {small} host(s) = {ratio:.2f}x{target}")
    lines.append("")
    lines.append(
        "NVML: "
        + "; ".join(
            f"{what}: {n['nvml_inits']} init, {n['nvml_calls']} calls" for what, n in nvml.items()
        )
    )
    if health is not None:
        lines.append(
            f"GPU health in the probe ({health['host']}): "
            f"+{health['added_cpu_s'] * 1000:.0f} ms CPU, "
            f"{health['nvml_calls']['probe --health'] - health['nvml_calls']['probe']} NVML calls"
        )
    if plan is not None:
        lines.append(
            f"plan: {plan['hosts']} hosts, `gpuprov plan` {plan['cli_median_s']:.2f} s "
            f"(pyinfra inventory load {plan['load_median_s']:.2f} s, "
            f"plan build {plan['plan_median_s']:.2f} s)"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,4,16", help="lab sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each kind")
    parser.add_argument("--plan-hosts", type=int, default=10_000, help="0 skips the planner")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("error: the lab needs root; run this as root", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        labs = [measure_lab(int(n), args.repeat) for n in args.hosts.split(",")]
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    nvml = nvml_inits()
    health = probe_health()
    plan = plan_scale(args.plan_hosts, args.repeat) if args.plan_hosts else None
    document = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "kernel": os.uname().release,
        },
        "repeat": args.repeat,
        "labs": labs,
        "nvml": nvml,
        "probe_health": health,
        "plan": plan,
        "total_s": time.perf_counter() - started,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "run.json").write_text(json.dumps(document, indent=2) + "\n")
    print(report(labs, nvml, plan, health))
    print(f"\n(bench/results/run.json; {document['total_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
