"""`gpuprov mig export|import`: the plan as a mig-parted config, and a mig-parted config as
gpuprov group data."""

from __future__ import annotations

import json
import os
import stat

import click
import yaml

from gpuprov.cli.output import bad_input
from gpuprov.cli.plan import limit_option, load_plan
from gpuprov.core import bounded_yaml
from gpuprov.core.cluster import mig_parted
from gpuprov.core.errors import InputError, Problem, clipped, shown
from gpuprov.core.variables import GPU_COUNT_MAX


@click.command("export")
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@bad_input
def export(inventory: str, limit: tuple[str, ...]) -> None:
    """Print the mig-parted config (version v1) for INVENTORY's plan.

    Each host's config name (its nvidia.com/mig.config label) is listed on stderr.
    """
    _, cluster = load_plan(inventory, limit)
    exported = mig_parted.export(cluster.hosts)
    if exported.host_configs:
        click.echo(f"warning: {mig_parted.PLACEMENT_WARNING}", err=True)
    for host, name in exported.host_configs.items():
        click.echo(f"# {host}: {name}", err=True)
    click.echo(exported.text(), nl=False)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--config", "name", help="Config under mig-configs (needed when there are several).")
@click.option("--model", help="GPU model; otherwise from the entries' device-filter.")
@click.option(
    "--gpu-count",
    type=click.IntRange(1, GPU_COUNT_MAX),
    help="GPUs per host: GPU indices are checked against it and it goes into the group data.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["py", "yaml"]),
    default="py",
    show_default=True,
    help="Group data as a group_data/*.py snippet or as YAML.",
)
@bad_input
def import_(
    file: str, name: str | None, model: str | None, gpu_count: int | None, fmt: str
) -> None:
    """Turn a mig-parted config into gpuprov group data (layouts checked, placements solved)."""
    document = mig_parted.parse(_read(file), file)
    imported = mig_parted.import_config(document, file, name, model, gpu_count)
    data = imported.group_data()
    if fmt == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
        return
    click.echo(
        f"# From mig-parted config {shown(imported.config)} of {clipped(file, 200)}; "
        "placements gpuprov solved:"
    )
    texts: dict[str, list[str]] = {}  # placements -> where (GPUs with the same layout grouped)
    for where, instances in imported.placements.items():
        text = " ".join(f"{i.profile}@{i.start}" for i in instances) or "MIG on, no instances"
        texts.setdefault(text, []).append("every GPU" if where == "all" else where)
    for text, where in texts.items():
        click.echo(f"#   {', '.join(where)}: {text}")
    for key, value in data.items():
        click.echo(f"{key} = {json.dumps(value) if key != 'mig_layout_by_gpu' else _by_gpu(value)}")


def _read(file: str) -> bytes:
    """The bytes of ``file``, at most one more than the loader takes; InputError when it is not
    a regular file or cannot be read. Opened non-blocking, so a FIFO never holds the command."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError([Problem(file, "file not found")]) from None
    except OSError as e:
        raise InputError([Problem(file, f"cannot read: {e.strerror}")]) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError([Problem(file, "not a regular file")])
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(bounded_yaml.MAX_BYTES + 1)
    except OSError as e:
        raise InputError([Problem(file, f"cannot read: {e.strerror}")]) from None
    finally:
        os.close(fd)


def _by_gpu(value: dict[int, dict[str, int] | None]) -> str:
    """Python literal with int keys (JSON would make them strings) and None for MIG off."""
    return (
        "{"
        + ", ".join(
            f"{i}: {'None' if layout is None else json.dumps(layout)}"
            for i, layout in value.items()
        )
        + "}"
    )
