"""A MIG change evicts only the pods on the devices it takes, never the whole node (issue 22).

The lab's MIG host gets a layout of its own per GPU (``mig_layout_by_gpu``): GPU 0 one 4g.40gb,
GPU 5 one 7g.80gb, the others the lab's balanced shape, so a pod asking for
``nvidia.com/mig-4g.40gb`` is on GPU 0 and one asking for ``nvidia.com/mig-7g.80gb`` on GPU 5.
With those two pods and one without a GPU running, and 20 shares on the shared host:

- a disruption budget that forbids evicting the GPU 5 pod fails the MIG host within
  ``drain_timeout``, naming the pod and the budget, with GPU 5's instance untouched;
- GPU 5 re-laid (two 3g.40gb) in the same deploy as the shared host's replicas 4 -> 2: the GPU 5
  pod is evicted, the other two keep running (same UID, no restart), the node advertises GPU 5's
  new devices; on the shared host no share is evicted or restarted, the plugin advertises 16
  and the kubelet keeps all 20 allocations (read at once after the deploy: its settle waited
  until the kubelet, restarted for maxPods, names the pods containerd runs again), which verify
  names as beyond the planned capacity;
  without them verify exits 0;
- ``drain_scope: node``: every pod of the node is evicted (``kubectl drain``).

Pods are bound to their node by name (no scheduler in the way, no pool label needed) and live
in the module's own namespace; the lab's own plan is deployed again at the end.
"""

from __future__ import annotations

import json
import time

import pytest
from gpuprov_lab.images import sleeper

from gpuprov.host.contract import AGENT_PATH, CRI_SOCKETS, POD_RESOURCES_SOCKET

pytestmark = pytest.mark.lab

SHARED, MIG = "lab-a100-01", "lab-h100-01"
NAMESPACE = "gpuprov-lab-drain"
SETTLE = 90  # seconds: a plugin restart plus a few kubelet status reports, on a loaded machine
RUNNING = 240  # seconds: 23 pods on 2 cores start in about 25 s, far longer under load
SHARES = 20
ONE_7G = {0: {"4g.40gb": 1}, 5: {"7g.80gb": 1}}
TWO_3G = {0: {"4g.40gb": 1}, 5: {"3g.40gb": 2}}
# GPUs 1-4, 6, 7 keep the lab's 3g + 2g + 2 x 1g.
BEFORE = {
    "nvidia.com/mig-4g.40gb": "1",
    "nvidia.com/mig-7g.80gb": "1",
    "nvidia.com/mig-3g.40gb": "6",
    "nvidia.com/mig-2g.20gb": "6",
    "nvidia.com/mig-1g.10gb": "12",
}
SHARED_BEFORE = {"nvidia.com/gpu.shared": "32"}
AFTER = {**{k: v for k, v in BEFORE.items() if "7g" not in k}, "nvidia.com/mig-3g.40gb": "8"}


def _inventory(lab, directory, layout, replicas: int = 4, group_data_code: str = ""):
    directory.mkdir()
    return lab.inventory_copy(
        directory,
        inventory_code=(
            f"\nmig = (mig[0], {{**mig[1], 'mig_layout_by_gpu': {layout!r}}})\n"
            f"shared = (shared[0], {{**shared[1], 'time_slicing_replicas': {replicas}}})\n"
        ),
        group_data_code=group_data_code,
    )


@pytest.fixture(scope="module")
def drain_lab(lab, tmp_path_factory):
    """The lab with GPU 0 and GPU 5 re-laid, the cluster side applied, the module's namespace
    and its pods running; the lab's own plan again afterwards."""
    root = tmp_path_factory.mktemp("drain")
    inventories = {
        "before": _inventory(lab, root / "before", ONE_7G),
        "refused": _inventory(lab, root / "refused", TWO_3G, 4, '\ndrain_timeout = "10s"\n'),
        "after": _inventory(lab, root / "after", TWO_3G, replicas=2),
        "node": _inventory(lab, root / "node", ONE_7G, 2, '\ndrain_scope = "node"\n'),
    }
    try:
        lab.deploy(inventories["before"])
        lab.kube_apply(inventories["before"])
        # Both nodes as planned before any pod is bound to them by name (a module before may
        # have left the shared host's plugin re-registering: a pod bound then fails admission).
        lab.wait_nodes(
            lambda n: _gpus(n[MIG]) == BEFORE and _gpus(n[SHARED]) == SHARED_BEFORE,
            SETTLE,
            "GPU 0's 4g and GPU 5's 7g, and 8 x 4 shares",
        )
        made = lab.kubectl("create", "namespace", NAMESPACE)
        assert made.returncode == 0, made.stderr
        _wait(lambda: lab.kubectl("-n", NAMESPACE, "get", "serviceaccount/default").returncode == 0)
        for name, limits in (("gpu-0", {"nvidia.com/mig-4g.40gb": 1}),
                             ("gpu-5", {"nvidia.com/mig-7g.80gb": 1}), ("no-gpu", {})):  # fmt: skip
            _create(lab, _pod(name, MIG, limits))
        for n in range(SHARES):
            _create(lab, _pod(f"share-{n:02d}", SHARED, {"nvidia.com/gpu.shared": 1}))
        _wait(
            lambda: all(_is_running(p) for p in _pods(lab)),
            RUNNING,
            "the pods running",
            lambda: lab.pods_not_running(NAMESPACE),
        )
        yield lab, inventories
    finally:
        lab.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s", timeout=150)
        lab.kubectl("uncordon", MIG)
        lab.deploy()
        lab.kube_apply()
        lab.wait_planned_allocatable(SETTLE, "the lab's own plan again")


