"""The container runtime: the pinned NVIDIA container toolkit and the nvidia runtime in
containerd (drop-in + ``imports``) or docker (``daemon.json``), restarted only on change."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.deploys import repo
from gpuprov.deploys.render import render
from gpuprov.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.operations import containerd, docker
from gpuprov.operations.packages import pending, pinned
from gpuprov.operations.units import restarted

REPO = "gpuprov-nvidia-container-toolkit"
# Pinned together: each depends on the others at the same version (k8s.md 3.4).
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
DROP_IN_DIR = "/etc/containerd/conf.d"
DROP_IN = f"{DROP_IN_DIR}/99-nvidia.toml"  # the path nvidia-ctk >= 1.19 uses (k8s.md 3.2)
DAEMON_JSON = "/etc/docker/daemon.json"


def watch(settings: dict) -> Watch:
    out = Watch(packages=TOOLKIT_PACKAGES if settings["container_toolkit_version"] else ())
    if settings["container_toolkit_version"] and settings["container_toolkit_repo_url"]:
        out += repo.watch(REPO, settings["container_toolkit_repo_key"])
    if settings["container_runtime"] == "containerd":
        main = settings["containerd_config_path"]
        return out + Watch(paths=(DROP_IN, main), read=(main,))
    return out + Watch(paths=(DAEMON_JSON,), read=(DAEMON_JSON,))


@deploy("Container runtime")
def container_runtime(view: HostView) -> None:
    settings = view.settings
    version = settings["container_toolkit_version"]
    if version:
        if settings["container_toolkit_repo_url"]:
            repo.repository(
                view,
                REPO,
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
            pinned(name=f"container toolkit {version}: pinned and held packages", packages=wanted)
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
                DROP_IN,
                render(
                    "99-nvidia.toml.j2",
                    version=version,
                    cri_plugin=containerd.CRI_PLUGINS[version],
                    default=view.settings["container_runtime_default"],
                    main_config=main,
                ),
                validate=containerd.VALIDATE,
            )
        )
    pattern = f"{DROP_IN_DIR}/*.toml"
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
    if docker.is_configured(view.text(DAEMON_JSON), default):
        return
    op = docker.daemon_json(
        name="docker: nvidia runtime in daemon.json", path=DAEMON_JSON, default=default
    )
    restarted(name="restart docker", unit="docker.service", _if=changed(op))
