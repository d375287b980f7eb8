"""Cordon/drain/uncordon around a disruptive change, run through pyinfra against @local.

kubectl is the external tool here: a stand-in script on PATH records each call and answers as a
cluster would (node present, node not joined yet, drain refused).
"""

from __future__ import annotations

import contextlib
import os
import stat
import textwrap

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops

from gpuprov.controller.operations.kube import drained, uncordoned

KUBECTL = textwrap.dedent("""\
    #!/bin/sh
    echo "$*" >> "$KUBECTL_LOG"
    case "$KUBECTL_SCENARIO:$3" in
      absent:get) echo 'Error from server (NotFound): nodes "gpu-1" not found' >&2; exit 1 ;;
      refuse:drain) echo 'error: cannot evict pod as it would violate the PDB' >&2; exit 1 ;;
    esac
    exit 0
""")


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "kubectl"
    script.parent.mkdir()
    script.write_text(KUBECTL)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "kubectl.log"
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECTL_LOG", str(log))

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    return calls


def run(operation, **kwargs) -> tuple[bool, State]:
    state = State(inventory=Inventory((["@local"], {})), config=Config())
    connect_all(state)
    try:
        result = add_op(state, operation, **kwargs)
        with contextlib.suppress(PyinfraError):  # "No hosts remaining!" once @local failed
            run_ops(state)
    finally:
        disconnect_all(state)
    host = state.inventory.get_host("@local")
    return result[host].did_succeed(), state


def test_drain_cordons_then_evicts_with_the_timeout(kubectl, monkeypatch):
    monkeypatch.setenv("KUBECTL_SCENARIO", "ok")
    ok, _ = run(drained, node="gpu-1", kubeconfig="/k/config", timeout=120)
    assert ok
    assert kubectl() == [
        "--kubeconfig /k/config get node gpu-1 -o name",
        "--kubeconfig /k/config cordon gpu-1",
        "--kubeconfig /k/config drain gpu-1 --ignore-daemonsets --delete-emptydir-data "
        "--pod-selector=!upgrade.cattle.io/controller --timeout=120s",
    ]


def test_a_refused_drain_fails_the_host(kubectl, monkeypatch):
    monkeypatch.setenv("KUBECTL_SCENARIO", "refuse")
    ok, state = run(drained, node="gpu-1", kubeconfig="/k/config")
    assert not ok
    assert state.failed_hosts


def test_a_node_not_in_the_cluster_is_not_cordoned(kubectl, monkeypatch):
    monkeypatch.setenv("KUBECTL_SCENARIO", "absent")
    ok, _ = run(drained, node="gpu-1", kubeconfig="/k/config")
    assert ok
    assert [c.split()[2] for c in kubectl()] == ["get"]


def test_uncordon_lets_the_scheduler_back_in(kubectl, monkeypatch):
    monkeypatch.setenv("KUBECTL_SCENARIO", "ok")
    ok, _ = run(uncordoned, node="gpu-1", kubeconfig="/k/config")
    assert ok
    assert kubectl()[-1] == "--kubeconfig /k/config uncordon gpu-1"


def test_missing_kubectl_fails_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, _ = run(drained, node="gpu-1", kubeconfig="/k/config")
    assert not ok
