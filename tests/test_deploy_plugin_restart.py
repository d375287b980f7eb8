"""The device plugin is restarted whenever what it advertises changes (its config, the MIG layout,
the MIG mode) and not otherwise: deploys/gpu_node.py on pyinfra's @fake connector.

Each case is one host whose device plugin config is already as planned (so the config alone
never restarts the plugin); only its GPUs' MIG state differs from case to case.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import pyinfra.context
import pytest
from click.testing import CliRunner
from pyinfra_cli.main import cli

from gpuprov.controller.inventory import load
from gpuprov.core.catalog import find_model
from gpuprov.core.hostfiles import device_plugin
from gpuprov.core.hostfiles import kubelet as kubelet_file
from gpuprov.core.plan import HostPlan, build
from tests.probes import matching_probe
from tests.test_deploy_fake import CONTAINERD_STATE, containerd_responses

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = "deploys/gpu_node.py"
HOST = "@fake/node"
RELOAD = "reload-the-device-plugin"  # the group data's device_plugin_reload_command
LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
H100 = find_model("H100-80GB").nvml_names[0]


def _file_line(path: str, text: str) -> str:
    """One line of the managed-files section: the file as gpuprov wrote it."""
    sha1 = hashlib.sha1(text.encode()).hexdigest()
    return f"{path}\t644\troot\troot\t{sha1}\t"


def plan_of(tmp_path: Path, mode: str, data: dict) -> HostPlan:
    """The plan of the fake host (its name is in the config file's header)."""
    directory = tmp_path / f"plan-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    (directory / "inv.py").write_text(f"{mode} = [({HOST!r}, {group_data(data)!r})]\n")
    return build(load(str(directory / "inv.py"))).host(HOST)


def _deploy(
    tmp_path: Path, monkeypatch, mode: str, probe: dict, data: dict, kubelet_as_planned=False
) -> list[str]:
    """Deploy one fake host whose state is ``probe``; the commands it ran. Its kubelet drop-in
    is missing (the deploy writes it and restarts the kubelet) unless ``kubelet_as_planned``."""
    plan = plan_of(tmp_path, mode, data)
    config_path = plan.device_plugin.device_plugin_config_path
    text = device_plugin.render(plan)
    managed = [_file_line(config_path, text)] if text is not None else [f"{config_path}\t-"]
    if kubelet_as_planned:
        managed.append(_file_line(kubelet_file.target(plan), kubelet_file.render(plan)))
    node = json.dumps({k: v for k, v in probe.items() if k not in ("files", "containerd")})
    state = [
        "@@ host:probe",
        *node.splitlines(),
        "@@ host:managed",
        "@@ files",
        *managed,
        "@@ host:hardware",
        "@@ host:containerd",
        *CONTAINERD_STATE,
    ]
    responses = {"@@ host:probe": state, "agent.pyz probe": node, **containerd_responses()}
    host_data = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}
    inventory = tmp_path / "fake.py"
    inventory.write_text(f"{mode} = ([({HOST!r}, {host_data!r})], {group_data(data)!r})\n")
    argv = ["-y", str(inventory), DEPLOY]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["pyinfra", *argv])
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    (host,) = pyinfra.context.state.inventory
    return list(host.connector.executed_commands)


def group_data(data: dict) -> dict:
    # No driver pinned: the driver's steps need apt state this fake host does not answer.
    return {
        "gpu_model": "A100-80GB",
        "gpu_count": 2,
        "kubelet_config_dir": "/etc/kubernetes/kubelet.conf.d",
        "device_plugin_reload_command": RELOAD,
        **data,
    }


MIG = {"gpu_model": "H100-80GB", "mig_layout": LAYOUT}


@pytest.fixture
def mig_probe(tmp_path) -> dict:
    """A MIG host's probe with every GPU as planned."""
    probe = matching_probe(plan_of(tmp_path, "mig", MIG))
    for gpu in probe["gpus"]:
        gpu["name"] = H100
    return probe


def restarts(commands: list[str]) -> int:
    return sum(RELOAD in c for c in commands)


