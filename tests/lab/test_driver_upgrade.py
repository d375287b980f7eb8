"""A driver version change on the lab: the packages move in place (dpkg `upgrade`, never a
remove and install), stay held, and the loaded driver is the planned one."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab

DRIVER = "nvidia-driver-550-server"


def dpkg_log_since(lab, host: str, line: int) -> list[str]:
    return lab.run(host, f"tail -n +{line + 1} /var/log/dpkg.log").stdout.splitlines()


def dpkg_log_length(lab, host: str) -> int:
    return int(lab.run(host, "wc -l < /var/log/dpkg.log").stdout)


def assert_driver_in_place(lab, inventory, old: str, new: str, log_start: dict[str, int]) -> None:
    result = lab.verify(inventory)
    assert result.returncode == 0, result.stdout + result.stderr
    for host in lab.names:
        assert lab.probe(host)["driver_version"] == new, host
        node = lab.testinfra(host)
        assert node.package(DRIVER).version == f"{new}-1", host
        assert DRIVER in node.check_output("apt-mark showhold").split(), host
        # dpkg.log: "DATE TIME ACTION PACKAGE:ARCH OLD NEW" (a downgrade is an "upgrade" too).
        actions = [
            (fields[2], fields[4], fields[5])
            for fields in map(str.split, dpkg_log_since(lab, host, log_start[host]))
            if fields[2] in ("install", "upgrade", "remove", "purge")
            and fields[3].split(":")[0] == DRIVER
        ]
        assert actions == [("upgrade", f"{old}-1", f"{new}-1")], (host, actions)


def test_a_new_driver_version_upgrades_in_place_and_stays_held(lab, deployed, tmp_path):
    old, new = lab.run_dir.read_state()["driver_versions"]
    upgraded = lab.inventory_copy(tmp_path, group_data_code=f'driver_version = "{new}"\n')
    assert {h["driver_version"] for h in lab.plan(upgraded).values()} == {new}

    log_start = {host: dpkg_log_length(lab, host) for host in lab.names}
    lab.deploy(upgraded)
    assert_driver_in_place(lab, upgraded, old, new, log_start)

    # Back to the lab's version: a downgrade, in place as well.
    log_start = {host: dpkg_log_length(lab, host) for host in lab.names}
    lab.deploy()
    assert_driver_in_place(lab, lab.inventory, new, old, log_start)
