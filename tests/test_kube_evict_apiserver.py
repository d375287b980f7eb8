"""The drain of touched GPUs (``drain_scope: gpus``) through pyinfra against a real kube-apiserver
with the real kubectl: the Eviction API evicts only the pods holding a touched device, a
disruption budget's refusal (429) is tried again until the time limit and then fails the host
naming the pod and the budget, and the other pods are left alone.

The host side is a stand-in for the agent's probe, run as ``gpuprov_python``: it prints the
probe document of a MIG host in its plan's state (``tests/probes.matching_probe``, each compute
instance with its MIG device UUID) whose pod-resources section lists, as the kubelet's API
would, the pods of ``$HOLDERS`` (``pod=GPU index``, holding that GPU's MIG device) that the API
server does not show terminating, and, when asked with the runtime's socket (``--runtime``), the
pods of ``$UNLISTED`` as the runtime's that the kubelet does not list. No kubelet runs here, so
an evicted pod stays terminating, which is what a kubelet that has let it go shows through
pod-resources.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest
from kube_cluster import bound_pod, control_plane, node
from plans import plan_for
from probes import gpu_uuid, matching_probe
from test_kube_drain import run

from gpuprov.controller.operations.kube import gpus_drained
from gpuprov.host.contract import CRI_SOCKETS

KUBELET_VIEW = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, subprocess, sys
    document = json.load(open(os.environ["PROBE_DOCUMENT"]))
    rows = []
    for entry in os.environ["HOLDERS"].split():
        pod, gpu = entry.split("=")
        shown = subprocess.run(
            ["kubectl", "--kubeconfig", os.environ["KUBECONFIG_FILE"], "get", "pod", pod,
             "-o", "jsonpath={{.metadata.deletionTimestamp}}"], capture_output=True, text=True)
        if shown.returncode == 0 and not shown.stdout:
            (instance,) = document["gpus"][int(gpu)]["gpu_instances"]
            rows.append({{"pod": pod, "namespace": "default", "container": "c",
                         "resource": "nvidia.com/mig-7g.80gb",
                         "device_ids": [instance["compute_instances"][0]["uuid"]]}})
    document["pod_resources"] = {{"socket": "/k.sock", "containers": rows}}
    if "--runtime" in sys.argv:
        document["pod_resources"]["unlisted"] = os.environ.get("UNLISTED", "").split()
    print(json.dumps(document))
""")


def mig_device(gpu: int) -> str:
    """The MIG device UUID of GPU ``gpu``'s one 7g.80gb in the stand-in's document."""
    return f"MIG-{gpu:08x}-0000-5000-8000-000000000000"


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
    document = matching_probe(plan_for(tmp_path, "mig", gpu_count=8, mig_layout={"7g.80gb": 1}))
    for gpu in document["gpus"]:
        for instance in gpu["gpu_instances"]:
            instance["compute_instances"][0]["uuid"] = mig_device(gpu["index"])
    (tmp_path / "probe.json").write_text(json.dumps(document))
    monkeypatch.setenv("PROBE_DOCUMENT", str(tmp_path / "probe.json"))
    monkeypatch.setenv("KUBECONFIG_FILE", str(plane.admin_kubeconfig))
    return {"python": str(script), "agent_path": str(agent)}


def drain(plane, host_view, name: str, devices: list[str], timeout: int, **more):
    """``gpus_drained`` of ``devices`` on node ``name`` through pyinfra: (ok, state)."""
    return run(
        gpus_drained,
        node=name,
        kubeconfig=str(plane.admin_kubeconfig),
        devices=devices,
        timeout=timeout,
        **host_view,
        **more,
    )


def _pod(plane, name: str) -> dict:
    return json.loads(plane.kubectl("get", "pod", name, "-o", "json").stdout)


def test_only_the_pod_on_the_touched_device_is_evicted(plane, host_view, monkeypatch):
    node(plane, "gpu-evict-1")
    bound_pod(plane, "on-gpu-5", "gpu-evict-1")
    bound_pod(plane, "on-gpu-0", "gpu-evict-1")
    monkeypatch.setenv("HOLDERS", "on-gpu-5=5 on-gpu-0=0")
    ok, _ = drain(plane, host_view, "gpu-evict-1", [mig_device(5), gpu_uuid(5)], 20)
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
    monkeypatch.setenv("HOLDERS", "kept=5")
    ok, state = drain(plane, host_view, "gpu-evict-2", [mig_device(5)], 5)
    assert not ok and state.failed_hosts
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "not free after 5 s (drain_timeout)" in said, said
    assert "pod default/kept: eviction refused by PodDisruptionBudget default/keep-it" in said
    assert not _pod(plane, "kept")["metadata"].get("deletionTimestamp")


def test_a_kubelet_that_does_not_list_the_runtimes_pods_fails_the_host_before_any_eviction(
    plane, host_view, monkeypatch, caplog
):
    # Right after a kubelet restart its pod-resources names no pod: GPU 5 would look free.
    node(plane, "gpu-evict-3")
    bound_pod(plane, "held-5", "gpu-evict-3")
    monkeypatch.setenv("HOLDERS", "")
    monkeypatch.setenv("UNLISTED", "default/held-5")
    ok, state = drain(
        plane, host_view, "gpu-evict-3", [mig_device(5)], 20, runtime=CRI_SOCKETS["containerd"]
    )
    assert not ok and state.failed_hosts
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot tell which pods hold the GPUs to change on gpu-evict-3" in said, said
    assert "the kubelet does not list 1 pods the container runtime runs (default/held-5)" in said
    assert "nothing was changed" in said
    assert not _pod(plane, "held-5")["metadata"].get("deletionTimestamp")
