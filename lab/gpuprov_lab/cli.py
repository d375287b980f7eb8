"""`gpuprov lab up|down|status|demo`: throwaway SSH hosts with simulated GPUs on this machine.

sudo gpuprov lab up                  # 3 hosts: 8 x A100 (shared), 8 x H100 (mig), 4 x H200
sudo gpuprov lab up --hosts 8        # cycling through the same three kinds
sudo gpuprov lab up --no-kube        # no control plane, no kubelet, no device plugin
sudo gpuprov lab up --queues kueue   # and Kueue v0.17.0 (or `volcano`) against its API server
sudo gpuprov lab status --format json
sudo gpuprov lab demo                # up, deploy, verify (with --kubeconfig --canary)
sudo gpuprov lab down

With Kubernetes (the default) the lab runs etcd, kube-apiserver (on 10.200.0.1:16443),
kube-scheduler and kube-controller-manager, and every host the real kubelet, which runs pods
through the host's containerd, and NVIDIA's device plugin; the admin kubeconfig is
``<run dir>/kube/admin.kubeconfig`` (printed by `up`). ``--queues kueue|volcano`` adds that
queue system, its CRDs and admission webhooks (``queue_system.py``); `up` again with another
``--queues``, or none, swaps or stops only it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov_lab import controlplane, lifecycle, queue_system, spec
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import RunDir, default_dir

INVENTORY = "inventories/lab.py"
DEPLOY = "deploys/gpu_node.py"
# The checkout that holds INVENTORY and DEPLOY: `demo` runs them from there, wherever it is called.
CHECKOUT = Path(__file__).resolve().parents[2]
DEMO_SETTLE = 60  # seconds: a plugin start (about 2 s) plus a few kubelet status reports


@click.group()
def lab() -> None:
    """Throwaway Debian hosts with simulated GPUs, over real SSH, on this machine (root)."""


@lab.command()
@click.option(
    "--hosts",
    "count",
    type=int,
    default=None,
    metavar="N",
    help="Number of hosts (default 3), cycling shared A100 / mig H100 / whole-card H200.",
)
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML list of {name?, group, model, count, containerd?}.",
)
@click.option(
    "--containerd",
    "containerd",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    metavar="PATH",
    help="A containerd binary (e.g. upstream 2.3.4) to run instead of Debian's 1.6: on every "
    "host, or with --spec on the hosts marked `containerd: upstream`.",
)
@click.option(
    "--no-kube",
    "no_kube",
    is_flag=True,
    help="No Kubernetes: no control plane, and the hosts' kubelet and device plugin units run "
    "only `sleep` (saves about 100 MB and some CPU per host).",
)
@click.option(
    "--device-plugin",
    "device_plugin",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    metavar="PATH",
    help="NVIDIA device plugin binary to run on every host (default: shared/bin's v0.20.0, "
    "decompressed into /var/tmp/gpuprov-bin and checked against its sha256).",
)
@click.option(
    "--queues",
    "queues",
    type=click.Choice(queue_system.SYSTEMS),
    default=None,
    help="Run this queue system against the lab's API server: Kueue v0.17.0 (built once into "
    "/var/tmp, about 3 minutes cold) or Volcano v1.15.1 (shared/bin's). On a running lab of "
    "the same hosts only the queue system is started, replaced or (without it) stopped.",
)
@bad_input
def up(
    count: int | None,
    spec_file: str | None,
    containerd: str | None,
    no_kube: bool,
    device_plugin: str | None,
    queues: str | None,
) -> None:
    """Start the lab (idempotent); print its hosts and how to reach them."""
    if no_kube and device_plugin:
        raise click.UsageError("--device-plugin runs on the lab's nodes: not with --no-kube")
    if no_kube and queues:
        raise click.UsageError("--queues runs against the lab's API server: not with --no-kube")
    _up(count, spec_file, containerd, kube=not no_kube, device_plugin=device_plugin, queues=queues)


@lab.command()
@bad_input
def down() -> None:
    """Stop the lab and remove everything it made (safe to run twice)."""
    _lab_errors(lambda: lifecycle.down(RunDir(default_dir())))
    click.echo("lab down")


@lab.command()
@format_option
@bad_input
def status(fmt: str) -> None:
    """Show whether the lab runs, and each host's state."""
    document = lifecycle.status(RunDir(default_dir()))
    if fmt == "json":
        emit_json(document)
        return
    click.echo(f"lab {document['state']} ({document['run_dir']})")
    _kube_status(document.get("kube"))
    _queues_status(document.get("queues"))
    if document["hosts"]:
        click.echo(
            table(
                [
                    [
                        h["name"],
                        h["ip"],
                        h["group"],
                        f"{h['count']} x {h['model']}",
                        "yes" if h["running"] else "NO",
                        "yes" if h["ssh"] else "NO",
                    ]
                    for h in document["hosts"]
                ],
                ["host", "address", "group", "gpus", "running", "ssh"],
            )
        )


def _kube_status(kube: dict | None) -> None:
    """The nodes as the API server shows them, after the host table."""
    if not kube:
        return
    click.echo(f"API server {kube['server']}, kubeconfig {kube['kubeconfig']}")
    if kube.get("components"):
        rows = [
            [
                c["name"],
                "yes" if c["running"] else "NO",
                c["port"] or "-",
                {True: "ok", False: "NO", None: "-"}[c["healthy"]],
            ]
            for c in kube["components"]
        ]
        click.echo(table(rows, ["component", "running", "port", "healthz"]) + "\n")
    if not kube["api"]:
        click.echo(f"nodes: {kube['error']}")
        return
    rows = [
        [
            n["name"],
            "yes" if n["ready"] else ("NO" if n["registered"] else "no Node"),
            " ".join(f"{k}={v}" for k, v in n["allocatable"].items() if k != "pods") or "-",
            n["allocatable"].get("pods", "-"),
        ]
        for n in kube["nodes"]
    ]
    click.echo(table(rows, ["node", "ready", "allocatable GPUs", "pods"]) + "\n")


