"""Rancher's system-upgrade-controller v0.20.1 runs outside a pod against a real API server: it
creates its Plan CRD itself and makes one Job per node a Plan selects, and none for the others."""

from __future__ import annotations

import time

import lab_consumers
import pytest
from gpuprov_lab import consumer, upgrade_controller
from kube_cluster import control_plane

NS = upgrade_controller.NAMESPACE


@pytest.fixture(scope="module")
def cluster():
    lab_consumers.require_shared()
    plane = control_plane()
    handle = None
    try:
        handle = upgrade_controller.start(plane.admin_kubeconfig, lab_consumers.workdir("suc"))
        yield plane, handle
    finally:
        if handle:
            handle.stop()
        plane.stop()


def node(name, pool):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "gpuprov.io/pool": pool},
        },
    }


def jobs(plane):
    return lab_consumers.get(plane, "jobs", "-n", NS)["items"]


def test_the_controller_created_its_plan_crd(cluster):
    plane, _ = cluster
    crd = lab_consumers.get(plane, "crd", upgrade_controller.PLAN_CRD, "--show-managed-fields")
    # Nobody but the controller wrote it (the lab applies none), and it is v0.20.1's own.
    managers = {m["manager"] for m in crd["metadata"]["managedFields"]}
    assert "gpuprov-lab" not in managers and "kubectl" not in managers, managers
    (release,) = consumer.reference_crds("system-upgrade-controller-v0.20.1")
    assert crd["spec"]["versions"][0]["schema"] == release["spec"]["versions"][0]["schema"]


def test_a_plan_makes_one_job_for_the_node_it_selects_only(cluster):
    plane, _ = cluster
    consumer.apply(
        plane.admin_kubeconfig, [node("suc-shared-01", "shared"), node("suc-mig-01", "mig")]
    )
    plan = {
        "apiVersion": "upgrade.cattle.io/v1",
        "kind": "Plan",
        "metadata": {"name": "gpuprov-shared", "namespace": NS},
        "spec": {
            "concurrency": 1,
            "version": "plan-1",
            "nodeSelector": {"matchLabels": {"gpuprov.io/pool": "shared"}},
            "upgrade": {"image": "registry.invalid/gpuprov-agent"},
        },
    }
    consumer.apply(plane.admin_kubeconfig, [plan])
    deadline = time.monotonic() + 60
    while not jobs(plane):
        assert time.monotonic() < deadline, "no Job for the Plan"
        time.sleep(0.5)
    time.sleep(2)  # a second Job (the other node) would have come with the first
    (job,) = jobs(plane)
    assert job["metadata"]["name"].startswith(
        upgrade_controller.job_name_prefix("gpuprov-shared", "suc-shared-01")
    )
    assert job["metadata"]["labels"]["upgrade.cattle.io/node"] == "suc-shared-01"
    pod = job["spec"]["template"]["spec"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["suc-shared-01"]
    (upgrade,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in upgrade["env"]}
    assert env["SYSTEM_UPGRADE_PLAN_LATEST_VERSION"] == "plan-1"
    mounts = {m["mountPath"] for m in upgrade["volumeMounts"]}
    assert "/host" in mounts


def test_stop_ends_the_controller(cluster):
    _, handle = cluster
    assert set(handle.rss_kib()) == {"system-upgrade-controller"}
    handle.stop()
    lab_consumers.assert_torn_down(handle)