def test_a_budget_that_forbids_the_eviction_fails_the_host_before_gpu_5_changes(drain_lab):
    lab, inventories = drain_lab
    before = _state(lab)
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-gpu-5", "namespace": NAMESPACE},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"pod": "gpu-5"}}},
    }
    made = lab.kubectl("create", "-f", "-", input_text=json.dumps(budget))
    assert made.returncode == 0, made.stderr
    try:
        started = time.monotonic()
        result = lab.deploy(inventories["refused"], check=False)
        took = time.monotonic() - started
        output = result.stdout + result.stderr
        assert result.returncode != 0, output[-3000:]
        (said,) = [line for line in output.splitlines() if "not free after 10 s" in line]
        assert f"pod {NAMESPACE}/gpu-5: eviction refused by PodDisruptionBudget" in said, said
        assert f"{NAMESPACE}/keep-gpu-5" in said, said
        assert took < 10 + 120, f"the deploy took {took:.0f} s"  # the drain's 10 s, the rest
        # GPU 5 still has its 7g.80gb, and every pod still runs as it did.
        gpu5 = lab.probe(MIG)["gpus"][5]
        assert [gi["profile"] for gi in gpu5["gpu_instances"]] == ["7g.80gb"]
        assert _state(lab) == before
    finally:
        lab.kubectl("-n", NAMESPACE, "delete", "pdb", "keep-gpu-5")
        lab.kubectl("uncordon", MIG)


def test_gpu_5_relaid_evicts_only_its_pod_and_lower_replicas_evict_no_share(drain_lab):
    lab, inventories = drain_lab
    before = _state(lab)
    assert len(before) == 3 + SHARES
    result = lab.deploy(inventories["after"])
    assert f"evicted pod {NAMESPACE}/gpu-5 (GPU 5)" in result.stdout + result.stderr
    after = _state(lab)
    assert "gpu-5" not in after  # evicted: a bare pod is gone
    # Every other pod is the same pod, never restarted: GPU 0's, the one without a GPU, and
    # the 20 shares whose host now offers 16.
    assert after == {k: v for k, v in before.items() if k != "gpu-5"}
    assert all(restarts == 0 for _, restarts in after.values())
    assert _node(lab, MIG)["spec"].get("unschedulable") is not True
    lab.wait_nodes(
        lambda n: _gpus(n[MIG]) == AFTER and _gpus(n[SHARED]) == {"nvidia.com/gpu.shared": "16"},
        SETTLE,
        "GPU 5's two 3g.40gb, and 8 x 2 shares",
    )
    # Still running, not only still there: a kubelet that rejected a pod when it restarted
    # (UnexpectedAdmissionError) keeps its UID and restart count.
    phases = {
        p["metadata"]["name"]: p["status"].get("phase")
        for p in _pods(lab)
        if not p["metadata"].get("deletionTimestamp")
    }
    assert set(phases.values()) == {"Running"}, (phases, lab.pods_not_running(NAMESPACE))
    # The kubelet keeps all 20 allocations, some on replicas the plugin no longer has. The
    # kubelet restarted for the new maxPods and names no pod for about a second after: read at
    # once, with no wait of the probe's own, this shows that the deploy's settle waited for it.
    document = json.loads(
        lab.run(SHARED, f"python3 {AGENT_PATH} probe --pod-resources {POD_RESOURCES_SOCKET}").stdout
    )
    # ... and it names every pod whose sandbox containerd has ready (containerd's own CRI).
    whole = json.loads(
        lab.run(
            SHARED,
            f"python3 {AGENT_PATH} probe --pod-resources {POD_RESOURCES_SOCKET} "
            f"--runtime {CRI_SOCKETS['containerd']}",
        ).stdout
    )
    assert whole["pod_resources"]["unlisted"] == [], whole["pod_resources"]["unlisted"]
    given = _shares_held(document)
    assert len(given) == SHARES, (given, _shares_held(whole), lab.run(SHARED, _JOURNAL).stdout)
    assert any(int(d.rsplit("::", 1)[1]) >= 2 for d in given), given
    # ... and verify names the pods beyond the planned capacity.
    lab.kube_apply(inventories["after"])
    report = _verify(lab, inventories["after"])
    hosts = {h["name"]: h for h in report["hosts"]}
    assert hosts[MIG]["status"] == "ok", hosts[MIG]
    (finding,) = hosts[SHARED]["findings"]
    assert finding["check"] == "shares-beyond-capacity", finding
    assert f"{SHARES} in use" in finding["found"], finding
    assert f"{NAMESPACE}/share-" in finding["found"], finding
    shares = [p for p in after if p.startswith("share-")]
    lab.kubectl("-n", NAMESPACE, "delete", "--wait=false", *[f"pod/{p}" for p in shares])
    _wait(
        lambda: not set(shares) & {p["metadata"]["name"] for p in _pods(lab)},
        RUNNING,
        "shares gone",
    )
    report = _verify(lab, inventories["after"])
    assert report["ok"], report


