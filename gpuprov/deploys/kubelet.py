"""kubelet ``maxPods``: a drop-in when the kubelet has a config dir, else an in-place edit;
the kubelet restarts only when its config changed."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.contract import KUBELET_DROP_IN
from gpuprov.deploys.render import render
from gpuprov.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.operations import kubelet as kubelet_ops
from gpuprov.operations.units import restarted


def watch(settings: dict) -> Watch:
    if settings["kubelet_config_dir"]:
        return Watch(paths=(f"{settings['kubelet_config_dir']}/{KUBELET_DROP_IN}",))
    path = settings["kubelet_config_path"]
    return Watch(paths=(path,), read=(path,))


@deploy("kubelet")
def kubelet(view: HostView) -> None:
    settings, max_pods = view.settings, view.plan.kubelet_max_pods
    if settings["kubelet_config_dir"]:
        op = ensure_file(
            view,
            f"kubelet drop-in: maxPods {max_pods}",
            f"{settings['kubelet_config_dir']}/{KUBELET_DROP_IN}",
            render(
                "50-gpuprov.conf.j2", host=view.plan.name, mode=view.plan.mode, max_pods=max_pods
            ),
        )
    else:
        path = settings["kubelet_config_path"]
        text = view.text(path)
        if text is not None and kubelet_ops.with_max_pods(text, max_pods) == text:
            return
        op = kubelet_ops.max_pods(
            name=f"kubelet: maxPods {max_pods} in {path}", path=path, max_pods=max_pods
        )
    if op:
        restarted(
            name="restart kubelet",
            unit="kubelet.service",
            _if=changed(op),
            _timeout=settings["gpuprov_timeout_service"],
        )
