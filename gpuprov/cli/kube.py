"""`gpuprov kube render|apply`: the cluster side of the plan (ConfigMaps, node labels, taints,
Helm values), rendered as files or applied with kubectl."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from gpuprov.cli.output import bad_input
from gpuprov.cli.output_dir import write_files
from gpuprov.cli.plan import limit_option, load_plan
from gpuprov.controller.image import DEFAULT_IMAGE
from gpuprov.controller.kube.kubectl import Kubectl, KubectlError
from gpuprov.core.cluster import fleet as fleet_deploy
from gpuprov.core.cluster import manifests
from gpuprov.core.cluster.nodes import node_change
from gpuprov.core.cluster.queue_files import QUEUE_SCHEDULERS, queue_files
from gpuprov.core.errors import InputError, Problem, shown
from gpuprov.core.kube_names import label_problem
from gpuprov.host.contract import EXIT_DRIFT, FLEET_NAMESPACE, VGPU_NAMESPACE

namespace_option = click.option(
    "--namespace",
    default=manifests.DEFAULT_NAMESPACE,
    show_default=True,
    help="Namespace of the device plugin (the chart's release or the GPU Operator's).",
)
vgpu_namespace_option = click.option(
    "--vgpu-namespace",
    default=VGPU_NAMESPACE,
    show_default=True,
    help="Namespace of the vGPU device plugin (HAMi's or Volcano's) that reads the vgpu hosts' "
    "node configs.",
)
mig_manager_option = click.option(
    "--mig-manager",
    type=click.Choice(manifests.MIG_MANAGERS),
    default="gpuprov",
    show_default=True,
    help="Who applies MIG layouts: gpuprov's deploy, or the GPU Operator's MIG manager "
    "(adds a mig-parted config and the nvidia.com/mig.config label).",
)


fleet_option = click.option(
    "--fleet",
    is_flag=True,
    help="Also the in-cluster deploy: a system-upgrade-controller Plan per pool whose Jobs run "
    "gpuprov's deploy on each node (docs/fleet.md).",
)
image_option = click.option(
    "--image",
    default=DEFAULT_IMAGE,
    show_default=True,
    help="With --fleet: the image the Plans' Jobs run (`gpuprov fleet image` builds it).",
)


queues_option = click.option(
    "--queues",
    type=click.Choice(QUEUE_SCHEDULERS),
    help="Also the teams' queues of kube_queues for this scheduler (docs/kubernetes.md#queues).",
)


@click.group()
def kube() -> None:
    """Kubernetes objects from the plan: device plugin configs, pool labels and taints."""


def _render(
    inventory: str,
    limit: tuple[str, ...],
    namespace: str,
    mig_manager: str,
    vgpu_namespace: str = VGPU_NAMESPACE,
    node_problem_detector: bool = False,
    queues: str | None = None,
    fleet_image: str | None = None,
) -> manifests.Rendered:
    """The whole inventory's manifests (the ConfigMaps serve every node), ``--limit`` choosing
    the nodes."""
    names = {"--namespace": namespace, "--vgpu-namespace": vgpu_namespace}
    bad = [(o, why) for o, name in names.items() if (why := label_problem(name))]
    if bad:
        raise InputError(
            [
                Problem("command line", f"a namespace {why}, got {shown(names[o])}", key=o)
                for o, why in bad
            ]
        )
    loaded, cluster = load_plan(inventory, ())
    only = {h.name for h in load_plan(inventory, limit)[1].hosts} if limit else None
    rendered = manifests.render(
        cluster, namespace, mig_manager, only, vgpu_namespace, node_problem_detector
    )
    if queues:
        rendered = dataclasses.replace(
            rendered, files={**rendered.files, **queue_files(loaded, cluster, queues)}
        )
    if fleet_image:
        if limit:
            raise InputError(
                [Problem("command line", "--fleet renders every pool: no --limit", key="--limit")]
            )
        header = (
            "The in-cluster deploy (docs/fleet.md): one system-upgrade-controller Plan per pool,\n"
            "its nodes' plan documents in a ConfigMap, and the RBAC of the controller and Jobs."
        )
        files = {}
        for path in fleet_deploy.local_files(cluster):
            try:
                files[path] = Path(path).expanduser().read_bytes()
            except OSError as e:
                raise InputError(
                    [Problem(inventory, f"cannot read {path}: {e.strerror}", key="--fleet")]
                ) from None
        objects = fleet_deploy.render(cluster, fleet_image, files=files)
        rendered = dataclasses.replace(
            rendered, files={**rendered.files, manifests.FLEET_FILE: (header, objects)}
        )
    _warn(rendered)
    return rendered


def _warn(rendered: manifests.Rendered) -> None:
    for warning in rendered.warnings:
        click.echo(f"warning: {warning}", err=True)


@kube.command()
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Write one YAML file per object kind here instead of a stream on stdout.",
)
@namespace_option
@vgpu_namespace_option
@mig_manager_option
@limit_option
@click.option(
    "--node-problem-detector",
    is_flag=True,
    help="Also render a Node Problem Detector config that sets a node condition on a "
    "critical GPU XID (health_critical_xids; docs/health.md).",
)
@queues_option
@fleet_option
@image_option
@bad_input
def render(
    inventory: str,
    out: str | None,
    namespace: str,
    vgpu_namespace: str,
    mig_manager: str,
    limit: tuple[str, ...],
    node_problem_detector: bool,
    queues: str | None,
    fleet: bool,
    image: str,
) -> None:
    """Render INVENTORY's manifests and Helm values (docs/kubernetes.md, docs/vgpu.md)."""
    rendered = _render(
        inventory,
        limit,
        namespace,
        mig_manager,
        vgpu_namespace,
        node_problem_detector,
        queues,
        image if fleet else None,
    )
    if out is None:
        click.echo(rendered.stream(), nl=False)
        return
    write_files(out, {name: rendered.file_text(name) for name in rendered.files})
    click.echo(f"wrote {', '.join(rendered.files)} to {out}")


