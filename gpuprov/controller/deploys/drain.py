"""The Kubernetes node around a disruptive change (a MIG mode change, instances destroyed, a
driver change): cordoned and drained before, uncordoned after, when a kubeconfig is given."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from gpuprov.controller.deploys.view import HostView
from gpuprov.controller.limits import DRAIN_MARGIN
from gpuprov.controller.operations import kube


def node_name(view: HostView) -> str:
    return view.settings["kube_node_name"] or view.plan.name


@deploy("Drain the node")
def drain(view: HostView, reasons: list[str]) -> None:
    settings = view.settings
    if settings["kubeconfig"] is None:
        logger.warning(
            f"{host.print_prefix}disruptive change ({'; '.join(reasons)}): pods "
            "using these GPUs will be disrupted; set kubeconfig to have gpuprov "
            "cordon and drain the node first"
        )
        return
    kube.drained(
        name=f"cordon and drain {node_name(view)}",
        node=node_name(view),
        kubeconfig=settings["kubeconfig"],
        timeout=settings["drain_timeout"],
        _timeout=settings["drain_timeout"] + DRAIN_MARGIN,
    )


@deploy("Uncordon the node")
def uncordon(view: HostView) -> None:
    if view.settings["kubeconfig"] is not None:
        kube.uncordoned(
            name=f"uncordon {node_name(view)}",
            node=node_name(view),
            kubeconfig=view.settings["kubeconfig"],
        )
