"""The container runtime: the pinned NVIDIA container toolkit and the nvidia runtime in
containerd (drop-in + ``imports``) or docker (``daemon.json``), restarted only on change."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.contract import (
    CRI_PLUGIN,
    DOCKER_DAEMON_PATH,
    TOOLKIT_REPO,
    containerd_drop_in_glob,
    containerd_drop_in_path,
)
from gpuprov.deploys import repo
from gpuprov.deploys.render import render
from gpuprov.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.hostfiles import apt_source
from gpuprov.operations import containerd, docker
from gpuprov.operations.packages import pending, pinned, resolution
from gpuprov.operations.units import restarted
from gpuprov.packaging.profiles import TOOLKIT_PACKAGES, TOOLKIT_REVISION


def watch(settings: dict) -> Watch:
    out = Watch(packages=TOOLKIT_PACKAGES if settings["container_toolkit_version"] else ())
    planned = apt_source.repository(settings, TOOLKIT_REPO)
    if planned:
        out += repo.watch(planned)
    if settings["container_runtime"] == "containerd":
        main = settings["containerd_config_path"]
        return out + Watch(paths=(containerd_drop_in_path(main), main), read=(main,))
    return out + Watch(paths=(DOCKER_DAEMON_PATH,), read=(DOCKER_DAEMON_PATH,))


@deploy("Container runtime")
def container_runtime(view: HostView) -> None:
    settings = view.settings
    version = settings["container_toolkit_version"]
    if version:
        planned = repo.planned(view, TOOLKIT_REPO)
        if planned:
            repo.repository(view, planned)
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
            )
    if settings["container_runtime"] == "containerd":
        _containerd(view)
    else:
        _docker(view)


def _containerd(view: HostView) -> None:
    main = view.settings["containerd_config_path"]
    text = view.text(main)
    version = containerd.config_version(text)
    ops = []
    if version is not None:
        ops.append(
            ensure_file(
                view,
                "containerd: nvidia runtime drop-in",
                containerd_drop_in_path(main),
                render(
                    "99-nvidia.toml.j2",
                    version=version,
                    cri_plugin=CRI_PLUGIN[version],
                    default=view.settings["container_runtime_default"],
                    main_config=main,
                ),
                validate=containerd.VALIDATE,
            )
        )
    pattern = containerd_drop_in_glob(main)
    if (
        version is None
        or view.files.get(main) is None
        or containerd.with_import(text, pattern) != text
    ):
        ops.append(
            containerd.imports(
                name=f"containerd: {main} imports the drop-ins", path=main, pattern=pattern
            )
        )
    if any(ops):
        restarted(name="restart containerd", unit="containerd.service", _if=changed(*ops))


def _docker(view: HostView) -> None:
    default = view.settings["container_runtime_default"]
    if docker.is_configured(view.text(DOCKER_DAEMON_PATH), default):
        return
    op = docker.daemon_json(
        name="docker: nvidia runtime in daemon.json", path=DOCKER_DAEMON_PATH, default=default
    )
    restarted(name="restart docker", unit="docker.service", _if=changed(op))