def test_a_mig_host_already_as_planned_gets_no_restart(tmp_path, monkeypatch, mig_probe):
    commands = _deploy(tmp_path, monkeypatch, "mig", mig_probe, MIG)
    assert not any("agent.pyz apply" in c for c in commands)
    assert restarts(commands) == 0


def test_a_changed_mig_layout_restarts_the_plugin_once_after_the_apply(
    tmp_path, monkeypatch, mig_probe
):
    probe = copy.deepcopy(mig_probe)
    probe["gpus"][1]["gpu_instances"] = probe["gpus"][1]["gpu_instances"][:1]  # one GI lost

    commands = _deploy(tmp_path, monkeypatch, "mig", probe, MIG)

    apply = next(n for n, c in enumerate(commands) if "agent.pyz apply" in c)
    restart = [n for n, c in enumerate(commands) if RELOAD in c]
    assert len(restart) == 1 and restart[0] > apply


def test_a_mig_mode_change_restarts_the_plugin(tmp_path, monkeypatch, mig_probe):
    probe = copy.deepcopy(mig_probe)
    probe["gpus"][0].update(mig={"current": False, "pending": False}, gpu_instances=[])

    commands = _deploy(tmp_path, monkeypatch, "mig", probe, MIG)

    assert any("agent.pyz apply" in c for c in commands)
    assert restarts(commands) == 1


def test_mig_turned_off_on_a_whole_card_host_restarts_the_plugin(tmp_path, monkeypatch):
    plan = plan_of(tmp_path, "whole_card", {})
    probe = matching_probe(plan)
    probe["gpus"][0]["mig"] = {"current": True, "pending": True}

    commands = _deploy(tmp_path, monkeypatch, "whole_card", probe, {})

    assert any("agent.pyz apply --layout /run/gpuprov/mig-off.json" in c for c in commands)
    assert restarts(commands) == 1


def test_a_whole_card_host_as_planned_gets_no_restart(tmp_path, monkeypatch):
    probe = matching_probe(plan_of(tmp_path, "whole_card", {}))
    commands = _deploy(tmp_path, monkeypatch, "whole_card", probe, {})
    assert restarts(commands) == 0


# --- after a restart the deploy waits until the kubelet has the planned devices


def settles(commands: list[str]) -> list[str]:
    return [c for c in commands if "agent.pyz settle" in c]


def test_after_a_restart_the_deploy_waits_for_the_planned_devices(tmp_path, monkeypatch, mig_probe):
    probe = copy.deepcopy(mig_probe)
    probe["gpus"][0].update(mig={"current": False, "pending": False}, gpu_instances=[])

    commands = _deploy(tmp_path, monkeypatch, "mig", probe, MIG)

    [settle] = settles(commands)
    assert commands.index(settle) > max(n for n, c in enumerate(commands) if RELOAD in c)
    plan = plan_of(tmp_path, "mig", MIG)
    for resource, count in plan.resources.items():
        assert f"--want={resource}={count}" in settle
    assert "--dir=/var/lib/kubelet/device-plugins" in settle


def test_no_restart_no_wait(tmp_path, monkeypatch, mig_probe):
    commands = _deploy(tmp_path, monkeypatch, "mig", mig_probe, MIG, kubelet_as_planned=True)
    assert [c for c in commands if "systemctl restart kubelet" in c] == []
    assert settles(commands) == []


def test_a_kubelet_restart_alone_is_waited_for(tmp_path, monkeypatch, mig_probe):
    commands = _deploy(tmp_path, monkeypatch, "mig", mig_probe, MIG)
    kubelet = [n for n, c in enumerate(commands) if "systemctl restart kubelet" in c]
    assert restarts(commands) == 0 and len(kubelet) == 1
    [settle] = settles(commands)
    assert commands.index(settle) > kubelet[0]


def test_no_wait_where_verify_does_not_check_the_kubelets_devices(tmp_path, monkeypatch, mig_probe):
    probe = copy.deepcopy(mig_probe)
    probe["gpus"][0].update(mig={"current": False, "pending": False}, gpu_instances=[])
    data = {**MIG, "verify_kubelet_devices": False}

    commands = _deploy(tmp_path, monkeypatch, "mig", probe, data)

    assert restarts(commands) == 1 and settles(commands) == []
