"""Pods on the lab's nodes, end to end: after the demo's deploy and `gpuprov kube apply`, a pod
that asks for a planned GPU resource, with the node selector and tolerations of its pool as
`gpuprov kube render` gives them, is placed by the real kube-scheduler, given a device by
NVIDIA's device plugin (`Allocate`: NVIDIA_VISIBLE_DEVICES), started by the host's containerd
through the nvidia runtime gpuprov configured, and runs. What the container was given is read
from its own output (`kubectl logs`) and matched against the simulated driver's GPUs.

Every pod lives in its own namespace, deleted with the module (the controller manager's
namespace controller removes the pods, the kubelets confirm it).
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import yaml
from gpuprov_lab import controlplane
from gpuprov_lab.images import CANARY
from gpuprov_lab.testing import REPO_ROOT, observed_instances, planned_instances

pytestmark = pytest.mark.lab

SHARED, MIG, WHOLE = "lab-a100-01", "lab-h100-01", "lab-h200-01"
NAMESPACE = "gpuprov-lab-pods"
RUNNING = 120  # seconds: 33 pods at once on 2 cores took about 35 s to all start
SETTLE = 60  # seconds: the plugins' resources in allocatable (a kubelet reports every 10 s)
SHARES = 32  # inventories/lab.py: 8 x A100, time-sliced 4 ways
# The container prints what the device plugin's Allocate gave it, then waits to be deleted.
PRINT_DEVICES = ["sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES"; exec sleep 3600']


@pytest.fixture(scope="module")
def cluster(lab, deployed):
    """The deployed lab, the cluster side applied, every planned resource advertised, and a
    namespace for this module's pods (deleted afterwards)."""
    lab.kube_apply()
    lab.wait_planned_allocatable(SETTLE, ready=True)
    made = lab.kubectl("create", "namespace", NAMESPACE)
    assert made.returncode == 0, made.stderr
    _wait(lambda: lab.kubectl("-n", NAMESPACE, "get", "serviceaccount/default").returncode == 0)
    try:
        yield lab
    finally:
        lab.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s", timeout=150)


