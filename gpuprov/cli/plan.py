"""`gpuprov plan INVENTORY`: the validated per-host, per-GPU plan."""

from __future__ import annotations

import fnmatch

import click

from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.controller import inventory as inventory_
from gpuprov.core import plan as plan_
from gpuprov.core.cluster.queue_files import scheduler_refusals
from gpuprov.core.cluster.queues import plan_queues
from gpuprov.core.errors import InputError, Problem

limit_option = click.option(
    "--limit",
    "limit",
    metavar="PATTERN",
    multiple=True,
    help="Only hosts whose name or group matches (glob; repeatable).",
)


strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Refuse keys that are not gpuprov's (by default they are another tool's and ignored).",
)


def load_plan(
    inventory_path: str, limit: tuple[str, ...], strict: bool = False
) -> tuple[inventory_.LoadedInventory, plan_.ClusterPlan]:
    """Load and plan ``inventory_path``; ``limit`` patterns match host names or groups;
    ``strict`` makes every key outside gpuprov's registry an error. Without ``limit`` the
    teams' queues (``kube_queues``) are checked against the pools too."""
    loaded = inventory_.load(inventory_path)
    selected = None
    if limit:
        selected = {
            h.name
            for h in loaded.hosts
            if any(fnmatch.fnmatch(h.name, p) or p in h.groups for p in limit)
        }
        if not selected:
            raise InputError(
                [Problem(inventory_path, f"--limit {' '.join(limit)} matches no host")]
            )
    cluster = plan_.build(loaded, selected, strict=strict)
    if selected is None:
        # The teams share the whole cluster: a limited plan has only part of its capacity.
        queues = plan_queues(loaded, cluster)
        if queues is not None:
            problems, warnings = scheduler_refusals(queues)
            if problems:
                raise InputError(problems)
            for warning in warnings:
                click.echo(f"warning: {warning}", err=True)
    return loaded, cluster


@click.command()
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@strict_option
@format_option
@bad_input
def plan(inventory: str, limit: tuple[str, ...], strict: bool, fmt: str) -> None:
    """Show the plan for INVENTORY; exit 2 (touching nothing) if it is impossible.

    Keys outside gpuprov's registry belong to other tools (Kubespray, Ansible roles) and are
    ignored, unless they are a near miss of a gpuprov key; --strict lists each as an error."""
    _, cluster = load_plan(inventory, limit, strict)
    warn(cluster)
    if fmt == "json":
        emit_json(cluster.as_dict())
        return
    rows = []
    for host in cluster.hosts:
        memory = ""
        if host.sharing and host.sharing.memory:
            memory = host.sharing.memory.label()
        elif host.vgpu and host.vgpu.memory:
            memory = host.vgpu.memory.label()
        rows.append(
            [
                host.name,
                host.mode,
                f"{host.gpu_count} x {host.gpu_model}",
                _sharing(host),
                memory,
                host.kubelet.kubelet_max_pods,
                "\n".join(_resource_lines(host)),
            ]
        )
    click.echo(
        table(rows, ["host", "mode", "gpus", "sharing", "memory/share", "maxPods", "resources"])
    )
    layouts = [
        [host.name, f"GPU {plan_.index_ranges(ix)}", text]
        for host in cluster.hosts
        for text, ix in _layouts(host).items()
    ]
    if layouts:
        click.echo()
        click.echo(table(layouts, ["host", "gpus", "MIG instances (profile@start slot)"]))
    click.echo()
    click.echo(table([[k, v] for k, v in cluster.totals.items()], ["resource", "cluster total"]))
    vgpu_totals = cluster.vgpu_totals
    if vgpu_totals:
        click.echo()
        click.echo(
            table([[k, v] for k, v in vgpu_totals.items()], ["vGPU resource", "cluster total"])
        )


def _sharing(host: plan_.HostPlan) -> str:
    """How the host's GPUs are shared: the strategy and replicas, or the vGPU flavour and split."""
    if host.sharing:
        return f"{host.sharing.strategy} x{host.sharing.replicas}"
    if host.vgpu:
        v = host.vgpu
        text = f"{v.flavour} x{v.split_count}"
        if v.memory_scaling != 1 or v.core_scaling != 1:
            text += f"\nmem x{v.memory_scaling}, cores x{v.core_scaling}"
        return text
    return ""


def _resource_lines(host: plan_.HostPlan) -> list[str]:
    """The node's resources; on a vgpu host also what only the scheduler counts (HAMi keeps
    memory and cores in a node annotation, not in the node's allocatable)."""
    if not host.vgpu:
        return [f"{_short(k)}: {v}" for k, v in host.resources.items()]
    return [
        f"{_short(k)}: {v}" + ("" if k in host.vgpu.allocatable else " (scheduler)")
        for k, v in host.vgpu.advertised.items()
    ]


def warn(cluster: plan_.ClusterPlan) -> None:
    """Say on stderr what the plan allows only because the inventory insisted (a memory
    overcommit), every time it is planned."""
    for warning in cluster.warnings:
        click.echo(f"warning: {warning}", err=True)


def _short(resource: str) -> str:
    return resource.removeprefix("nvidia.com/")


def _layouts(host: plan_.HostPlan) -> dict[str, list[int]]:
    """Identical GPU layouts of a MIG host grouped: text -> GPU indices."""
    groups: dict[str, list[int]] = {}
    if host.mode == "mig":
        for gpu in host.gpus:
            text = " ".join(f"{i.profile}@{i.start}" for i in gpu.instances)
            if not gpu.mig_enabled:
                text = "MIG off"
            elif not text:
                text = "MIG on, no instances"
            groups.setdefault(text, []).append(gpu.index)
    return groups
