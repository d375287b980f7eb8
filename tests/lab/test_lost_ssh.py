"""A host's SSH connection lost in the middle of a deploy on the lab: that host fails, the others
complete their work, and a rerun once it is back converges."""

from __future__ import annotations

import os
import subprocess

import pytest
from gpuprov_lab.testing import REPO_ROOT

pytestmark = pytest.mark.lab

KUBELET_DROP_IN = "/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf"
PLUGIN_CONFIG = "/etc/nvidia/device-plugin/config.yaml"


def test_a_host_that_loses_ssh_mid_deploy_fails_alone_and_a_rerun_converges(lab, deployed):
    lost = lab.in_group("shared")[0].name  # its time-slicing config missing is drift
    for host in lab.names:  # work for every host: config files to write again
        lab.run(host, f"rm -f {KUBELET_DROP_IN} {PLUGIN_CONFIG}")

    deploy = subprocess.Popen(
        lab.deploy_argv(),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # each line as it happens
    )
    output = []
    for line in deploy.stdout:
        output.append(line)
        if "Beginning operation run" in line:
            lab.cut_ssh(lost, seconds=3)
    assert deploy.wait(timeout=300) != 0, "".join(output[-80:])
    text = "".join(output)
    assert f"[{lost}] Command socket/SSH error" in text, text[-4000:]
    assert lab.verify_status() == {host: "drift" if host == lost else "ok" for host in lab.names}
    for host in lab.names:
        assert lab.testinfra(host).file(KUBELET_DROP_IN).exists == (host != lost), host

    lab.deploy()
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr
