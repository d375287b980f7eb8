"""Named Debian packages as dpkg and apt see them (``gpuprov.host.packages``, the command the
probe runs too): the installed version and hold state, and every version the host's apt sources
offer, which is what a planned version is resolved against."""

from __future__ import annotations

from pyinfra.api import FactBase
from typing_extensions import override

from gpuprov.host import packages as dpkg
from gpuprov.host.packages import PackageState


class PackageStates(FactBase[dict[str, PackageState]]):
    """
    Version, hold state and apt's versions of each named package dpkg or apt knows; unknown
    ones are left out.

    .. code:: python

        {
            "nvidia-driver": {"version": "535.216.03-2~bpo12+1", "held": True,
                              "available": ["535.261.03-1", "535.216.03-2~bpo12+1"]},
            "nvidia-kernel-dkms": {"version": None, "held": False, "available": []},
        }
    """

    default = dict

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return "dpkg-query"

    @override
    def command(self, packages: list[str]) -> str:
        return dpkg.command(packages)

    @override
    def process(self, output: list[str]) -> dict[str, PackageState]:
        return dpkg.parse(output)