def test_the_control_plane_runs_etcd_the_api_server_the_scheduler_and_the_controller_manager(
    cluster,
):
    status = json.loads(
        subprocess.run(
            [str(cluster.bin / "gpuprov"), "lab", "status", "--format", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    components = {c["name"]: c for c in status["kube"]["components"]}
    assert sorted(components) == sorted(controlplane.COMPONENTS)
    assert all(c["running"] for c in components.values()), components
    assert components["kube-scheduler"]["healthy"] is True
    assert components["kube-controller-manager"]["healthy"] is True
    # Each runs as the identity kubeadm gives it, which the bootstrap RBAC policy binds.
    for name, user in (
        ("scheduler", "system:kube-scheduler"),
        ("controller-manager", "system:kube-controller-manager"),
    ):
        config = cluster.run_dir.kube / f"{name}.kubeconfig"
        whoami = cluster.kubectl("--kubeconfig", str(config), "auth", "whoami", "-o", "json")
        assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == user


def test_a_shared_pod_runs_on_the_shared_host_with_one_of_its_eight_gpus(cluster):
    pod = _pod("shared-one", _pool(cluster, SHARED), {"nvidia.com/gpu.shared": 1})
    _create(cluster, pod)
    node, devices = _wait_running(cluster, "shared-one")
    assert node == SHARED
    assert devices in _gpu_uuids(cluster, SHARED)  # a replica id maps back to its GPU's UUID


def test_a_mig_1g_pod_runs_on_the_mig_host_with_a_planned_1g_instance(cluster):
    pod = _pod("mig-1g", _pool(cluster, MIG), {"nvidia.com/mig-1g.10gb": 1})
    _create(cluster, pod)
    node, devices = _wait_running(cluster, "mig-1g")
    assert node == MIG
    assert devices in _mig_uuids(cluster, MIG)["1g.10gb"]
    # ... and the instances the driver has are the plan's.
    assert observed_instances(cluster.probe(MIG)) == planned_instances(cluster.plan()[MIG])


def test_a_whole_card_pod_runs_on_the_whole_card_host_with_one_of_its_gpus(cluster):
    pod = _pod("whole-one", _pool(cluster, WHOLE), {"nvidia.com/gpu": 1})
    _create(cluster, pod)
    node, devices = _wait_running(cluster, "whole-one")
    assert node == WHOLE
    assert devices in _gpu_uuids(cluster, WHOLE)


def test_32_shares_run_on_the_shared_host_and_the_33rd_stays_pending(cluster):
    _delete_pods(cluster, "shared-one")  # the shares of this test are all the host has
    pool = _pool(cluster, SHARED)
    names = [f"share-{i:02d}" for i in range(SHARES + 1)]
    for name in names:
        _create(cluster, _pod(name, pool, {"nvidia.com/gpu.shared": 1}, labels={"test": "shares"}))
    try:
        running: dict[str, str] = {}
        deadline = time.monotonic() + RUNNING
        while len(running) < SHARES and time.monotonic() < deadline:
            for item in _pods(cluster, "test=shares"):
                if item["status"].get("phase") == "Running":
                    running[item["metadata"]["name"]] = item["spec"]["nodeName"]
            time.sleep(2)
        assert len(running) == SHARES, f"{len(running)} of {SHARES} shares running"
        assert set(running.values()) == {SHARED}
        (pending,) = [
            p for p in _pods(cluster, "test=shares") if p["metadata"]["name"] not in running
        ]
        condition = _scheduled_condition(pending)
        assert condition["reason"] == "Unschedulable"
        assert "Insufficient nvidia.com/gpu.shared" in condition["message"], condition
        # The plugin's `distributed` policy spreads the shares: each GPU four times.
        given = [_devices(cluster, name) for name in running]
        assert sorted(given) == sorted(_gpu_uuids(cluster, SHARED) * 4)
    finally:
        _delete_pods(cluster, *names)


def test_a_broken_nvidia_runtime_binary_fails_a_gpu_pod_with_the_runtime_error(cluster):
    drop_in = "/etc/containerd/conf.d/99-nvidia.toml"
    broken = "/usr/bin/nvidia-container-runtime.missing"
    original = cluster.run(WHOLE, f"cat {drop_in}").stdout
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in original
    cluster.run(
        WHOLE,
        f'sed -i \'s|"/usr/bin/nvidia-container-runtime"|"{broken}"|\' {drop_in} && '
        "systemctl restart containerd",
    )
    try:
        _create(cluster, _pod("whole-broken", _pool(cluster, WHOLE), {"nvidia.com/gpu": 1}))
        # nvidia is the default runtime (the plan's `container_runtime_default`): the pod's
        # sandbox is the first thing the broken entry runs, and fails.
        event = _wait(lambda: _event(cluster, "whole-broken", "FailedCreatePodSandBox"), RUNNING)
        assert f"fork/exec {broken}: no such file or directory" in event["message"], event
        assert _phase(cluster, "whole-broken") == "Pending"
    finally:
        _delete_pods(cluster, "whole-broken")
        cluster.run(
            WHOLE,
            f'sed -i \'s|"{broken}"|"/usr/bin/nvidia-container-runtime"|\' {drop_in} && '
            "systemctl restart containerd",
        )
    assert cluster.run(WHOLE, f"cat {drop_in}").stdout == original


def test_a_device_the_driver_does_not_know_fails_the_container_in_nvidias_hook(cluster):
    # NVIDIA's prestart hook (the runtime adds it) resolves NVIDIA_VISIBLE_DEVICES through the
    # driver before the container starts, as nvidia-container-cli does.
    pod = _pod("unknown-device", _pool(cluster, WHOLE), {})
    pod["spec"]["containers"][0]["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-00000000-0000-0000-0000-000000000000"}
    ]
    pod["spec"]["restartPolicy"] = "Never"
    _create(cluster, pod)
    try:
        state = _wait(lambda: _terminated(cluster, "unknown-device"), RUNNING)
        assert state["reason"] == "StartError", state
        assert "error executing hook `/usr/bin/nvidia-container-runtime-hook`" in state["message"]
    finally:
        _delete_pods(cluster, "unknown-device")


def test_an_image_the_host_lacks_fails_at_once_and_nothing_is_pulled(cluster):
    pod = _pod("no-such-image", _pool(cluster, WHOLE), {})
    pod["spec"]["containers"][0]["image"] = "gpuprov.invalid/not-built:1"
    pod["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    started = time.monotonic()
    _create(cluster, pod)
    try:
        reason = _wait(lambda: _pull_failure(cluster, "no-such-image"), 30)
        assert reason in ("ErrImagePull", "ImagePullBackOff")
        assert time.monotonic() - started < 30
        event = _event(cluster, "no-such-image", "Failed")
        assert event and "gpuprov.invalid" in event["message"], event
    finally:
        _delete_pods(cluster, "no-such-image")


# --- helpers


def _pool(lab, host: str) -> dict:
    """The node selector and tolerations a pod needs to land on ``host``'s pool, from what
    `gpuprov kube render` gives that node: its pool label and a toleration per taint."""
    rendered = subprocess.run(
        [str(lab.bin / "gpuprov"), "kube", "render", str(lab.inventory)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    (node,) = [d for d in documents if d.get("kind") == "Node" and d["metadata"]["name"] == host]
    (taints,) = [d for d in documents if d.get("kind") is None and host in d]
    tolerations = []
    for taint in taints[host]:
        key_value, effect = taint.rsplit(":", 1)
        key, value = key_value.split("=", 1)
        tolerations.append({"key": key, "operator": "Equal", "value": value, "effect": effect})
    pool = {"gpuprov.io/pool": node["metadata"]["labels"]["gpuprov.io/pool"]}
    return {"nodeSelector": pool, "tolerations": tolerations}


def _pod(name: str, pool: dict, limits: dict, labels: dict | None = None) -> dict:
    container = {
        "name": "c",
        "image": CANARY,
        "imagePullPolicy": "Never",
        "command": PRINT_DEVICES,
        "resources": {"limits": limits},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {**pool, "terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def _create(lab, pod: dict) -> None:
    result = subprocess.run(
        [lab.kube["kubectl"], f"--kubeconfig={lab.kubeconfig}", "create", "-f", "-"],
        input=json.dumps(pod),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def _get(lab, name: str) -> dict:
    result = lab.kubectl("-n", NAMESPACE, "get", "pod", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _pods(lab, selector: str) -> list[dict]:
    result = lab.kubectl("-n", NAMESPACE, "get", "pods", "-l", selector, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["items"]


def _phase(lab, name: str) -> str:
    return _get(lab, name)["status"].get("phase", "")


def _wait_running(lab, name: str) -> tuple[str, str]:
    """Wait until pod ``name`` runs; its node and the NVIDIA_VISIBLE_DEVICES it printed."""
    _wait(lambda: _phase(lab, name) == "Running", RUNNING, lambda: _get(lab, name)["status"])
    devices = _wait(lambda: _devices(lab, name), 30)
    return _get(lab, name)["spec"]["nodeName"], devices


def _devices(lab, name: str) -> str:
    """The first line pod ``name`` printed (NVIDIA_VISIBLE_DEVICES), '' before it did."""
    logs = lab.kubectl("-n", NAMESPACE, "logs", name)
    return logs.stdout.strip() if logs.returncode == 0 else ""


def _scheduled_condition(pod: dict) -> dict:
    return next(c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled")


def _event(lab, pod: str, reason: str) -> dict | None:
    result = lab.kubectl(
        "-n", NAMESPACE, "get", "events", "-o", "json",
        "--field-selector", f"involvedObject.name={pod},reason={reason}",
    )  # fmt: skip
    items = json.loads(result.stdout)["items"] if result.returncode == 0 else []
    return items[0] if items else None


def _terminated(lab, name: str) -> dict | None:
    statuses = _get(lab, name)["status"].get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("terminated")


def _pull_failure(lab, name: str) -> str | None:
    statuses = _get(lab, name)["status"].get("containerStatuses") or [{}]
    reason = statuses[0].get("state", {}).get("waiting", {}).get("reason")
    return reason if reason in ("ErrImagePull", "ImagePullBackOff") else None


def _delete_pods(lab, *names: str) -> None:
    result = lab.kubectl(
        "-n", NAMESPACE, "delete", "pod", "--ignore-not-found", "--wait=true", "--timeout=120s",
        *names, timeout=150,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _gpu_uuids(lab, host: str) -> list[str]:
    """The host's GPU UUIDs as the simulated driver reports them (``nvidia-smi -L``)."""
    return re.findall(r"^GPU \d+: .*\(UUID: (GPU-[0-9a-f-]+)\)$", _smi_list(lab, host), re.M)


def _mig_uuids(lab, host: str) -> dict[str, list[str]]:
    """MIG profile -> the UUIDs of the host's MIG devices of it (``nvidia-smi -L``)."""
    out: dict[str, list[str]] = {}
    for profile, uuid in re.findall(
        r"^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[0-9a-f-]+)\)$", _smi_list(lab, host), re.M
    ):
        out.setdefault(profile, []).append(uuid)
    return out


def _smi_list(lab, host: str) -> str:
    return lab.run(host, "nvidia-smi -L").stdout


def _wait(predicate, timeout: float = 60, last=lambda: None):
    """Poll ``predicate`` until it returns something true (returned); fail after ``timeout``
    seconds with ``last()``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not so after {timeout:.0f} s: {last()}")
        time.sleep(1)
