"""gpuprov against the SSH round-trip floor, on the lab: one command, a table, a JSON file.

    sudo .venv/bin/python bench/run.py                  # 1, 4 and 16 lab hosts, 5 runs each
    sudo .venv/bin/python bench/run.py --hosts 1,4 --repeat 5 --plan-hosts 10000
    sudo .venv/bin/python bench/run.py --hosts 16,32 --repeat 3 --plan-hosts 0
    sudo .venv/bin/python bench/run.py --hosts 1,4 --repeat 7 --lab-only --baseline ../main

For each lab size the harness starts the lab (`gpuprov lab up --hosts N`), deploys it once
(the first deploy, every host at once, as an operator would run it), then runs in rounds, so that machine noise hits all three alike:
- floor: `pyinfra -y inventories/lab.py exec -- true` (connect + one command per host);
- verify: `gpuprov verify inventories/lab.py`;
- no-op: `pyinfra -y inventories/lab.py deploys/gpu_node.py` on the converged hosts.
Each run's controller CPU (user + system seconds of the command's process tree, from the
children's rusage; the lab hosts' own processes are not the controller's children, so they are
not in it) is kept beside its wall time; verify's CPU is compared with the floor's (issue #26:
within 1.3x at four hosts). ``--baseline DIR`` adds, to the same rounds, verify as another
checkout DIR has it (its ``gpuprov`` and ``gpuprov_lab`` first on ``PYTHONPATH``, this venv's
interpreter and packages), for a before/after measured on the same lab in the same minutes.
The checkouts' packages are byte-compiled first, as an install does. It then runs the no-op
and verify once more under bench/counted.py, which counts each host's
remote commands and the operations that changed something, and takes the lab down. Last come
NVML initialisations per probe and per MIG apply (bench/nvml_inits.py), the probe's added CPU
time for GPU health (bench/probe_health.py) and the planner at 10,000 hosts
(bench/plan_scale.py). Medians; ratios to the floor of the same lab size.

Writes bench/results/run.json (every sample) and bench/results/logs/ (the last output of each
step). Needs root and a lab that is down: a lab someone else started is never touched.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
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
VERIFY_MAX_CPU_RATIO = 1.3  # verify's controller CPU to the floor's, at four hosts
FLOOR = [str(BIN / "pyinfra"), "-y", INVENTORY, "exec", "--", "true"]
NOOP = [str(BIN / "pyinfra"), "-y", INVENTORY, DEPLOY]
VERIFY = [str(BIN / "gpuprov"), "verify", INVENTORY]


class BenchError(Exception):
    """The benchmark cannot go on (the message says why and what to do)."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(
    name: str, argv: Sequence[str], timeout: float = 300, env: dict[str, str] | None = None
) -> float:
    """Run ``argv`` in the repository; its wall time. Fails on a non-zero exit."""
    return run_timed(name, argv, timeout, env)[0]


