"""Pods in the lab: creation to Running, and what the scheduler and controller manager add to
`gpuprov lab up`. One command, a table, a JSON file.

    sudo .venv/bin/python bench/lab_pods.py                 # 3 lab ups, 5 pods per pool
    sudo .venv/bin/python bench/lab_pods.py --ups 5 --pods 9

Three measurements, on the default three-host lab (warm caches: run `gpuprov lab up` once
before, so no build is timed):
- ``lab up`` wall time, ``--ups`` times (each followed by ``lab down``), with what it reports
  of its control plane: etcd + kube-apiserver until ``/readyz``, the whole control plane's start
  (the controllers' processes, the namespace, the kubeconfigs), and how long it still waited
  for the scheduler and the controller manager (both answer ``/healthz``, namespace ``default``
  has its service account and ``kube-root-ca.crt``) once the hosts had booted;
- the resident memory (VmRSS) of each control-plane process 30 s after the last ``up``, and of
  each host's containerd and kubelet;
- after the lab's deploy and ``gpuprov kube apply``, pod creation (``kubectl create`` returned)
  to phase ``Running`` (polled every 0.2 s), one pod at a time, ``--pods`` per pool: a
  ``nvidia.com/gpu.shared`` pod on the shared host, a ``nvidia.com/mig-1g.10gb`` pod on the MIG
  host, a ``nvidia.com/gpu`` pod on the whole-card host; medians.

Writes bench/results/lab_pods.json. Needs root and a lab that is down (a lab someone else
started is never touched).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpuprov_lab import controlplane, lifecycle, procs
from gpuprov_lab.images import CANARY
from gpuprov_lab.rundir import RunDir, default_dir
from gpuprov_lab.spec import default_spec
from gpuprov_lab.testing import Lab
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
POOLS = {  # pool -> (the resource a pod asks for, the host it must land on)
    "shared": ("nvidia.com/gpu.shared", "lab-a100-01"),
    "mig": ("nvidia.com/mig-1g.10gb", "lab-h100-01"),
    "whole_card": ("nvidia.com/gpu", "lab-h200-01"),
}
NAMESPACE = "gpuprov-bench-pods"


class BenchError(Exception):
    """The benchmark cannot go on (the message says why)."""


def lab_up() -> dict[str, float]:
    """One `gpuprov lab up`: its wall time and the control plane's parts, as it reports them."""
    started = time.perf_counter()
    result = subprocess.run(
        [str(BIN / "gpuprov"), "lab", "up"], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(f"gpuprov lab up exited {result.returncode}:\n{result.stderr[-2000:]}")
    if "building" in result.stderr:
        raise BenchError("lab up built something: run it once before the benchmark (warm caches)")

    def seconds(pattern: str) -> float:
        match = re.search(pattern, result.stderr, re.M)
        return float(match.group(1)) if match else float("nan")

    return {
        "lab_up_s": wall,
        "api_server_s": seconds(r"^api server up in ([\d.]+) s"),
        "control_plane_s": seconds(r"^control plane up in ([\d.]+) s"),
        "controllers_after_hosts_s": seconds(r"^controllers ready ([\d.]+) s after the hosts"),
    }


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else None


def memory(lab: Lab) -> dict[str, Any]:
    """VmRSS (MiB) of each control-plane process, and of each host's containerd and kubelet."""
    plane = {
        c: rss_mib(procs.read(controlplane.pidfile(lab.run_dir.kube, c)))
        for c in controlplane.COMPONENTS
    }
    hosts = {}
    for name in lab.names:
        out = lab.run(name, "for p in containerd kubelet; do echo $p $(pidof -s $p); done").stdout
        row = {}
        for line in out.splitlines():
            program, _, pid = line.partition(" ")
            status = lab.run(name, f"grep VmRSS /proc/{pid}/status", check=False).stdout
            match = re.search(r"(\d+) kB", status)
            row[program] = int(match.group(1)) / 1024 if match else None
        hosts[name] = row
    return {"control_plane": plane, "hosts": hosts}


def pod_to_running(lab: Lab, pool: str, index: int) -> float:
    """Create one pod for ``pool`` and wait until it runs; seconds from create to Running."""
    resource, host = POOLS[pool]
    name = f"bench-{pool.replace('_', '-')}-{index}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {"gpuprov.io/pool": pool},
            "tolerations": [
                {"key": "gpuprov.io/pool", "operator": "Equal", "value": pool,
                 "effect": "NoSchedule"}
            ],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "c", "image": CANARY, "imagePullPolicy": "Never",
                 "command": ["sleep", "3600"], "resources": {"limits": {resource: 1}}}
            ],
        },
    }  # fmt: skip
    kubectl = [lab.kube["kubectl"], f"--kubeconfig={lab.kubeconfig}", "-n", NAMESPACE]
    started = time.perf_counter()
    subprocess.run([*kubectl, "create", "-f", "-"], input=json.dumps(pod), text=True, check=True,
                   capture_output=True)  # fmt: skip
    while True:
        got = subprocess.run(
            [*kubectl, "get", "pod", name, "-o", "jsonpath={.status.phase} {.spec.nodeName}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        if got and got[0] == "Running":
            seconds = time.perf_counter() - started
            break
        if time.perf_counter() - started > 120:
            raise BenchError(f"pod {name} not Running after 120 s: {got}")
        time.sleep(0.2)
    if got[1:] != [host]:
        raise BenchError(f"pod {name} runs on {got[1:]}, not {host}")
    subprocess.run([*kubectl, "delete", "pod", name, "--wait=true"], check=True,
                   capture_output=True)  # fmt: skip
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ups", type=int, default=3, help="lab up/down cycles (default 3)")
    parser.add_argument("--pods", type=int, default=5, help="pods per pool (default 5)")
    options = parser.parse_args()
    if lifecycle.status(RunDir(default_dir()))["state"] != "down":
        raise SystemExit("a lab is running and this benchmark did not start it: left alone")
    ups = []
    for i in range(options.ups):
        ups.append(lab_up())
        print(f"lab up {i + 1}/{options.ups}: {ups[-1]}", file=sys.stderr, flush=True)
        if i < options.ups - 1:
            lifecycle.down(RunDir(default_dir()))
    lab = Lab(RunDir(default_dir()), default_spec(3))  # the lab the last `up` left
    try:
        time.sleep(30)
        rss = memory(lab)
        lab.deploy()
        lab.kube_apply()
        lab.kubectl("create", "namespace", NAMESPACE)
        deadline = time.monotonic() + 30
        while lab.kubectl("-n", NAMESPACE, "get", "serviceaccount/default").returncode != 0:
            if time.monotonic() > deadline:
                raise BenchError(f"no default service account in {NAMESPACE}")
            time.sleep(0.5)
        lab.wait_planned_allocatable(90, "the planned resources")
        pods = {pool: [pod_to_running(lab, pool, i) for i in range(options.pods)] for pool in POOLS}
    finally:
        lab.stop()
    result = {
        "lab_up": ups,
        "lab_up_median": {k: statistics.median(u[k] for u in ups) for k in ups[0]},
        "rss_mib": rss,
        "pod_to_running_s": pods,
        "pod_to_running_median_s": {pool: statistics.median(v) for pool, v in pods.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lab_pods.json").write_text(json.dumps(result, indent=2) + "\n")
    print(tabulate([[k, f"{v:.2f}"] for k, v in result["lab_up_median"].items()],
                   ["lab up (median)", "s"]))  # fmt: skip
    print(tabulate([[p, f"{statistics.median(v):.2f}", f"{min(v):.2f}-{max(v):.2f}"]
                    for p, v in pods.items()], ["pod to Running", "median s", "range s"]))  # fmt: skip
    print(tabulate([[c, f"{m:.0f}" if m else "-"] for c, m in rss["control_plane"].items()],
                   ["process", "RSS MiB"]))  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        sys.exit(f"error: {e}")
