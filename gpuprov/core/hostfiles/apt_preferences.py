"""The apt pin file (``/etc/apt/preferences.d/gpuprov-nvidia.pref``, apt_preferences(5)): the
driver's and the container toolkit's packages pinned to the planned upstream versions.

The pin is what makes apt pick the planned version for every package of the driver, its
dependencies included (Debian's ``nvidia-driver`` depends on a dozen packages at its exact
version; naming only the top ones to ``apt-get install`` leaves the rest at the newest version
and fails). Priority 1001 lets apt move to it even when that is a downgrade. ``apt-mark hold``
(the deploy) keeps them there against ``apt upgrade``.

>>> from types import SimpleNamespace as areas
>>> Plan = areas(name="gpu-1", driver=areas(driver_version="535.216.03",
...     driver_source="debian-nonfree", driver_persistenced=True,
...     driver_fabric_manager=False), runtime=areas(container_toolkit_version=None))
>>> print(render(Plan, "debian"), end="")
# Written by gpuprov: the NVIDIA driver and container toolkit stay at the planned versions.
<BLANKLINE>
Explanation: NVIDIA driver 535.216.03 (debian-nonfree)
Package: src:nvidia-graphics-drivers
Pin: version 535.216.03-*
Pin-Priority: 1001
>>> check(Plan, {APT_PIN_PATH: render(Plan, "debian"), OS_RELEASE_PATH: "ID=debian"})
[]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import Report
from gpuprov.core.packaging.profiles import (
    TOOLKIT_PACKAGES,
    ProfileError,
    driver_packages,
    os_release_id,
    select,
)
from gpuprov.host.contract import APT_PIN_PATH, APT_PIN_PRIORITY, OS_RELEASE_PATH

CHECK = "apt-pin"
HEADER = (
    "# Written by gpuprov: the NVIDIA driver and container toolkit stay at the planned versions.\n"
)


@dataclass(frozen=True)
class Record:
    """One apt preferences record."""

    explanation: str
    packages: tuple[str, ...]
    version: str

    def kind(self, explanation: str) -> bool:
        """Whether a record explained as ``explanation`` pins the same thing as this one."""
        return explanation.rsplit(" ", 2)[0] == self.explanation.rsplit(" ", 2)[0]

    def fields(self) -> dict[str, str]:
        return {
            "Package": " ".join(self.packages),
            "Pin": f"version {self.version}",
            "Pin-Priority": str(APT_PIN_PRIORITY),
        }

    def text(self) -> str:
        lines = [f"Explanation: {self.explanation}"]
        lines += [f"{k}: {v}" for k, v in self.fields().items()]
        return "\n".join(lines) + "\n"


def version_pattern(planned: str) -> str:
    """The ``Pin: version`` of a planned version: every Debian revision of an upstream one.

    >>> version_pattern("535.216.03"), version_pattern("1.17.8-1")
    ('535.216.03-*', '1.17.8-1')
    """
    return planned if "-" in planned else f"{planned}-*"


def records(plan: Any, distribution: str | None) -> list[Record]:
    """The records the plan wants; ``distribution`` is the host's os-release ID (it chooses the
    driver's source when ``driver_source`` is unset)."""
    out = []
    version = plan.driver.driver_version
    if version:
        source = select(plan.driver.driver_source, distribution)
        packages = driver_packages(
            source, version, plan.driver.driver_persistenced, plan.driver.driver_fabric_manager
        )
        out.append(
            Record(
                f"NVIDIA driver {version} ({source.name})",
                packages.pin,
                version_pattern(version),
            )
        )
    toolkit = plan.runtime.container_toolkit_version
    if toolkit:
        out.append(
            Record(
                f"NVIDIA container toolkit {toolkit} (libnvidia-container)",
                TOOLKIT_PACKAGES,
                version_pattern(toolkit),
            )
        )
    return out


def needs_distribution(plan: Any) -> bool:
    """Whether the records depend on the host's /etc/os-release."""
    return bool(plan.driver.driver_version) and plan.driver.driver_source is None


def paths(plan: Any) -> Wanted:
    """The pin file, and the host's os-release when the source follows the distribution."""
    return Wanted(files=(APT_PIN_PATH,) + ((OS_RELEASE_PATH,) if needs_distribution(plan) else ()))


def render(plan: Any, distribution: str | None) -> str | None:
    """The file's text, or None when there is nothing to pin (the file must then be absent)."""
    wanted = records(plan, distribution)
    if not wanted:
        return None
    return HEADER + "".join(f"\n{r.text()}" for r in wanted)


def parse(text: str) -> list[dict[str, str]]:
    """The records of an apt preferences file, each as its fields (comments dropped)."""
    out, current = [], {}
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                out.append(current)
            current = {}
            continue
        key, _, value = line.partition(":")
        current[key.strip()] = " ".join(value.split())
    return out


def check(plan: Any, files: Mapping[str, str | None]) -> list[Finding]:
    """One finding per planned record the file lacks or spells differently, one per record
    gpuprov would not write."""
    report = Report(plan.name)
    try:
        wanted = records(plan, os_release_id(files.get(OS_RELEASE_PATH)))
    except ProfileError as e:
        report.add(CHECK, "a package source for the driver", str(e), "set driver_source")
        return report.findings
    text = files.get(APT_PIN_PATH)
    if not wanted:
        if text is not None:
            report.add(CHECK, f"no {APT_PIN_PATH}", "present", "run the deploy (it removes it)")
        return report.findings
    if text is None:
        report.add(CHECK, APT_PIN_PATH, "missing", "run the deploy")
        return report.findings
    found = parse(text)
    for record in wanted:
        fields = record.fields()
        # The file's record for the same thing: its Explanation names it ("NVIDIA driver").
        same = next((f for f in found if record.kind(f.get("Explanation", ""))), None)
        if same is not None:
            found.remove(same)
            same = {k: v for k, v in same.items() if k != "Explanation"}
            if same == fields:
                continue
        report.add(
            CHECK,
            f"{record.explanation}: {_spell(fields)} in {APT_PIN_PATH}",
            _spell(same) if same else "no such record",
            "run the deploy (it rewrites the pin file)",
        )
    for extra in found:
        report.add(
            CHECK,
            f"only gpuprov's records in {APT_PIN_PATH}",
            _spell({k: v for k, v in extra.items() if k != "Explanation"}),
            "run the deploy (it rewrites the pin file)",
        )
    return report.findings


def _spell(fields: Mapping[str, str]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in fields.items())
