"""Debian packages: pinned, held versions that move in place, and the sources they come from."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation
from pyinfra.operations import apt

from gpuprov.facts.packages import PackageState, PackageStates
from gpuprov.limits import APT_OPTIONS, APT_UPDATE
from gpuprov.operations.files import atomic

# pyinfra's apt.packages uses the same non-interactive switches; keep the admin's conffiles.
APT_INSTALL = (
    f"DEBIAN_FRONTEND=noninteractive apt-get {APT_OPTIONS} -y -o Dpkg::Options::=--force-confdef "
    "-o Dpkg::Options::=--force-confold --allow-downgrades install"
)


def pending(
    current: dict[str, PackageState], packages: dict[str, str], held: bool = True
) -> tuple[list[str], list[str]]:
    """(packages not at their pinned version, packages whose hold must change)."""
    wrong = [p for p, v in packages.items() if current.get(p, {}).get("version") != v]
    holds = [p for p in packages if current.get(p, {}).get("held", False) != held]
    return wrong, holds


@operation()
def pinned(packages: dict[str, str], held: bool = True):
    """
    Install each package at exactly its version and hold it there (``apt-mark hold``).

    A version change unholds the package, installs the new version over the old one (an upgrade
    or downgrade in place, never a purge) and holds it again.

    + packages: package name -> Debian version (``{"nvidia-driver-550-server": "550.127.05-1"}``)
    + held: keep the packages on hold

    **Example:**

    .. code:: python

        pinned(
            name="Install the pinned container toolkit",
            packages={"nvidia-container-toolkit": "1.17.8-1",
                      "nvidia-container-toolkit-base": "1.17.8-1"},
        )
    """
    current = host.get_fact(PackageStates, packages=sorted(packages))
    wrong, holds = pending(current, packages, held)
    if not wrong and not holds:
        host.noop(
            f"{', '.join(packages)} already at the pinned versions" + (" and held" if held else "")
        )
        return
    if wrong:
        unhold = [p for p in wrong if current.get(p, {}).get("held")]
        if unhold:
            yield StringCommand("apt-mark", "unhold", *map(shlex.quote, unhold))
        specs = " ".join(shlex.quote(f"{p}={packages[p]}") for p in wrong)
        # A version published after the last `apt-get update` is not in the cache yet.
        yield StringCommand(
            f"{APT_INSTALL} {specs} || {{ {APT_UPDATE} && {APT_INSTALL} {specs}; }}"
        )
    if held and (wrong or holds):
        yield StringCommand("apt-mark", "hold", *map(shlex.quote, sorted(packages)))
    elif not held and holds:
        yield StringCommand("apt-mark", "unhold", *map(shlex.quote, holds))


@operation()
def source(
    filename: str, uris: str, suites: str, components: list[str], signed_by: str | None = None
):
    """
    Ensure a deb822 apt source ``/etc/apt/sources.list.d/<filename>.sources``, written atomically.

    This is pyinfra's ``apt.sources_file`` (its comparison, its ``--diff``) with the upload
    made atomic.

    + filename: file name without ``.sources``
    + uris: repository URL (deb822 ``URIs``)
    + suites: deb822 ``Suites`` (``/`` for a flat repository)
    + components: deb822 ``Components`` (none for a flat repository)
    + signed_by: the keyring that signs the repository

    **Example:**

    .. code:: python

        source(filename="gpuprov-nvidia-driver", uris="http://repo.lan/nvidia", suites="/",
               components=[], signed_by="/etc/apt/keyrings/gpuprov-nvidia-driver.gpg")
    """
    yield from atomic(
        apt.sources_file._inner(
            filename=filename,
            uris=uris,
            suites=suites,
            components=components or None,
            signed_by=signed_by,
        ),
        mode="644",
    )


def source_text(uris: str, suites: str, components: list[str], signed_by: str | None) -> str:
    """The file ``source`` writes, as apt.sources_file builds it (to compare without a fact)."""
    lines = ["Types: deb", f"URIs: {uris}", f"Suites: {suites}"]
    if components:
        lines.append(f"Components: {' '.join(components)}")
    if signed_by:
        lines.append(f"Signed-By: {signed_by}")
    return "\n".join(lines) + "\n"
