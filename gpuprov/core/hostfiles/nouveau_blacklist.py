"""The nouveau blacklist (``/etc/modprobe.d/gpuprov-blacklist-nouveau.conf``): the NVIDIA
driver cannot bind a GPU that nouveau holds, so a host with a planned driver keeps nouveau out.

>>> from types import SimpleNamespace as areas
>>> Plan = areas(name="gpu-1", driver=areas(driver_version="535.261.03"))
>>> check(Plan, {NOUVEAU_BLACKLIST_PATH: render(Plan)})
[]
>>> [f.found for f in check(Plan, {NOUVEAU_BLACKLIST_PATH: "blacklist nouveau\\n"})]
['no line `options nouveau modeset=0`']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import Report
from gpuprov.host.contract import NOUVEAU_BLACKLIST_PATH

CHECK = "nouveau-blacklist"
# modprobe.d(5): `blacklist` stops nouveau loading by alias; modeset=0 keeps it from taking the
# console should something load it anyway.
LINES = ("blacklist nouveau", "options nouveau modeset=0")


def wanted(plan: Any) -> bool:
    """Whether gpuprov keeps this file on the host: only where it manages the driver."""
    return plan.driver.driver_version is not None


def paths(plan: Any) -> Wanted:
    """The blacklist, when the plan manages the driver."""
    return Wanted(files=(NOUVEAU_BLACKLIST_PATH,) if wanted(plan) else ())


def render(plan: Any) -> str:
    return (
        "# Written by gpuprov: the NVIDIA driver cannot bind a GPU that nouveau holds.\n"
        + "\n".join(LINES)
        + "\n"
    )


def check(plan: Any, files: Mapping[str, str | None]) -> list[Finding]:
    """Each required line that the host's file lacks (or the file itself)."""
    report = Report(plan.name)
    if not wanted(plan):
        return []
    text = files.get(NOUVEAU_BLACKLIST_PATH)
    if text is None:
        report.add(CHECK, NOUVEAU_BLACKLIST_PATH, "missing", "run the deploy")
        return report.findings
    present = {" ".join(line.split()) for line in text.splitlines()}
    for line in LINES:
        if line not in present:
            report.add(
                CHECK,
                f"`{line}` in {NOUVEAU_BLACKLIST_PATH}",
                f"no line `{line}`",
                "run the deploy (it rewrites the file)",
            )
    return report.findings
