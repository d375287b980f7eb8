"""The NVIDIA device plugin's config: time-slicing or MPS on ``shared`` hosts, the MIG strategy on
``mig`` hosts, none on ``whole_card`` and ``vgpu`` hosts (a config left by an earlier mode is
removed). The plugin restarts (``device_plugin_reload_command``) whenever what it advertises
changed: its config, or the GPUs' MIG layout or mode. Nothing changed, no restart. The text comes
from ``gpuprov.core.hostfiles.device_plugin``, the model verify checks against."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import server

from gpuprov.controller.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.core.hostfiles import device_plugin as config
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import CRI_SOCKETS, KUBELET_DEVICE_PLUGIN_DIR, POD_RESOURCES_SOCKET


def watch(plan: HostPlan) -> Watch:
    return Watch(paths=(plan.device_plugin.device_plugin_config_path,))


@deploy("Device plugin config")
def device_plugin(
    view: HostView, mig_changes: Sequence[OperationMeta] = ()
) -> OperationMeta | None:
    """The config file, then the plugin restarted if the file or the GPUs' MIG state changed;
    returns the restart (None when nothing could change).

    ``mig_changes`` are the MIG apply operations of this run (``gpuprov.controller.deploys.mig``). The
    plugin enumerates its devices only when it (re)starts its plugins and never notices a MIG
    change by itself (NVIDIA/k8s-device-plugin#992): after a re-layout it keeps advertising the
    old MIG devices. Its SIGHUP handler is such a restart: it stops every plugin, loads the
    config and builds the device lists again from NVML (``goto restart`` -> ``startPlugins`` ->
    ``GetPlugins`` in cmd/nvidia-device-plugin/main.go,
    https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/cmd/nvidia-device-plugin/main.go),
    so the same reload command serves a config change and a MIG change.

        device_plugin(view, mig_changes=mig.mig_layout(view))
    """
    path = view.plan.device_plugin.device_plugin_config_path
    text = config.render(view.plan)
    what = {
        "shared": f"{view.plan.sharing.strategy} x{view.plan.sharing.replicas}"
        if view.plan.sharing
        else "",
        "mig": f"MIG {view.plan.mig_strategy}",
        "whole_card": "none (whole cards)",
        "vgpu": f"none ({view.plan.vgpu.flavour}'s vGPU plugin serves the GPUs)"
        if view.plan.vgpu
        else "",
    }[view.plan.mode]
    op = ensure_file(
        view, f"device plugin config: {what}", path, text or "", present=text is not None
    )
    triggers = [t for t in (op, *mig_changes) if t is not None]
    if not triggers:
        return None
    return server.shell(
        name="device plugin restarts: its config or the GPUs' MIG state changed",
        commands=[view.plan.device_plugin.device_plugin_reload_command],
        _if=changed(*triggers),
        _timeout=view.plan.timeouts.gpuprov_timeout_service,
    )


@deploy("Device plugin registered")
def settled(view: HostView, restarts: Sequence[OperationMeta | None]) -> None:
    """After this run restarted the plugin or the kubelet, wait (``gpuprov_timeout_service``
    at most) until the kubelet has the planned devices, so that a ``gpuprov verify`` right
    after the deploy sees the node as it now is (``gpuprov.host.kubelet.settle``); the host fails,
    naming what is missing, when it does not get there. Only where verify checks the
    kubelet's devices on the node (``verify_kubelet_devices``), and not on ``vgpu`` hosts, whose
    devices the flavour's own plugin registers.

        settled(view, [device_plugin(view, mig_changes), kubelet(view)])
    """
    plan = view.plan
    ops = [op for op in restarts if op is not None]
    if (
        not ops
        or not plan.kubelet.verify_kubelet_devices
        or view.plan.vgpu
        or not view.plan.resources
    ):
        return
    timeout = plan.timeouts.gpuprov_timeout_service
    wants = [f"--want={r}={n}" for r, n in sorted(view.plan.resources.items())]
    server.shell(
        name="the kubelet has the planned devices: "
        + ", ".join(f"{r.partition('/')[2]} {n}" for r, n in view.plan.resources.items()),
        commands=[
            shlex.join(
                [
                    plan.agent.gpuprov_python,
                    plan.agent.gpuprov_agent_path,
                    "settle",
                    f"--dir={KUBELET_DEVICE_PLUGIN_DIR}",
                    *wants,
                    f"--timeout={timeout}",
                    # ... and the kubelet lists its pods again, so that verify's count of the
                    # devices they hold is whole.
                    f"--pod-resources={POD_RESOURCES_SOCKET}",
                    f"--runtime={CRI_SOCKETS[plan.runtime.container_runtime]}",
                ]
            )
        ],
        _if=changed(*ops),
        # The agent gives up first and says what is missing; this only bounds the round trip.
        _timeout=timeout + 30,
    )
