"""The host side of MPS: the directory NVIDIA's MPS control daemon works in (``mps_root``, the
device plugin's ``flags.mpsRoot``), made at every boot by a tmpfiles.d entry, on ``shared`` hosts
with ``sharing_strategy: mps``; no entry anywhere else.

The daemon creates ``<root>/<resource>/pipe`` and ``log`` (mode 0755) and ``<root>/.ready``, and
its init container mounts a 64 MiB tmpfs at ``<root>/shm``; the plugin hands every MPS client
the pipe directory and that shm as its /dev/shm
(https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/cmd/mps-control-daemon/mps/root.go,
cmd/mps-control-daemon/mount/mount-shm.go, internal/plugin/mps.go). Those belong to the chart's
DaemonSet; the root itself, root-owned and 0755 under /run (a tmpfs), belongs to the host.

>>> from types import SimpleNamespace as areas
>>> Plan = areas(name="gpu-1", mode="shared",
...     sharing=areas(strategy="mps", mps_root="/run/nvidia/mps"))
>>> print(render(Plan).splitlines()[-1])
d "/run/nvidia/mps" 0755 root root -
>>> check(Plan, {MPS_TMPFILES_PATH: render(Plan), "/run/nvidia/mps": DIRECTORY})
[]
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import Report, one_line
from gpuprov.host.contract import MPS_ROOT_MODE, MPS_TMPFILES_PATH, SHARING_MPS

CHECK = "mps"
# What the probe reports for a path that is a directory (gpuprov.host.agent.probe read_file).
DIRECTORY = {"error": "not a regular file (directory)"}


def root(plan: Any) -> str | None:
    """The MPS root ``plan`` keeps on the host; None when the host does not share with MPS."""
    sharing = plan.sharing if plan.mode == "shared" else None
    return sharing.mps_root if sharing and sharing.strategy == SHARING_MPS else None


def paths(plan: Any) -> Wanted:
    """The tmpfiles.d entry on every host (one left on a host that stopped using MPS is seen)
    and, on an MPS host, the root itself."""
    wanted_root = root(plan)
    return Wanted(files=(MPS_TMPFILES_PATH,) + ((wanted_root,) if wanted_root else ()))


def entry(path: str) -> str:
    """The tmpfiles.d(5) line that makes ``path``: quoted, ``%`` doubled (a specifier otherwise).

    >>> entry('/run/my "mps" 100%')
    'd "/run/my \\\\"mps\\\\" 100%%" 0755 root root -'
    """
    quoted = path.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'd "{quoted}" {MPS_ROOT_MODE} root root -'


def create_command() -> str:
    """What makes the root now, as the entry makes it at boot (and fixes its mode and owner)."""
    return f"systemd-tmpfiles --create {shlex.quote(MPS_TMPFILES_PATH)}"


def render(plan: Any) -> str | None:
    """The tmpfiles.d entry the deploy writes at MPS_TMPFILES_PATH; None: the host has none."""
    wanted_root = root(plan)
    if wanted_root is None:
        return None
    return (
        "# Written by gpuprov: the directory NVIDIA's MPS control daemon works in (the device\n"
        "# plugin's flags.mpsRoot), made again at every boot since /run is a tmpfs.\n"
        + entry(wanted_root)
        + "\n"
    )


def check(plan: Any, files: Mapping[str, Any]) -> list[Finding]:
    """Findings for the tmpfiles.d entry and the MPS root against ``plan``."""
    report = Report(plan.name)
    text = files.get(MPS_TMPFILES_PATH)
    wanted_root = root(plan)
    if wanted_root is None:
        if text is not None:
            report.add(
                "leftover",
                f"no MPS root entry at {MPS_TMPFILES_PATH} (the host does not share with MPS)",
                "an entry",
                "run the deploy (it removes the file, keeping a backup)",
            )
        return report.findings
    hint = f"run the deploy (it writes {MPS_TMPFILES_PATH} and makes {wanted_root})"
    if not isinstance(text, str):
        report.add(CHECK, f"the MPS root entry at {MPS_TMPFILES_PATH}", "missing", hint)
    else:
        lines = [
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if lines != [entry(wanted_root)]:
            report.add(
                CHECK,
                f"`{entry(wanted_root)}` in {MPS_TMPFILES_PATH}",
                one_line("; ".join(lines) or "no entry")[:200],
                hint,
            )
    found = files.get(wanted_root)
    if found != DIRECTORY:
        report.add(
            CHECK,
            f"the MPS root {wanted_root} (a directory)",
            "missing" if found is None else "not a directory",
            f"{create_command()} makes it (the deploy runs it when it writes the entry; "
            "every boot does)",
        )
    return report.findings
