"""The driver as Debian names and versions it, against Debian's real archive.

What the deploy would install resolves, with its pin file, to exactly the planned version for
both bookworm's 535.261.03-1 and bookworm-backports' 535.216.03-2~bpo12+1. Only simulated
(`apt-get -s`), in a private apt root on this machine: lab hosts have no route to Debian (their
packages come from the lab's own repository, which mirrors this set), and the kernel module
could not be built there anyway.
"""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import pytest
from gpuprov_lab.base import mirror

from gpuprov.controller.operations.packages import install_specs, resolution, targets
from gpuprov.core.hostfiles import apt_preferences
from gpuprov.core.packaging.profiles import driver_packages, profile
from gpuprov.host.contract import APT_PIN_PATH
from gpuprov.host.packages import parse as parse_packages

HOST = "controller"
DEBIAN = "/usr/share/keyrings/debian-archive-keyring.gpg"
REAL_SOURCE = (
    f"Types: deb\nURIs: {mirror()}/debian\nSuites: bookworm bookworm-backports\n"
    f"Components: main contrib non-free non-free-firmware\nSigned-By: {DEBIAN}\n"
)
# A private apt root on this machine: its own sources, lists, cache, preferences and an empty dpkg
# status (what a bare host would install), so the host's own apt state is not touched.
ROOT = "/tmp/gpuprov-real-debian"
APT = (
    f"-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts={ROOT}/sources "
    f"-o Dir::State::Lists={ROOT}/lists -o Dir::Cache={ROOT}/cache "
    f"-o Dir::State::status={ROOT}/status -o Dir::Etc::Preferences=/dev/null "
    f"-o Dir::Etc::PreferencesParts={ROOT}/preferences.d"
)


class _Here:
    """Runs the commands on this machine, as the lab would on a host."""

    def run(self, host, command, timeout=120, check=True):
        result = subprocess.run(
            command, shell=True, capture_output=True, text=True, timeout=timeout
        )
        assert not check or result.returncode == 0, result.stdout + result.stderr
        return result


def driver_plan(version: str) -> SimpleNamespace:
    """The areas of a host plan the pin file reads."""
    return SimpleNamespace(
        name=HOST,
        driver=SimpleNamespace(
            driver_version=version,
            driver_source="debian-nonfree",
            driver_persistenced=True,
            driver_fabric_manager=False,
        ),
        runtime=SimpleNamespace(container_toolkit_version=None),
    )


@pytest.fixture(scope="module")
def lab():
    return _Here()


@pytest.fixture(scope="module")
def real_archive(lab):
    lab.run(
        HOST,
        f"rm -rf {ROOT}; mkdir -p {ROOT}/sources {ROOT}/lists/partial "
        f"{ROOT}/cache/archives/partial {ROOT}/preferences.d && touch {ROOT}/status",
    )
    lab.run(HOST, f"cat > {ROOT}/sources/debian.sources <<'EOF'\n{REAL_SOURCE}EOF")
    lab.run(HOST, f"apt-get -q {APT} update", timeout=600)
    yield
    lab.run(HOST, f"rm -rf {ROOT}", check=False)


def simulate(lab, version: str, pin: bool) -> tuple[int, dict[str, str], str]:
    """(exit status, package -> version apt would install, output) of the deploy's install of
    driver ``version`` against the real archive."""
    wanted = driver_packages(profile("debian-nonfree"), version)
    madison = lab.run(HOST, f"apt-cache {APT} madison {' '.join(wanted.names)}").stdout
    current = parse_packages(madison.splitlines())
    resolved = resolution(current, wanted.exact, version, wanted.revision, wanted.own)
    assert resolved.missing == {}, resolved.problem("driver")
    plan = driver_plan(version)
    prefs = f"{ROOT}/preferences.d/{APT_PIN_PATH.rsplit('/', 1)[1]}"
    text = apt_preferences.render(plan, "debian") if pin else ""
    lab.run(HOST, f"cat > {prefs} <<'EOF'\n{text}EOF")
    wanted_versions = targets(current, resolved, wanted.own)
    specs = install_specs(wanted_versions, list(wanted_versions), [])
    result = lab.run(HOST, f"apt-get {APT} -s install {specs}", check=False)
    installs = dict(re.findall(r"^Inst (\S+) \((\S+)", result.stdout, re.M))
    return result.returncode, installs, result.stdout + result.stderr


@pytest.mark.parametrize("version", ["535.261.03", "535.216.03"])
def test_real_archive_resolves_the_planned_version_for_every_driver_package(
    lab, real_archive, version
):
    status, installs, output = simulate(lab, version, pin=True)
    assert status == 0, output[-3000:]
    expected = "535.261.03-1" if version == "535.261.03" else "535.216.03-2~bpo12+1"
    for name in driver_packages(profile("debian-nonfree"), version).exact:
        assert installs[name] == expected, (name, installs.get(name))
    # Every package built with the driver (nvidia-driver's exact dependencies) follows it.
    of_the_driver = {
        n: v for n, v in installs.items() if v.startswith(("535.261.03-", "535.216.03-"))
    }
    assert set(of_the_driver.values()) == {expected}, of_the_driver
    assert installs["nvidia-persistenced"] == "535.171.04-1~deb12u1"


def test_without_the_pin_file_the_backports_version_does_not_resolve(lab, real_archive):
    # Why the pin file exists: nvidia-driver's exact dependencies would come from bookworm.
    status, _, output = simulate(lab, "535.216.03", pin=False)
    assert status != 0 and "unmet dependencies" in output, output[-3000:]
