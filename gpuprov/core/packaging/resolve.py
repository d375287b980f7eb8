"""The exact Debian version of every planned package, from what a host's apt metadata lists
(``apt-cache madison``), or the reason the host cannot have the plan. Pure: the deploy hands in
what the host reported.

>>> from gpuprov.core.packaging.profiles import driver_packages, profile
>>> wanted = driver_packages(profile("debian-nonfree"), "535.216.03", persistenced=False)
>>> apt = {n: ["535.261.03-1", "535.216.03-2~bpo12+1"] for n in wanted.names}
>>> resolve(wanted, "535.216.03", apt).versions["nvidia-driver"]
'535.216.03-2~bpo12+1'
>>> print(resolve(wanted, "535.1.01", apt).problem("driver"))
driver 535.1.01 is not in this host's apt sources: nvidia-driver has 535.261.03-1, 535.216.03-2~bpo12+1 (and 4 more packages)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuprov.core.packaging.profiles import TOOLKIT_PACKAGES, TOOLKIT_REVISION, DriverPackages
from gpuprov.core.packaging.versions import newest_first, pick


@dataclass(frozen=True)
class Resolution:
    planned: str
    versions: dict[str, str]  # package -> the exact Debian version to install and hold
    missing: dict[str, list[str]] = field(default_factory=dict)  # package -> what apt has

    def problem(self, what: str) -> str | None:
        """One line naming what the host lacks and what it has instead; None when complete."""
        if not self.missing:
            return None
        name, have = next(iter(self.missing.items()))
        listed = ", ".join(have) if have else "no version (unknown to apt)"
        more = f" (and {len(self.missing) - 1} more packages)" if len(self.missing) > 1 else ""
        return f"{what} {self.planned} is not in this host's apt sources: {name} has {listed}{more}"


def resolve(
    packages: DriverPackages, planned: str, available: Mapping[str, Sequence[str]]
) -> Resolution:
    """Each of ``packages.exact`` at the version ``planned`` (upstream, spelled the source's
    way) means; each of ``packages.own`` at the newest version apt has."""
    versions: dict[str, str] = {}
    missing: dict[str, list[str]] = {}
    for name in packages.own:
        have = newest_first(available.get(name, ()))
        if have:
            versions[name] = have[0]
        else:
            missing[name] = []
    for name in packages.exact:
        have = list(available.get(name, ()))
        chosen = pick(planned, have, packages.revision)
        if chosen is None:
            missing[name] = newest_first(have)
        else:
            versions[name] = chosen
    return Resolution(planned, versions, missing)


def toolkit(planned: str, available: Mapping[str, Sequence[str]]) -> Resolution:
    """The container toolkit's four packages at ``planned`` (``1.17.8`` or ``1.17.8-1``)."""
    wanted = DriverPackages(exact=TOOLKIT_PACKAGES, own=(), pin=(), revision=TOOLKIT_REVISION)
    return resolve(wanted, planned, available)
