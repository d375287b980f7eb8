"""Pods on devices the plan no longer has (capacity lowered under running pods): each resource's
pods beyond the plan named in one finding, from the kubelet's pod-resources rows."""

from __future__ import annotations

import pytest
from plans import plan_for
from probes import matching_probe

from gpuprov.core.checks import shares_in_use
from gpuprov.core.checks.probe_document import read
from gpuprov.host.contract import POD_RESOURCES_SOCKET


def probe_with(plan, rows):
    """The matching probe of ``plan`` (each MIG device with a UUID), the kubelet listing
    ``rows`` of (pod, resource, device ids)."""
    document = matching_probe(plan)
    for gpu in document["gpus"]:
        for gi in gpu["gpu_instances"]:
            for ci in gi["compute_instances"]:
                ci["uuid"] = f"MIG-{gpu['index']}-{gi['id']}"
    document["pod_resources"] = {
        "socket": POD_RESOURCES_SOCKET,
        "containers": [
            {"pod": pod, "namespace": "ml", "container": "c", "resource": r, "device_ids": ids}
            for pod, r, ids in rows
        ],
    }
    checked, findings = read(plan.name, document, "/usr/lib/gpuprov/agent.pyz", "python3")
    assert findings == []
    return checked


@pytest.fixture
def two_replicas(tmp_path):
    return plan_for(tmp_path, "shared", time_slicing_replicas=2)


def test_replicas_past_the_planned_count_are_named(two_replicas):
    probe = matching_probe(two_replicas)
    uuid = probe["gpus"][0]["uuid"]
    rows = [(f"share-{n}", "nvidia.com/gpu.shared", [f"{uuid}::{n}"]) for n in range(4)]
    (finding,) = shares_in_use.check(two_replicas, probe_with(two_replicas, rows))
    assert finding.check == "shares-beyond-capacity"
    assert "4 in use, 2 beyond it" in finding.found
    assert f"ml/share-2 ({uuid}::2)" in finding.found and "ml/share-3" in finding.found
    assert "ml/share-0" not in finding.found and "ml/share-1" not in finding.found


def test_shares_within_the_plan_are_no_finding(two_replicas):
    probe = matching_probe(two_replicas)
    rows = [
        (f"share-{g['index']}-{n}", "nvidia.com/gpu.shared", [f"{g['uuid']}::{n}"])
        for g in probe["gpus"]
        for n in range(2)
    ]
    assert shares_in_use.check(two_replicas, probe_with(two_replicas, rows)) == []


def test_a_mig_device_outside_the_planned_layout_is_named(tmp_path):
    plan = plan_for(tmp_path, "mig", mig_layout={"3g.40gb": 2}, mig_strategy="mixed")
    rows = [
        ("planned", "nvidia.com/mig-3g.40gb", ["MIG-0-1"]),
        ("gone", "nvidia.com/mig-3g.40gb", ["MIG-from-a-destroyed-instance"]),
    ]
    probe = probe_with(plan, rows)
    assert any(gi["id"] == 1 for gi in probe.gpus[0]["gpu_instances"])
    (finding,) = shares_in_use.check(plan, probe)
    assert "ml/gone" in finding.found and "ml/planned" not in finding.found


def test_no_pod_resources_read_is_no_finding(two_replicas):
    probe, _ = read(two_replicas.name, matching_probe(two_replicas), "/a", "python3")
    assert shares_in_use.check(two_replicas, probe) == []
