"""What `gpuprov kube render --queues volcano` writes for the example and the lab inventories is
accepted by the real kube-apiserver with Volcano v1.15.1's CRDs and admission webhooks: the
rendered scheduler configuration runs the real scheduler (which exits on an invalid one), every
Queue is admitted and opened, and `kube apply --queues volcano` applies them server-side (a
second apply changes nothing)."""

from __future__ import annotations

import time

import lab_consumers
import pytest
from gpuprov_lab import volcano
from kube_cluster import control_plane
from lab_queue_inventories import INVENTORIES, apply, lab_inventory_readable, rendered


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    lab_consumers.require_shared()
    with pytest.MonkeyPatch.context() as patch:
        lab_inventory_readable(patch, tmp_path_factory.mktemp("lab-run"))
        files = rendered(INVENTORIES[0], "volcano", tmp_path_factory.mktemp("rendered"))
        plane = control_plane()
        handle = None
        try:
            workdir = lab_consumers.workdir("volcano")
            (config_map,) = files["volcano-scheduler-configmap.yaml"]
            conf = workdir / "scheduler.conf"
            conf.write_text(config_map["data"]["volcano-scheduler.conf"])
            handle = volcano.start(plane.admin_kubeconfig, "127.0.0.1", workdir, conf)
            assert plane.kubectl("create", "namespace", "nvidia-device-plugin").returncode == 0
            yield plane, files
        finally:
            if handle:
                handle.stop()
            plane.stop()


def test_every_queue_rendered_for_the_example_inventory_is_admitted_and_opened(cluster):
    plane, files = cluster
    queues = files["volcano-queues.yaml"]
    for document in queues:
        result = lab_consumers.create(plane, document)
        assert result.returncode == 0, (document["metadata"], result.stderr)
    deadline = time.monotonic() + 60
    for document in queues:
        name = document["metadata"]["name"]
        while lab_consumers.get(plane, "queue", name).get("status", {}).get("state") != "Open":
            assert time.monotonic() < deadline, f"the queue controller did not open {name}"
            time.sleep(0.5)
    for document in queues:
        stored = lab_consumers.get(plane, "queue", document["metadata"]["name"])["spec"]
        assert stored["deserved"] == document["spec"]["deserved"]
        assert stored["capability"] == document["spec"]["capability"]


def test_the_lab_inventory_applies_and_a_second_apply_changes_nothing(cluster):
    plane, _ = cluster
    result = apply(INVENTORIES[1], plane.admin_kubeconfig, "volcano")
    assert result.exit_code == 0, result.output
    stored = lab_consumers.get(plane, "queue", "team-b")["spec"]
    assert stored["deserved"]["nvidia.com/mig-1g.10gb"] == "16"  # the lab's one H100 host
    conf = lab_consumers.get(
        plane, "configmap", "volcano-scheduler-configmap", "-n", "volcano-system"
    )
    assert "capacity" in conf["data"]["volcano-scheduler.conf"]

    def owned() -> dict:
        # Volcano writes each queue's status (resourceVersion moves); the spec (generation),
        # the metadata gpuprov sets and the scheduler's ConfigMap (nobody else writes it) stay.
        queues = {
            q["metadata"]["name"]: (
                q["metadata"]["generation"],
                q["metadata"].get("labels"),
                q["metadata"].get("annotations"),
            )
            for q in lab_consumers.get(plane, "queues")["items"]
        }
        conf = lab_consumers.get(
            plane, "configmap", "volcano-scheduler-configmap", "-n", "volcano-system"
        )
        return {"queues": queues, "configmap": conf["metadata"]["resourceVersion"]}

    before = owned()
    result = apply(INVENTORIES[1], plane.admin_kubeconfig, "volcano")
    assert result.exit_code == 0, result.output
    assert owned() == before
