"""kwok v0.8.0, built from the module proxy, makes fake Nodes with gpuprov's labels and GPU
allocatable Ready in a real API server, and leaves the Nodes it does not manage alone. Its
timing at 5,000 Nodes is measured in bench/kwok_nodes.py."""

from __future__ import annotations

import time

import lab_consumers
import pytest
from gpuprov_lab import kwok
from kube_cluster import control_plane, node

N = 40


@pytest.fixture(scope="module")
def cluster():
    lab_consumers.require_built(kwok)
    plane = control_plane()
    handle = None
    try:
        handle = kwok.start(plane.admin_kubeconfig, lab_consumers.workdir("kwok"))
        yield plane, handle
    finally:
        if handle:
            handle.stop()
        plane.stop()


def test_fake_nodes_become_ready_with_the_planned_allocatable(cluster):
    plane, _ = cluster
    node(plane, "real-node-01")  # no kwok annotation: a kubelet's node, not kwok's
    nodes = [
        kwok.fake_node(
            f"kwok-{i:03d}",
            {"gpuprov.io/pool": "shared"},
            {"nvidia.com/gpu.shared": "32"},
            [{"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"}],
            index=i,
        )
        for i in range(N)
    ]
    kwok.create_nodes(plane.admin_kubeconfig, nodes)
    deadline = time.monotonic() + 60
    while kwok.ready_nodes(plane.admin_kubeconfig) != (N, N):
        assert time.monotonic() < deadline, kwok.ready_nodes(plane.admin_kubeconfig)
        time.sleep(0.5)
    shown = lab_consumers.get(plane, "node", "kwok-007")
    assert shown["status"]["allocatable"]["nvidia.com/gpu.shared"] == "32"
    assert shown["metadata"]["labels"]["gpuprov.io/pool"] == "shared"
    assert shown["spec"]["taints"][0]["key"] == "gpuprov.io/pool"
    # kwok renews each fake node's Lease, as a kubelet does
    lease = lab_consumers.get(plane, "lease", "kwok-007", "-n", "kube-node-lease")
    assert lease["spec"]["leaseDurationSeconds"] == kwok.LEASE_SECONDS
    assert lease["spec"]["renewTime"]
    real = lab_consumers.get(plane, "node", "real-node-01")
    assert "conditions" not in real["status"]


def test_stop_ends_kwok(cluster):
    _, handle = cluster
    assert set(handle.rss_kib()) == {"kwok"}
    handle.stop()
    lab_consumers.assert_torn_down(handle)
