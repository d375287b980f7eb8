"""One GPU host brought to its plan: every concern, in the order the changes must happen."""

from __future__ import annotations

from dataclasses import dataclass

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
from gpuprov.core.disruption import Touched, touched
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


@dataclass(frozen=True)
class Disruption:
    """Why this run would disturb running pods, the GPUs it touches, and whether it may
    reboot the host (then every pod of the node goes)."""

    reasons: list[str]
    touched: list[Touched]
    reboots: bool


def disruptions(view: HostView) -> Disruption:
    """What this run would disturb (no reasons when it would not)."""
    plan = view.plan
    reasons = []
    driver_change = driver.changes(view)
    if driver_change:
        reasons.append(f"driver change to {plan.driver.driver_version}")
    actions = mig.pending_actions(view) or []
    if disruptive(actions):
        reasons.append("MIG change on GPU " + ", ".join(str(a.index) for a in actions))
    else:
        actions = []
    mode_change = any(a.mig_mode is not None or a.reset for a in actions)
    return Disruption(
        reasons,
        touched(view.probe, actions, driver_change),
        (driver_change and plan.driver.driver_reboot) or (mode_change and plan.mig.mig_reboot),
    )


@deploy("GPU node")
def gpu_node(plan: HostPlan) -> None:
    view = HostView(plan)
    view.read(watch(plan))
    if not preflight(plan, view.hardware) or not versions.available(view):
        return
    # The agent first: the drain reads the kubelet's pod-resources through its probe.
    mig.agent(view)
    disruption = disruptions(view)
    if disruption.reasons:
        drain(view, disruption.reasons, disruption.touched, disruption.reboots)
    driver.driver(view)
    runtime.container_runtime(view)
    leftovers.leftovers(view)
    mig_changes = mig.mig_layout(view) if plan.mode == "mig" else mig.mig_off(view)
    mps.mps(view)
    plugin_restart = plugin_config.device_plugin(view, mig_changes)
    kubelet_restart = max_pods.kubelet(view)
    plugin_config.settled(view, [plugin_restart, kubelet_restart])
    if disruption.reasons:
        uncordon(view)
