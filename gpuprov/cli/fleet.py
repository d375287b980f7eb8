"""`gpuprov fleet apply` and `gpuprov fleet image`: the in-cluster deploy's two ends (docs/fleet.md).

    gpuprov fleet apply --config-map gpuprov-fleet-shared --host-root /host   # in the Job
    gpuprov fleet image --base rootfs.tar --kubectl kubectl --out gpuprov-fleet.tar   # the image

``apply`` is what a ``kube render --fleet`` Plan's Job runs on its node, with the controller's
environment (``SYSTEM_UPGRADE_NODE_NAME``, ``SYSTEM_UPGRADE_PLAN_LATEST_VERSION``) and the
Plan's (``GPUPROV_FLEET_NAMESPACE``). Exit 0 applied, 1 the deploy failed (the node is
annotated ``failed``; the controller retries the Job), 2 no usable plan for this node.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import click

from gpuprov.cli.output import bad_input
from gpuprov.controller.image import DEFAULT_IMAGE
from gpuprov.core.errors import InputError, Problem
from gpuprov.host.contract import EXIT_DRIFT

# The kubeconfig of the Job's service account, in the container (never on the host).
JOB_KUBECONFIG = Path("/tmp/gpuprov-fleet.kubeconfig")


@click.group()
def fleet() -> None:
    """The in-cluster deploy: the Jobs' command and their image (docs/fleet.md)."""


@fleet.command()
@click.option("--config-map", required=True, help="The pool's ConfigMap of plan documents.")
@click.option("--host-root", default="/host", show_default=True, help="The node's root.")
@bad_input
def apply(config_map: str, host_root: str) -> None:
    """Deploy this node's plan from CONFIG_MAP onto the host root (run by the Plan's Job)."""
    from gpuprov.controller.deploys import fleet_node
    from gpuprov.controller.kube.incluster import ApiClient, ApiError

    env = {
        k: os.environ.get(k)
        for k in (
            "SYSTEM_UPGRADE_NODE_NAME",
            "SYSTEM_UPGRADE_PLAN_LATEST_VERSION",
            "GPUPROV_FLEET_NAMESPACE",
        )
    }
    missing = [k for k, v in env.items() if not v]
    if missing:
        raise InputError(
            [Problem("environment", "not set (run by the Plan's Job)", key=k) for k in missing]
        )
    node, version = env["SYSTEM_UPGRADE_NODE_NAME"], env["SYSTEM_UPGRADE_PLAN_LATEST_VERSION"]
    try:
        api = ApiClient.in_cluster()
        data, binary = api.config_map(env["GPUPROV_FLEET_NAMESPACE"], config_map)
    except ApiError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_DRIFT)
    # The deploy's own drain runs kubectl as the Job's account; an image without kubectl
    # drains nothing and says so at a disruptive change (docs/fleet.md, "Drain").
    kubeconfig = None
    if shutil.which("kubectl"):
        kubeconfig = str(JOB_KUBECONFIG)
        JOB_KUBECONFIG.write_text(json.dumps(api.kubeconfig()))
    try:
        plan = fleet_node.host_plan(data, node, f"configmap {config_map}", kubeconfig)
        fleet_node.install_files(data, binary, f"configmap {config_map}")
    except InputError:
        # The node is told too: verify and `kubectl get nodes` show which one has no plan.
        api.annotate_node(node, fleet_node.result_annotations(version, False))
        raise
    click.echo(f"node {node}: deploying plan {version} (host {plan.name}) onto {host_root}")
    ok = fleet_node.deploy(plan, host_root)
    try:
        api.annotate_node(node, fleet_node.result_annotations(version, ok))
    except ApiError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_DRIFT)
    click.echo(f"node {node}: plan {version} {'applied' if ok else 'failed'}")
    sys.exit(0 if ok else EXIT_DRIFT)


@fleet.command()
@click.option(
    "--base",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A root filesystem tar with python3 (e.g. mmdebstrap's; docs/fleet.md).",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The image tar.")
@click.option("--name", default=DEFAULT_IMAGE, show_default=True, help="The image's name.")
@click.option(
    "--kubectl",
    type=click.Path(exists=True, dir_okay=False),
    help="A kubectl binary for the image (its Jobs drain through it; without, they drain nothing).",
)
@click.option(
    "--source",
    help="What pip installs as gpuprov: a checkout, a wheel or a requirement (default: the "
    "checkout gpuprov runs from, else this version from the package index).",
)
@bad_input
def image(base: str, out: str, name: str, kubectl: str | None, source: str | None) -> None:
    """Build the fleet image: BASE plus gpuprov installed with pip, as an OCI tar."""
    from gpuprov.controller import image as image_

    built = image_.build(base, out, name, source=source, kubectl=kubectl)
    click.echo(f"wrote {out}: {name} ({built.manifest_digest})")
