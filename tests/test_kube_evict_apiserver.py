"""The drain of touched GPUs (``drain_scope: gpus``) through pyinfra against a real kube-apiserver
with the real kubectl: the Eviction API evicts only the pods holding a touched device, a
disruption budget's refusal (429) is tried again until the time limit and then fails the host
naming the pod and the budget, and the other pods are left alone.

The host side is a stand-in for the agent's probe, run as ``gpuprov_python``: it lists, as the
kubelet's pod-resources API would, the pods of ``$HOLDERS`` (``pod=device``) that the API server
does not show terminating. No kubelet runs here, so an evicted pod stays terminating, which is
what a kubelet that has let it go shows through pod-resources.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest
from kube_cluster import bound_pod, control_plane, node
from test_kube_drain import run

from gpuprov.controller.operations.kube import gpus_drained

KUBELET_VIEW = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, subprocess
    rows = []
    for entry in os.environ["HOLDERS"].split():
        pod, device = entry.split("=")
        shown = subprocess.run(
            ["kubectl", "--kubeconfig", os.environ["KUBECONFIG_FILE"], "get", "pod", pod,
             "-o", "jsonpath={{.metadata.deletionTimestamp}}"], capture_output=True, text=True)
        if shown.returncode == 0 and not shown.stdout:
            rows.append({{"pod": pod, "namespace": "default", "container": "c",
                         "resource": "nvidia.com/mig-7g.80gb", "device_ids": [device]}})
    print(json.dumps({{"schema": "gpuprov.probe/v1", "nvml": "ok", "gpus": [
        {{"index": 0, "uuid": "GPU-0", "gpu_instances": [
            {{"id": 0, "compute_instances": [{{"uuid": "MIG-0"}}]}}]}},
        {{"index": 5, "uuid": "GPU-5", "gpu_instances": [
            {{"id": 0, "compute_instances": [{{"uuid": "MIG-5"}}]}}]}}],
        "pod_resources": {{"socket": "/k.sock", "containers": rows}}}}))
""")


@pytest.fixture(scope="module")
def plane():
    path = os.environ["PATH"]
    started = control_plane()
    yield started
    started.stop()
    os.environ["PATH"] = path


@pytest.fixture
def host_view(tmp_path, monkeypatch, plane):
    script = tmp_path / "kubelet-view"
    script.write_text(KUBELET_VIEW)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    agent = tmp_path / "agent.pyz"
    agent.write_text("")
    monkeypatch.setenv("KUBECONFIG_FILE", str(plane.admin_kubeconfig))
    return {"python": str(script), "agent_path": str(agent)}


def _pod(plane, name: str) -> dict:
    return json.loads(plane.kubectl("get", "pod", name, "-o", "json").stdout)


def test_only_the_pod_on_the_touched_device_is_evicted(plane, host_view, monkeypatch):
    node(plane, "gpu-evict-1")
    bound_pod(plane, "on-gpu-5", "gpu-evict-1")
    bound_pod(plane, "on-gpu-0", "gpu-evict-1")
    monkeypatch.setenv("HOLDERS", "on-gpu-5=MIG-5 on-gpu-0=MIG-0")
    ok, _ = run(
        gpus_drained,
        node="gpu-evict-1",
        kubeconfig=str(plane.admin_kubeconfig),
        devices=["MIG-5", "GPU-5"],
        timeout=20,
        **host_view,
    )
    assert ok
    assert _pod(plane, "on-gpu-5")["metadata"].get("deletionTimestamp")  # evicted
    assert not _pod(plane, "on-gpu-0")["metadata"].get("deletionTimestamp")  # left alone
    shown = json.loads(plane.kubectl("get", "node", "gpu-evict-1", "-o", "json").stdout)
    assert shown["spec"].get("unschedulable") is True  # cordoned for the change


def test_a_budget_that_refuses_fails_the_host_naming_the_pod_and_the_budget(
    plane, host_view, monkeypatch, caplog, tmp_path
):
    node(plane, "gpu-evict-2")
    bound_pod(plane, "kept", "gpu-evict-2", phase="Running")  # a Pending pod is evicted anyway
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-it", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kept"}}},
    }
    (tmp_path / "budget.json").write_text(json.dumps(budget))
    made = plane.kubectl("create", "-f", str(tmp_path / "budget.json"))
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("HOLDERS", "kept=MIG-5")
    ok, state = run(
        gpus_drained,
        node="gpu-evict-2",
        kubeconfig=str(plane.admin_kubeconfig),
        devices=["MIG-5"],
        timeout=5,
        **host_view,
    )
    assert not ok and state.failed_hosts
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "not free after 5 s (drain_timeout)" in said, said
    assert "pod default/kept: eviction refused by PodDisruptionBudget default/keep-it" in said
    assert not _pod(plane, "kept")["metadata"].get("deletionTimestamp")
