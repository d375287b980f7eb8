"""An apt repository the plan adds: its signing keyring and its deb822 source (both rendered by
``gpuprov.core.hostfiles.apt_source``), then `apt-get update` only when either changed."""

from __future__ import annotations

from pyinfra.operations import server

from gpuprov.controller.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.controller.limits import APT_UPDATE
from gpuprov.core.hostfiles import apt_source


def watch(repo: apt_source.Repository) -> Watch:
    paths = [repo.source_path] + ([repo.keyring_path] if repo.keyring_path else [])
    return Watch(paths=tuple(paths))


def repository(view: HostView, repo: apt_source.Repository):
    """Keyring + source of ``repo``; returns the `apt-get update` it scheduled, or None."""
    key_op = None
    if repo.keyring_path:
        key_op = ensure_file(
            view, f"apt keyring {repo.keyring_path}", repo.keyring_path, repo.key_data()
        )
    source_op = ensure_file(
        view, f"apt source {repo.source_path}", repo.source_path, apt_source.render(repo)
    )
    if key_op or source_op:
        return server.shell(
            name=f"apt-get update ({repo.name})",
            commands=[APT_UPDATE],
            _if=changed(key_op, source_op),
            _timeout=view.plan.timeouts.gpuprov_timeout_apt_update,
        )
    return None


def planned(view: HostView, name: str) -> apt_source.Repository | None:
    """The plan's repository ``name`` (DRIVER_REPO, TOOLKIT_REPO), if it adds one."""
    return apt_source.repository(view.plan, name)
