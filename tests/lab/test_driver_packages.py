"""The driver as Debian names and versions it, on the lab.

Against Debian's real archive (through the lab's apt proxy): what the deploy would install
resolves, with its pin file, to exactly the planned version for both bookworm's 535.261.03-1
and bookworm-backports' 535.216.03-2~bpo12+1 (only simulated: the kernel module cannot be built
in the lab); a version the archive lacks is refused at pre-flight, naming the ones it has.

Against the lab's own repository, which mirrors Debian's package set: a first install (the
older backports version), a second deploy that changes nothing, an upgrade in place to
bookworm's version and back, each verified.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from gpuprov.contract import APT_PIN_PATH
from gpuprov.facts.packages import parse_packages
from gpuprov.hostfiles import apt_preferences
from gpuprov.lab.packages import DEBIAN_VERSIONS, DRIVER_VERSIONS
from gpuprov.operations.packages import install_specs, resolution, targets
from gpuprov.packaging.profiles import driver_packages, profile

pytestmark = pytest.mark.lab

HOST = "lab-a100-01"
DEBIAN = "/usr/share/keyrings/debian-archive-keyring.gpg"
REAL_SOURCE = (
    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-backports\n"
    f"Components: main contrib non-free non-free-firmware\nSigned-By: {DEBIAN}\n"
)
# A private apt root on the host: its own sources, lists, cache, preferences and an empty dpkg
# status (what a bare host would install), so the host's own apt state is not touched.
ROOT = "/tmp/real-debian"
APT = (
    f"-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts={ROOT}/sources "
    f"-o Dir::State::Lists={ROOT}/lists -o Dir::Cache={ROOT}/cache "
    f"-o Dir::State::status={ROOT}/status -o Dir::Etc::Preferences=/dev/null "
    f"-o Dir::Etc::PreferencesParts={ROOT}/preferences.d"
)


def settings(version: str) -> dict:
    return {
        "driver_version": version,
        "driver_source": "debian-nonfree",
        "driver_persistenced": True,
        "driver_fabric_manager": False,
        "container_toolkit_version": None,
    }


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
    plan = SimpleNamespace(name=HOST, settings=settings(version))
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


@pytest.mark.lab_fresh
def test_a_version_the_real_archive_lacks_is_refused_at_preflight(lab, tmp_path):
    source = "/etc/apt/sources.list.d/debian-non-free.sources"
    lab.run(HOST, f"cat > {source} <<'EOF'\n{REAL_SOURCE}EOF")
    try:
        lab.run(HOST, "apt-get -q update", timeout=600)
        missing = lab.inventory_copy(
            tmp_path, group_data_code='driver_version = "535.183.01"\ndriver_repo_url = None\n'
        )
        result = lab.deploy(missing, "--limit", HOST, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert (
            "pre-flight: driver 535.183.01 is not in this host's apt sources: nvidia-driver has "
            "535.261.03-1, 535.216.03-2~bpo12+1"
        ) in output, output[-3000:]
        node = lab.testinfra(HOST)
        assert not node.package("nvidia-driver").is_installed
        assert not node.file(APT_PIN_PATH).exists
    finally:
        lab.run(HOST, f"rm -f {source} && apt-get -q update", check=False, timeout=600)


DRIVER = "nvidia-driver"
EXACT = ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1")
DEPENDENCIES = ("nvidia-driver-libs", "nvidia-alternative")  # not named by the deploy


def dpkg_log_length(lab, host: str) -> int:
    return int(lab.run(host, "wc -l < /var/log/dpkg.log").stdout)


def dpkg_actions(lab, host: str, since: int) -> list[tuple[str, str, str, str]]:
    """(action, package, old, new) of the driver's packages in dpkg.log after line ``since``."""
    lines = lab.run(host, f"tail -n +{since + 1} /var/log/dpkg.log").stdout.splitlines()
    return [
        (f[2], f[3].split(":")[0], f[4], f[5])
        for f in map(str.split, lines)
        if f[2] in ("install", "upgrade", "remove", "purge")
        and f[3].split(":")[0] in EXACT + DEPENDENCIES
    ]


def assert_driver(lab, inventory, upstream: str) -> None:
    version = DEBIAN_VERSIONS[upstream]
    result = lab.verify(inventory)
    assert result.returncode == 0, result.stdout + result.stderr
    for host in lab.names:
        assert lab.probe(host)["driver_version"] == upstream, host
        node = lab.testinfra(host)
        for name in EXACT + DEPENDENCIES:
            assert node.package(name).version == version, (host, name)
        held = node.check_output("apt-mark showhold").split()
        assert set(EXACT) | {"nvidia-persistenced"} <= set(held), host
        pin = node.file(APT_PIN_PATH).content_string
        assert f"Pin: version {upstream}-*" in pin, host


def test_first_install_then_a_second_deploy_that_changes_nothing(lab, deployed):
    old, _ = DRIVER_VERSIONS
    assert_driver(lab, lab.inventory, old)
    result = lab.deploy()
    assert "Starting operation" not in result.stdout, result.stdout[-4000:]


def test_upgrade_in_place_to_bookworm_and_back_to_backports(lab, deployed, tmp_path):
    old, new = DRIVER_VERSIONS
    upgraded = lab.inventory_copy(tmp_path, group_data_code=f'driver_version = "{new}"\n')
    assert {h["driver_version"] for h in lab.plan(upgraded).values()} == {new}

    start = {host: dpkg_log_length(lab, host) for host in lab.names}
    lab.deploy(upgraded)
    assert_driver(lab, upgraded, new)
    for host in lab.names:
        actions = dpkg_actions(lab, host, start[host])
        # In place: every package upgraded from the old version, none removed or installed.
        assert {a[0] for a in actions} == {"upgrade"}, (host, actions)
        assert {(a[1], a[2], a[3]) for a in actions} == {
            (n, DEBIAN_VERSIONS[old], DEBIAN_VERSIONS[new]) for n in EXACT + DEPENDENCIES
        }, (host, actions)

    # Back to the lab's version: a downgrade (dpkg logs it as an upgrade), in place as well.
    start = {host: dpkg_log_length(lab, host) for host in lab.names}
    lab.deploy()
    assert_driver(lab, lab.inventory, old)
    for host in lab.names:
        assert {a[0] for a in dpkg_actions(lab, host, start[host])} == {"upgrade"}, host
