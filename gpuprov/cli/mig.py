"""`gpuprov mig check|profiles`: ask the solver and the catalog directly."""

from __future__ import annotations

import re
import sys

import click

from gpuprov.cli.lazy import LazyGroup
from gpuprov.cli.output import bad_input, emit_json, format_option, table
from gpuprov.core import catalog
from gpuprov.core.errors import InputError, Problem, shown
from gpuprov.core.mig.solver import solve
from gpuprov.core.variables import MIG_COUNT_MAX, VARIABLES
from gpuprov.host.contract import EXIT_DRIFT, EXIT_OK

# A count is 1 to 3 ASCII digits (str.isdigit and int() also take other scripts' digits).
_COUNT = re.compile(r"[0-9]{1,3}")


@click.group(
    cls=LazyGroup,
    commands={
        "export": "gpuprov.cli.mig_parted:export",
        "import": "gpuprov.cli.mig_parted:import_",
    },
)
def mig() -> None:
    """MIG layouts: check a layout against a model, list a model's profiles."""


def _model(name: str) -> catalog.GpuModel:
    model = catalog.find_model(name)
    if model is None:
        raise InputError(
            [Problem("command line", catalog.load().unknown_model(name, shown), key="MODEL")]
        )
    return model


def _layout(items: tuple[str, ...]) -> dict[str, int]:
    """PROFILE=COUNT arguments as a layout: ASCII decimal counts (not ``²`` or ``٣``, which
    Python's ``int`` takes), each profile once, checked as the planner checks ``mig_layout``."""
    layout: dict[str, int] = {}
    problems = []
    for item in items:
        profile, sep, count = item.partition("=")
        if not sep or not _COUNT.fullmatch(count):
            problems.append(
                Problem(
                    "command line",
                    f"{shown(item)} is not PROFILE=COUNT (COUNT in ASCII digits, 0 to "
                    f"{MIG_COUNT_MAX})",
                    key="LAYOUT",
                )
            )
        elif profile in layout:
            problems.append(
                Problem("command line", f"{shown(profile)} is given twice", key="LAYOUT")
            )
        else:
            layout[profile] = int(count)
    if problems:
        raise InputError(problems)
    try:
        return VARIABLES["mig_layout"].check(layout)
    except ValueError as e:
        raise InputError([Problem("command line", str(e), key="LAYOUT")]) from None


@mig.command()
@click.argument("model")
@click.argument("layout", nargs=-1, required=True)
@format_option
@bad_input
def check(model: str, layout: tuple[str, ...], fmt: str) -> None:
    """Does LAYOUT (PROFILE=COUNT ...) fit MODEL? Exit 0 fits, 1 does not, 2 bad input."""
    gpu = _model(model)
    fit = solve(gpu, _layout(layout))
    if fit.kind == "unknown-profile":
        raise InputError([Problem("command line", fit.reason or "", key="LAYOUT")])
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
