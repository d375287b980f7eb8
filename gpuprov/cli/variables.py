"""`gpuprov variables`: every inventory key gpuprov reads, its default and its meaning."""

from __future__ import annotations

import json

import click

from gpuprov.cli.output import emit_json, table
from gpuprov.core.variables import NOT_SET, VARIABLES


def _default(value: object) -> str:
    return "required" if value is NOT_SET else json.dumps(value)


def markdown() -> str:
    """The reference table of docs/variables.md."""
    lines = ["| key | default | modes | meaning |", "|---|---|---|---|"]
    for var in VARIABLES.values():
        modes = ", ".join(var.modes) or "all"
        default = _default(var.default).replace("|", "\\|")  # a pipe would end the cell
        lines.append(f"| `{var.name}` | `{default}` | {modes} | {var.doc} |")
    return "\n".join(lines) + "\n"


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
    help="Output format.",
)
def variables(fmt: str) -> None:
    """List every group/host data key gpuprov reads, with its default."""
    if fmt == "json":
        emit_json(
            [
                {
                    "name": v.name,
                    "default": None if v.default is NOT_SET else v.default,
                    "required": v.default is NOT_SET,
                    "modes": list(v.modes),
                    "doc": v.doc,
                }
                for v in VARIABLES.values()
            ]
        )
    elif fmt == "markdown":
        click.echo(markdown(), nl=False)
    else:
        click.echo(
            table([[v.name, _default(v.default)] for v in VARIABLES.values()], ["key", "default"])
        )
