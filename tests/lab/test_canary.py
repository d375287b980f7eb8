"""`gpuprov verify --canary --kubeconfig` on the lab after the demo's deploy: one pod per node and
planned resource, placed by the real kube-scheduler, given a device by NVIDIA's device plugin,
started through the nvidia runtime gpuprov configured, its device read back from the real
kubelet's pod-resources API in the probe's round trip. Broken on purpose: the nvidia runtime's
binary on one host, the device plugin stopped on another. No canary pod is left in any case.

(Capacity, 32 shares and the 33rd Pending, and a MIG 1g pod's UUID are tests/lab/test_pods.py's.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuprov_lab import images

from gpuprov.core.disruption import device_gpus, gpu_of
from gpuprov.host.contract import CANARY_NAMESPACE, POD_RESOURCES_SOCKET

pytestmark = pytest.mark.lab

SHARED, MIG, WHOLE = "lab-a100-01", "lab-h100-01", "lab-h200-01"
SETTLE = 60  # seconds: the plugins' resources in allocatable (a kubelet reports every 10 s)
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
RUNTIME = "/usr/bin/nvidia-container-runtime"
# Seconds a canary gets in the tests where one cannot start (the lab's own 90 s waited out twice
# was 3.5 minutes of the suite); the others run within about 10 s.
FAILING_TIMEOUT = 40


@pytest.fixture(scope="module")
def cluster(lab, deployed):
    """The deployed lab with the cluster side applied and every planned resource advertised."""
    lab.kube_apply()
    lab.wait_planned_allocatable(SETTLE, ready=True)
    return lab


def canary(lab, inventory=None) -> tuple[int, list[dict], str]:
    """Exit code, every finding of `verify --canary --kubeconfig --format json`, stderr."""
    result = lab.verify(
        inventory, "--canary", "--kubeconfig", str(lab.kubeconfig), "--format", "json"
    )
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    return result.returncode, [f for h in report["hosts"] for f in h["findings"]], result.stderr


def short_timeout(lab, directory) -> Path:
    """The lab inventory with ``canary_timeout`` cut to ``FAILING_TIMEOUT``: a canary that
    cannot start is reported once its time is up, and the healthy hosts' start in seconds."""
    return lab.inventory_copy(directory, group_data_code=f"\ncanary_timeout = {FAILING_TIMEOUT}\n")


def no_canary_left(lab) -> None:
    pods = lab.kubectl("-n", CANARY_NAMESPACE, "get", "pods", "-o", "json")
    assert pods.returncode == 0, pods.stderr
    assert json.loads(pods.stdout)["items"] == []


def test_every_canary_runs_with_a_planned_device_and_none_is_left(cluster):
    code, findings, stderr = canary(cluster)
    assert (code, findings) == (0, []), stderr
    # One pod per node and planned resource (3 + 1 + 1 on the demo's three hosts).
    planned = sum(len(p["resources"]) for p in cluster.plan().values())
    assert f"verify: {planned} canary pod(s)" in stderr
    no_canary_left(cluster)


def test_the_probe_reads_the_real_kubelets_pod_resources(cluster):
    # The agent's own reader against the real kubelet: a pod holding one share is one row,
    # naming the pod, the resource and a device id of one of the shared host's GPUs.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod-resources-reader", "namespace": "default"},
        "spec": {
            "nodeName": SHARED,
            "terminationGracePeriodSeconds": 1,
            "containers": [images.sleeper({"nvidia.com/gpu.shared": 1})],
        },
    }
    made = cluster.kubectl("create", "-f", "-", input_text=json.dumps(pod))
    assert made.returncode == 0, made.stderr
    try:
        ready = cluster.kubectl(
            "-n", "default", "wait", "--for=condition=Ready", "pod/pod-resources-reader",
            "--timeout=120s", timeout=130,
        )  # fmt: skip
        assert ready.returncode == 0, ready.stderr + cluster.pods_not_running("default")
        document = json.loads(
            cluster.run(
                SHARED,
                f"python3 /usr/lib/gpuprov/agent.pyz probe --pod-resources {POD_RESOURCES_SOCKET}",
            ).stdout
        )
        rows = [
            r for r in document["pod_resources"]["containers"] if r["pod"] == "pod-resources-reader"
        ]
        assert [(r["namespace"], r["resource"], len(r["device_ids"])) for r in rows] == [
            ("default", "nvidia.com/gpu.shared", 1)
        ], document["pod_resources"]
        # a replica id of a GPU the probe sees on that host
        assert gpu_of(rows[0]["device_ids"][0], device_gpus(document)) is not None, rows
    finally:
        cluster.kubectl("-n", "default", "delete", "pod", "pod-resources-reader", "--wait=true")


def test_a_broken_nvidia_runtime_binary_fails_that_hosts_canary_with_the_runtime_error(
    cluster, tmp_path
):
    broken = f"{RUNTIME}.missing"
    original = cluster.run(WHOLE, f"cat {DROP_IN}").stdout
    assert f'BinaryName = "{RUNTIME}"' in original
    cluster.run(
        WHOLE, f'sed -i \'s|"{RUNTIME}"|"{broken}"|\' {DROP_IN} && systemctl restart containerd'
    )
    try:
        code, findings, stderr = canary(cluster, short_timeout(cluster, tmp_path))
    finally:
        cluster.run(
            WHOLE,
            f'sed -i \'s|"{broken}"|"{RUNTIME}"|\' {DROP_IN} && systemctl restart containerd',
        )
    assert cluster.run(WHOLE, f"cat {DROP_IN}").stdout == original
    assert code == 1, stderr
    failed = [f for f in findings if f["check"] == "canary-failed"]
    assert [f["host"] for f in failed] == [WHOLE], findings
    # nvidia is the default runtime: the sandbox is the first thing the broken entry runs.
    assert failed[0]["found"].startswith("FailedCreatePodSandBox: "), failed
    assert f"fork/exec {broken}: no such file or directory" in failed[0]["found"]
    assert not [f for f in findings if f["host"] != WHOLE and f["check"].startswith("canary")]
    no_canary_left(cluster)


def test_a_stopped_device_plugin_leaves_that_hosts_canary_pending_with_the_schedulers_reason(
    cluster, tmp_path
):
    cluster.run(WHOLE, "systemctl stop nvidia-device-plugin.service")
    try:
        # The kubelet drops the plugin's resource to 0 within seconds of its socket going.
        cluster.wait_nodes(
            lambda nodes: nodes[WHOLE]["allocatable"].get("nvidia.com/gpu") == "0",
            SETTLE,
            "nvidia.com/gpu at 0 on the node whose plugin stopped",
        )
        code, findings, stderr = canary(cluster, short_timeout(cluster, tmp_path))
    finally:
        cluster.run(WHOLE, "systemctl start nvidia-device-plugin.service")
    assert code == 1, stderr
    pending = [f for f in findings if f["check"] == "canary-pending"]
    assert [f["host"] for f in pending] == [WHOLE], findings
    assert pending[0]["found"].startswith("Unschedulable: "), pending
    assert "Insufficient nvidia.com/gpu" in pending[0]["found"]
    assert not [f for f in findings if f["host"] != WHOLE and f["check"].startswith("canary")]
    no_canary_left(cluster)
    cluster.wait_planned_allocatable(SETTLE, ready=True)