def run_timed(
    name: str, argv: Sequence[str], timeout: float = 300, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """Run ``argv`` in the repository; its wall time and its controller CPU seconds (user +
    system of the process and every descendant it waited for: the children's rusage before
    and after, one run at a time). Fails on a non-zero exit."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    start, cpu = time.perf_counter(), _children_cpu()
    with open(log, "w") as out:
        result = subprocess.run(
            argv,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env=None if env is None else {**os.environ, **env},
        )
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise BenchError(f"`{' '.join(argv)}` exited {result.returncode} ({log}):\n{tail}")
    return seconds, cpu


def baseline_env(checkout: Path) -> dict[str, str]:
    """The environment that runs another checkout's gpuprov and gpuprov_lab with this venv."""
    for package in (checkout / "gpuprov", checkout / "lab" / "gpuprov_lab"):
        if not (package / "__init__.py").is_file():
            raise BenchError(f"--baseline {checkout}: no {package}/__init__.py")
    return {"PYTHONPATH": f"{checkout}{os.pathsep}{checkout / 'lab'}"}


def compile_checkout(checkout: Path) -> None:
    """Byte-compile a checkout's packages, as installing them does: an editable checkout under
    ``PYTHONDONTWRITEBYTECODE`` would otherwise compile gpuprov's modules on every run while
    pyinfra's come compiled from site-packages, which is not what a user's install costs."""
    for package in (checkout / "gpuprov", checkout / "lab" / "gpuprov_lab", checkout / "deploys"):
        compileall.compile_dir(package, quiet=1)


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


def measure_lab(hosts: int, repeat: int, baseline: Path | None = None) -> dict[str, Any]:
    """Everything measured on a lab of ``hosts`` hosts; the lab is down again afterwards.
    With ``baseline``, each round also runs that checkout's verify (kind ``verify-baseline``)."""
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
        kinds: list[tuple[str, list[str], dict[str, str] | None]] = [
            ("floor", FLOOR, None),
            ("verify", VERIFY, None),
            ("noop", NOOP, None),
        ]
        if baseline is not None:
            kinds.insert(2, ("verify-baseline", VERIFY, baseline_env(baseline)))
            result["baseline"] = str(baseline)
        samples: dict[str, list[float]] = {kind: [] for kind, _, _ in kinds}
        cpu: dict[str, list[float]] = {kind: [] for kind, _, _ in kinds}
        for i in range(repeat):
            for kind, argv, env in kinds:
                seconds, used = run_timed(f"{kind}-{hosts}", argv, env=env)
                samples[kind].append(seconds)
                cpu[kind].append(used)
            print(
                f"   round {i + 1}/{repeat}: "
                + ", ".join(
                    f"{k} {v[-1]:.2f} s ({cpu[k][-1]:.2f} CPU-s)" for k, v in samples.items()
                ),
                file=sys.stderr,
                flush=True,
            )
        result["samples"] = samples
        result["cpu_samples"] = cpu
        result["median"] = {k: statistics.median(v) for k, v in samples.items()}
        result["cpu_median"] = {k: statistics.median(v) for k, v in cpu.items()}
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
    nvml: dict[str, Any] | None,
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
        ),
        "",
        cpu_table(labs),
    ]
    by_hosts = {lab["hosts"]: lab["median"] for lab in labs}
    if len(by_hosts) > 1:
        small, big = min(by_hosts), max(by_hosts)
        lines.append("")
        for kind in ("floor", "verify", "noop"):
            ratio = by_hosts[big][kind] / by_hosts[small][kind]
            target = "" if kind == "floor" else f" (target <= {SCALING_MAX_RATIO})"
            lines.append(f"{kind}: {big} hosts / {small} host(s) = {ratio:.2f}x{target}")
    if nvml is not None:
        lines.append("")
        lines.append(
            "NVML: "
            + "; ".join(
                f"{what}: {n['nvml_inits']} init, {n['nvml_calls']} calls"
                for what, n in nvml.items()
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


def cpu_table(labs: list[dict[str, Any]]) -> str:
    """Controller CPU seconds per kind (median, with the range of the rounds), each to the
    floor's median; with a baseline, its verify beside this checkout's."""
    kinds = [
        k for k in ("floor", "verify", "verify-baseline", "noop") if k in labs[0]["cpu_median"]
    ]
    rows = []
    for lab in labs:
        cpu, samples = lab["cpu_median"], lab["cpu_samples"]
        row: list[Any] = [lab["hosts"]]
        for kind in kinds:
            spread = f"{min(samples[kind]):.2f}-{max(samples[kind]):.2f}"
            row.append(f"{cpu[kind]:.2f} ({spread})")
            if kind != "floor":
                row.append(f"{cpu[kind] / cpu['floor']:.2f}x")
        if "verify-baseline" in kinds:
            row.append(f"{lab['median']['verify-baseline']:.2f}")
            row.append(f"{lab['median']['verify-baseline'] / lab['median']['floor']:.2f}x")
        rows.append(row)
    headers = ["hosts", "floor CPU s"]
    for kind in kinds[1:]:
        target = f" (<= {VERIFY_MAX_CPU_RATIO} at 4)" if kind == "verify" else ""
        headers += [f"{kind} CPU s", f"{kind}/floor CPU{target}"]
    if "verify-baseline" in kinds:
        headers += ["verify-baseline s", "verify-baseline/floor"]
    return tabulate(rows, headers=headers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,4,16", help="lab sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each kind")
    parser.add_argument("--plan-hosts", type=int, default=10_000, help="0 skips the planner")
    parser.add_argument(
        "--lab-only",
        action="store_true",
        help="only the lab sizes (no NVML counts, probe health or planner)",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        type=Path,
        help="also run verify as the checkout DIR has it, in the same rounds (before/after)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("error: the lab needs root; run this as root", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        baseline = args.baseline.resolve() if args.baseline else None
        for checkout in (ROOT, baseline):
            if checkout is not None:
                compile_checkout(checkout)
        labs = [measure_lab(int(n), args.repeat, baseline) for n in args.hosts.split(",")]
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    nvml = None if args.lab_only else nvml_inits()
    health = None if args.lab_only else probe_health()
    plan = (
        plan_scale(args.plan_hosts, args.repeat) if args.plan_hosts and not args.lab_only else None
    )
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
