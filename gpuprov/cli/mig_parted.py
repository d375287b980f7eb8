"""`gpuprov mig export|import`: the plan as a mig-parted config, and a mig-parted config as
gpuprov group data."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from gpuprov.cli.output import bad_input
from gpuprov.cli.plan import limit_option, load_plan
from gpuprov.core.cluster import mig_parted
from gpuprov.core.errors import InputError, Problem


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
    "--format",
    "fmt",
    type=click.Choice(["py", "yaml"]),
    default="py",
    show_default=True,
    help="Group data as a group_data/*.py snippet or as YAML.",
)
@bad_input
def import_(file: str, name: str | None, model: str | None, fmt: str) -> None:
    """Turn a mig-parted config into gpuprov group data (layouts checked, placements solved)."""
    path = Path(file)
    if not path.is_file():
        raise InputError([Problem(file, "file not found")])
    document = mig_parted.parse(path.read_text(), file)
    imported = mig_parted.import_config(document, file, name, model)
    data = imported.group_data()
    if fmt == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
        return
    click.echo(
        f"# From mig-parted config {imported.config!r} of {file}; placements gpuprov solved:"
    )
    texts: dict[str, list[str]] = {}  # placements -> where (GPUs with the same layout grouped)
    for where, instances in imported.placements.items():
        text = " ".join(f"{i.profile}@{i.start}" for i in instances)
        texts.setdefault(text, []).append("every GPU" if where == "all" else where)
    for text, where in texts.items():
        click.echo(f"#   {', '.join(where)}: {text}")
    for key, value in data.items():
        click.echo(f"{key} = {json.dumps(value) if key != 'mig_layout_by_gpu' else _by_gpu(value)}")


def _by_gpu(value: dict[int, dict[str, int]]) -> str:
    """Python literal with int keys (JSON would make them strings)."""
    return "{" + ", ".join(f"{i}: {json.dumps(layout)}" for i, layout in value.items()) + "}"
