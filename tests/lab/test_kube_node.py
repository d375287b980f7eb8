"""The lab's Kubernetes end to end: after a deploy, the real API server shows each lab host as a
Ready Node whose allocatable is the plan, as the real kubelet and NVIDIA's real device plugin
(over the simulated NVML) report it; a changed inventory changes what the nodes advertise; a MIG
mode change cordons, drains and uncordons the node through the API server.

What the nodes must advertise is written out here (``ADVERTISED``), not taken from the planner:
the planner is checked against it too. The kubelet reports its status every 10 s, so every
change is awaited with a bounded poll (``Lab.wait_nodes``).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time

import pytest
from gpuprov_lab.images import sleeper

pytestmark = pytest.mark.lab

SHARED, MIG, WHOLE = "lab-a100-01", "lab-h100-01", "lab-h200-01"
# inventories/lab.py: 8 x A100 time-sliced 4 ways (renamed), 8 x H100 each 3g + 2g + 2 x 1g in
# `mixed`, 4 x H200 whole.
ADVERTISED = {
    SHARED: {"nvidia.com/gpu.shared": "32"},
    MIG: {
        "nvidia.com/mig-3g.40gb": "8",
        "nvidia.com/mig-2g.20gb": "8",
        "nvidia.com/mig-1g.10gb": "16",
    },
    WHOLE: {"nvidia.com/gpu": "4"},
}
SETTLE = 60  # seconds: a plugin restart (about 2 s) plus one or two kubelet status reports


def verify_cluster(lab, inventory=None):
    """`gpuprov kube apply` (labels, taints, ConfigMap), then `gpuprov verify --kubeconfig`."""
    lab.kube_apply(inventory)
    return lab.verify(inventory, "--kubeconfig", str(lab.kubeconfig))


def gpus(node: dict) -> dict[str, str]:
    """The GPU resources a node advertises; a resource at 0 is one a plugin served before, which
    the kubelet keeps for its grace period (docs/kubernetes.md), not one it advertises."""
    return {k: v for k, v in node["allocatable"].items() if k != "pods" and v != "0"}


def advertising(expected: dict[str, dict[str, str]]):
    def check(nodes: dict) -> bool:
        return all(
            name in nodes and nodes[name]["ready"] and gpus(nodes[name]) == want
            for name, want in expected.items()
        )

    return check


def test_after_a_deploy_three_ready_nodes_advertise_the_plan_and_verify_agrees(lab, deployed):
    plans = lab.plan()
    assert {n: {k: str(v) for k, v in p["resources"].items()} for n, p in plans.items()} == (
        ADVERTISED
    )
    nodes = lab.wait_nodes(advertising(ADVERTISED), SETTLE, "the planned GPU resources")
    assert sorted(nodes) == sorted(ADVERTISED)
    assert {n: nodes[n]["allocatable"]["pods"] for n in nodes} == {
        n: str(p["kubelet_max_pods"]) for n, p in plans.items()
    }
    result = verify_cluster(lab)
    assert result.returncode == 0, result.stdout + result.stderr


def test_new_replicas_are_re_read_by_the_running_plugin_and_advertised(lab, deployed, tmp_path):
    inventory = lab.inventory_copy(tmp_path)
    text = inventory.read_text().replace(
        '{"time_slicing_replicas": 4}', '{"time_slicing_replicas": 2}'
    )
    assert '"time_slicing_replicas": 2' in text
    inventory.write_text(text)
    pid = _plugin_pid(lab, SHARED)
    try:
        lab.deploy(inventory)
        lab.wait_nodes(advertising({SHARED: {"nvidia.com/gpu.shared": "16"}}), SETTLE, "8 x 2")
        assert _plugin_pid(lab, SHARED) == pid  # re-read on SIGHUP, not restarted
        result = verify_cluster(lab, inventory)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        lab.deploy()
        lab.kube_apply()
    lab.wait_nodes(advertising({SHARED: ADVERTISED[SHARED]}), SETTLE, "8 x 4 again")


def test_kubelet_max_pods_in_the_inventory_becomes_each_nodes_pods(lab, deployed, tmp_path):
    inventory = lab.inventory_copy(tmp_path, group_data_code="\nkubelet_max_pods = 64\n")
    try:
        lab.deploy(inventory)
        # A restarted kubelet drops the plugins' sockets; each plugin registers again by itself
        # (docs/kubernetes.md), so the GPUs come back at the next status report.
        lab.wait_nodes(
            lambda nodes: (
                advertising(ADVERTISED)(nodes)
                and all(n["allocatable"].get("pods") == "64" for n in nodes.values())
            ),
            SETTLE,
            "pods 64 and the planned GPUs on every node",
        )
        result = verify_cluster(lab, inventory)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        lab.deploy()
        lab.kube_apply()
    planned = {n: str(p["kubelet_max_pods"]) for n, p in lab.plan().items()}
    lab.wait_nodes(
        lambda nodes: (
            advertising(ADVERTISED)(nodes)
            and {n: nodes[n]["allocatable"].get("pods") for n in planned} == planned
        ),
        SETTLE,
        "the planned pods and GPUs again",
    )


def test_a_new_mig_layout_is_what_the_node_advertises(lab, deployed, tmp_path):
    # GPU 1 becomes one 7g.80gb: the plugin must be restarted to see other MIG devices
    # (k8s-device-plugin#992); its config file does not change.
    inventory = lab.inventory_copy(tmp_path)
    text = inventory.read_text().replace(
        '"mig_strategy": "mixed"}',
        '"mig_strategy": "mixed", "mig_layout_by_gpu": {1: {"7g.80gb": 1}}}',
    )
    assert "mig_layout_by_gpu" in text
    inventory.write_text(text)
    relaid = {
        "nvidia.com/mig-7g.80gb": "1",
        "nvidia.com/mig-3g.40gb": "7",
        "nvidia.com/mig-2g.20gb": "7",
        "nvidia.com/mig-1g.10gb": "14",
    }
    try:
        lab.deploy(inventory)
        lab.wait_nodes(advertising({MIG: relaid}), SETTLE, "the new MIG layout")
        result = verify_cluster(lab, inventory)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        lab.deploy()
        lab.kube_apply()
    lab.wait_nodes(advertising({MIG: ADVERTISED[MIG]}), SETTLE, "the lab's own layout again")


def test_a_stopped_plugin_fails_verify_naming_the_host_and_the_resource(lab, deployed):
    lab.wait_nodes(advertising({WHOLE: ADVERTISED[WHOLE]}), SETTLE, "4 whole cards")
    lab.run(WHOLE, "systemctl stop nvidia-device-plugin.service")
    try:
        lab.wait_nodes(lambda nodes: gpus(nodes[WHOLE]) == {}, SETTLE, f"{WHOLE} advertising none")
        lab.kube_apply()
        result = lab.verify(None, "--kubeconfig", str(lab.kubeconfig), "--format", "json")
        assert result.returncode == 1, result.stdout + result.stderr
        findings = {
            h["name"]: [
                (f["check"], f.get("expected", ""), f.get("found", "")) for f in h["findings"]
            ]
            for h in json.loads(result.stdout)["hosts"]
        }
        assert findings[SHARED] == [] and findings[MIG] == []
        assert any(
            check == "kube-allocatable" and "nvidia.com/gpu" in f"{expected} {found}"
            for check, expected, found in findings[WHOLE]
        ), findings[WHOLE]
    finally:
        lab.run(WHOLE, "systemctl start nvidia-device-plugin.service")
    lab.wait_nodes(advertising({WHOLE: ADVERTISED[WHOLE]}), SETTLE, "4 whole cards again")


def test_a_mig_mode_change_cordons_drains_and_uncordons_the_node_of_a_bound_pod(
    lab, deployed, tmp_path
):
    # The whole node's drain (drain_scope: node; the default evicts only the pods holding a GPU,
    # tests/lab/test_gpu_drain.py).
    inventory = _mig_host_as_whole_cards(lab, tmp_path, '\ndrain_scope = "node"\n')
    _bound_pod(lab, "mode-change", MIG)
    seen = _Cordons(lab, MIG)
    try:
        with seen:
            result = lab.deploy(inventory)
        output = result.stdout + result.stderr
        assert f"cordon and drain {MIG}" in output and f"uncordon {MIG}" in output
        assert True in seen.values, seen.values  # cordoned while the change ran
        assert _node(lab, MIG)["spec"].get("unschedulable") is not True  # and uncordoned
        assert _pods_on(lab, MIG) == []  # drained
        lab.wait_nodes(advertising({MIG: {"nvidia.com/gpu": "8"}}), SETTLE, "8 whole H100s")
    finally:
        _delete(lab, "rs/mode-change-rs", "pod/mode-change")
        lab.deploy()
    lab.wait_nodes(advertising({MIG: ADVERTISED[MIG]}), SETTLE, "MIG again")


def test_a_drain_that_times_out_leaves_the_node_cordoned_and_the_host_failed(
    lab, deployed, tmp_path
):
    # A pod that does not go away once evicted (a finalizer nobody removes, as a stuck volume
    # detach leaves one): the drain waits for it until its time limit. (A disruption budget does
    # not hold a pod that never ran: the API server evicts Pending pods regardless.)
    inventory = _mig_host_as_whole_cards(
        lab, tmp_path, '\ndrain_timeout = "5s"\ndrain_scope = "node"\n'
    )
    _bound_pod(lab, "held", MIG, finalizers=["gpuprov.io/test-hold"])
    try:
        result = lab.deploy(inventory, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output[-3000:]
        said = [line for line in output.splitlines() if "kubectl" in line]
        assert any(f"kubectl drain {MIG}" in line and "held" in line for line in said), said
        assert _node(lab, MIG)["spec"].get("unschedulable") is True
        probe = lab.probe(MIG)
        assert all(g["mig"]["current"] for g in probe["gpus"])  # nothing was changed
    finally:
        lab.kubectl(
            "patch",
            "pod",
            "held",
            "--type=json",
            "-p",
            '[{"op": "remove", "path": "/metadata/finalizers"}]',
        )
        _delete(lab, "rs/held-rs", "pod/held")
        lab.kubectl("uncordon", MIG)
    assert not _node(lab, MIG)["spec"].get("unschedulable")


# --- helpers


def _plugin_pid(lab, host: str) -> str:
    return lab.run(host, "systemctl show -P MainPID nvidia-device-plugin.service").stdout.strip()


def _mig_host_as_whole_cards(lab, directory, group_data_code: str = ""):
    """The lab inventory with the MIG host moved to whole_card: MIG off, a mode change."""
    return lab.inventory_copy(
        directory,
        inventory_code=(
            f"\nwhole_card = (whole_card[0] + [h for h in mig[0] if h[0] == {MIG!r}], whole_card[1])\n"
            f"mig = ([h for h in mig[0] if h[0] != {MIG!r}], mig[1])\n"
        ),
        group_data_code=group_data_code,
    )


class _Cordons:
    """Samples the node's ``spec.unschedulable`` while the block runs (a cordon lasts as long as
    the change, seconds)."""

    def __init__(self, lab, node: str):
        self.lab, self.node, self.values = lab, node, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)

    def _sample(self):
        while not self._stop.wait(0.2):
            self.values.append(_node(self.lab, self.node)["spec"].get("unschedulable") is True)


def _node(lab, name: str) -> dict:
    result = lab.kubectl("get", "node", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _pods_on(lab, node: str) -> list[str]:
    result = lab.kubectl(
        "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "name"
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _bound_pod(lab, name: str, node: str, finalizers: list[str] = ()) -> None:
    """A pod running on ``node`` and owned by a ReplicaSet, as a workload's pods are (drain
    evicts only such pods without --force). The pod is bound first, then a ReplicaSet of one
    adopts it; the replacement the ReplicaSet makes once the pod is evicted names no node and
    tolerates no pool taint, so the scheduler leaves it Pending, off the drained node."""
    spec = {
        "terminationGracePeriodSeconds": 1,
        "containers": [sleeper()],
    }
    _apply(
        lab,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"app": name},
                "finalizers": list(finalizers),
            },
            "spec": {"nodeName": node, **spec},
        },
    )
    _apply(
        lab,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": f"{name}-rs", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        },
    )
    deadline = time.monotonic() + 30
    while not any(
        ref.get("controller") for ref in _pod(lab, name)["metadata"].get("ownerReferences", [])
    ):
        assert time.monotonic() < deadline, f"ReplicaSet {name}-rs did not adopt pod {name}"
        time.sleep(0.5)


def _pod(lab, name: str) -> dict:
    result = lab.kubectl("-n", "default", "get", "pod", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _apply(lab, document: dict) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(document, f)
        f.flush()
        result = lab.kubectl("apply", "-f", f.name)
    assert result.returncode == 0, result.stderr


def _delete(lab, *objects: str) -> None:
    lab.kubectl("delete", "--ignore-not-found", "--wait=true", "--timeout=30s", *objects)
