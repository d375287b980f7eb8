"""The driver as Debian names and versions it, on the lab.

Against the lab's own repository, which mirrors Debian's package set (tests/
test_driver_real_archive.py resolves the same against Debian's real archive): a version it
lacks is refused at pre-flight, naming the ones it has; a first install (the
older backports version), a second deploy that changes nothing, an upgrade in place to
bookworm's version and back, each verified.
"""

from __future__ import annotations

import pytest
from gpuprov_lab.packages import DEBIAN_VERSIONS, DRIVER_VERSIONS
from gpuprov_lab.services import repo_url

from gpuprov.host.contract import APT_PIN_PATH

pytestmark = pytest.mark.lab

HOST = "lab-a100-01"
# The lab's mirror of Debian's non-free driver set, as a source of the host's own (trusted: the
# test adds it without the key the deploy would install).
LAB_SOURCE = f"Types: deb\nURIs: {repo_url('non-free')}\nSuites: /\nTrusted: yes\n"


@pytest.mark.lab_fresh
def test_a_version_the_repository_lacks_is_refused_at_preflight(lab, tmp_path):
    source = "/etc/apt/sources.list.d/lab-non-free.sources"
    lab.run(HOST, f"cat > {source} <<'EOF'\n{LAB_SOURCE}EOF")
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
