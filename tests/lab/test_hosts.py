"""`gpuprov lab up` gives SSH hosts that look like GPU nodes before gpuprov runs."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.lab_fresh]


def test_every_host_answers_ssh_as_itself_with_systemd_running(lab):
    for host in lab.hosts:
        result = lab.run(host.name, "hostname; systemctl is-system-running")
        assert result.stdout.split() == [host.name, "running"]


def test_lspci_lists_the_simulated_gpus_before_any_driver(lab):
    for host in lab.hosts:
        lines = lab.run(host.name, "lspci -Dnmm -d 10de:").stdout.splitlines()
        device = {"A100-80GB": "20b2", "H100-80GB": "2330", "H200-141GB": "2335"}[host.model]
        assert len(lines) == host.count
        assert all(f'"0302" "10de" "{device}"' in line for line in lines)
        assert lab.run(host.name, "command -v nvidia-smi", check=False).returncode != 0


def test_node_parts_run_before_gpuprov(lab):
    node = lab.testinfra("lab-a100-01")
    for unit in ("containerd", "kubelet", "nvidia-device-plugin"):
        assert node.service(unit).is_running, unit
    config = node.file("/var/lib/kubelet/config.yaml")
    assert "kind: KubeletConfiguration" in config.content_string
    assert node.run("containerd config dump").rc == 0


def test_device_plugin_logs_each_sighup(lab):
    def reloads() -> int:
        return (
            lab.run(
                "lab-h200-01", "grep -c SIGHUP /var/log/nvidia-device-plugin.log", check=False
            ).stdout.strip()
            or "0"
        )

    before = int(reloads())
    lab.run("lab-h200-01", "systemctl reload nvidia-device-plugin.service")
    lab.run("lab-h200-01", "sleep 0.3")
    assert int(reloads()) == before + 1


def test_sim_state_starts_with_the_driver_not_loaded(lab):
    for host in lab.hosts:
        state = json.loads(lab.run(host.name, "cat /var/lib/nvidia-sim/gpus.json").stdout)
        assert state["driver"]["loaded"] is False
        assert [g["model"] for g in state["gpus"]] == [host.model] * host.count
