"""The NVIDIA driver: its repository, the pinned and held packages, nouveau blacklisted,
persistenced and fabric manager, and the reboot a new kernel module needs."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import server

from gpuprov.contract import (
    DRIVER_REPO,
    FABRIC_MANAGER_UNIT,
    NOUVEAU_BLACKLIST_PATH,
    PERSISTENCED_UNIT,
)
from gpuprov.deploys import repo
from gpuprov.deploys.render import render
from gpuprov.deploys.view import HostView, Watch, ensure_file
from gpuprov.limits import reboot_limit
from gpuprov.operations.packages import pending, pinned
from gpuprov.operations.units import service


def packages(settings: dict) -> dict[str, str]:
    """Package name -> Debian version for the planned driver (and fabric manager)."""
    version = settings["driver_version"]
    branch = version.split(".")[0]
    deb_version = settings["driver_package_version"].format(version=version)
    out = {name.format(branch=branch): deb_version for name in settings["driver_packages"]}
    if settings["driver_fabric_manager"]:
        # Fabric manager must match the driver exactly (k8s.md section 4).
        out[f"nvidia-fabricmanager-{branch}"] = deb_version
    return out


def units(settings: dict) -> list[str]:
    return ([PERSISTENCED_UNIT] if settings["driver_persistenced"] else []) + (
        [FABRIC_MANAGER_UNIT] if settings["driver_fabric_manager"] else []
    )


def watch(settings: dict) -> Watch:
    if settings["driver_version"] is None:
        return Watch()
    out = Watch(
        paths=(NOUVEAU_BLACKLIST_PATH,),
        packages=tuple(packages(settings)),
        units=tuple(units(settings)),
    )
    if settings["driver_repo_url"]:
        out += repo.watch(DRIVER_REPO, settings["driver_repo_key"])
    return out


def changes(view: HostView) -> bool:
    """Whether the installed driver packages differ from the plan (a disruptive change)."""
    settings = view.settings
    if settings["driver_version"] is None:
        return False
    wrong, _ = pending(view.packages, packages(settings))
    # A first install is not disruptive: nothing can be using a GPU without a driver.
    return any(view.packages.get(p, {}).get("version") for p in wrong)


def reboot_pending(view: HostView) -> bool:
    """The driver nvidia-smi reports (the loaded module) is not the installed, planned one."""
    loaded = {g["driver_version"] for g in view.hardware["gpus"]} - {None}
    return bool(loaded) and loaded != {view.settings["driver_version"]}


@deploy("NVIDIA driver")
def driver(view: HostView) -> None:
    settings = view.settings
    version = settings["driver_version"]
    if version is None:
        return
    if settings["driver_repo_url"]:
        repo.repository(
            view,
            DRIVER_REPO,
            settings["driver_repo_url"],
            settings["driver_repo_suite"],
            settings["driver_repo_components"],
            settings["driver_repo_key"],
        )

    ensure_file(
        view,
        "blacklist nouveau",
        NOUVEAU_BLACKLIST_PATH,
        render("gpuprov-blacklist-nouveau.conf.j2"),
    )

    wanted = packages(settings)
    wrong, holds = pending(view.packages, wanted)
    install = None
    if wrong or holds:
        install = pinned(
            name=f"driver {version}: pinned and held packages",
            packages=wanted,
            _timeout=settings["gpuprov_timeout_packages"],
        )

    wanted_units = units(settings)
    if any(
        view.units.get(u, {}).get("enabled") != "enabled"
        or view.units.get(u, {}).get("active") != "active"
        for u in wanted_units
    ):
        service(
            name="driver services enabled and running",
            units=wanted_units,
            _timeout=settings["gpuprov_timeout_service"],
        )

    needs_reboot = bool(wrong) or reboot_pending(view)
    if not needs_reboot:
        return
    if settings["driver_reboot"]:
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