def test_drain_scope_node_evicts_every_pod_of_the_node(drain_lab):
    lab, inventories = drain_lab
    # kubectl drain evicts only pods a controller owns (no --force): a ReplicaSet adopts each.
    _delete(lab, "pod/gpu-0", "pod/no-gpu")
    for name in ("owned-a", "owned-b"):
        _owned_pod(lab, name, MIG)
    before = _state(lab)
    result = lab.deploy(inventories["node"])
    assert f"cordon and drain {MIG}" in result.stdout + result.stderr
    assert not set(before.values()) & set(_state(lab).values())  # every pod replaced or gone
    lab.wait_nodes(lambda n: _gpus(n[MIG]) == BEFORE, SETTLE, "GPU 5's 7g again")


# --- helpers

# What the kubelet said about its restart and the shares' devices, for a failure's message.
_JOURNAL = (
    "journalctl -u kubelet --since -3min --no-pager | grep -E "
    "'Started kubelet|SyncLoop ADD|checkpoint|devicemanager|Pods to be removed|dmission' "
    "| cut -c1-400 | tail -40"
)


def _shares_held(document: dict) -> list[str]:
    return [
        device
        for row in document["pod_resources"]["containers"]
        if row["namespace"] == NAMESPACE
        for device in row["device_ids"]
    ]


def _gpus(node: dict) -> dict[str, str]:
    return {
        k: v for k, v in node["allocatable"].items() if k.startswith("nvidia.com/") and v != "0"
    }


def _pod(name: str, node: str, limits: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"pod": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [sleeper(limits)],
        },
    }


def _owned_pod(lab, name: str, node: str) -> None:
    """A pod bound to ``node``, then adopted by a ReplicaSet of one whose replacement names no
    node and tolerates no pool taint (so the scheduler leaves it Pending)."""
    pod = _pod(name, node, {})
    _create(lab, pod)
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-rs", "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"pod": name}},
            "template": {"metadata": {"labels": {"pod": name}}, "spec": spec},
        },
    }
    _create(lab, replica_set)
    _wait(
        lambda: any(
            r.get("controller") for r in _get(lab, name)["metadata"].get("ownerReferences", [])
        ),
        30,
        f"ReplicaSet {name}-rs adopting {name}",
    )
    _wait(lambda: _is_running(_get(lab, name)), RUNNING, f"{name} running")


def _create(lab, document: dict) -> None:
    result = lab.kubectl("create", "-f", "-", input_text=json.dumps(document))
    assert result.returncode == 0, result.stderr


def _get(lab, name: str) -> dict:
    result = lab.kubectl("-n", NAMESPACE, "get", "pod", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _pods(lab) -> list[dict]:
    result = lab.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["items"]


def _is_running(pod: dict) -> bool:
    status = pod["status"]
    states = status.get("containerStatuses") or [{}]
    return status.get("phase") == "Running" and "running" in (states[0].get("state") or {})


def _state(lab) -> dict[str, tuple[str, int]]:
    """Pod name -> (UID, restart count) of every pod of the namespace that is not terminating."""
    out = {}
    for pod in _pods(lab):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        statuses = pod["status"].get("containerStatuses") or [{}]
        restarts = sum(s.get("restartCount", 0) for s in statuses)
        out[pod["metadata"]["name"]] = (pod["metadata"]["uid"], restarts)
    return out


def _node(lab, name: str) -> dict:
    result = lab.kubectl("get", "node", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _verify(lab, inventory) -> dict:
    result = lab.verify(inventory, "--kubeconfig", str(lab.kubeconfig), "--format", "json")
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def _delete(lab, *objects: str) -> None:
    result = lab.kubectl(
        "-n", NAMESPACE, "delete", "--ignore-not-found", "--wait=true", "--timeout=60s", *objects
    )
    assert result.returncode == 0, result.stderr


def _wait(predicate, timeout: float = 30, what: str = "the condition", shown=lambda: "") -> None:
    """Poll ``predicate`` every second; after ``timeout`` fail with ``what`` and ``shown()``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not so after {timeout:.0f} s\n{shown()}"
        time.sleep(1)
