"""The README's first command, end to end: `gpuprov lab demo` starts the lab as a person would,
deploys it with plain pyinfra, applies the cluster side and verifies hosts, nodes and a canary pod
per node and resource; it exits 0, says how to look around and how to take the lab down, and
leaves no canary pod. The lab it starts is a person's lab (the tests never reuse one), so the test
takes it down itself with `gpuprov lab down`, and runs after the shared lab is down.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gpuprov_lab.rundir import RunDir, default_dir
from gpuprov_lab.testing import Lab, UserLabUp

from gpuprov.host.contract import CANARY_NAMESPACE

pytestmark = [pytest.mark.lab, pytest.mark.lab_down, pytest.mark.own_lab]

DEMO_TIMEOUT = 900  # seconds: 55 s measured here, from lab up to verify


def gpuprov(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuprov", *args], capture_output=True, text=True, timeout=timeout
    )


def test_the_demo_deploys_verifies_with_canaries_and_says_how_to_take_it_down():
    try:
        Lab.make_way()  # the shared lab a test started; never a lab a person started
    except UserLabUp as e:
        pytest.skip(str(e))
    try:
        demo = gpuprov("lab", "demo", timeout=DEMO_TIMEOUT)
        output = demo.stdout + demo.stderr
        assert demo.returncode == 0, output[-6000:]
        # each step as the README names it, in order, the last one the verify with canaries
        steps = [line for line in demo.stderr.splitlines() if line.startswith("$ ")]
        assert [s.split()[1].rsplit("/", 1)[-1] for s in steps] == ["pyinfra", "gpuprov", "gpuprov"]
        assert "kube apply" in steps[1] and "verify" in steps[2] and "--canary" in steps[2]
        assert "canary pod(s)" in demo.stderr
        assert "Take it down: sudo gpuprov lab down" in demo.stdout
        kube = RunDir(default_dir()).read_state()["kube"]
        left = subprocess.run(
            [kube["kubectl"], f"--kubeconfig={kube['kubeconfig']}", "-n", CANARY_NAMESPACE,
             "get", "pods", "-o", "json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert left.returncode == 0, left.stderr
        assert json.loads(left.stdout)["items"] == []
    finally:
        down = gpuprov("lab", "down", timeout=300)
    assert down.returncode == 0, down.stderr
    assert RunDir(default_dir()).read_state() is None
