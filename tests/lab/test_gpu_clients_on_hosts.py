"""GPU clients and the device plugin around MIG changes, on the lab's hosts.

- The device plugin restarts when what it advertises changes: after a MIG layout change (the
  deploy's `device_plugin_reload_command`, `systemctl reload` in the lab, which systemd logs as
  "Reloaded ..." for the unit), and not after a deploy that changes nothing.
- A process holding `/dev/nvidia0` (the simulated driver's device node) that is not among
  `gpu_clients` blocks a MIG mode change: the host fails naming its pid, command and unit, and
  the GPU is unchanged. Listed in `gpu_clients`, its unit is stopped, the mode changes, and it
  is started again, as is every other client (the device plugin among them).
"""

from __future__ import annotations

import pytest

from gpuprov.host.contract import GPU_CLIENT_UNITS

pytestmark = pytest.mark.lab

PLUGIN = "nvidia-device-plugin.service"
HOLDER = "gpu-holder.service"
HOLDER_UNIT = """[Unit]
Description=A program using GPU 0 that gpuprov does not know (test)

[Service]
ExecStart=/bin/sh -c 'exec sleep infinity < /dev/nvidia0'
"""


def plugin_reloads(lab, host: str) -> int:
    """How often systemd has reloaded the device plugin's unit on ``host``."""
    out = lab.run(
        host, f"journalctl -u {PLUGIN} -o cat --no-pager | grep -c '^Reloaded ' || true"
    ).stdout
    return int(out.strip() or 0)


def unit(lab, host: str, name: str, prop: str) -> str:
    return lab.run(host, f"systemctl show -p {prop} --value {name}").stdout.strip()


def test_the_driver_makes_a_device_node_per_gpu(lab, deployed):
    for lab_host in lab.hosts:
        nodes = lab.run(lab_host.name, "ls /dev/nvidiactl /dev/nvidia[0-9]*").stdout.split()
        count = len(lab.probe(lab_host.name)["gpus"])
        assert sorted(nodes) == sorted(
            ["/dev/nvidiactl", *(f"/dev/nvidia{i}" for i in range(count))]
        ), lab_host.name


def test_the_plugin_restarts_after_a_layout_change_and_not_after_a_deploy_that_changes_nothing(
    lab, deployed, tmp_path
):
    mig_host = lab.in_group("mig")[0].name
    inventory = lab.inventory_copy(tmp_path)
    text = inventory.read_text().replace(
        '"mig_strategy": "mixed"}',
        '"mig_strategy": "mixed", "mig_layout_by_gpu": {1: {"7g.80gb": 1}}}',
    )
    assert "mig_layout_by_gpu" in text
    inventory.write_text(text)
    before = plugin_reloads(lab, mig_host)
    try:
        lab.deploy(inventory)  # the config file is unchanged; only GPU 1's layout changes
        assert plugin_reloads(lab, mig_host) == before + 1

        lab.deploy(inventory)
        assert plugin_reloads(lab, mig_host) == before + 1
    finally:
        lab.deploy()  # back to the lab's own plan


def test_a_gpu_holder_blocks_the_mig_mode_change_until_it_is_among_the_gpu_clients(
    lab, deployed, tmp_path
):
    host = lab.in_group("shared")[0].name
    lab.run(host, f"cat > /etc/systemd/system/{HOLDER} <<'EOF'\n{HOLDER_UNIT}EOF")
    lab.run(host, f"systemctl daemon-reload && systemctl start {HOLDER}")
    try:
        # MIG left on GPU 0, as a previous mode leaves it: the deploy turns it off (a reset).
        lab.run(host, "nvidia-smi -i 0 -mig 1 && nvidia-smi -r -i 0")
        pid = unit(lab, host, HOLDER, "MainPID")
        plugin_run = unit(lab, host, PLUGIN, "InvocationID")

        failed = lab.deploy(check=False)

        assert failed.returncode != 0
        output = failed.stdout + failed.stderr
        assert f"pid {pid} (sleep infinity) of unit {HOLDER} holds /dev/nvidia0" in output
        assert lab.probe(host)["gpus"][0]["mig"] == {"current": True, "pending": True}
        assert unit(lab, host, HOLDER, "MainPID") == pid
        for client in ("kubelet.service", PLUGIN, "nvidia-persistenced.service"):
            assert unit(lab, host, client, "ActiveState") == "active", client  # started again
        assert unit(lab, host, PLUGIN, "InvocationID") != plugin_run  # stopped and started

        clients = [*GPU_CLIENT_UNITS, HOLDER]
        inventory = lab.inventory_copy(tmp_path, group_data_code=f"\ngpu_clients = {clients!r}\n")
        plugin_run = unit(lab, host, PLUGIN, "InvocationID")

        lab.deploy(inventory)

        assert lab.probe(host)["gpus"][0]["mig"] == {"current": False, "pending": False}
        assert unit(lab, host, HOLDER, "ActiveState") == "active"
        assert unit(lab, host, HOLDER, "MainPID") != pid  # stopped for the reset, started after
        assert unit(lab, host, PLUGIN, "InvocationID") != plugin_run  # the plugin restarted
    finally:
        lab.run(host, f"systemctl stop {HOLDER}; rm -f /etc/systemd/system/{HOLDER}", check=False)
        lab.run(host, "systemctl daemon-reload", check=False)
        lab.deploy()
