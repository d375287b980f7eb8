"""Pre-flight for packages: the planned driver and container toolkit versions must be on the
host's apt sources (as its last `apt-get update` saw them), or the host is refused, naming the
versions it has, before anything is installed.

A repository this run adds is not in the host's metadata yet; its versions are checked when the
install operation runs, still before anything is installed.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from gpuprov.controller.deploys import driver, repo
from gpuprov.controller.deploys.view import HostView
from gpuprov.controller.operations.files import is_current
from gpuprov.controller.operations.packages import resolution, unavailable
from gpuprov.core.hostfiles import apt_source
from gpuprov.core.packaging.profiles import TOOLKIT_PACKAGES, TOOLKIT_REVISION, ProfileError
from gpuprov.host.contract import DRIVER_REPO, FILE_MODE, TOOLKIT_REPO


def _adds_repository(view: HostView, name: str) -> bool:
    planned = repo.planned(view, name)
    if planned is None:
        return False
    current = view.files.get(planned.source_path)
    return current is None or not is_current(
        current, apt_source.render(planned).encode(), FILE_MODE
    )


def problems(view: HostView) -> list[str]:
    """Why this host cannot have the planned packages (empty when it can, or cannot tell)."""
    plan = view.plan
    out = []
    if plan.driver.driver_version:
        try:
            _, wanted = driver.packages(view)
        except ProfileError as e:
            out.append(str(e))
        else:
            if not _adds_repository(view, DRIVER_REPO):
                resolved = resolution(
                    view.packages,
                    wanted.exact,
                    plan.driver.driver_version,
                    wanted.revision,
                    wanted.own,
                )
                out += [p for p in [resolved.problem("driver")] if p]
    toolkit = plan.runtime.container_toolkit_version
    if toolkit and not _adds_repository(view, TOOLKIT_REPO):
        resolved = resolution(view.packages, TOOLKIT_PACKAGES, toolkit, TOOLKIT_REVISION)
        out += [p for p in [resolved.problem("container toolkit")] if p]
    return out


@deploy("Pre-flight: package versions")
def available(view: HostView) -> bool:
    """Whether the planned versions are on the host's apt sources; if not, the host fails
    (only it) at the first operation, with nothing changed."""
    found = problems(view)
    for problem in found:
        logger.error(f"{host.print_prefix}pre-flight: {problem}; this host will not be changed")
    if found:
        unavailable(name="planned package versions", message="; ".join(found))
    return not found
