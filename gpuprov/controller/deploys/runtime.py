"""The container runtime: the pinned NVIDIA container toolkit and the nvidia runtime in
containerd (drop-in + ``imports``, proven with containerd's own dump before the swap) or docker
(``daemon.json``), restarted only on change."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.controller.deploys import repo
from gpuprov.controller.deploys.view import HostView, Watch, changed
from gpuprov.controller.operations import containerd, docker
from gpuprov.controller.operations.files import is_current
from gpuprov.controller.operations.packages import pending, pinned, resolution
from gpuprov.controller.operations.units import restarted
from gpuprov.core.hostfiles import apt_source
from gpuprov.core.hostfiles import containerd as containerd_file
from gpuprov.core.hostfiles import docker as daemon_file
from gpuprov.core.packaging import planned
from gpuprov.core.packaging.profiles import TOOLKIT_PACKAGES, TOOLKIT_REVISION
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    DOCKER_DAEMON_PATH,
    DOCKER_UNIT,
    FILE_MODE,
    TOOLKIT_REPO,
    containerd_drop_in_path,
)


def watch(plan: HostPlan) -> Watch:
    out = Watch(packages=planned.toolkit_packages(plan))
    repository = apt_source.repository(plan, TOOLKIT_REPO)
    if repository:
        out += repo.watch(repository)
    if plan.runtime.container_runtime == "containerd":
        main = plan.runtime.containerd_config_path
        return out + Watch(paths=(containerd_drop_in_path(main), main), read=(main,))
    return out + Watch(paths=(DOCKER_DAEMON_PATH,), read=(DOCKER_DAEMON_PATH,))


@deploy("Container runtime")
def container_runtime(view: HostView) -> None:
    plan = view.plan
    version = plan.runtime.container_toolkit_version
    if version:
        repository = repo.planned(view, TOOLKIT_REPO)
        if repository:
            repo.repository(view, repository)
        # Without a repository of its own the toolkit comes from the driver's source (or from
        # the host's own sources). Unresolved here: the operation resolves when it runs.
        resolved = resolution(view.packages, TOOLKIT_PACKAGES, version, TOOLKIT_REVISION)
        wrong, holds = pending(view.packages, resolved.versions)
        if resolved.missing or wrong or holds:
            pinned(
                name=f"container toolkit {version}: pinned and held packages",
                packages=list(TOOLKIT_PACKAGES),
                version=version,
                what="container toolkit",
                revision=TOOLKIT_REVISION,
                _timeout=plan.timeouts.gpuprov_timeout_packages,
            )
    if plan.runtime.container_runtime == "containerd":
        _containerd(view)
    else:
        _docker(view)


def _containerd(view: HostView) -> None:
    """Schedule the swap only when what containerd's own dump asks for differs from the host
    (or the host is to be refused: the operation says why)."""
    path = view.plan.runtime.containerd_config_path
    try:
        main, drop_in = containerd_file.render(view.plan, view.text(path), view.containerd)
    except containerd_file.Refused:
        pass
    else:
        if is_current(view.files.get(path), main.encode(), FILE_MODE) and is_current(
            view.files.get(containerd_drop_in_path(path)), drop_in.encode(), FILE_MODE
        ):
            return
    containerd.nvidia_runtime(
        name=f"containerd: nvidia runtime ({containerd_drop_in_path(path)} imported by {path})",
        path=path,
        default=view.plan.runtime.container_runtime_default,
        _timeout=view.plan.timeouts.gpuprov_timeout_service,
    )


def _docker(view: HostView) -> None:
    default = view.plan.runtime.container_runtime_default
    if daemon_file.is_configured(view.text(DOCKER_DAEMON_PATH), default):
        return
    op = docker.daemon_json(
        name="docker: nvidia runtime in daemon.json", path=DOCKER_DAEMON_PATH, default=default
    )
    restarted(
        name="restart docker",
        unit=DOCKER_UNIT,
        _if=changed(op),
        _timeout=view.plan.timeouts.gpuprov_timeout_service,
    )
