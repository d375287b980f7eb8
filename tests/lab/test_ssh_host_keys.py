"""The lab knows its hosts' keys: ssh and pyinfra check them strictly and print no host-key
noise (issue #26 item 6: "Permanently added ...", "No host key for ... found in known_hosts")."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.lab]

NOISE = ("Permanently added", "No host key", "known_hosts", "REMOTE HOST IDENTIFICATION")


def ssh(lab, host: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", "-F", str(lab.ssh_config), "-o", "BatchMode=yes", *options, host, "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ssh_with_the_labs_config_prints_nothing_by_name_or_address(lab):
    for host in lab.hosts:
        for target in (host.name, host.ip):
            result = ssh(lab, target)
            assert (result.returncode, result.stderr) == (0, ""), (target, result.stderr)


def test_a_host_key_the_lab_does_not_know_is_refused(lab):
    # Host key checking is on: without the lab's known_hosts, ssh refuses the host.
    host = lab.hosts[0]
    result = ssh(lab, host.name, "-o", "UserKnownHostsFile=/dev/null")
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr


def test_pyinfra_against_the_lab_checks_host_keys_and_says_nothing_about_them(lab):
    result = subprocess.run(
        [str(lab.bin / "pyinfra"), "-y", str(lab.inventory), "exec", "--", "hostname"],
        capture_output=True,
        text=True,
        timeout=300,
        env=lab.env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    for host in lab.hosts:
        assert f"[{host.name}] {host.name}" in output, output[-3000:]
    assert not [line for line in output.splitlines() if any(n in line for n in NOISE)]


def test_verify_says_nothing_about_host_keys(lab):
    result = lab.verify()
    output = result.stdout + result.stderr
    assert not [line for line in output.splitlines() if any(n in line for n in NOISE)], output


def test_testinfra_connects_through_the_labs_known_hosts(lab):
    host = lab.hosts[0]
    assert lab.testinfra(host.name).check_output("hostname") == host.name
