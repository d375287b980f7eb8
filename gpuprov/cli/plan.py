"""`gpuprov plan INVENTORY`: the validated per-host, per-GPU plan."""

from __future__ import annotations

import fnmatch

import click

from gpuprov import inventory as inventory_
from gpuprov import plan as plan_
from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.errors import InputError, Problem

limit_option = click.option("--limit", "limit", metavar="PATTERN", multiple=True,
                            help="Only hosts whose name or group matches (glob; repeatable).")


def load_plan(inventory_path: str, limit: tuple[str, ...]) -> plan_.ClusterPlan:
    """Load and plan ``inventory_path``; ``limit`` patterns match host names or groups."""
    loaded = inventory_.load(inventory_path)
    selected = None
    if limit:
        selected = {h.name for h in loaded.hosts
                    if any(fnmatch.fnmatch(h.name, p) or p in h.groups for p in limit)}
        if not selected:
            raise InputError([Problem(inventory_path, f"--limit {' '.join(limit)} matches no "
                                                      "host")])
    return plan_.build(loaded, selected)


@click.command()
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@format_option
@bad_input
def plan(inventory: str, limit: tuple[str, ...], fmt: str) -> None:
    """Show the plan for INVENTORY; exit 2 (touching nothing) if it is impossible."""
    cluster = load_plan(inventory, limit)
    if fmt == "json":
        emit_json(cluster.as_dict())
        return
    rows = []
    for host in cluster.hosts:
        rows.append([host.name, host.mode, f"{host.gpu_count} x {host.gpu_model}",
                     _gpus_text(host), host.kubelet_max_pods,
                     ", ".join(f"{k.removeprefix('nvidia.com/')}: {v}"
                               for k, v in host.resources.items())])
    click.echo(table(rows, ["host", "mode", "gpus", "layout", "maxPods", "resources"]))
    click.echo()
    click.echo(table([[k, v] for k, v in cluster.totals.items()], ["resource", "cluster total"]))


def _gpus_text(host: plan_.HostPlan) -> str:
    if host.mode == "shared":
        return f"time-sliced x{host.time_slicing.replicas}"
    if host.mode == "whole_card":
        return "whole cards"
    groups: dict[str, list[int]] = {}
    for gpu in host.gpus:
        text = " ".join(f"{i.profile}@{i.start}" for i in gpu.instances) or "MIG off"
        groups.setdefault(text, []).append(gpu.index)
    return "; ".join(f"GPU {_ranges(ix)}: {text}" for text, ix in groups.items())


def _ranges(indices: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5'."""
    parts, start = [], indices[0]
    for prev, cur in zip(indices, indices[1:] + [None]):
        if cur != prev + 1 if cur is not None else True:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = cur
    return ",".join(parts)