@kube.command()
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--kubeconfig", required=True, help="kubeconfig of the cluster.")
@click.option("--dry-run", is_flag=True, help="Only show what would change (kubectl diff).")
@namespace_option
@vgpu_namespace_option
@mig_manager_option
@limit_option
@queues_option
@fleet_option
@image_option
@bad_input
def apply(
    inventory: str,
    kubeconfig: str,
    dry_run: bool,
    namespace: str,
    vgpu_namespace: str,
    mig_manager: str,
    limit: tuple[str, ...],
    queues: str | None,
    fleet: bool,
    image: str,
) -> None:
    """Apply INVENTORY's ConfigMaps, node labels and taints.

    ConfigMaps by kubectl server-side apply; each node that differs gets one JSON patch. Only
    gpuprov's own labels and taints change; other labels and taints stay. Exit 0 done, 1 the
    cluster refused or could not be reached, 2 bad input (touching nothing). With --queues,
    the teams' queue objects too (server-side: fields others set stay); the scheduler's CRDs
    must be installed. With --fleet, the in-cluster deploy's Plans and what they need
    (docs/fleet.md), and the Plans and documents of pools left without a host are deleted;
    system-upgrade-controller must be running (it creates the Plan CRD).
    """
    client = Kubectl(kubeconfig)
    client.check_kubeconfig()
    rendered = _render(
        inventory,
        limit,
        namespace,
        mig_manager,
        vgpu_namespace,
        queues=queues,
        fleet_image=image if fleet else None,
    )
    try:
        nodes = client.nodes()
        present = [n for n in rendered.nodes if n.name in nodes]
        for node in rendered.nodes:
            if node.name not in nodes:
                click.echo(
                    f"warning: node {node.name} (host {node.host}) is not in the cluster: skipped",
                    err=True,
                )
            elif fleet and (why := fleet_deploy.unselectable(node.name, nodes[node.name])):
                click.echo(f"warning: node {node.name} (host {node.host}): {why}", err=True)
        stream = manifests.dump(
            rendered.config_maps() + rendered.queue_objects() + rendered.fleet_objects()
        )
        changes = [c for n in present if (c := node_change(n, nodes[n.name])) is not None]
        if dry_run:
            click.echo(client.diff(stream), nl=False)
        else:
            client.apply(stream)
        if fleet:
            # The pools that lost their last host: their Plans and documents go (docs/fleet.md).
            gone = fleet_deploy.left_over(rendered.fleet_objects())
            click.echo(client.delete(FLEET_NAMESPACE, gone, dry_run=dry_run), nl=False)
        for change in changes:
            client.patch_node(change, dry_run=dry_run)
    except KubectlError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_DRIFT)
    verb = "would change" if dry_run else "changed"
    for change in changes:
        click.echo(f"node {change.node}: {verb} {', '.join(change.summary())}")
    if not changes:
        click.echo(f"nodes: nothing to change ({len(present)} nodes checked)")
