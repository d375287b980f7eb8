"""What a plan installs, holds and runs on a host: the driver's packages on the host's package
source, the container toolkit's four packages, and the driver's services. The deploy installs,
holds and enables these (``gpuprov.controller.deploys.driver``, ``runtime``); verify reads the
same list back (``gpuprov.core.checks.packages``, ``units``): one definition for both.

Each function takes a host plan (``gpuprov.core.plan.HostPlan``: its ``driver``, ``runtime``
and ``sharing`` areas).

>>> from types import SimpleNamespace as areas
>>> plan = areas(driver=areas(driver_version="535.216.03", driver_source="debian-nonfree",
...     driver_persistenced=True, driver_fabric_manager=False), sharing=None,
...     runtime=areas(container_toolkit_version="1.17.8-1"))
>>> source, driver = driver_packages(plan, None)
>>> source.name, driver.exact[0], driver.own
('debian-nonfree', 'nvidia-driver', ('nvidia-persistenced',))
>>> driver_units(plan), toolkit_packages(plan)[0]
(['nvidia-persistenced.service'], 'nvidia-container-toolkit')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprov.core.packaging import profiles
from gpuprov.core.packaging.profiles import TOOLKIT_PACKAGES, DriverPackages, Profile
from gpuprov.host.contract import FABRIC_MANAGER_UNIT, PERSISTENCED_UNIT, SHARING_MPS


@dataclass(frozen=True)
class Wants:
    """The plan's package settings (``gpuprov/core/variables.py``)."""

    driver: str | None  # upstream driver version; None: the driver is not gpuprov's
    source: str | None  # driver_source; None: the host's /etc/os-release chooses
    persistenced: bool
    fabric_manager: bool
    mps: bool  # the host shares its GPUs with MPS: the driver's MPS binaries too
    toolkit: str | None  # container toolkit version; None: the toolkit is not gpuprov's


def wants(plan: Any) -> Wants:
    """The one place that reads the plan's package settings."""
    driver = plan.driver
    return Wants(
        driver=driver.driver_version,
        source=driver.driver_source,
        persistenced=driver.driver_persistenced,
        fabric_manager=driver.driver_fabric_manager,
        # The chart's MPS control daemon runs the host's nvidia-cuda-mps-control.
        mps=plan.sharing is not None and plan.sharing.strategy == SHARING_MPS,
        toolkit=plan.runtime.container_toolkit_version,
    )


def driver_packages(plan: Any, distribution: str | None) -> tuple[Profile, DriverPackages]:
    """The host's package source (``distribution``: the ``ID`` of its /etc/os-release) and the
    planned driver's packages on it; ProfileError when the source cannot give what the plan
    asks for. Only for a plan with a driver version."""
    want = wants(plan)
    chosen = profiles.select(want.source, distribution)
    return chosen, profiles.driver_packages(
        chosen, want.driver, want.persistenced, want.fabric_manager, want.mps
    )


def driver_names(plan: Any) -> tuple[str, ...]:
    """Every package name and installed-package pattern of the planned driver on each of its
    possible sources (the host's /etc/os-release may choose): what to read of a host before its
    source is known. Empty when the driver is not gpuprov's.

    >>> from types import SimpleNamespace as areas
    >>> driver_names(areas(driver=areas(driver_version="535.216.03",
    ...     driver_source="debian-nonfree", driver_persistenced=False,
    ...     driver_fabric_manager=False), sharing=None,
    ...     runtime=areas(container_toolkit_version=None)))[:2]
    ('nvidia-driver', 'nvidia-kernel-dkms')
    """
    want = wants(plan)
    if want.driver is None:
        return ()
    candidates = (
        [profiles.profile(want.source)] if want.source else list(profiles.profiles().values())
    )
    branch = profiles.branch_of(want.driver)
    names: dict[str, None] = {}
    for candidate in candidates:
        era = candidate.era(branch)
        planned = profiles.driver_packages(candidate, want.driver, want.persistenced, mps=want.mps)
        names.update(dict.fromkeys(planned.names))
        if era.fabric_manager:
            names[era.fabric_manager.format(branch=branch, version=want.driver)] = None
        names.update(dict.fromkeys(profiles.installed_patterns(candidate)))
    return tuple(names)


def toolkit_packages(plan: Any) -> tuple[str, ...]:
    """The container toolkit's packages, when its version is the plan's."""
    return TOOLKIT_PACKAGES if wants(plan).toolkit else ()


def driver_units(plan: Any) -> list[str]:
    """The driver's services the deploy enables and starts (none when the driver is not
    gpuprov's)."""
    want = wants(plan)
    if want.driver is None:
        return []
    return ([PERSISTENCED_UNIT] if want.persistenced else []) + (
        [FABRIC_MANAGER_UNIT] if want.fabric_manager else []
    )
