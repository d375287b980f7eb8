"""The `gpuprov` command line: thin click commands around the pure core.

Each subcommand lives in its own module; bad input becomes one message and exit code 2.
"""

from __future__ import annotations

import click

from gpuprov.cli import mig, plan, probe
from gpuprov.cli import verify as verify_cmd
from gpuprov.cli.lab import lab


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gpuprov")
def main() -> None:
    """Plan, deploy and verify GPU nodes: time-slicing, MIG layouts, whole cards."""


main.add_command(plan.plan)
main.add_command(mig.mig)
main.add_command(verify_cmd.verify)
main.add_command(lab)
main.add_command(probe.probe)