def _queues_status(queues: dict | None) -> None:
    """The queue system's processes, after the nodes."""
    if not queues:
        return
    rows = [
        [queues["system"], p["name"], "yes" if p["running"] else "NO"] for p in queues["processes"]
    ] or [[queues["system"], "-", "NO"]]
    click.echo(table(rows, ["queues", "process", "running"]))
    click.echo(f"webhooks at {', '.join(queues['endpoints'])}\n")


@lab.command()
@click.option("--hosts", "count", type=int, default=None, metavar="N", help="As for `up`.")
@click.option(
    "--spec", "spec_file", type=click.Path(dir_okay=False), default=None, help="As for `up`."
)
@bad_input
def demo(count: int | None, spec_file: str | None) -> None:
    """Start the lab, deploy it with pyinfra, apply the cluster side (`gpuprov kube apply`),
    verify hosts and nodes (`--kubeconfig`) with a canary pod per node and resource
    (`--canary`), and say how to look around."""
    run = _up(count, spec_file)
    kube = (run.read_state() or {}).get("kube")
    env = controlplane.env_with_kubectl(kube and kube["kubectl"])
    gpuprov = str(Path(sys.executable).parent / "gpuprov")
    _demo_step([str(Path(sys.executable).parent / "pyinfra"), "-y", INVENTORY, DEPLOY], env)
    verify = [gpuprov, "verify", INVENTORY]
    if kube:
        kubeconfig = ["--kubeconfig", kube["kubeconfig"]]
        # The node labels, taints and ConfigMap that verify checks through the API server.
        _demo_step([gpuprov, "kube", "apply", INVENTORY, *kubeconfig], env)
        verify += kubeconfig
        _wait_advertised(verify, env)
        # Once the nodes advertise their plan, a pod per node and resource must run on it.
        verify.append("--canary")
    _demo_step(verify, env)
    click.echo(
        f"\nLook around:  ssh -F {run.ssh_config} {spec.SUBNET_PREFIX}11   (or a host name above)"
    )
    click.echo("Take it down: sudo gpuprov lab down")


def _demo_step(argv: list[str], env: dict[str, str]) -> None:
    click.echo(f"\n$ {' '.join(argv)}", err=True)
    if subprocess.run(argv, cwd=CHECKOUT, env=env).returncode != 0:
        click.echo(
            f"error: `{' '.join(argv)}` failed; the lab is still up (`gpuprov lab down` ends it)",
            err=True,
        )
        sys.exit(1)


def _wait_advertised(verify: list[str], env: dict[str, str]) -> None:
    """Give the nodes time to advertise what the deploy changed before the verify that is
    shown: each device plugin starts once its driver is there, and a kubelet reports its node's
    status every 10 s. Quiet runs of the same verify, up to ``DEMO_SETTLE`` seconds."""
    click.echo(
        f"\n(waiting up to {DEMO_SETTLE} s for the nodes to report what they advertise)", err=True
    )
    deadline = time.monotonic() + DEMO_SETTLE
    while time.monotonic() < deadline:
        quiet = subprocess.run(
            [*verify, "--format", "json"], cwd=CHECKOUT, env=env, capture_output=True
        )
        if quiet.returncode == 0:
            return
        time.sleep(3)


def _up(
    count: int | None,
    spec_file: str | None,
    containerd: str | None = None,
    kube: bool = True,
    device_plugin: str | None = None,
    queues: str | None = None,
) -> RunDir:
    if count is not None and spec_file is not None:
        raise click.UsageError("give --hosts or --spec, not both")
    binary = os.path.abspath(containerd) if containerd else None
    hosts = (
        spec.load_spec(spec_file, binary)
        if spec_file
        else spec.default_spec(3 if count is None else count, binary)
    )
    run = RunDir(default_dir())
    lifecycle.require_root("up")
    plugin = Path(device_plugin).resolve() if device_plugin else None
    _lab_errors(lambda: lifecycle.up(run, hosts, kube=kube, plugin=plugin, queues=queues))
    click.echo(
        table(
            [
                [h.name, h.ip, h.group, f"{h.count} x {h.model}", h.containerd or "debian"]
                for h in hosts
            ],
            ["host", "address", "group", "gpus", "containerd"],
        )
    )
    click.echo(f"\nssh -F {run.ssh_config} {hosts[0].name}")
    cluster = (run.read_state() or {}).get("kube")
    if cluster:
        bindir = Path(cluster["kubectl"]).parent
        click.echo(f"kubeconfig {cluster['kubeconfig']} (API server {cluster['server']})")
        click.echo(f"PATH={bindir}:$PATH pyinfra -y {INVENTORY} {DEPLOY}")
        click.echo(f"gpuprov kube apply {INVENTORY} --kubeconfig {cluster['kubeconfig']}")
        if queues:
            click.echo(
                f"gpuprov kube apply {INVENTORY} --kubeconfig {cluster['kubeconfig']} "
                f"--queues {queues}"
            )
        click.echo(f"gpuprov verify {INVENTORY} --kubeconfig {cluster['kubeconfig']}")
    else:
        click.echo(f"pyinfra -y {INVENTORY} {DEPLOY}")
    return run


def _lab_errors(action: Callable[[], object]) -> None:
    """A lab failure on this machine: one message, exit 1."""
    try:
        action()
    except LabError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
