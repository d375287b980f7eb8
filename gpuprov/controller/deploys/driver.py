"""The NVIDIA driver: its repository, the pin file, the packages its source names at the Debian
version the host's apt sources have for the planned one (held), nouveau blacklisted,
persistenced and fabric manager, and the reboot a new kernel module needs."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import server

from gpuprov.controller.deploys import repo
from gpuprov.controller.deploys.view import HostView, Watch, ensure_file
from gpuprov.controller.limits import reboot_limit
from gpuprov.controller.operations.packages import installed, pending, pinned, resolution, targets
from gpuprov.controller.operations.units import service
from gpuprov.core.hostfiles import apt_preferences, apt_source, nouveau_blacklist
from gpuprov.core.packaging import planned, profiles
from gpuprov.core.packaging.profiles import DriverPackages, Profile
from gpuprov.core.packaging.versions import upstream
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    APT_PIN_PATH,
    DRIVER_REPO,
    NOUVEAU_BLACKLIST_PATH,
    OS_RELEASE_PATH,
)


def packages(view: HostView) -> tuple[Profile, DriverPackages]:
    """The host's source and the planned driver's packages on it (ProfileError when the source
    cannot give what the plan asks for)."""
    distribution = profiles.os_release_id(view.text(OS_RELEASE_PATH))
    return planned.driver_packages(view.plan, distribution)


def watch(plan: HostPlan) -> Watch:
    """The pin file always (it may have to go); with a planned driver, every package name and
    installed-package pattern of its possible sources (the host's /etc/os-release may choose)."""
    out = Watch(paths=(APT_PIN_PATH,))
    if plan.driver.driver_version is None:
        return out
    named = plan.driver.driver_source
    out += Watch(
        paths=(NOUVEAU_BLACKLIST_PATH,) + (() if named else (OS_RELEASE_PATH,)),
        read=() if named else (OS_RELEASE_PATH,),
        packages=planned.driver_names(plan),
        units=tuple(planned.driver_units(plan)),
    )
    repository = apt_source.repository(plan, DRIVER_REPO)
    if repository:
        out += repo.watch(repository)
    return out


def removed(view: HostView, chosen: Profile, wanted: DriverPackages) -> list[str]:
    """Installed driver packages of another branch (or naming era) of the host's source."""
    present = [name for name, state in view.packages.items() if state.get("version")]
    return profiles.replaced(chosen, wanted, present)


def changes(view: HostView) -> bool:
    """Whether the installed driver differs from the plan (a disruptive change)."""
    plan = view.plan
    version = plan.driver.driver_version
    if version is None:
        return False
    try:
        chosen, wanted = packages(view)
    except profiles.ProfileError:
        return False  # pre-flight refuses the host
    # A first install is not disruptive: nothing can be using a GPU without a driver.
    current = [view.packages[p]["version"] for p in installed(view.packages, wanted.exact)]
    moved = [v for v in current if v != version and upstream(v) != version]
    return bool(moved or removed(view, chosen, wanted))


def reboot_pending(view: HostView) -> bool:
    """The driver nvidia-smi reports (the loaded module) is not the installed, planned one."""
    loaded = {g["driver_version"] for g in view.hardware["gpus"]} - {None}
    return bool(loaded) and loaded != {view.plan.driver.driver_version}


def pin_file(view: HostView) -> None:
    """The pin file as the plan wants it: written before any install, removed when unneeded."""
    text = apt_preferences.render(view.plan, profiles.os_release_id(view.text(OS_RELEASE_PATH)))
    ensure_file(
        view,
        f"apt pin file {APT_PIN_PATH}",
        APT_PIN_PATH,
        text or "",
        present=text is not None,
    )


@deploy("NVIDIA driver")
def driver(view: HostView) -> None:
    plan = view.plan
    version = plan.driver.driver_version
    pin_file(view)
    if version is None:
        return
    chosen, wanted = packages(view)  # pre-flight has refused a host where this fails
    repository = repo.planned(view, DRIVER_REPO)
    if repository:
        repo.repository(view, repository)

    ensure_file(
        view, "blacklist nouveau", NOUVEAU_BLACKLIST_PATH, nouveau_blacklist.render(view.plan)
    )

    resolved = resolution(view.packages, wanted.exact, version, wanted.revision, wanted.own)
    remove = removed(view, chosen, wanted)
    wrong, holds = pending(view.packages, targets(view.packages, resolved, wanted.own))
    install = None
    # Unresolved here (a repository added by this run): the operation resolves when it runs.
    if resolved.missing or wrong or holds or remove:
        install = pinned(
            name=f"driver {version} from {chosen.name}: pinned and held packages",
            packages=list(wanted.exact),
            version=version,
            what="driver",
            revision=wanted.revision,
            own=list(wanted.own),
            remove=remove,
            _timeout=plan.timeouts.gpuprov_timeout_packages,
        )

    wanted_units = planned.driver_units(plan)
    if any(
        view.units.get(u, {}).get("enabled") != "enabled"
        or view.units.get(u, {}).get("active") != "active"
        for u in wanted_units
    ):
        service(
            name="driver services enabled and running",
            units=wanted_units,
            _timeout=plan.timeouts.gpuprov_timeout_service,
        )

    exact_wrong = [p for p in wrong if p in wanted.exact]
    needs_reboot = bool(resolved.missing or exact_wrong or remove) or reboot_pending(view)
    if not needs_reboot:
        return
    if plan.driver.driver_reboot:
        already_pending = reboot_pending(view)
        server.reboot(
            name=f"reboot to load driver {version}",
            delay=5,
            reboot_timeout=600,
            _timeout=reboot_limit(5, 600),
            _if=lambda: already_pending or (install is not None and install.did_change()),
        )
    else:
        logger.warning(
            f"{host.print_prefix}a reboot is pending: driver {version} is loaded only "
            "after the host restarts (driver_reboot is false, so gpuprov will not "
            "reboot it)"
        )
