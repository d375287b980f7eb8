"""The plan of the whole inventory, built once per pyinfra run from the live inventory.

pyinfra runs the deploy file once per host; the plan is built on the first call and kept for
the run (keyed by the pyinfra State). An impossible plan stops the run before any operation,
with the messages and exit code of ``gpuprov plan``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from pyinfra.api import State
from pyinfra.context import ctx_state

from gpuprov.controller.inventory import LoadedInventory, from_pyinfra
from gpuprov.core.errors import InputError
from gpuprov.core.plan import ClusterPlan, build
from gpuprov.host.contract import EXIT_BAD_INPUT

# (state, plan) of the current run; the State itself is kept, so a later run never mistakes it.
_cached: tuple[State, ClusterPlan] | None = None


def inventory_path(state: State) -> str:
    """The inventory file of this run (``inventory`` when it cannot be told).

    pyinfra keeps no record of it, and click's context lives in the main greenlet only, so the
    command line is parsed again with pyinfra's own click command; the answer is trusted only
    if it is a file that pyinfra made a group of (it names a group after the file)."""
    from pyinfra_cli.cli import cli

    try:
        with cli.make_context("pyinfra", sys.argv[1:], resilient_parsing=True) as context:
            path = context.params.get("inventory")
    except click.ClickException:
        path = None
    if path and Path(path).is_file() and Path(path).stem in state.inventory.groups:
        return str(path)
    return "inventory"


def loaded(state: State) -> LoadedInventory:
    """The live pyinfra inventory in the shape the planner reads."""
    return from_pyinfra(state.inventory, inventory_path(state))


def cluster_plan(state: State) -> ClusterPlan:
    """The plan for ``state``'s inventory; on bad input, print every problem and exit 2."""
    global _cached
    # A deploy file's `state` is pyinfra's context proxy, the same object in every run of one
    # process (tests run several): the State behind it tells the runs apart.
    current = ctx_state.get() if state is ctx_state.context else state
    if _cached is not None and _cached[0] is current:
        return _cached[1]
    inventory = loaded(state)
    try:
        plan = build(inventory)
    except InputError as e:
        for problem in e.problems:
            click.echo(f"error: {problem}", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        # Not sys.exit: this runs in one of pyinfra's per-host greenlets, where gevent reports
        # a SystemExit with tracebacks. Nothing has run on any host yet.
        os._exit(EXIT_BAD_INPUT)
    for warning in plan.warnings:
        click.echo(f"warning: {warning}", err=True)
    _cached = (current, plan)
    return plan
