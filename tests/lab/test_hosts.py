"""`gpuprov lab up` gives SSH hosts that look like GPU nodes before gpuprov runs."""

from __future__ import annotations

import json
import time

import pytest
from gpuprov_lab import kubebuild

from gpuprov.host.contract import KUBELET_CONFIG_PATH

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
    config = node.file(KUBELET_CONFIG_PATH)
    assert "kind: KubeletConfiguration" in config.content_string
    assert node.run("containerd config dump").rc == 0
    assert node.check_output("kubelet --version") == f"Kubernetes v{kubebuild.KUBERNETES_VERSION}"


def test_each_host_is_a_ready_node_with_the_kubelets_default_pods_and_no_gpus_before_a_deploy(lab):
    # The real kubelet registered each host with the lab's API server; the device plugin waits
    # for NVML, which comes with the driver package the deploy installs.
    nodes = lab.nodes()
    assert sorted(nodes) == sorted(lab.names)
    for name, node in nodes.items():
        assert node["ready"], name
        assert node["allocatable"] == {"pods": "110"}, name


def test_device_plugin_restarts_on_each_reload(lab):
    # The real plugin re-reads its config on SIGHUP, which the unit's reload sends.
    def reloads() -> int:
        journal = lab.run(
            "lab-h200-01", "journalctl -o cat -u nvidia-device-plugin.service", check=False
        ).stdout
        return journal.count("Received SIGHUP, restarting.")

    before = reloads()
    lab.run("lab-h200-01", "systemctl reload nvidia-device-plugin.service")
    deadline = time.monotonic() + 10
    while reloads() == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert reloads() == before + 1


def test_sim_state_starts_with_the_driver_not_loaded(lab):
    for host in lab.hosts:
        state = json.loads(lab.run(host.name, "cat /var/lib/nvidia-sim/gpus.json").stdout)
        assert state["driver"]["loaded"] is False
        assert [g["model"] for g in state["gpus"]] == [host.model] * host.count
