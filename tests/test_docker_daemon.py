"""docker's daemon.json: what the deploy writes keeps every other key and checks clean; each
field changed gives exactly that field's finding; dockerd validates it where it exists."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from gpuprov.controller.inventory import load
from gpuprov.core.hostfiles import docker as daemon_file
from gpuprov.core.plan import build
from gpuprov.host.contract import DOCKER_DAEMON_PATH

KUBEADM_NODE = {
    "exec-opts": ["native.cgroupdriver=systemd"],
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m"},
    "storage-driver": "overlay2",
    "runtimes": {"crun": {"path": "/usr/bin/crun"}},
}


def plan_for(tmp_path, **data):
    data = {"gpu_model": "A100-80GB", "gpu_count": 2, "container_runtime": "docker", **data}
    directory = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    (directory / "inv.py").write_text(f"whole_card = [('n1', {data!r})]\n")
    return build(load(str(directory / "inv.py"))).host("n1")


@pytest.mark.parametrize("default", [True, False])
@pytest.mark.parametrize("before", [None, "", json.dumps(KUBEADM_NODE)])
def test_what_the_deploy_writes_keeps_every_key_and_checks_clean(tmp_path, before, default):
    plan = plan_for(tmp_path, container_runtime_default=default)
    text = daemon_file.render(plan, before)
    written = json.loads(text)
    for key, value in (json.loads(before) if before else {}).items():
        if key != "runtimes":
            assert written[key] == value
    assert written["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}
    assert ("default-runtime" in written) is default
    assert daemon_file.check(plan, {DOCKER_DAEMON_PATH: text}) == []
    assert daemon_file.is_configured(text, default)


@pytest.mark.parametrize(
    "change,expected",
    [
        (lambda d: d["runtimes"]["nvidia"].update(path="/usr/sbin/runc"), "runtimes.nvidia.path"),
        (lambda d: d["runtimes"].pop("nvidia"), "runtimes.nvidia.path"),
        (lambda d: d.update({"default-runtime": "runc"}), "default-runtime"),
        (lambda d: d.pop("default-runtime"), "default-runtime"),
    ],
)
def test_each_field_changed_is_exactly_that_finding(tmp_path, change, expected):
    plan = plan_for(tmp_path)
    document = json.loads(daemon_file.render(plan, json.dumps(KUBEADM_NODE)))
    change(document)
    [finding] = daemon_file.check(plan, {DOCKER_DAEMON_PATH: json.dumps(document)})
    assert (finding.host, finding.check) == ("n1", "container-runtime")
    assert finding.expected.startswith(expected)


@pytest.mark.parametrize("text", ["[1]", '{"runtimes": 3}', '{"a": '])
def test_a_file_that_is_not_a_daemon_config_is_refused_naming_it(text):
    with pytest.raises(daemon_file.Refused) as refused:
        daemon_file.render_text(text, True)
    assert str(refused.value).startswith(f"{DOCKER_DAEMON_PATH}: ")


@pytest.mark.skipif(shutil.which("dockerd") is None, reason="no dockerd on this machine")
def test_dockerd_validates_what_the_deploy_writes(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text(daemon_file.render_text(json.dumps(KUBEADM_NODE), True))
    done = subprocess.run(
        ["dockerd", "--validate", "--config-file", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
