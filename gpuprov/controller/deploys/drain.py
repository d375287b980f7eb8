"""The Kubernetes node around a disruptive change (a MIG mode change, instances destroyed, a
driver change): cordoned before, uncordoned after, when a kubeconfig is given; in between the
pods that hold a device the change takes are evicted (``drain_scope: gpus``, the default), or
every pod of the node (``drain_scope: node``, and any change that reboots the host)."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host, logger
from pyinfra.api import deploy

from gpuprov.controller.deploys.view import HostView
from gpuprov.controller.limits import DRAIN_MARGIN
from gpuprov.controller.operations import kube
from gpuprov.core.disruption import Touched, described, taken
from gpuprov.host.contract import CRI_SOCKETS


def node_name(view: HostView) -> str:
    return view.plan.node.kube_node_name or view.plan.name


@deploy("Drain the node")
def drain(view: HostView, reasons: list[str], touched: Sequence[Touched], reboots: bool) -> None:
    """Cordon, then evict: the pods holding ``touched`` devices, or the node's when
    ``drain_scope`` is ``node`` or the change ``reboots`` the host (a reboot ends every pod)."""
    plan = view.plan
    whole = plan.node.drain_scope == "node" or reboots
    if plan.node.kubeconfig is None:
        who = "every pod of the node" if whole else f"pods on {described(touched)}"
        logger.warning(
            f"{host.print_prefix}disruptive change ({'; '.join(reasons)}): {who} will be "
            "disrupted; set kubeconfig to have gpuprov cordon the node and evict them first"
        )
        return
    limit = plan.node.drain_timeout + DRAIN_MARGIN
    if whole:
        kube.drained(
            name=f"cordon and drain {node_name(view)}"
            + (" (the change reboots the host)" if reboots else ""),
            node=node_name(view),
            kubeconfig=plan.node.kubeconfig,
            timeout=plan.node.drain_timeout,
            _timeout=limit,
        )
        return
    kube.gpus_drained(
        name=f"cordon {node_name(view)}, evict the pods on {described(touched)}",
        node=node_name(view),
        kubeconfig=plan.node.kubeconfig,
        devices=sorted(taken(touched)),
        timeout=plan.node.drain_timeout,
        agent_path=plan.agent.gpuprov_agent_path,
        python=plan.agent.gpuprov_python,
        runtime=CRI_SOCKETS[plan.runtime.container_runtime],
        _timeout=limit,
    )


@deploy("Uncordon the node")
def uncordon(view: HostView) -> None:
    if view.plan.node.kubeconfig is not None:
        kube.uncordoned(
            name=f"uncordon {node_name(view)}",
            node=node_name(view),
            kubeconfig=view.plan.node.kubeconfig,
        )
