"""`gpuprov kube apply` against a real kube-apiserver (etcd, client certificates, RBAC) with the
real kubectl of the same version (both built by gpuprov_lab.kubebuild).

No kubelet runs: each Node object is made as an admin would make one by hand (client-side
``kubectl apply``, which leaves ``kubectl.kubernetes.io/last-applied-configuration``), with a
foreign label and a foreign taint, and the API server's admission adds its own
``node.kubernetes.io/not-ready`` taint, as it does for every new node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpuprov_lab import kubebuild
from gpuprov_lab.controlplane import Identity
from kube_cluster import control_plane

from gpuprov.cli import main
from inventories import write_inventory

NAMESPACE = "nvidia-device-plugin"
CONFIGMAP = "gpuprov-device-plugin-configs"
FOREIGN_TAINT = {"key": "example.com/dedicated", "value": "team-a", "effect": "NoExecute"}
POOL_TAINT = {"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def plane():
    """One control plane for the module; the built kubectl first on PATH (it matches the
    server's version; the machine's own may be older)."""
    with pytest.MonkeyPatch.context() as patch:
        kubectl = kubebuild.binaries()["kubectl"]
        patch.setenv("PATH", f"{kubectl.parent}{os.pathsep}{os.environ['PATH']}")
        started = control_plane()
        try:
            assert started.kubectl("create", "namespace", NAMESPACE).returncode == 0
            yield started
        finally:
            started.stop()


def inventory(directory: Path, prefix: str, replicas: int = 4, extra_label: bool = False) -> str:
    """Two time-sliced A100 hosts and one whole-card host, named ``<prefix>-1..3``."""
    labels = {"gpuprov.io/pool": "{mode}"}
    if extra_label:
        labels["example.com/tier"] = "gold"
    group = {"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": replicas}
    group["kube_node_labels"] = labels
    text = (
        f"shared = ([{prefix + '-1'!r}, {prefix + '-2'!r}], {group!r})\n"
        f"whole_card = ([{prefix + '-3'!r}], {{'gpu_model': 'H200-141GB', 'gpu_count': 1}})\n"
    )
    return str(write_inventory(directory, text))


def make_node(plane, tmp_path: Path, name: str) -> None:
    """A Node made by client-side ``kubectl apply`` with a foreign label and taint."""
    document = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"example.com/team": "team-a"}},
        "spec": {"taints": [FOREIGN_TAINT]},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document))
    result = plane.kubectl("apply", "-f", str(path))
    assert result.returncode == 0, result.stderr


def get(plane, kind: str, name: str, namespace: str | None = None) -> dict | None:
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    result = plane.kubectl(*args)
    return json.loads(result.stdout) if result.returncode == 0 else None


def apply(inventory_path: str, kubeconfig, *args: str):
    return CliRunner().invoke(
        main, ["kube", "apply", inventory_path, "--kubeconfig", str(kubeconfig), *args]
    )


def taints(node: dict) -> list[dict]:
    return [
        {k: v for k, v in t.items() if k != "timeAdded"} for t in node["spec"].get("taints", [])
    ]


@pytest.fixture
def nodes(plane, tmp_path, request):
    """Three nodes named after the test, and the inventory planning them."""
    prefix = request.node.name.removeprefix("test_")[:40].replace("_", "-")
    for index in (1, 2, 3):
        make_node(plane, tmp_path, f"{prefix}-{index}")
    return prefix


def test_apply_adds_labels_and_taints_and_keeps_the_foreign_ones(plane, tmp_path, nodes):
    result = apply(inventory(tmp_path, nodes), plane.admin_kubeconfig)
    assert result.exit_code == 0, result.output
    node = get(plane, "node", f"{nodes}-1")
    labels = node["metadata"]["labels"]
    assert labels["gpuprov.io/pool"] == "shared"
    assert labels["nvidia.com/device-plugin.config"] == "shared-r4"
    assert labels["example.com/team"] == "team-a"  # foreign, kept
    assert FOREIGN_TAINT in taints(node) and POOL_TAINT in taints(node)
    # The API server's own taint for a node whose kubelet never reported is kept too.
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in taints(node)
    whole = get(plane, "node", f"{nodes}-3")
    assert whole["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "whole"
    configmap = get(plane, "configmap", CONFIGMAP, NAMESPACE)
    assert sorted(configmap["data"]) == ["shared-r4", "whole"]
    assert "replicas: 4" in configmap["data"]["shared-r4"]


def test_a_second_apply_changes_nothing(plane, tmp_path, nodes):
    path = inventory(tmp_path, nodes)
    assert apply(path, plane.admin_kubeconfig).exit_code == 0
    before = {n: get(plane, "node", f"{nodes}-{n}")["metadata"]["resourceVersion"] for n in "123"}
    configmap = get(plane, "configmap", CONFIGMAP, NAMESPACE)["metadata"]["resourceVersion"]
    result = apply(path, plane.admin_kubeconfig)
    assert result.exit_code == 0, result.output
    assert "nodes: nothing to change (3 nodes checked)" in result.output
    after = {n: get(plane, "node", f"{nodes}-{n}")["metadata"]["resourceVersion"] for n in "123"}
    assert after == before
    assert get(plane, "configmap", CONFIGMAP, NAMESPACE)["metadata"]["resourceVersion"] == configmap


def test_a_plan_change_moves_the_node_to_another_config_and_drops_a_label_gpuprov_no_longer_sets(
    plane, tmp_path, nodes
):
    first = tmp_path / "first"
    first.mkdir()
    assert apply(inventory(first, nodes, extra_label=True), plane.admin_kubeconfig).exit_code == 0
    assert get(plane, "node", f"{nodes}-1")["metadata"]["labels"]["example.com/tier"] == "gold"
    result = apply(inventory(tmp_path, nodes, replicas=8), plane.admin_kubeconfig)
    assert result.exit_code == 0, result.output
    assert f"node {nodes}-1: changed nvidia.com/device-plugin.config=shared-r8" in result.output
    labels = get(plane, "node", f"{nodes}-1")["metadata"]["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "shared-r8"
    assert "example.com/tier" not in labels
    assert labels["example.com/team"] == "team-a"
    data = get(plane, "configmap", CONFIGMAP, NAMESPACE)["data"]
    assert "shared-r8" in data and "shared-r4" not in data


def test_dry_run_shows_the_changes_and_changes_nothing(plane, tmp_path, nodes):
    before = get(plane, "node", f"{nodes}-1")
    result = apply(inventory(tmp_path, nodes, replicas=3), plane.admin_kubeconfig, "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"node {nodes}-1: would change gpuprov.io/pool=shared" in result.output
    assert "+  shared-r3: |" in result.output  # kubectl diff of the ConfigMap
    assert get(plane, "node", f"{nodes}-1")["metadata"] == before["metadata"]
    assert (
        "shared-r3" not in (get(plane, "configmap", CONFIGMAP, NAMESPACE) or {"data": {}})["data"]
    )


def test_an_api_server_that_is_down_is_exit_1_naming_it(plane, tmp_path):
    config = json.loads(plane.admin_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"  # nothing listens there
    down = tmp_path / "down.kubeconfig"
    down.write_text(json.dumps(config))
    result = apply(inventory(tmp_path, "down"), down)
    assert result.exit_code == 1
    assert "error: listing nodes failed: the API server is unreachable" in result.output
    assert "Traceback" not in result.output


def test_a_namespace_that_does_not_exist_is_named(plane, tmp_path, nodes):
    result = apply(inventory(tmp_path, nodes), plane.admin_kubeconfig, "--namespace", "gpu-op")
    assert result.exit_code == 1
    assert "kubectl apply failed: namespace gpu-op does not exist: create it" in result.output
    assert "gpuprov.io/pool" not in get(plane, "node", f"{nodes}-1")["metadata"]["labels"]


def grant(plane, user: str, kind: str, name: str, verbs: str, resource: str) -> None:
    """A Role (in the device plugin's namespace) or ClusterRole bound to ``user``."""
    scope = ["-n", NAMESPACE] if kind == "role" else []
    binding = "rolebinding" if kind == "role" else "clusterrolebinding"
    for args in (
        ["create", kind, name, f"--verb={verbs}", f"--resource={resource}"],
        ["create", binding, name, f"--{kind}={name}", f"--user={user}"],
    ):
        result = plane.kubectl(*scope, *args)
        assert result.returncode == 0, result.stderr


def test_a_kubeconfig_that_may_only_read_nodes_is_refused_naming_the_permission(
    plane, tmp_path, nodes
):
    grant(plane, "node-reader", "clusterrole", "node-reader", "get,list", "nodes")
    reader = plane.kubeconfig(tmp_path / "reader.kubeconfig", Identity("node-reader"))
    before = get(plane, "node", f"{nodes}-1")["metadata"]["resourceVersion"]
    result = apply(inventory(tmp_path, nodes), reader)
    assert result.exit_code == 1
    assert (
        'kubectl apply failed: missing permission: user "node-reader" may not patch configmaps '
        f'(API group core, in the namespace "{NAMESPACE}")'
    ) in result.output
    # With the ConfigMaps allowed, the nodes are next.
    grant(plane, "node-reader", "role", "reader-configmaps", "get,create,patch", "configmaps")
    dry = apply(inventory(tmp_path, nodes), reader, "--dry-run")  # the server checks it too
    assert dry.exit_code == 1 and "may not patch nodes" in dry.output
    result = apply(inventory(tmp_path, nodes), reader)
    assert result.exit_code == 1
    assert (
        f'changing node {nodes}-1 failed: missing permission: user "node-reader" may not patch '
        "nodes (API group core, at the cluster scope)"
    ) in result.output
    assert get(plane, "node", f"{nodes}-1")["metadata"]["resourceVersion"] == before


def test_the_permissions_docs_list_are_enough(plane, tmp_path, nodes):
    """docs/kubernetes.md's RBAC: nodes get, list, patch; configmaps get, create, patch."""
    grant(plane, "applier", "clusterrole", "gpuprov-apply-nodes", "get,list,patch", "nodes")
    grant(plane, "applier", "role", "gpuprov-apply-configmaps", "get,create,patch", "configmaps")
    applier = plane.kubeconfig(tmp_path / "applier.kubeconfig", Identity("applier"))
    result = apply(inventory(tmp_path, nodes), applier)
    assert result.exit_code == 0, result.output
    dry = apply(inventory(tmp_path, nodes, replicas=2), applier, "--dry-run")
    assert dry.exit_code == 0, dry.output
