"""What `gpuprov kube render --queues kueue` writes for the example and the lab inventories is
accepted by the real kube-apiserver with Kueue v0.17.0's CRDs and admission webhooks, Kueue's
controller finds every flavor (each ClusterQueue Active), and `kube apply --queues kueue` applies
it server-side: others' fields stay, a second apply changes nothing."""

from __future__ import annotations

import json
import time

import kube_cluster
import lab_consumers
import pytest
from gpuprov_lab import kueue
from lab_queue_inventories import INVENTORIES, apply, lab_inventory_readable, rendered, verify


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    lab_consumers.require_shared()
    lab_consumers.require_built(kueue)
    with pytest.MonkeyPatch.context() as patch:
        lab_inventory_readable(patch, tmp_path_factory.mktemp("lab-run"))
        plane = kube_cluster.control_plane()
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
    # Kueue writes each queue's status, so resourceVersion moves; what gpuprov owns (the spec,
    # counted by generation, and the metadata it sets) must not.
    owned = [
        {
            (o["kind"], o["metadata"]["name"]): (
                o["metadata"]["generation"],
                o["metadata"].get("labels"),
                o["metadata"].get("annotations"),
            )
            for o in items
        }
        for items in (before, after)
    ]
    assert owned[0] == owned[1]
    labels = lab_consumers.get(cluster, "clusterqueue", "team-a")["metadata"]["labels"]
    assert labels["example.com/owner"] == "ops"
    assert labels["app.kubernetes.io/managed-by"] == "gpuprov"


def test_verify_names_the_queue_whose_quota_a_regrouped_node_left_above_capacity(cluster):
    # The lab's hosts as the API server shows them (inventories/lab.py's plan).
    mig = {"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8"}
    for name, pool, allocatable in (
        ("lab-a100-01", "shared", {"nvidia.com/gpu.shared": "32"}),
        ("lab-h100-01", "mig", {**mig, "nvidia.com/mig-3g.40gb": "8"}),
        ("lab-h200-01", "whole_card", {"nvidia.com/gpu": "4"}),
    ):
        kube_cluster.node(cluster, name, {**allocatable, "pods": "110"})
        assert cluster.kubectl("label", "node", name, f"gpuprov.io/pool={pool}").returncode == 0
    label = ["label", "node", "lab-a100-01", "--overwrite"]
    assert queue_findings(verify(INVENTORIES[1], cluster.admin_kubeconfig)) == {}
    # Moved to whole_card: the shared flavor selects no node, its quotas stay.
    assert cluster.kubectl(*label, "gpuprov.io/pool=whole_card").returncode == 0
    result = verify(INVENTORIES[1], cluster.admin_kubeconfig)
    assert result.exit_code == 1, result.output
    found = queue_findings(result)
    assert sorted(found) == ["queue team-a", "queue team-b"]
    (finding,) = found["queue team-a"]
    assert finding["check"] == "kube-queues"
    assert finding["expected"] == (
        "pool (flavor) shared: nvidia.com/gpu.shared quota within the live capacity"
    )
    assert finding["found"] == (
        "nvidia.com/gpu.shared: quota 16, the ClusterQueues' quotas sum to 32 (team-a 16, "
        "team-b 16); live capacity 0 on 0 schedulable nodes with gpuprov.io/pool=shared"
    )


def queue_findings(result) -> dict[str, list[dict]]:
    report = json.loads(result.stdout)
    return {h["name"]: h["findings"] for h in report["hosts"] if h["name"].startswith("queue ")}
