"""`gpuprov verify` end to end: a pyinfra @local host with simulated GPUs and the real agent.

The host's files live under tmp paths named by the inventory's *_path / *_dir variables; its MIG
state is built with the simulated nvidia-smi (not gpuprov's applier, so the test does not lean on
code it checks), and the agent bundle probes it through pyinfra, as on a real host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import admin
from simulated import programs

from gpuprov.cli import main
from gpuprov.controller.bundle import write_bundle
from gpuprov.controller.facts.probe import AgentProbe
from gpuprov.controller.inventory import load
from gpuprov.core.checks.host import probe_command
from gpuprov.core.plan import build
from gpuprov.host.contract import KUBELET_DEVICE_PLUGIN_DIR, MIG_UNIT
from tests.containerd_binaries import (
    debian_containerd,
    node_main,
    running_containerd,
    write_rendered,
)
from tests.host_root import interpreter
from tests.probes import driver_and_mig_files, installed_packages

# mig-parted's all-balanced layout; on an A100-80GB the plan puts 2g@0, 1g@2, 1g@3, 3g@4.
PLANNED_GIS = "14:0,19:2,19:3,9:4"


def smi(*args: str) -> str:
    """Run the simulated nvidia-smi on the state file GPUPROV_NVML_SIM names."""
    done = subprocess.run(
        [str(programs()["nvidia-smi"]), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


class SimHost:
    """A MIG host on @local: simulated A100s, its files in a tmp dir, an inventory for it."""

    def __init__(self, root: Path):
        # A space and a quote in every path: the fact must quote what it sends to the shell.
        self.root = root / "gpu node's root"
        self.root.mkdir()
        self.state = self.root / "gpus.json"
        self.agent = self.root / "agent.pyz"
        self.inventory = self.root / "inventory.py"
        self.device_plugin = self.root / "device-plugin" / "config.yaml"
        self.kubelet_dir = self.root / "kubelet.conf.d"
        self.containerd = self.root / "containerd" / "config.toml"
        # Its /etc and /var/lib over this machine's (tests/host_root.py): a path without spaces.
        self.host_root = root / "host-root"
        self.python = self.host_root / "python"

    def write(self, name: str = "@local", **data) -> None:
        data = {
            "gpu_model": "A100-80GB",
            "gpu_count": 2,
            "driver_version": "535.261.03",
            "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
            "gpuprov_agent_path": str(self.agent),
            "gpuprov_python": str(self.python),
            # No systemd runs here to keep nvidia-persistenced running.
            "driver_persistenced": False,
            "device_plugin_config_path": str(self.device_plugin),
            "kubelet_config_path": str(self.root / "kubelet.yaml"),
            "kubelet_config_dir": str(self.kubelet_dir),
            "containerd_config_path": str(self.containerd),
            # The kubelet's device-plugin directory is fixed (/var/lib/kubelet/device-plugins):
            # this machine has no kubelet, so the check is off here, and on in its own tests.
            "verify_kubelet_devices": False,
            **data,
        }
        self.inventory.write_text(f"mig = [({name!r}, {data!r})]\n")

    def files(self) -> None:
        for path in (self.device_plugin, self.kubelet_dir / "50-gpuprov.conf"):
            path.parent.mkdir(parents=True, exist_ok=True)
        self.device_plugin.write_text("version: v1\nflags:\n  migStrategy: mixed\n")
        (self.root / "kubelet.yaml").write_text("kind: KubeletConfiguration\nmaxPods: 250\n")
        (self.kubelet_dir / "50-gpuprov.conf").write_text(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n"
        )
        # A kubeadm-style containerd config with what the deploy renders for it; the fixture
        # runs Debian's containerd on it, so the probe reads what containerd itself reports.
        node_main(self.containerd.parent)
        write_rendered(self.containerd, default=True)
        # The files at fixed paths, the packages and the MIG unit as the deploy leaves them.
        plan = build(load(str(self.inventory))).host("@local")
        interpreter(
            self.host_root,
            driver_and_mig_files(plan),
            installed_packages(plan),
            [MIG_UNIT] if plan.mode == "mig" else [],
        )

    def gpus(self) -> None:
        admin.create(str(self.state), "A100-80GB", 2, seed="verify")
        smi("-i", "0,1", "-mig", "1")
        smi("-r", "-i", "0,1")
        smi("mig", "-i", "0,1", "-cgi", PLANNED_GIS, "-C")


@pytest.fixture
def host(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("runs containerd in a private mount namespace: needs root")
    sim = SimHost(tmp_path)
    monkeypatch.setenv(SIM_ENV, str(sim.state))  # pyinfra's @local passes it to the agent
    write_bundle(str(sim.agent))
    sim.write()
    sim.files()
    sim.gpus()
    with running_containerd(debian_containerd(), sim.containerd):
        yield sim


def verify(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout


def findings(inventory: Path, *args: str) -> list[dict]:
    code, out = verify(str(inventory), "--format", "json", *args)
    [report] = json.loads(out)["hosts"]
    assert code == (0 if report["status"] == "ok" else 1)
    return report["findings"]


def test_host_that_matches_its_plan_exits_0(host):
    code, out = verify(str(host.inventory))
    assert code == 0, out
    assert "1 host: 1 ok, 0 drift, 0 unreachable" in out


def test_instances_moved_to_other_slots_exit_1_naming_gpu_and_slots(host):
    smi("mig", "-i", "0", "-dci")
    smi("mig", "-i", "0", "-dgi")
    smi("mig", "-i", "0", "-cgi", "19:0,19:1,14:2,9:4", "-C")  # same profile counts
    found = findings(host.inventory)
    assert {(f["gpu"], f["check"]) for f in found} == {(0, "gpu-instances")}
    assert sorted((f["expected"], f["found"].split(": ", 1)[1]) for f in found) == [
        ("1g.10gb at slot 2", "1g.10gb at slot 0"),
        ("1g.10gb at slot 3", "1g.10gb at slot 1"),
        ("2g.20gb at slots 0-1", "2g.20gb at slots 2-3"),
    ]
    assert all(f["found"].startswith("GI ") for f in found)


def test_mig_disabled_pending_a_reset_exits_1(host):
    smi("mig", "-i", "1", "-dci")
    smi("mig", "-i", "1", "-dgi")
    smi("-i", "1", "-mig", "0")
    found = findings(host.inventory)
    mode = [f for f in found if f["check"] == "mig-mode"]
    assert [(f["gpu"], f["found"]) for f in mode] == [(1, "MIG enabled, pending disabled")]
    assert {f["check"] for f in found} == {"mig-mode", "gpu-instances"}


def test_a_drifted_file_is_found_through_the_probe(host):
    host.device_plugin.write_text("version: v1\nflags:\n  migStrategy: single\n")
    (host.kubelet_dir / "90-site.conf").write_text("maxPods: 300\n")
    found = findings(host.inventory)
    assert [(f["check"], f["found"]) for f in found] == [
        ("device-plugin", 'flags.migStrategy: "single"'),
        ("kubelet-max-pods", f"maxPods 300 ({host.kubelet_dir}/90-site.conf)"),
    ]


def test_what_the_deploy_put_at_fixed_paths_is_read_back_through_the_probe(host):
    upper = host.host_root / "upper"
    (upper / "etc/apt/preferences.d/gpuprov-nvidia.pref").unlink()
    (upper / "etc/gpuprov/mig-layout.json").unlink()
    (upper / "etc/systemd/system/multi-user.target.wants" / MIG_UNIT).unlink()
    status = upper / "var/lib/dpkg/status"
    status.write_text(status.read_text().replace("Status: hold ok", "Status: install ok", 1))
    found = findings(host.inventory)
    assert [(f["check"], f["expected"], f["found"]) for f in found] == [
        (
            "package-hold",
            "nvidia-driver held (apt-mark hold)",
            "nvidia-driver 535.261.03-1 not held",
        ),
        ("unit", f"{MIG_UNIT} enabled at boot", f"{MIG_UNIT} disabled"),
        (
            "mig-layout",
            "/etc/gpuprov/mig-layout.json as planned",
            "missing (removed after the deploy wrote it)",
        ),
        ("apt-pin", "/etc/apt/preferences.d/gpuprov-nvidia.pref", "missing"),
    ]


def test_missing_agent_is_a_finding_not_a_crash(host):
    host.agent.unlink()
    [finding] = findings(host.inventory)
    assert (finding["check"], finding["found"]) == ("agent", f"no agent at {host.agent}")


def test_missing_python_is_an_agent_finding(host):
    host.write(gpuprov_python="/nonexistent/python3")
    [finding] = findings(host.inventory)
    assert (finding["check"], finding["found"]) == (
        "agent",
        "no /nonexistent/python3 to run the agent",
    )


def test_bad_inventory_exits_2_with_one_message(host):
    host.write(mig_layuot={"3g.40gb": 2})
    result = CliRunner().invoke(main, ["verify", str(host.inventory)])
    assert result.exit_code == 2
    assert "mig_layuot: unknown key; did you mean mig_layout?" in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


def test_limit_that_matches_nothing_exits_2(host):
    result = CliRunner().invoke(main, ["verify", str(host.inventory), "--limit", "nope"])
    assert result.exit_code == 2


def test_json_on_stdout_stays_parseable(host):
    # A real process: pyinfra's own output must not reach stdout.
    [gi] = [
        g for g in sim_state.load(str(host.state))["gpus"][0]["gpu_instances"] if g["start"] == 4
    ]
    smi("mig", "-i", "0", "-dci", "-gi", str(gi["id"]))
    done = subprocess.run(
        [sys.executable, "-m", "gpuprov", "verify", str(host.inventory), "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, SIM_ENV: str(host.state)},
    )
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert report["schema"] == "gpuprov.verify/v1" and report["ok"] is False
    assert [(f["gpu"], f["check"]) for f in report["hosts"][0]["findings"]] == [
        (0, "compute-instances")
    ]


def snapshot(host, directory: Path) -> None:
    """Save the host's probe output as an air-gapped site would: DIR/<host>.json."""
    plan = build(load(str(host.inventory))).host("@local")
    directory.mkdir(exist_ok=True)
    out = subprocess.run(
        probe_command(plan), shell=True, capture_output=True, text=True, check=True
    ).stdout
    (directory / "@local.json").write_text(out)


