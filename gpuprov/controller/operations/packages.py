"""Debian packages at the version a plan means on this host's apt sources: resolved, installed
in place (upgrade or downgrade, never a purge), held; the packages they replace removed in the
same transaction."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpuprov.controller.facts.packages import PackageStates
from gpuprov.controller.limits import APT_OPTIONS
from gpuprov.controller.operations.refuse import refuse
from gpuprov.core.packaging.profiles import DriverPackages
from gpuprov.core.packaging.resolve import Resolution, resolve
from gpuprov.host.packages import PackageState

# pyinfra's apt.packages uses the same non-interactive switches; keep the admin's conffiles.
APT_INSTALL = (
    f"DEBIAN_FRONTEND=noninteractive apt-get {APT_OPTIONS} -y -o Dpkg::Options::=--force-confdef "
    "-o Dpkg::Options::=--force-confold --allow-downgrades install"
)


def pending(
    current: Mapping[str, PackageState], packages: Mapping[str, str], held: bool = True
) -> tuple[list[str], list[str]]:
    """(packages not at their exact version, packages whose hold must change)."""
    wrong = [p for p, v in packages.items() if current.get(p, {}).get("version") != v]
    holds = [p for p in packages if current.get(p, {}).get("held", False) != held]
    return wrong, holds


def installed(current: Mapping[str, PackageState], names: Sequence[str]) -> list[str]:
    """Those of ``names`` that are installed."""
    return [p for p in names if current.get(p, {}).get("version")]


def resolution(
    current: Mapping[str, PackageState],
    packages: Sequence[str],
    version: str,
    revision: str = ".*",
    own: Sequence[str] = (),
) -> Resolution:
    """``packages`` at the Debian version ``version`` means among what apt lists, ``own`` at
    the newest apt lists."""
    wanted = DriverPackages(exact=tuple(packages), own=tuple(own), pin=(), revision=revision)
    available = {name: state["available"] for name, state in current.items()}
    return resolve(wanted, version, available)


def targets(
    current: Mapping[str, PackageState], resolved: Resolution, own: Sequence[str]
) -> dict[str, str]:
    """Package -> the version to hold it at: the resolved one, except that a package of its own
    version stays at the version installed."""
    out = dict(resolved.versions)
    out.update({p: current[p]["version"] for p in installed(current, own)})
    return out


def install_specs(wanted: Mapping[str, str], wrong: Sequence[str], remove: Sequence[str]) -> str:
    """The `apt-get install` arguments: ``wrong`` at their wanted version, ``remove`` removed.

    >>> install_specs({"nvidia-driver": "535.261.03-1"}, ["nvidia-driver"], ["nvidia-driver-550"])
    'nvidia-driver=535.261.03-1 nvidia-driver-550-'
    """
    # `name-` removes in the same transaction (apt-get(8)): a branch change never leaves the
    # old branch's packages beside the new ones.
    return " ".join(
        [shlex.quote(f"{p}={wanted[p]}") for p in wrong] + [shlex.quote(f"{p}-") for p in remove]
    )


@operation()
def pinned(
    packages: list[str],
    version: str,
    what: str,
    revision: str = ".*",
    own: list[str] | None = None,
    remove: list[str] | None = None,
    held: bool = True,
):
    """
    Install ``packages`` at the Debian version ``version`` means on this host, hold them there.

    The version is resolved against the host's apt metadata when the operation runs (so a
    repository added earlier in the same deploy counts); a version apt does not list fails the
    host, naming what apt has, before anything is installed. A version change unholds, installs
    the new version over the old one and holds again.

    + packages: installed at exactly ``version``
    + version: upstream (``535.216.03``, the newest Debian revision spelled ``revision``) or
      a Debian version (``1.17.8-1``, exactly)
    + what: what the packages are, for messages (``driver``)
    + revision: regular expression of the Debian revisions the source spells
    + own: also installed and held, at the newest version apt lists (their own versioning)
    + remove: removed in the same transaction where installed (another branch's packages)
    + held: keep the packages on hold

    **Example:**

    .. code:: python

        pinned(
            name="Install the pinned container toolkit",
            packages=["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                      "libnvidia-container-tools", "libnvidia-container1"],
            version="1.17.8",
            what="container toolkit",
        )
    """
    own, remove = list(own or ()), list(remove or ())
    current = host.get_fact(PackageStates, packages=sorted({*packages, *own, *remove}))
    resolved = resolution(current, packages, version, revision, own)
    problem = resolved.problem(what)
    if problem:
        yield refuse(f"{problem}; nothing was installed")
        return
    wanted = targets(current, resolved, own)
    wrong, holds = pending(current, wanted, held)
    removing = installed(current, remove)
    if not wrong and not holds and not removing:
        host.noop(f"{what} {version}: {', '.join(wanted)} already at {_summary(wanted)}")
        return
    if wrong or removing:
        unhold = [p for p in wrong + removing if current.get(p, {}).get("held")]
        if unhold:
            yield StringCommand("apt-mark", "unhold", *map(shlex.quote, unhold))
        yield StringCommand(f"{APT_INSTALL} {install_specs(wanted, wrong, removing)}")
    if held:
        yield StringCommand("apt-mark", "hold", *map(shlex.quote, sorted(wanted)))
    elif holds:
        yield StringCommand("apt-mark", "unhold", *map(shlex.quote, holds))


@operation()
def unavailable(message: str):
    """
    Fail the host with ``message``: the plan asks for packages its sources cannot give.

    + message: what is missing and what the host has instead

    **Example:**

    .. code:: python

        unavailable(name="driver packages", message="debian-nonfree has no fabric manager")
    """
    yield refuse(f"{message}; nothing was installed")


def _summary(versions: Mapping[str, str]) -> str:
    return ", ".join(sorted(set(versions.values())))
