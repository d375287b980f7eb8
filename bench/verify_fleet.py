"""`gpuprov verify --kubeconfig` at fleet size: N kwok Nodes that match a generated plan, against
kubectl's own `get nodes` of the same cluster as the floor.

    python bench/verify_fleet.py [--nodes 5000] [--drift 50] [--images 0] [--repeat 5]

Starts the lab's control plane (etcd + kube-apiserver on 127.0.0.1) and kwok, writes
``gpuprov_lab.fleet``'s inventory of N hosts (the three mode groups, as bench/plan_scale.py
plans them), creates a Node per planned host showing exactly its plan (labels, taints,
allocatable; ``--images`` entries of ``status.images`` each for a kubelet's Node size), and waits
until kwok has made them all Ready. Then, in rounds so that machine noise falls on all alike:

- **floor**: ``kubectl get nodes`` (the server-side table), ``kubectl get nodes -o json``, and
  one of verify's pages alone (``kubectl get --raw '/api/v1/nodes?limit=500'``), each with
  kubectl's own CPU and peak RSS;
- **verify**: ``gpuprov verify INVENTORY --kubeconfig K --cluster-only --format json``, which
  must exit 0; its own CPU and peak RSS (read at its exit) apart from its kubectl calls';
- **phases**, in this process: loading and planning the inventory, the node list
  (``Kubectl.nodes``), the comparison, the table;
- **list variants**, each in a fresh interpreter: pages of 250, 500 and 1,000, one unpaged
  call, and ``kubectl get nodes -o json`` kept whole (what verify did before), with the CPU and
  the peak RSS each adds to the controller.

Then ``--drift`` nodes drift, three in five of them in pool shared (``status.allocatable``
lowered through the status subresource, as a kubelet whose device plugin lost GPUs reports it)
and the rest in pool mig (their ``gpuprov.io/pool`` label removed): verify must exit 1, name
exactly those nodes in its JSON, and its table must show two repeated findings. The drifted
rounds are timed as well. Prints tables and the drifted table's output; writes every sample
to bench/results/verify_fleet.json. Ends everything it started and removes its files.

Each fake node's Lease is renewed every ``--lease-seconds / 4`` (600 s by default: kubelet's 40 s
renews 500 Leases a second at 5,000 nodes, half of this 2-core machine, bench/kwok_nodes.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuprov_lab import consumer, fleet, kubebuild, kwok
from gpuprov_lab.controlplane import ControlPlane
from tabulate import tabulate

from gpuprov.cli.plan import load_plan
from gpuprov.cli.verify import report_text, verify_report
from gpuprov.controller.kube.cluster_verify import ClusterCheck
from gpuprov.core.cluster.compare import compare_nodes

RESULTS = Path(__file__).parent / "results" / "verify_fleet.json"
# Peak RSS is read as VmHWM of /proc/self/status, never as getrusage's ru_maxrss: Linux keeps
# ru_maxrss across fork and exec, so a process started by a big one (this bench holds 5,000
# Nodes) reports its parent's size.
#
# The gpuprov CLI, reporting its own CPU seconds and peak RSS at exit (its kubectl calls apart).
_CLI = """\
import atexit, json, os, resource, sys
def report():
    own = resource.getrusage(resource.RUSAGE_SELF)
    peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
    with open(os.environ["BENCH_RUSAGE"], "w") as f:
        json.dump({"cpu_s": own.ru_utime + own.ru_stime, "rss_mib": peak}, f)
atexit.register(report)
sys.argv[0] = "gpuprov"
from gpuprov.cli import main
main()
"""
# One way of reading the node list, in a fresh interpreter: its CPU seconds and peak RSS above
# what the imports take, and its kubectl calls' CPU (argv: kubeconfig, a page size or "json").
_LIST = """\
import json, resource, sys, time
from gpuprov.controller.kube.kubectl import Kubectl
def status(field):
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0]) / 1024
client, variant, base = Kubectl(sys.argv[1]), sys.argv[2], status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak RSS starts again from here (proc(5), clear_refs)
started, cpu = time.perf_counter(), time.process_time()
if variant == "json":  # what verify did before: one `kubectl get nodes -o json`, kept whole
    listed = json.loads(client.run("get", "nodes", "-o", "json").stdout)
    nodes = {item["metadata"]["name"]: item for item in listed["items"]}
