"""The probe's added CPU time for ``--health``: the agent's own probe, with and without it.

    python bench/probe_health.py            # prints a table and one JSON object on the last line

Three measurements:
- the agent bundle run as on a host (``python3 agent.pyz probe [--health]``) on a simulated
  8 x H100-80GB host, reading this machine's real ``/dev/kmsg``: CPU time (user + system) of
  the child process, median of ``--repeat`` alternating runs. The simulated driver reads its
  state file on every NVML call, so the NVML part is an upper bound of the real driver's cost;
- the kernel log read alone (``gpuprov.host.health.kernel_log.read``): on this machine's
  ``/dev/kmsg``, and on a file at the read limit (KERNEL_LOG_MAX_BYTES of kmsg records, one in a
  hundred an XID), the worst a host can cost;
- the NVML calls ``--health`` adds per probe (counted by the simulated library).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuprov_lab.sim.contract import SIM_ENV, SIM_TRACE_ENV
from gpuprov_lab.sim.libnvml import admin, preload

from gpuprov.controller.bundle import write_bundle
from gpuprov.host.agent.probe import probe
from gpuprov.host.contract import KERNEL_LOG_MAX_BYTES, KERNEL_LOG_PATH
from gpuprov.host.health import kernel_log

MODEL, COUNT = "H100-80GB", 8


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) ``argv`` used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def agent_runs(tmp: Path, repeat: int) -> dict[str, float]:
    state = tmp / "gpus.json"
    admin.create(str(state), MODEL, COUNT, seed="bench")
    agent = tmp / "agent.pyz"
    write_bundle(str(agent))
    env = preload.environment(base={**os.environ, SIM_ENV: str(state)})
    samples: dict[str, list[float]] = {"probe": [], "probe --health": []}
    base = [sys.executable, str(agent), "probe"]
    child_cpu(base, env)  # the bundle's bytecode cache, as on a host after its first probe
    for _ in range(repeat):
        samples["probe"].append(child_cpu(base, env))
        samples["probe --health"].append(child_cpu([*base, "--health"], env))
    return {name: statistics.median(values) for name, values in samples.items()}


def read_cpu(path: str, repeat: int) -> tuple[float, int]:
    """Median CPU seconds of one bounded read of ``path``, and the XIDs it found."""
    times, found = [], 0
    for _ in range(repeat):
        start = time.process_time()
        log = kernel_log.read(path)
        times.append(time.process_time() - start)
        found = len(log.xids)
    return statistics.median(times), found


def worst_case_log(tmp: Path) -> str:
    path = tmp / "kmsg-at-limit"
    lines, size, n = [], 0, 0
    while size < KERNEL_LOG_MAX_BYTES:
        if n % 100 == 0:
            message = "NVRM: Xid (PCI:0000:17:00): 79, pid=0, name=, GPU has fallen off the bus"
        else:
            message = 'audit: type=1400 audit(1700000000.000:42): apparmor="STATUS" profile'
        line = f"6,{n},{n * 1000},-;{message}\n"
        lines.append(line)
        size += len(line)
        n += 1
    path.write_text("".join(lines))
    return str(path)


def nvml_calls(tmp: Path) -> dict[str, int]:
    """NVML calls of one in-process probe without and with health (simulated library counts)."""
    state = tmp / "calls.json"
    admin.create(str(state), MODEL, COUNT, seed="bench")
    os.environ[SIM_ENV] = str(state)
    trace = tmp / "nvml.trace"
    os.environ[SIM_TRACE_ENV] = str(trace)
    preload.preload()  # pynvml's own CDLL("libnvidia-ml.so.1") is the simulated library
    out = {}
    for name, health in (("probe", False), ("probe --health", True)):
        trace.write_text("")
        with contextlib.redirect_stdout(io.StringIO()):
            probe(health=health, kernel_log_path=str(tmp / "no-kmsg"))
        out[name] = len(trace.read_text().splitlines())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs of each kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        agent = agent_runs(tmp, args.repeat)
        host_log = (
            read_cpu(KERNEL_LOG_PATH, args.repeat)
            if os.access(KERNEL_LOG_PATH, os.R_OK)
            else (None, 0)
        )
        worst = read_cpu(worst_case_log(tmp), max(3, args.repeat // 5))
        calls = nvml_calls(tmp)
    result = {
        "host": f"{COUNT} x {MODEL} (simulated driver)",
        "agent_cpu_s": agent,
        "added_cpu_s": agent["probe --health"] - agent["probe"],
        "kernel_log_cpu_s": {
            f"this machine's {KERNEL_LOG_PATH}": host_log[0],
            "16 MiB at the limit": worst[0],
        },
        "xids_in_worst_case": worst[1],
        "nvml_calls": calls,
    }
    print(
        f"agent probe CPU, median of {args.repeat}: "
        f"{agent['probe'] * 1000:.0f} ms; with --health {agent['probe --health'] * 1000:.0f} ms "
        f"(+{result['added_cpu_s'] * 1000:.0f} ms)"
    )
    if host_log[0] is not None:
        print(f"kernel log read, this machine's {KERNEL_LOG_PATH}: {host_log[0] * 1000:.1f} ms CPU")
    print(f"kernel log read, 16 MiB at the limit ({worst[1]} XIDs): {worst[0] * 1000:.0f} ms CPU")
    print(f"NVML calls per probe: {calls['probe']}; with --health {calls['probe --health']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