def test_snapshot_round_trip(host, tmp_path):
    snapshots = tmp_path / "snapshots"
    snapshot(host, snapshots)
    assert verify(str(host.inventory), "--snapshot-dir", str(snapshots))[0] == 0
    # The snapshot, not the host, is compared: a change after it is not seen ...
    smi("mig", "-i", "0", "-dci")
    smi("mig", "-i", "0", "-dgi")
    assert verify(str(host.inventory), "--snapshot-dir", str(snapshots))[0] == 0
    # ... until a new snapshot is taken.
    snapshot(host, snapshots)
    found = findings(host.inventory, "--snapshot-dir", str(snapshots))
    assert [(f["gpu"], f["check"], f["found"]) for f in found] == [
        (0, "gpu-instances", "missing")
    ] * 4


def test_missing_snapshot_is_a_finding_with_the_command_to_take_it(host, tmp_path):
    [finding] = findings(host.inventory, "--snapshot-dir", str(tmp_path))
    assert finding["check"] == "unreachable"
    assert "agent.pyz" in finding["hint"] and "probe --file" in finding["hint"]


def test_corrupt_snapshot_is_a_finding_for_that_host(host, tmp_path):
    (tmp_path / "@local.json").write_text("{not json")
    [finding] = findings(host.inventory, "--snapshot-dir", str(tmp_path))
    assert finding["check"] == "probe-document"
    assert finding["expected"].endswith("@local.json")
    assert finding["found"].startswith("not JSON")


