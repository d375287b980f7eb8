"""`gpuprov mig check|profiles`: ask the solver and the catalog directly."""

from __future__ import annotations

import sys

import click

from gpuprov import catalog
from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.contract import EXIT_BAD_INPUT, EXIT_DRIFT, EXIT_OK
from gpuprov.errors import InputError, Problem
from gpuprov.mig.solver import solve


@click.group()
def mig() -> None:
    """MIG layouts: check a layout against a model, list a model's profiles."""


def _model(name: str) -> catalog.GpuModel:
    model = catalog.find_model(name)
    if model is None:
        raise InputError([Problem("command line", catalog.load().unknown_model(name), key="MODEL")])
    return model


def _layout(items: tuple[str, ...]) -> dict[str, int]:
    layout: dict[str, int] = {}
    problems = []
    for item in items:
        profile, sep, count = item.partition("=")
        if not sep or not count.isdigit():
            problems.append(
                Problem(
                    "command line",
                    f"{item!r} is not PROFILE=COUNT (count an integer >= 0)",
                    key="LAYOUT",
                )
            )
            continue
        layout[profile] = layout.get(profile, 0) + int(count)
    if problems:
        raise InputError(problems)
    return layout


@mig.command()
@click.argument("model")
@click.argument("layout", nargs=-1, required=True)
@format_option
@bad_input
def check(model: str, layout: tuple[str, ...], fmt: str) -> None:
    """Does LAYOUT (PROFILE=COUNT ...) fit MODEL? Exit 0 fits, 1 does not, 2 bad input."""
    gpu = _model(model)
    fit = solve(gpu, _layout(layout))
    if fmt == "json":
        emit_json(
            {
                "model": gpu.alias,
                "fits": fit.fits,
                "placements": [
                    {"profile": i.profile, "start": i.start, "size": i.size} for i in fit.instances
                ],
                "reason": fit.reason,
            }
        )
    elif fit.fits:
        click.echo(f"fits {gpu.alias}:")
        click.echo(
            table(
                [
                    [i.profile, i.profile_id, i.start, i.size, f"{i.start}-{i.start + i.size - 1}"]
                    for i in fit.instances
                ],
                ["profile", "id", "start", "size", "memory slots"],
            )
        )
    else:
        click.echo(f"does not fit {gpu.alias}: {fit.reason}")
    if fit.kind == "unknown-profile":
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(EXIT_OK if fit.fits else EXIT_DRIFT)


@mig.command()
@click.argument("model")
@format_option
@bad_input
def profiles(model: str, fmt: str) -> None:
    """List MODEL's MIG profiles: NVML ids, slices, max count and placements."""
    gpu = _model(model)
    if fmt == "json":
        emit_json(
            {
                "model": gpu.alias,
                "nvml_names": list(gpu.nvml_names),
                "memory_slots": gpu.memory_slots,
                "compute_slices": gpu.compute_slices,
                "profiles": [
                    {
                        "name": p.name,
                        "id": p.id,
                        "const": p.const,
                        "compute_slices": p.compute_slices,
                        "memory_slices": p.memory_slices,
                        "max_instances": p.max_instances,
                        "memory_mib": p.memory_mib,
                        "placements": [list(x) for x in p.placements],
                        "verified": p.verified,
                        "sources": list(p.sources),
                    }
                    for p in gpu.profiles
                ],
            }
        )
        return
    if not gpu.mig_capable:
        click.echo(
            f"{gpu.alias} does not support MIG ({gpu.memory_mib} MiB, whole card or "
            "time-sliced only)"
        )
        return
    click.echo(
        f"{gpu.alias} ({', '.join(gpu.nvml_names)}): {gpu.compute_slices} compute "
        f"slices, {gpu.memory_slots} memory slots"
    )
    click.echo(
        table(
            [
                [
                    p.name,
                    p.id,
                    p.compute_slices,
                    p.memory_slices,
                    p.max_instances,
                    " ".join(f"{s}:{z}" for s, z in p.placements),
                    "yes" if p.verified else "no",
                ]
                for p in gpu.profiles
            ],
            ["profile", "id", "compute", "memory", "max", "placements (start:size)", "verified"],
        )
    )
