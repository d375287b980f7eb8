"""One GPU host brought to its plan: every concern, in the order the changes must happen."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.controller.deploys import (
    driver,
    leftovers,
    max_pods,
    mig,
    mps,
    plugin_config,
    runtime,
    versions,
)
from gpuprov.controller.deploys.drain import drain, uncordon
from gpuprov.controller.deploys.preflight import preflight
from gpuprov.controller.deploys.view import HostView, Watch
from gpuprov.controller.operations.mig import disruptive
from gpuprov.core.plan import HostPlan


def watch(plan: HostPlan) -> Watch:
    """Everything the deploy steps compare, for the one read of the host state."""
    return (
        driver.watch(plan)
        + runtime.watch(plan)
        + mig.watch(plan, plan.mode)
        + leftovers.watch(plan.mode)
        + mps.watch()
        + plugin_config.watch(plan)
        + max_pods.watch(plan)
    )


def disruptions(view: HostView) -> list[str]:
    """Why this run would disturb running pods (empty when it would not)."""
    reasons = []
    if driver.changes(view):
        reasons.append(f"driver change to {view.plan.driver.driver_version}")
    actions = mig.pending_actions(view)
    if actions and disruptive(actions):
        reasons.append("MIG change on GPU " + ", ".join(str(a.index) for a in actions))
    return reasons


@deploy("GPU node")
def gpu_node(plan: HostPlan) -> None:
    view = HostView(plan)
    view.read(watch(plan))
    if not preflight(plan, view.hardware) or not versions.available(view):
        return
    reasons = disruptions(view)
    if reasons:
        drain(view, reasons)
    driver.driver(view)
    runtime.container_runtime(view)
    mig.agent(view)
    leftovers.leftovers(view)
    mig_changes = mig.mig_layout(view) if plan.mode == "mig" else mig.mig_off(view)
    mps.mps(view)
    plugin_restart = plugin_config.device_plugin(view, mig_changes)
    kubelet_restart = max_pods.kubelet(view)
    plugin_config.settled(view, [plugin_restart, kubelet_restart])
    if reasons:
        uncordon(view)
