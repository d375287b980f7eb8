"""MPS on the lab: a `shared` host switched to `sharing_strategy: mps` gets its device plugin
config, its MPS root (now and at boot) and the driver's MPS binaries, verifies, and a second
deploy changes nothing; switched back to time-slicing it verifies with nothing of MPS left
that verify would name."""

from __future__ import annotations

import pytest
import yaml

from gpuprov.host.contract import MPS_ROOT, MPS_TMPFILES_PATH

pytestmark = pytest.mark.lab

PLUGIN_CONFIG = "/etc/nvidia/device-plugin/config.yaml"


def with_mps(lab, directory, host: str):
    """The lab inventory with ``host`` sharing its GPUs with MPS (host data). The lab has no
    MPS control daemon (the chart runs it; its stand-in package answers nothing), so the real
    plugin waits for one and never registers (docs/sharing.md): the on-node check of the
    kubelet's devices, and the deploy's wait for them, are off for that host."""
    return lab.inventory_copy(
        directory,
        inventory_code=(
            f"\n# {host} shares its GPUs with MPS.\n"
            "shared = (\n"
            f"    [(h[0], {{**h[1], 'sharing_strategy': 'mps', 'verify_kubelet_devices': False}}) if h[0] == {host!r} else h\n"
            "     for h in shared[0]],\n"
            "    shared[1],\n"
            ")\n"
        ),
    )


def test_a_shared_host_switched_to_mps_and_back_converges(lab, deployed, tmp_path):
    host = lab.in_group("shared")[0].name
    mps = with_mps(lab, tmp_path, host)
    planned = lab.plan(mps)[host]["time_slicing"]
    assert planned["strategy"] == "mps"
    node = lab.testinfra(host)

    lab.deploy(mps)
    result = lab.verify(mps)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(lab.run(host, f"cat {PLUGIN_CONFIG}").stdout)
    assert config["flags"]["mpsRoot"] == MPS_ROOT
    assert config["sharing"] == {
        "mps": {
            "renameByDefault": True,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": planned["replicas"]}],
        }
    }
    root = node.file(MPS_ROOT)
    assert root.is_directory and (root.mode, root.user, root.group) == (0o755, "root", "root")
    assert node.file(MPS_TMPFILES_PATH).mode == 0o644
    assert node.package("nvidia-cuda-mps").is_installed
    assert node.file("/usr/bin/nvidia-cuda-mps-control").is_file

    again = lab.deploy(mps)
    assert "Starting operation" not in again.stdout, again.stdout[-4000:]

    # The entry is what systemd makes at boot: it makes the root again once it is gone.
    lab.run(host, f"rmdir {MPS_ROOT}")
    assert lab.verify_status(mps)[host] == "drift"
    lab.run(host, f"systemd-tmpfiles --create {MPS_TMPFILES_PATH}")
    assert lab.verify_status(mps)[host] == "ok"

    lab.deploy()
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr
    assert not node.file(MPS_TMPFILES_PATH).exists
    config = yaml.safe_load(lab.run(host, f"cat {PLUGIN_CONFIG}").stdout)
    assert "mpsRoot" not in config["flags"] and list(config["sharing"]) == ["timeSlicing"]
    again = lab.deploy()
    assert "Starting operation" not in again.stdout, again.stdout[-4000:]
