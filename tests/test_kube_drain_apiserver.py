"""Cordon, drain and uncordon through pyinfra against a real kube-apiserver (with etcd and RBAC),
with the real kubectl: what gpuprov does around a disruptive change, seen through the API server.

No kubelet runs here: a pod that is still running cannot finish terminating, which is exactly a
drain that times out; a pod that has completed is removed at once.
"""

from __future__ import annotations

import json
import os

import pytest
from gpuprov_lab.controlplane import node_identity
from kube_cluster import bound_pod, control_plane, node
from test_kube_drain import run

from gpuprov.controller.operations.kube import drained, uncordoned
from gpuprov.host.contract import SUC_CONTROLLER_LABEL


@pytest.fixture(scope="module")
def plane():
    path = os.environ["PATH"]
    started = control_plane()
    yield started
    started.stop()
    os.environ["PATH"] = path


def _node(plane, name: str) -> dict:
    return json.loads(plane.kubectl("get", "node", name, "-o", "json").stdout)


def _pods_on(plane, name: str) -> list[str]:
    out = plane.kubectl(
        "get", "pods", "-A", "--field-selector", f"spec.nodeName={name}", "-o", "name"
    )
    return out.stdout.split()


def test_drain_cordons_the_node_and_removes_its_pods(plane):
    node(plane, "gpu-drain-1")
    bound_pod(plane, "done-1", "gpu-drain-1", phase="Succeeded")
    ok, _ = run(drained, node="gpu-drain-1", kubeconfig=str(plane.admin_kubeconfig), timeout=20)
    assert ok
    assert _node(plane, "gpu-drain-1")["spec"].get("unschedulable") is True
    assert _pods_on(plane, "gpu-drain-1") == []


def test_a_drain_leaves_the_pod_of_a_system_upgrade_controller_job_alone(plane):
    # The fleet Job that runs the deploy is such a pod: a drain from inside it must not evict it.
    node(plane, "gpu-drain-5")
    bound_pod(plane, "done-5", "gpu-drain-5", phase="Succeeded")
    bound_pod(plane, "suc-job-5", "gpu-drain-5", labels={SUC_CONTROLLER_LABEL: "suc"})
    ok, _ = run(drained, node="gpu-drain-5", kubeconfig=str(plane.admin_kubeconfig), timeout=20)
    assert ok
    assert _pods_on(plane, "gpu-drain-5") == ["pod/suc-job-5"]


def test_a_drain_that_times_out_leaves_the_node_cordoned_and_fails_the_host(plane):
    node(plane, "gpu-drain-2")
    bound_pod(plane, "running-2", "gpu-drain-2")
    ok, state = run(drained, node="gpu-drain-2", kubeconfig=str(plane.admin_kubeconfig), timeout=3)
    assert not ok and state.failed_hosts
    assert _node(plane, "gpu-drain-2")["spec"].get("unschedulable") is True


def test_uncordon_makes_the_node_schedulable_again(plane):
    node(plane, "gpu-drain-3")
    assert run(drained, node="gpu-drain-3", kubeconfig=str(plane.admin_kubeconfig))[0]
    assert run(uncordoned, node="gpu-drain-3", kubeconfig=str(plane.admin_kubeconfig))[0]
    assert not _node(plane, "gpu-drain-3")["spec"].get("unschedulable")


def test_a_node_not_registered_yet_is_left_alone(plane):
    ok, _ = run(drained, node="gpu-not-joined", kubeconfig=str(plane.admin_kubeconfig))
    assert ok


def test_rbac_is_on_a_node_identity_cannot_cordon_another_node(plane, tmp_path):
    node(plane, "gpu-drain-4")
    config = plane.kubeconfig(tmp_path / "node.kubeconfig", node_identity("gpu-other"))
    ok, _ = run(drained, node="gpu-drain-4", kubeconfig=str(config))
    assert not ok
    assert not _node(plane, "gpu-drain-4")["spec"].get("unschedulable")