else:
    nodes = client.nodes(page=int(variant))
kubectl = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
                  "rss_mib": status("VmHWM") - base, "nodes": len(nodes),
                  "kubectl_cpu_s": kubectl.ru_utime + kubectl.ru_stime}))
"""
# kubectl (argv) started by a small interpreter, so that its ru_maxrss is kubectl's own; its
# wall time, CPU and peak go to stderr's last line.
_KUBECTL = """\
import json, resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.run(sys.argv[1:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "rss_mib": usage.ru_maxrss / 1024}), file=sys.stderr)
sys.exit(code)
"""
# How verify could read the list: pages of 250, 500 (its choice), 1,000, one unpaged call
# (limit=0), and kubectl's decoded `get nodes -o json`.
LIST_VARIANTS = ("250", "500", "1000", "0", "json")
SHARED_RESOURCE = "nvidia.com/gpu.shared"


def children_cpu() -> float:
    """CPU seconds of every child this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``argv``: its wall time, exit code, output, and the CPU seconds of it and the
    children it waited for (kubectl's, for verify)."""
    before, started = children_cpu(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": children_cpu() - before,
        "rc": done.returncode,
        "out": done.stdout,
        "err": done.stderr,
    }


def verify(inventory: Path, kubeconfig: Path, fmt: str, workdir: Path) -> dict:
    rusage = workdir / "rusage.json"
    env = {**os.environ, "BENCH_RUSAGE": str(rusage)}
    argv = [sys.executable, "-c", _CLI, "verify", str(inventory), "--kubeconfig", str(kubeconfig)]
    result = run([*argv, "--cluster-only", "--format", fmt], env)
    own = json.loads(rusage.read_text())
    result["own_cpu_s"] = own["cpu_s"]
    result["own_rss_mib"] = own["rss_mib"]
    result["kubectl_cpu_s"] = result["cpu_s"] - own["cpu_s"]
    return result


def phases(inventory: Path, kubeconfig: Path) -> dict[str, float]:
    """Wall and CPU seconds of each step of verify, in this process (the list's kubectl calls
    apart)."""
    out: dict[str, float] = {}

    def step(name: str, work):
        wall, cpu, kubectl = time.perf_counter(), time.process_time(), children_cpu()
        result = work()
        out[f"{name}_s"] = time.perf_counter() - wall
        out[f"{name}_cpu_s"] = time.process_time() - cpu
        if name == "list":
            out["list_kubectl_cpu_s"] = children_cpu() - kubectl
        return result

    _, cluster = step("load_and_plan", lambda: load_plan(str(inventory), ()))
    check = step("render", lambda: ClusterCheck(str(kubeconfig), cluster))
    nodes = step("list", check.client.nodes)
    results = step("compare", lambda: compare_nodes(check.plans, check.wanted, nodes))
    pools = {p.name: p.mode for p in cluster.hosts}
    step(
        "report",
        lambda: (
            report_text(results, pools, check.node_names()),
            json.dumps(verify_report(results)),
        ),
    )
    return out


def list_variants(kubeconfig: Path) -> dict[str, dict]:
    out = {}
    for variant in LIST_VARIANTS:
        done = subprocess.run(
            [sys.executable, "-c", _LIST, str(kubeconfig), variant],
            capture_output=True,
            text=True,
            check=True,
        )
        out[variant] = json.loads(done.stdout)
    return out


FLOORS = {
    "get_nodes": ("get", "nodes"),
    "get_nodes_json": ("get", "nodes", "-o", "json"),
    "get_raw_page": ("get", "--raw", "/api/v1/nodes?limit=500"),  # one of verify's pages
}


def floor(kubectl: str, kubeconfig: Path, args: tuple[str, ...]) -> dict:
    """kubectl's own wall, CPU and peak RSS for ``args``."""
    done = run([sys.executable, "-c", _KUBECTL, kubectl, f"--kubeconfig={kubeconfig}", *args])
    assert done["rc"] == 0, done["err"]
    return {**json.loads(done["err"].splitlines()[-1]), "bytes": len(done["out"])}


def round_(kubectl: str, inventory: Path, kubeconfig: Path, workdir: Path, fmt: str) -> dict:
    sample = {name: floor(kubectl, kubeconfig, args) for name, args in FLOORS.items()}
    sample["verify"] = verify(inventory, kubeconfig, fmt, workdir)
    sample["phases"] = phases(inventory, kubeconfig)
    sample["json_bytes"] = sample["get_nodes_json"]["bytes"]
    return sample


def medians(samples: list[dict]) -> dict:
    def med(path):
        values = []
        for s in samples:
            for key in path:
                s = s[key]
            values.append(s)
        return statistics.median(values)

    keys = ("wall_s", "cpu_s", "rss_mib")
    out = {f"{n}_{k}": med((n, k)) for n in FLOORS for k in keys}
    for key in ("wall_s", "cpu_s", "own_cpu_s", "kubectl_cpu_s", "own_rss_mib"):
        out[f"verify_{key}"] = med(("verify", key))
    for key in samples[0]["phases"]:
        out[key] = med(("phases", key))
    out["json_mib"] = samples[0]["json_bytes"] / 2**20
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--drift", type=int, default=50)
    parser.add_argument("--images", type=int, default=0, help="status.images entries per node")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lease-seconds", type=int, default=600)
    args = parser.parse_args()
    kwok.ensure()
    binaries = kubebuild.ensure()
    kubectl = str(binaries["kubectl"])
    os.environ["PATH"] = f"{binaries['kubectl'].parent}{os.pathsep}{os.environ['PATH']}"
    workdir = Path(tempfile.mkdtemp(prefix="gpuprov-bench-fleet-"))
    plane = ControlPlane(workdir / "kube", "127.0.0.1", None)
    plane.start(binaries)
    kubeconfig = plane.admin_kubeconfig
    try:
        kwok.start(kubeconfig, workdir / "kwok", lease_seconds=args.lease_seconds)
        inventory = fleet.write_inventory(workdir, args.nodes)
        _, cluster = load_plan(str(inventory), ())
        nodes = fleet.nodes(cluster, args.images)
        started = time.monotonic()
        fleet.create(kubeconfig, nodes)
        created = time.monotonic() - started
        while kwok.ready_nodes(kubeconfig)[0] < args.nodes:
            time.sleep(5)
        ready = time.monotonic() - started
        print(
            f"{args.nodes} nodes created in {created:.0f} s, Ready after {ready:.0f} s", flush=True
        )

        clean = [
            round_(kubectl, inventory, kubeconfig, workdir, "json") for _ in range(args.repeat)
        ]
        for sample in clean:
            assert sample["verify"]["rc"] == 0, sample["verify"]["out"][-2000:]
            sample["verify"].pop("out")
        lists = [list_variants(kubeconfig) for _ in range(args.repeat)]

        shared = [h.name for h in cluster.hosts if h.mode == "shared"]
        mig = [h.name for h in cluster.hosts if h.mode == "mig"]
        in_shared = args.drift * 3 // 5
        lowered, unlabelled = shared[:in_shared], mig[: args.drift - in_shared]
        planned = cluster.host(lowered[0]).resources[SHARED_RESOURCE]
        fleet.set_allocatable(kubeconfig, lowered, SHARED_RESOURCE, str(planned - 4))
        fleet.remove_label(kubeconfig, unlabelled, "gpuprov.io/pool")
        drifted = verify(inventory, kubeconfig, "json", workdir)
        assert drifted["rc"] == 1, drifted["err"]
        hosts = json.loads(drifted["out"])["hosts"]
        named = {h["name"] for h in hosts if h["status"] != "ok"}
        assert named == set(lowered) | set(unlabelled), sorted(named ^ {*lowered, *unlabelled})
        assert len(hosts) == args.nodes
        drift_rounds = [
            round_(kubectl, inventory, kubeconfig, workdir, "table") for _ in range(args.repeat)
        ]
        table_output = drift_rounds[0]["verify"]["out"]
        repeats = [
            line
            for line in table_output.splitlines()
            if line.startswith("pool ") and ": expected" in line
        ]
        assert len(repeats) == 2, table_output
        assert repeats[0].startswith(f"pool shared, {len(lowered)} hosts: kube-allocatable"), (
            repeats
        )
        assert repeats[1].startswith(f"pool mig, {len(unlabelled)} hosts: kube-label"), repeats
        for sample in drift_rounds:
            assert sample["verify"]["rc"] == 1
            sample["verify"].pop("out")
    finally:
        consumer.stop(workdir / "kwok")
        plane.stop()
        shutil.rmtree(workdir)  # etcd's data: 60-330 MiB

    summary = {"clean": medians(clean), "drift": medians(drift_rounds)}
    rows = []
    for label, m in summary.items():
        rows += [
            [
                f"{label}: kubectl {' '.join(args)}",
                f"{m[f'{name}_wall_s']:.2f}",
                f"{m[f'{name}_cpu_s']:.2f}",
                f"{m[f'{name}_rss_mib']:.0f}",
            ]
            for name, args in FLOORS.items()
        ]
        rows += [
            [
                f"{label}: gpuprov verify --cluster-only",
                f"{m['verify_wall_s']:.2f}",
                f"{m['verify_cpu_s']:.2f} ({m['verify_own_cpu_s']:.2f} own + {m['verify_kubectl_cpu_s']:.2f} kubectl)",
                f"{m['verify_own_rss_mib']:.0f}",
            ],
        ]
    print(
        tabulate(
            rows,
            headers=[
                f"{args.nodes} nodes, median of {args.repeat}",
                "wall s",
                "CPU s",
                "peak RSS MiB",
            ],
            disable_numparse=True,
        )
    )
    m = summary["clean"]
    steps = ", ".join(
        f"{name} {m[f'{key}_s']:.2f} ({m[f'{key}_cpu_s']:.2f})"
        for name, key in [
            ("load + plan", "load_and_plan"),
            ("render", "render"),
            ("list", "list"),
            ("compare", "compare"),
            ("report", "report"),
        ]
    )
    print(
        f"verify's steps, wall s (CPU s): {steps}; the list's kubectl calls "
        f"{m['list_kubectl_cpu_s']:.2f} CPU s; `kubectl get nodes -o json` prints "
        f"{m['json_mib']:.1f} MiB"
    )
    variants = {
        v: {k: statistics.median(sample[v][k] for sample in lists) for k in lists[0][v]}
        for v in LIST_VARIANTS
    }
    print(
        tabulate(
            [
                [
                    "kubectl get nodes -o json, kept whole"
                    if v == "json"
                    else "one unpaged call (limit=0)"
                    if v == "0"
                    else f"pages of {v}",
                    f"{m['wall_s']:.2f}",
                    f"{m['cpu_s']:.2f}",
                    f"{m['rss_mib']:.0f}",
                    f"{m['kubectl_cpu_s']:.2f}",
                ]
                for v, m in variants.items()
            ],
            headers=[
                "reading the node list",
                "wall s",
                "own CPU s",
                "own peak RSS MiB (above imports)",
                "kubectl CPU s",
            ],
            disable_numparse=True,
        )
    )
    print(f"\nverify's table with {args.drift} nodes drifted:\n{table_output}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "nodes": args.nodes,
                "drift": args.drift,
                "images": args.images,
                "repeat": args.repeat,
                "lease_seconds": args.lease_seconds,
                "created_s": created,
                "ready_s": ready,
                "medians": summary,
                "list_variants": variants,
                "list_variant_samples": lists,
                "clean": clean,
                "drifted": drift_rounds,
                "drifted_table": table_output,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
