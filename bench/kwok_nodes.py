"""Fleet size in a real API server: N kwok Nodes with GPU allocatable, created and made Ready.

    python bench/kwok_nodes.py [--nodes 5000] [--settle 60]

Starts the lab's control plane (etcd + kube-apiserver on 127.0.0.1) and the kwok controller,
creates N Nodes (``gpuprov_lab.kwok.fake_node``: a pool label, 32 ``nvidia.com/gpu.shared``),
and measures: the wall time of the creation (one ``kubectl create`` of a List), the time until
the API server shows all N Ready, the resident memory of kube-apiserver, etcd and kwok, and
their CPU seconds, at Ready and again after ``--settle`` seconds of kwok renewing one Lease per
node (the steady load a fleet puts on the control plane). Writes
bench/results/kwok_nodes.json; ends everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from gpuprov_lab import consumer, kubebuild, kwok, procs
from gpuprov_lab.controlplane import ControlPlane
from tabulate import tabulate

RESULTS = Path(__file__).parent / "results" / "kwok_nodes.json"


def usage(pidfile: Path) -> dict[str, float]:
    """RSS (MiB) and CPU seconds (user + system) of the process in ``pidfile``."""
    pid = procs.read(pidfile)
    if pid is None:
        return {"rss_mib": 0.0, "cpu_s": 0.0}
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return {"rss_mib": round(rss / 1024, 1), "cpu_s": (int(fields[11]) + int(fields[12])) / ticks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument(
        "--lease-seconds",
        type=int,
        default=kwok.LEASE_SECONDS,
        help="each node's Lease duration; kwok renews it 4 times per duration",
    )
    args = parser.parse_args()
    kwok.ensure()
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="gpuprov-bench-kube-")), "127.0.0.1", None)
    plane.start(kubebuild.ensure())
    workdir = Path(tempfile.mkdtemp(prefix="gpuprov-bench-kwok-"))
    pidfiles = {
        "kube-apiserver": plane.dir / "apiserver.pid",
        "etcd": plane.dir / "etcd.pid",
        "kwok": workdir / "kwok.pid",
    }
    try:
        handle = kwok.start(plane.admin_kubeconfig, workdir, lease_seconds=args.lease_seconds)
        idle = {name: usage(p) for name, p in pidfiles.items()}
        nodes = [
            kwok.fake_node(
                f"kwok-{i:05d}",
                {"gpuprov.io/pool": "shared"},
                {"nvidia.com/gpu.shared": "32"},
                index=i,
            )
            for i in range(args.nodes)
        ]
        started = time.monotonic()
        kwok.create_nodes(plane.admin_kubeconfig, nodes)
        created = time.monotonic() - started
        while kwok.ready_nodes(plane.admin_kubeconfig)[0] < args.nodes:
            time.sleep(2)
        ready = time.monotonic() - started
        at_ready = {name: usage(p) for name, p in pidfiles.items()}
        time.sleep(args.settle)
        settled = {name: usage(p) for name, p in pidfiles.items()}
        assert handle.running(), handle.tail("kwok")
    finally:
        consumer.stop(workdir)
        plane.stop()
    rows = [
        [
            name,
            idle[name]["rss_mib"],
            at_ready[name]["rss_mib"],
            settled[name]["rss_mib"],
            round(at_ready[name]["cpu_s"] - idle[name]["cpu_s"], 1),
            round((settled[name]["cpu_s"] - at_ready[name]["cpu_s"]) / args.settle, 3),
        ]
        for name in pidfiles
    ]
    print(
        f"{args.nodes} nodes, Leases of {args.lease_seconds} s: created in {created:.1f} s, all Ready after {ready:.1f} s"
    )
    print(
        tabulate(
            rows,
            headers=[
                "process",
                "RSS idle MiB",
                "RSS at Ready",
                f"RSS +{args.settle:.0f} s",
                "CPU s to Ready",
                "CPU s/s after",
            ],
        )
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "nodes": args.nodes,
                "lease_seconds": args.lease_seconds,
                "created_s": created,
                "ready_s": ready,
                "settle_s": args.settle,
                "idle": idle,
                "at_ready": at_ready,
                "settled": settled,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
