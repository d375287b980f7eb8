"""The `gpuprov` command line: thin click commands around the pure core.

Each subcommand lives in its own module and is imported only when it runs (a pure command never
loads pyinfra or paramiko); bad input becomes one message and exit code 2. Other distributions
add commands through the ``gpuprov.commands`` entry point group (gpuprov-lab adds ``lab``).

>>> "plan" in main.list_commands(None)
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import click

from gpuprov.cli.lazy import LazyGroup

ENTRY_POINTS = "gpuprov.commands"


def _installed() -> Mapping[str, Callable[[], click.Command]]:
    """The commands other installed distributions add (entry point group ``gpuprov.commands``)."""
    from importlib.metadata import entry_points

    return {e.name: e.load for e in entry_points(group=ENTRY_POINTS)}


@click.group(
    cls=LazyGroup,
    commands={
        "advise": "gpuprov.cli.advise:advise",
        "deploy": "gpuprov.cli.deploy:deploy",
        "fleet": "gpuprov.cli.fleet:fleet",
        "kube": "gpuprov.cli.kube:kube",
        "mig": "gpuprov.cli.mig:mig",
        "plan": "gpuprov.cli.plan:plan",
        "probe": "gpuprov.cli.probe:probe",
        "variables": "gpuprov.cli.variables:variables",
        "verify": "gpuprov.cli.verify:verify",
    },
    extra=_installed,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="gpuprov")
def main() -> None:
    """Plan, deploy and verify GPU nodes: time-slicing, MIG layouts, whole cards."""
