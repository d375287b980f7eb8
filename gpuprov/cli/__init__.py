"""The `gpuprov` command line: thin click commands around the pure core.

Each subcommand lives in its own module; bad input becomes one message and exit code 2.
"""

from __future__ import annotations

import click

from gpuprov.cli import advise, kube, lab, mig, mig_parted, plan, probe, variables, verify


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gpuprov")
def main() -> None:
    """Plan, deploy and verify GPU nodes: time-slicing, MIG layouts, whole cards."""


for command in (plan.plan, mig.mig, verify.verify, probe.probe, lab.lab, variables.variables):
    main.add_command(command)
main.add_command(kube.kube)
main.add_command(advise.advise)
for command in (mig_parted.export, mig_parted.import_):
    mig.mig.add_command(command)
