"""The Debian packages the deploy installs and holds, read back: each at the planned version and
on hold, and no driver package of another branch beside them.

The probe's ``packages`` section is dpkg's view of every name and pattern ``names(plan)`` lists
(``gpuprov.host.packages``, the command the deploy's facts run): the installed version and the
hold. What the plan means comes from ``gpuprov.core.packaging.planned``, as the deploy takes it:

- the driver's packages on the host's source (``driver_source``, or its /etc/os-release): those
  of the driver's version at a Debian version of it in the source's spelling (``535.216.03`` is
  ``535.216.03-2~bpo12+1`` on Debian; ``Pin: version 535.216.03-*``), those of their own version
  (``nvidia-persistenced`` on Debian) at any version; all held;
- the container toolkit's four packages at ``container_toolkit_version`` (``1.17.8`` any Debian
  revision, ``1.17.8-1`` exactly), held;
- installed driver packages of another branch or naming era of the source: the deploy removes
  them in the transaction that installs the planned driver, so one still there is drift.

Which Debian revision of the planned upstream version is installed is not compared: the pin and
the hold keep the one the deploy chose, and apt's newest revision is not read here.

>>> [f.check for f in check(plan, probe, "python3 agent.pyz probe ...")]  # doctest: +SKIP
['package', 'package-hold']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.apt_preferences import version_pattern
from gpuprov.core.hostfiles.documents import Report, one_line
from gpuprov.core.packaging import planned, profiles
from gpuprov.core.packaging.profiles import TOOLKIT_REVISION, ProfileError
from gpuprov.core.packaging.versions import pick
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import OS_RELEASE_PATH

CHECK = "package"
HOLD_CHECK = "package-hold"
HINT = "run the deploy (it installs the planned version and holds it)"


def names(plan: HostPlan) -> tuple[str, ...]:
    """The package names and dpkg-query patterns the probe reads: every one the deploy reads."""
    return tuple(dict.fromkeys(planned.driver_names(plan) + planned.toolkit_packages(plan)))


def paths(plan: HostPlan) -> Wanted:
    """The host's /etc/os-release when it chooses the driver's package source."""
    want = planned.wants(plan)
    return Wanted(files=(OS_RELEASE_PATH,) if want.driver and not want.source else ())


def check(plan: HostPlan, probe: ProbeDocument, command: str) -> list[Finding]:
    """Findings for the planned packages against the probe's ``packages`` section; ``command``
    is the probe command that writes the section (for the hint when it is missing)."""
    if not names(plan):
        return []
    report = Report(plan.name)
    section = probe.packages
    if section is None or _unread(section):
        found = "not in the probe document" if section is None else one_line(section["error"])
        report.add(
            CHECK,
            "the probe's packages section (dpkg's view of the planned packages)",
            found[:200],
            f"probe with the planned packages: {command}",
        )
        return report.findings
    want = planned.wants(plan)
    if want.driver:
        _driver(report, plan, section, probe.files or {})
    if want.toolkit:
        for name in planned.toolkit_packages(plan):
            _exact(report, section, name, want.toolkit, TOOLKIT_REVISION)
    return report.findings


def _driver(report: Report, plan: HostPlan, section: Mapping[str, Any], files: Mapping) -> None:
    text = files.get(OS_RELEASE_PATH)
    try:
        source, wanted = planned.driver_packages(
            plan, profiles.os_release_id(text if isinstance(text, str) else None)
        )
    except ProfileError:
        return  # no source for this host: the pin file's check says why (apt_preferences)
    for name in wanted.exact:
        _exact(report, section, name, wanted.version, wanted.revision)
    for name in wanted.own:
        state = section.get(name)
        if not _installed(state):
            report.add(CHECK, f"{name} installed (its own version)", "not installed", HINT)
        elif not state["held"]:
            _unheld(report, name, state["version"])
    installed = [name for name, state in section.items() if _installed(state)]
    for name in profiles.replaced(source, wanted, installed):
        report.add(
            CHECK,
            f"no {name} (not the planned driver {wanted.version} on {source.name})",
            f"{name} {section[name]['version']} installed",
            "run the deploy (it removes the other driver's packages as it installs the "
            "planned one)",
        )


def _exact(
    report: Report, section: Mapping[str, Any], name: str, version: str, revision: str
) -> None:
    """``name`` at a Debian version of ``version`` spelled ``revision``, and held."""
    state = section.get(name)
    expected = f"{name} {version_pattern(version)}"
    if not _installed(state):
        report.add(CHECK, expected, "not installed", HINT)
        return
    if pick(version, [state["version"]], revision) != state["version"]:
        report.add(CHECK, expected, f"{name} {state['version']}", HINT)
    if not state["held"]:
        _unheld(report, name, state["version"])


def _unheld(report: Report, name: str, version: str) -> None:
    report.add(
        HOLD_CHECK,
        f"{name} held (apt-mark hold)",
        f"{name} {version} not held",
        "run the deploy (it holds the planned packages, so `apt upgrade` keeps them)",
    )


def _installed(state: Any) -> bool:
    return isinstance(state, Mapping) and state.get("version") is not None


def _unread(section: Any) -> bool:
    return isinstance(section, Mapping) and isinstance(section.get("error"), str)
