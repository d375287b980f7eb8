"""kubelet ``maxPods``: a drop-in when the kubelet has a config dir, else an in-place edit;
the kubelet restarts only when its config changed. The text comes from
``gpuprov.core.hostfiles.kubelet``, the model verify checks against."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta

from gpuprov.controller.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.controller.operations import kubelet_config as kubelet_ops
from gpuprov.controller.operations.units import restarted
from gpuprov.core.hostfiles import kubelet as kubelet_file
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import KUBELET_UNIT, kubelet_drop_in_path


def watch(plan: HostPlan) -> Watch:
    if plan.kubelet.kubelet_config_dir:
        return Watch(paths=(kubelet_drop_in_path(plan.kubelet.kubelet_config_dir),))
    path = plan.kubelet.kubelet_config_path
    return Watch(paths=(path,), read=(path,))


@deploy("kubelet")
def kubelet(view: HostView) -> OperationMeta | None:
    """kubelet ``maxPods`` (a drop-in, or the main file), the kubelet restarted when it
    changed; returns the restart (None when nothing could change)."""
    plan, max_pods = view.plan, view.plan.kubelet.kubelet_max_pods
    path = kubelet_file.target(plan)
    if view.plan.kubelet.kubelet_config_dir:
        op = ensure_file(
            view, f"kubelet drop-in: maxPods {max_pods}", path, kubelet_file.render(plan) or ""
        )
    else:
        text = view.text(path)
        if text is not None and kubelet_file.render(plan, text) == text:
            return None
        op = kubelet_ops.max_pods(
            name=f"kubelet: maxPods {max_pods} in {path}", path=path, max_pods=max_pods
        )
    if not op:
        return None
    return restarted(
        name="restart kubelet",
        unit=KUBELET_UNIT,
        _if=changed(op),
        _timeout=view.plan.timeouts.gpuprov_timeout_service,
    )
