"""`gpuprov lab up|down|status|demo`: throwaway SSH hosts with simulated GPUs on this machine.

sudo gpuprov lab up                  # 3 hosts: 8 x A100 (shared), 8 x H100 (mig), 4 x H200
sudo gpuprov lab up --hosts 8        # cycling through the same three kinds
sudo gpuprov lab status --format json
sudo gpuprov lab demo                # up, deploy, verify
sudo gpuprov lab down
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click

from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.lab import lifecycle, spec
from gpuprov.lab.errors import LabError
from gpuprov.lab.rundir import RunDir, default_dir

INVENTORY = "inventories/lab.py"
DEPLOY = "deploys/gpu_node.py"
# The checkout that holds INVENTORY and DEPLOY: `demo` runs them from there, wherever it is called.
CHECKOUT = Path(__file__).resolve().parents[2]


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
@bad_input
def up(count: int | None, spec_file: str | None, containerd: str | None) -> None:
    """Start the lab (idempotent); print its hosts and how to reach them."""
    _up(count, spec_file, containerd)


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


@lab.command()
@click.option("--hosts", "count", type=int, default=None, metavar="N", help="As for `up`.")
@click.option(
    "--spec", "spec_file", type=click.Path(dir_okay=False), default=None, help="As for `up`."
)
@bad_input
def demo(count: int | None, spec_file: str | None) -> None:
    """Start the lab, deploy it with pyinfra, verify it, and say how to look around."""
    run = _up(count, spec_file)
    bindir = Path(sys.executable).parent
    for argv in (
        [str(bindir / "pyinfra"), "-y", INVENTORY, DEPLOY],
        [str(bindir / "gpuprov"), "verify", INVENTORY],
    ):
        click.echo(f"\n$ {' '.join(argv)}", err=True)
        if subprocess.run(argv, cwd=CHECKOUT).returncode != 0:
            click.echo(
                f"error: `{' '.join(argv)}` failed; the lab is still up "
                "(`gpuprov lab down` ends it)",
                err=True,
            )
            sys.exit(1)
    click.echo(f"\nLook around:  ssh -F {run.ssh_config} 10.200.0.11   (or a host name above)")
    click.echo("Take it down: sudo gpuprov lab down")


def _up(count: int | None, spec_file: str | None, containerd: str | None = None) -> RunDir:
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
    _lab_errors(lambda: lifecycle.up(run, hosts))
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
    click.echo(f"pyinfra -y {INVENTORY} {DEPLOY}")
    return run


def _lab_errors(action: Callable[[], object]) -> None:
    """A lab failure on this machine: one message, exit 1."""
    try:
        action()
    except LabError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
