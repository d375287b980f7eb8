"""deploys/gpu_node.py end to end on the lab: all modes, idempotence, incremental MIG changes.

Runs pyinfra against the lab's SSH hosts (simulated GPUs, real containerd, real apt), then checks
them with the probe, testinfra and `gpuprov verify`.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab

MANAGED_FILES = (
    "/etc/containerd/conf.d/99-nvidia.toml",
    "/etc/containerd/config.toml",
    "/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf",
    "/usr/lib/gpuprov/agent.pyz",
)


def gi_ids(document: dict, index: int) -> dict[tuple[int, int], int]:
    """(start, profile id) -> GI id of one GPU."""
    gpu = next(g for g in document["gpus"] if g["index"] == index)
    return {(gi["start"], gi["profile_id"]): gi["id"] for gi in gpu["gpu_instances"]}


def test_every_mode_group_deploys_and_verifies(lab, deployed):
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr


def test_config_files_are_root_owned_0644_and_packages_held(lab, deployed):
    for name in lab.names:
        host = lab.testinfra(name)
        for path in MANAGED_FILES:
            f = host.file(path)
            assert f.is_file and f.mode == 0o644 and f.user == "root", (name, path)
        held = host.check_output("apt-mark showhold").split()
        assert {"nvidia-driver", "nvidia-kernel-dkms", "nvidia-container-toolkit"} <= set(held), (
            name
        )
        assert not host.run("ls /etc/containerd/conf.d/.*.gpuprov-tmp 2>/dev/null").stdout


def test_mig_host_has_its_layout_and_boot_unit_and_others_do_not(lab, deployed):
    for lab_host in lab.hosts:
        host = lab.testinfra(lab_host.name)
        mig = lab_host.group == "mig"
        assert host.file("/etc/gpuprov/mig-layout.json").exists == mig, lab_host.name
        assert host.file("/etc/systemd/system/gpuprov-mig.service").exists == mig, lab_host.name
        if mig:
            assert host.service("gpuprov-mig.service").is_enabled
        plugin = host.file("/etc/nvidia/device-plugin/config.yaml")
        assert plugin.exists == (lab_host.group != "whole_card"), lab_host.name


def test_a_second_deploy_changes_nothing(lab, deployed):
    result = lab.deploy()
    assert "Starting operation" not in result.stdout, result.stdout[-4000:]


def test_a_changed_layout_touches_only_the_differing_gpu(lab, deployed, tmp_path):
    mig_host = lab.in_group("mig")[0].name
    before = lab.probe(mig_host)
    inventory = lab.inventory_copy(tmp_path)
    text = inventory.read_text().replace(
        '"mig_strategy": "mixed"}',
        '"mig_strategy": "mixed", "mig_layout_by_gpu": {1: {"7g.80gb": 1}}}',
    )
    assert "mig_layout_by_gpu" in text
    inventory.write_text(text)

    lab.deploy(inventory)
    after = lab.probe(mig_host)
    assert gi_ids(after, 0) == gi_ids(before, 0)  # untouched GPU: same GIs, same ids
    assert [gi["profile"] for gi in after["gpus"][1]["gpu_instances"]] == ["7g.80gb"]
    assert lab.verify(inventory).returncode == 0

    lab.deploy()  # back to the lab's own plan
    assert gi_ids(lab.probe(mig_host), 0) == gi_ids(before, 0)
