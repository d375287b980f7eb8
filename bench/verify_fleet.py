"""`gpuprov verify --kubeconfig` at fleet size: N kwok Nodes that match a generated plan, against
kubectl's own `get nodes` of the same cluster as the floor.

    python bench/verify_fleet.py [--nodes 5000] [--drift 50] [--images 0] [--repeat 5]

Starts the lab's control plane (etcd + kube-apiserver on 127.0.0.1) and kwok, writes
``gpuprov_lab.fleet``'s inventory of N hosts (the three mode groups, as bench/plan_scale.py
plans them), creates a Node per planned host showing exactly its plan (labels, taints,
allocatable; ``--images`` entries of ``status.images`` each for a kubelet's Node size), and waits
until kwok has made them all Ready. Then, in rounds so that machine noise falls on all alike:

- **floor**: ``kubectl get nodes`` (the server-side table), ``kubectl get nodes -o json``;
- **verify**: ``gpuprov verify INVENTORY --kubeconfig K --cluster-only --format json``, which
  must exit 0; its own CPU and peak RSS (read at its exit) apart from its kubectl calls';
- **phases**, in this process: loading and planning the inventory, the node list
  (``Kubectl.nodes``), the comparison, the table.

Then ``--drift`` nodes drift, three in five of them in pool shared (``status.allocatable``
lowered through the status subresource, as a kubelet whose device plugin lost GPUs reports it)
and the rest in pool mig (their ``gpuprov.io/pool`` label removed): verify must exit 1, name
exactly those nodes in its JSON, and its table must show two repeated findings. The drifted
rounds are timed as well. Prints tables and the drifted table's output; writes every sample
to bench/results/verify_fleet.json. Ends everything it started.

Each fake node's Lease is renewed every ``--lease-seconds / 4`` (600 s by default: kubelet's 40 s
renews 500 Leases a second at 5,000 nodes, half of this 2-core machine, bench/kwok_nodes.py).
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

from gpuprov_lab import consumer, fleet, kubebuild, kwok
from gpuprov_lab.controlplane import ControlPlane
from tabulate import tabulate

from gpuprov.cli.plan import load_plan
from gpuprov.cli.verify import report_text, verify_report
from gpuprov.controller.kube.cluster_verify import ClusterCheck
from gpuprov.core.cluster.compare import compare_nodes

RESULTS = Path(__file__).parent / "results" / "verify_fleet.json"
# The gpuprov CLI, reporting its own CPU seconds and peak RSS at exit (its kubectl calls apart).
_CLI = """\
import atexit, json, os, resource, sys
def report():
    own = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["BENCH_RUSAGE"], "w") as f:
        json.dump({"cpu_s": own.ru_utime + own.ru_stime, "rss_mib": own.ru_maxrss / 1024}, f)
atexit.register(report)
sys.argv[0] = "gpuprov"
from gpuprov.cli import main
main()
"""
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
    """Wall seconds of each step of verify, in this process."""
    out = {}
    started = time.perf_counter()
    _, cluster = load_plan(str(inventory), ())
    out["load_and_plan_s"] = time.perf_counter() - started
    started = time.perf_counter()
    check = ClusterCheck(str(kubeconfig), cluster)
    out["render_s"] = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    before = children_cpu()
    nodes = check.client.nodes()
    out["list_s"] = time.perf_counter() - started
    out["list_own_cpu_s"] = time.process_time() - cpu
    out["list_kubectl_cpu_s"] = children_cpu() - before
    started = time.perf_counter()
    results = compare_nodes(check.plans, check.wanted, nodes)
    out["compare_s"] = time.perf_counter() - started
    started = time.perf_counter()
    report_text(results, {p.name: p.mode for p in cluster.hosts}, check.node_names())
    json.dumps(verify_report(results))
    out["report_s"] = time.perf_counter() - started
    return out


def round_(kubectl: str, inventory: Path, kubeconfig: Path, workdir: Path, fmt: str) -> dict:
    sample = {
        "get_nodes": run([kubectl, f"--kubeconfig={kubeconfig}", "get", "nodes"]),
        "get_nodes_json": run(
            [kubectl, f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "json"]
        ),
        "verify": verify(inventory, kubeconfig, fmt, workdir),
        "phases": phases(inventory, kubeconfig),
    }
    sample["json_bytes"] = len(sample["get_nodes_json"]["out"])
    for name in ("get_nodes", "get_nodes_json"):
        assert sample[name]["rc"] == 0, sample[name]["err"]
    for result in (sample["get_nodes"], sample["get_nodes_json"]):
        result.pop("out")
    return sample


def medians(samples: list[dict]) -> dict:
    def med(path):
        values = []
        for s in samples:
            for key in path:
                s = s[key]
            values.append(s)
        return statistics.median(values)

    keys = ("wall_s", "cpu_s")
    out = {f"{n}_{k}": med((n, k)) for n in ("get_nodes", "get_nodes_json") for k in keys}
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

    summary = {"clean": medians(clean), "drift": medians(drift_rounds)}
    rows = []
    for label, m in summary.items():
        rows += [
            [
                f"{label}: kubectl get nodes",
                f"{m['get_nodes_wall_s']:.2f}",
                f"{m['get_nodes_cpu_s']:.2f}",
                "",
            ],
            [
                f"{label}: kubectl get nodes -o json",
                f"{m['get_nodes_json_wall_s']:.2f}",
                f"{m['get_nodes_json_cpu_s']:.2f}",
                "",
            ],
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
    print(
        f"verify's steps (wall s): load + plan {m['load_and_plan_s']:.2f}, render {m['render_s']:.2f}, "
        f"list {m['list_s']:.2f} ({m['list_own_cpu_s']:.2f} CPU s parsing, "
        f"{m['list_kubectl_cpu_s']:.2f} kubectl), compare {m['compare_s']:.2f}, report {m['report_s']:.2f}; "
        f"the JSON list is {m['json_mib']:.1f} MiB"
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
