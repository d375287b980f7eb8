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
from gpuprov.operations import containerd, docker
from gpuprov.operations.packages import pending, pinned
from gpuprov.operations.units import restarted

# Pinned together: each depends on the others at the same version (k8s.md 3.4).
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)


def watch(settings: dict) -> Watch:
    out = Watch(packages=TOOLKIT_PACKAGES if settings["container_toolkit_version"] else ())
    if settings["container_toolkit_version"] and settings["container_toolkit_repo_url"]:
        out += repo.watch(TOOLKIT_REPO, settings["container_toolkit_repo_key"])
    if settings["container_runtime"] == "containerd":
        main = settings["containerd_config_path"]
        return out + Watch(paths=(containerd_drop_in_path(main), main), read=(main,))
    return out + Watch(paths=(DOCKER_DAEMON_PATH,), read=(DOCKER_DAEMON_PATH,))


@deploy("Container runtime")
def container_runtime(view: HostView) -> None:
    settings = view.settings
    version = settings["container_toolkit_version"]
    if version:
        if settings["container_toolkit_repo_url"]:
            repo.repository(
                view,
                TOOLKIT_REPO,
                settings["container_toolkit_repo_url"],
                settings["container_toolkit_repo_suite"],
                settings["container_toolkit_repo_components"],
                settings["container_toolkit_repo_key"],
            )
        # Without a repository of its own the toolkit comes from the driver's source (or from
        # the host's own sources).
        wanted = dict.fromkeys(TOOLKIT_PACKAGES, version)
        wrong, holds = pending(view.packages, wanted)
        if wrong or holds:
            pinned(
                name=f"container toolkit {version}: pinned and held packages",
                packages=wanted,
                _timeout=settings["gpuprov_timeout_packages"],
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
        restarted(
            name="restart containerd",
            unit="containerd.service",
            _if=changed(*ops),
            _timeout=view.settings["gpuprov_timeout_service"],
        )


def _docker(view: HostView) -> None:
    default = view.settings["container_runtime_default"]
    if docker.is_configured(view.text(DOCKER_DAEMON_PATH), default):
        return
    op = docker.daemon_json(
        name="docker: nvidia runtime in daemon.json", path=DOCKER_DAEMON_PATH, default=default
    )
    restarted(
        name="restart docker",
        unit="docker.service",
        _if=changed(op),
        _timeout=view.settings["gpuprov_timeout_service"],
    )
