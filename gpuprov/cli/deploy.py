"""`gpuprov deploy PYINFRA-ARGUMENTS`: pyinfra, run once gpuprov has checked the inventory.

    gpuprov deploy -y inventories/prod.py deploys/gpu_node.py      # as `pyinfra -y ...`

pyinfra loads the inventory (``pyinfra_cli.inventory.make_inventory``, called from
``pyinfra_cli.cli._main``) before it reads any deploy file, and a malformed one raises there
(IndexError, ValueError, ...) with pyinfra's own traceback and a ``pyinfra-debug.log``: in a
plain ``pyinfra INVENTORY deploys/gpu_node.py`` no code of gpuprov runs before that (the only
file pyinfra executes earlier is a ``config.py`` in the current directory, which is the user's).
So this front end loads the inventory with gpuprov's own loader first
(``gpuprov.controller.inventory``, the one ``gpuprov plan`` uses): a malformed inventory is one
line per problem and exit 2, and pyinfra is never started. Otherwise the arguments go to pyinfra
unchanged: this process becomes ``python -m pyinfra ARGUMENTS`` (its output, its exit code).
Plain ``pyinfra`` keeps working; the deploy file itself still refuses a plan it cannot deploy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from gpuprov.cli.output import bad_input
from gpuprov.controller import inventory as inventory_


def inventory_argument(arguments: tuple[str, ...]) -> str | None:
    """The inventory file pyinfra would load for ``arguments``, read with pyinfra's own click
    command (so every option of pyinfra is understood); None when it names no file (a host
    list such as ``@local`` or ``h1,h2``, or a command line pyinfra would refuse itself)."""
    from pyinfra_cli.cli import cli

    try:
        with cli.make_context("pyinfra", list(arguments), resilient_parsing=True) as context:
            path, chdir = context.params.get("inventory"), context.params.get("chdir")
    except click.ClickException:
        return None
    if not path:
        return None
    full = Path(chdir or ".") / path
    # pyinfra reads an existing path as a file and anything else as host names.
    return str(full) if os.path.lexists(full) else None


@click.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    },
)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
@bad_input
def deploy(arguments: tuple[str, ...]) -> None:
    """Run pyinfra with ARGUMENTS once the inventory loads (pyinfra's --help: its own)."""
    path = inventory_argument(arguments)
    if path is not None:
        inventory_.load(path)  # InputError: every problem, exit 2, pyinfra not started
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "pyinfra", *arguments])
