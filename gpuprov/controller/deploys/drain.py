"""The Kubernetes node around a disruptive change (a MIG mode change, instances destroyed, a
driver change): cordoned and drained before, uncordoned after, when a kubeconfig is given."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from gpuprov.controller.deploys.view import HostView
from gpuprov.controller.limits import DRAIN_MARGIN
from gpuprov.controller.operations import kube


def node_name(view: HostView) -> str:
    return view.plan.node.kube_node_name or view.plan.name


@deploy("Drain the node")
def drain(view: HostView, reasons: list[str]) -> None:
    plan = view.plan
    if plan.node.kubeconfig is None:
        logger.warning(
            f"{host.print_prefix}disruptive change ({'; '.join(reasons)}): pods "
            "using these GPUs will be disrupted; set kubeconfig to have gpuprov "
            "cordon and drain the node first"
        )
        return
    kube.drained(
        name=f"cordon and drain {node_name(view)}",
        node=node_name(view),
        kubeconfig=plan.node.kubeconfig,
        timeout=plan.node.drain_timeout,
        _timeout=plan.node.drain_timeout + DRAIN_MARGIN,
    )


@deploy("Uncordon the node")
def uncordon(view: HostView) -> None:
    if view.plan.node.kubeconfig is not None:
        kube.uncordoned(
            name=f"uncordon {node_name(view)}",
            node=node_name(view),
            kubeconfig=view.plan.node.kubeconfig,
        )
