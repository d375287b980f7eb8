"""What `gpuprov kube render --queues kueue` writes for the example and the lab inventories is
accepted by the real kube-apiserver with Kueue v0.17.0's CRDs and admission webhooks, Kueue's
controller finds every flavor (each ClusterQueue Active), and `kube apply --queues kueue` applies
it server-side: others' fields stay, a second apply changes nothing."""

from __future__ import annotations

import time

import lab_consumers
import pytest
from gpuprov_lab import kueue
from kube_cluster import control_plane
from lab_queue_inventories import INVENTORIES, apply, lab_inventory_readable, rendered


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    lab_consumers.require_shared()
    lab_consumers.require_built(kueue)
    with pytest.MonkeyPatch.context() as patch:
        lab_inventory_readable(patch, tmp_path_factory.mktemp("lab-run"))
        plane = control_plane()
        handle = None
        try:
            handle = kueue.start(
                plane.admin_kubeconfig, "127.0.0.1", lab_consumers.workdir("kueue")
            )
            assert plane.kubectl("create", "namespace", "nvidia-device-plugin").returncode == 0
            yield plane
        finally:
            if handle:
                handle.stop()
            plane.stop()


def active(plane, name: str) -> bool:
    conditions = (
        lab_consumers.get(plane, "clusterqueue", name).get("status", {}).get("conditions", [])
    )
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def test_every_object_rendered_for_the_example_inventory_is_admitted_and_active(cluster, tmp_path):
    documents = rendered(INVENTORIES[0], "kueue", tmp_path)["kueue-queues.yaml"]
    assert {d["kind"] for d in documents} == {
        "Namespace",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    }
    for document in documents:
        result = lab_consumers.create(cluster, document)
        assert result.returncode == 0, (document["kind"], document["metadata"], result.stderr)
    deadline = time.monotonic() + 60
    for name in ("team-a", "team-b"):
        while not active(cluster, name):
            assert time.monotonic() < deadline, lab_consumers.get(cluster, "clusterqueue", name)
            time.sleep(0.5)


def test_the_lab_inventory_applies_keeping_others_fields_and_a_second_apply_changes_nothing(
    cluster, tmp_path
):
    result = apply(INVENTORIES[1], cluster.admin_kubeconfig, "kueue")
    assert result.exit_code == 0, result.output
    # The lab's one shared host: 8 A100 x 4 replicas, half each.
    stored = lab_consumers.get(cluster, "clusterqueue", "team-a")
    shared = stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert shared["name"] == "nvidia.com/gpu.shared" and str(shared["nominalQuota"]) == "16"
    assert (
        cluster.kubectl("label", "clusterqueue", "team-a", "example.com/owner=ops").returncode == 0
    )
    kinds = "resourceflavors,clusterqueues,localqueues"
    before = lab_consumers.get(cluster, kinds, "-A")["items"]
    result = apply(INVENTORIES[1], cluster.admin_kubeconfig, "kueue")
    assert result.exit_code == 0, result.output
    after = lab_consumers.get(cluster, kinds, "-A")["items"]
    generations = [
        {(o["kind"], o["metadata"]["name"]): o["metadata"]["generation"] for o in items}
        for items in (before, after)
    ]
    assert generations[0] == generations[1]
    labels = lab_consumers.get(cluster, "clusterqueue", "team-a")["metadata"]["labels"]
    assert labels["example.com/owner"] == "ops"
    assert labels["app.kubernetes.io/managed-by"] == "gpuprov"
