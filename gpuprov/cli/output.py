"""Shared CLI output: tables, JSON, and the one-message-exit-2 rule for bad input."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from tabulate import tabulate

from gpuprov.core.errors import InputError
from gpuprov.host.contract import EXIT_BAD_INPUT

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain table that stays readable at 100 columns."""
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def emit_json(document: Any) -> None:
    """Indented for a terminal; compact for pipes (json's C encoder only runs without indent,
    which is 5x faster on a 10,000-host plan)."""
    click.echo(json.dumps(document, indent=2 if sys.stdout.isatty() else None))


def bad_input(handler: Callable) -> Callable:
    """Turn InputError into its messages on stderr and exit code 2, never a traceback."""

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except InputError as e:
            for problem in e.problems:
                click.echo(f"error: {problem}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper
