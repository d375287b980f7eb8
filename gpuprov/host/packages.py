"""Named Debian packages as dpkg and apt see them, read in one shell command: the installed
version and hold state (``dpkg-query``) and, when asked, every version the host's apt sources
offer (``apt-cache madison``), which is what a planned version is resolved against.

The deploy (``PackageStates``, ``ManagedState``) and the probe (``gpuprov verify``) run this
same command, so they read a package the same way. Stdlib only: the agent bundle carries it.

>>> parse(["nvidia-driver\\t535.216.03-2~bpo12+1\\thold\\tinstalled",
...        "nvidia-driver | 535.261.03-1 | http://repo/ ./ Packages"])["nvidia-driver"]
{'version': '535.216.03-2~bpo12+1', 'held': True, 'available': ['535.261.03-1']}
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any, TypedDict

_GLOB = set("*?[")


class PackageState(TypedDict):
    version: str | None  # None unless the package is fully installed
    held: bool  # `apt-mark hold` (dpkg selection "hold")
    available: list[str]  # the versions apt's indexes list (`apt-cache madison`), as listed


def command(packages: Sequence[str], available: bool = True) -> str:
    """``packages`` are names or dpkg-query glob patterns (``nvidia-*``: to find what is
    installed of another branch); with ``available``, apt is asked about the names only."""
    # dpkg-query exits 1 and complains on stderr for a package it has never seen; the package is
    # then simply absent from the output.
    names = " ".join(shlex.quote(p) for p in packages)
    out = (
        f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Want}}\\t"
        f"${{db:Status-Status}}\\n' {names} 2>/dev/null || true"
    )
    exact = " ".join(shlex.quote(p) for p in packages if not _GLOB & set(p))
    if available and exact:
        out += (
            f"; if command -v apt-cache >/dev/null; then apt-cache madison {exact} "
            "2>/dev/null || true; fi"
        )
    return out


def parse(lines: Sequence[str]) -> dict[str, PackageState]:
    """Each package dpkg or apt knows, from what ``command`` printed; unknown ones are left out."""
    out: dict[str, PackageState] = {}
    for line in lines:
        madison = [f.strip() for f in line.split(" | ")]
        if len(madison) == 3:
            name, version, origin = madison
            if origin.endswith("Packages"):  # binary indexes, not deb-src "Sources"
                entry = out.setdefault(name, PackageState(version=None, held=False, available=[]))
                if version not in entry["available"]:
                    entry["available"].append(version)
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            continue
        name, version, want, status = fields
        out[name] = PackageState(
            version=version if status == "installed" else None,
            held=want == "hold",
            available=out.get(name, {}).get("available", []),
        )
    return out


def read(packages: Sequence[str]) -> dict[str, Any]:
    """The probe's ``packages`` section: ``{name: {"version", "held"}}`` of each of ``packages``
    (names or patterns) that is installed or held, run here; ``{"error": why}`` when there is
    no dpkg. A package dpkg only remembers (removed, its config files left) is left out, as one
    it never saw.

    >>> read(["gpuprov-no-such-package"]) in ({}, {"error": "no dpkg-query on this host"})
    True
    """
    if shutil.which("dpkg-query") is None:
        return {"error": "no dpkg-query on this host"}
    result = subprocess.run(
        ["sh", "-c", command(packages, available=False)],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        name: {"version": state["version"], "held": state["held"]}
        for name, state in parse(result.stdout.splitlines()).items()
        if state["version"] is not None or state["held"]
    }
