"""Kueue v0.17.0, built from the module proxy, runs outside a pod against a real API server and
its admission webhooks are called there: what gpuprov will render for queues is checked by
Kueue's own code, not by a schema copy."""

from __future__ import annotations

import json
import time

import lab_consumers
import pytest
from gpuprov_lab import consumer, kueue
from kube_cluster import control_plane

NS = "team-a"


@pytest.fixture(scope="module")
def cluster():
    lab_consumers.require_shared()
    lab_consumers.require_built(kueue)
    plane = control_plane()
    handle = None
    try:
        handle = kueue.start(plane.admin_kubeconfig, "127.0.0.1", lab_consumers.workdir("kueue"))
        consumer.apply(
            plane.admin_kubeconfig,
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": NS},
                },
            ],
        )
        yield plane, handle
    finally:
        if handle:
            handle.stop()
        plane.stop()


def flavor(name="shared-pool"):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {
            "nodeLabels": {"gpuprov.io/pool": "shared"},
            "nodeTaints": [{"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"}],
            "tolerations": [
                {
                    "key": "gpuprov.io/pool",
                    "operator": "Equal",
                    "value": "shared",
                    "effect": "NoSchedule",
                }
            ],
        },
    }


def cluster_queue(name, resources, lending=None):
    quota = [
        {"name": r, "nominalQuota": q, **({"lendingLimit": lending} if lending else {})}
        for r, q in resources
    ]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": "gpus",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu.shared"],
                    "flavors": [{"name": "shared-pool", "resources": quota}],
                }
            ],
        },
    }


def test_flavor_cluster_queue_and_local_queue_are_admitted_and_defaulted_by_kueue(cluster):
    plane, _ = cluster
    for document in (
        flavor(),
        cluster_queue(
            "team-a", [("cpu", "64"), ("memory", "256Gi"), ("nvidia.com/gpu.shared", "16")]
        ),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": NS},
            "spec": {"clusterQueue": "team-a"},
        },
    ):
        result = lab_consumers.create(plane, document)
        assert result.returncode == 0, result.stderr
    # Kueue's mutating webhook (mresourceflavor.kb.io) adds its finalizer: it was called.
    stored = lab_consumers.get(plane, "resourceflavor", "shared-pool")
    assert stored["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]


def test_cluster_queue_whose_quota_names_another_resource_is_refused_by_the_webhook(cluster):
    plane, _ = cluster
    # Same count as coveredResources (the CRD's CEL rule passes); the name differs, which only
    # Kueue's webhook checks.
    document = cluster_queue(
        "wrong-order", [("cpu", "1"), ("nvidia.com/gpu.shared", "4"), ("memory", "1Gi")]
    )
    result = lab_consumers.create(plane, document)
    assert result.returncode != 0
    assert 'admission webhook "vclusterqueue.kb.io" denied the request' in result.stderr
    assert "must match the name in coveredResources" in result.stderr


def test_lending_limit_above_nominal_quota_is_refused_by_the_webhook(cluster):
    plane, _ = cluster
    document = cluster_queue(
        "lends-too-much",
        [("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu.shared", "4")],
        lending="8",
    )
    result = lab_consumers.create(plane, document)
    assert result.returncode != 0
    assert 'admission webhook "vclusterqueue.kb.io" denied the request' in result.stderr


def test_job_for_a_queue_is_suspended_by_the_batch_job_integration(cluster):
    plane, _ = cluster
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.invalid/train",
                            "resources": {"limits": {"nvidia.com/gpu.shared": "2"}},
                        }
                    ],
                }
            }
        },
    }
    result = lab_consumers.create(plane, job)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["suspend"] is True  # Kueue's mjob.kb.io
    # Kueue's own scheduler admits it to the flavor (16 gpu.shared of quota), unsuspends it and
    # puts the flavor's node labels and tolerations into its pods.
    deadline = time.monotonic() + 60
    while (shown := lab_consumers.get(plane, "job", "train", "-n", NS))["spec"]["suspend"]:
        assert time.monotonic() < deadline, "Kueue did not admit the Job"
        time.sleep(0.5)
    template = shown["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {"gpuprov.io/pool": "shared"}
    assert {"key": "gpuprov.io/pool", "operator": "Equal", "value": "shared"}.items() <= (
        template["tolerations"][0].items()
    )


def test_pod_for_a_queue_is_gated_by_the_pod_integration(cluster):
    plane, _ = cluster
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "infer",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        },
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/infer"}]},
    }
    result = lab_consumers.create(plane, pod)
    assert result.returncode == 0, result.stderr
    # As stored (Kueue may admit and ungate it a moment later): gated by mpod.kb.io.
    gates = json.loads(result.stdout)["spec"]["schedulingGates"]
    assert {"name": "kueue.x-k8s.io/admission"} in gates


def test_stop_ends_kueue_and_removes_its_webhooks(cluster):
    plane, handle = cluster
    assert set(handle.rss_kib()) == {"kueue"}
    handle.stop()
    lab_consumers.assert_torn_down(handle)
    listed = plane.kubectl(
        "get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
    )
    assert "kueue-" not in listed.stdout
    # Nothing is left that refuses a Job because no Kueue answers.
    job = lab_consumers.get(plane, "job", "train", "-n", NS)
    job["metadata"] = {"name": "after-stop", "namespace": NS, "labels": job["metadata"]["labels"]}
    job["spec"]["template"]["metadata"] = {}
    job["spec"].pop("selector", None)
    result = lab_consumers.create(plane, job)
    assert result.returncode == 0, result.stderr