def test_unreachable_host_is_named_and_exits_1(host):
    # Nothing listens on port 1 of localhost: the connection is refused at once.
    host.write("gpu-gone", ssh_hostname="127.0.0.1", ssh_port=1)
    code, out = verify(str(host.inventory))
    assert code == 1
    assert "1 unreachable (gpu-gone)" in out


def test_fact_command_quotes_every_path():
    command = AgentProbe().command(
        agent_path="/opt/a b/agent.pyz",
        python="python3",
        files=["/etc/x y.yaml"],
        globs=["/etc/d/*.conf"],
    )
    text = command.get_raw_value()
    assert "'/opt/a b/agent.pyz' probe --file '/etc/x y.yaml' --glob '/etc/d/*.conf'" in text


def test_no_kubelet_on_the_host_is_named_per_planned_resource_not_a_crash(host):
    if Path(KUBELET_DEVICE_PLUGIN_DIR).exists():
        pytest.skip(f"this machine runs a kubelet ({KUBELET_DEVICE_PLUGIN_DIR} exists)")
    host.write(verify_kubelet_devices=True)
    found = findings(host.inventory)
    assert [(f["check"], f["expected"].split(":")[0]) for f in found] == [
        (
            "kubelet-socket",
            f"the kubelet's device manager ({KUBELET_DEVICE_PLUGIN_DIR}/kubelet.sock)",
        ),
        ("kubelet-checkpoint", "nvidia.com/mig-1g.10gb"),
        ("kubelet-checkpoint", "nvidia.com/mig-2g.20gb"),
        ("kubelet-checkpoint", "nvidia.com/mig-3g.40gb"),
    ]
    assert found[0]["found"] == f"no directory {KUBELET_DEVICE_PLUGIN_DIR}"
    assert "no such file" in found[1]["found"]


def test_agent_that_prints_no_json_is_an_agent_finding(host):
    host.agent.write_text("print('hello from the wrong file')\n")
    [finding] = findings(host.inventory)
    assert finding["check"] == "agent" and finding["found"].startswith("no probe document")


def test_malformed_files_on_the_host_are_findings_not_a_crash(host):
    host.device_plugin.write_text(
        "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing: [1]\n"
    )
    host.containerd.write_text("version = [2]\n")
    found = findings(host.inventory)
    assert ("device-plugin", "sharing.timeSlicing: a list, not a mapping") in [
        (f["check"], f["found"]) for f in found
    ]
    assert {f["check"] for f in found} <= {"device-plugin", "container-runtime", "check-failed"}
