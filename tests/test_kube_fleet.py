"""`gpuprov kube render --fleet`: one system-upgrade-controller Plan per pool, its nodes' plan
documents in a ConfigMap, and a version that follows the pool's plan and nothing else."""

from __future__ import annotations

import base64
import json

import yaml
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.core.cluster import fleet
from gpuprov.core.plan_document import read
from inventories import write_inventory

INVENTORY = """
shared = (["gpu-a100-01", "gpu-a100-02"], {"gpu_model": "A100-80GB", "gpu_count": 2,
          "time_slicing_replicas": REPLICAS, "fleet_concurrency": 2})
whole_card = (["gpu-h200-01"], {"gpu_model": "H200-141GB", "gpu_count": 4})
"""
IMAGE = "registry.example/gpuprov-fleet:1"


def render(tmp_path, replicas=4, *extra, inventory=INVENTORY):
    directory = tmp_path / f"inv-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    path = write_inventory(directory, inventory.replace("REPLICAS", str(replicas)))
    result = CliRunner().invoke(
        main, ["kube", "render", str(path), "--fleet", "--image", IMAGE, *extra]
    )
    return result


def objects(tmp_path, replicas=4):
    result = render(tmp_path, replicas)
    assert result.exit_code == 0, result.output
    stream = result.stdout.split("# file: fleet.yaml\n", 1)[1].split("\n---\n# file:", 1)[0]
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(stream) if d}


def hostnames(*names):
    return [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(names)}]


def test_one_plan_per_pool_selecting_its_label_and_nodes_with_its_concurrency_and_cordon(
    tmp_path,
):
    found = objects(tmp_path)
    shared, whole = found["Plan", "gpuprov-shared"], found["Plan", "gpuprov-whole-card"]
    assert shared["spec"]["nodeSelector"] == {
        "matchLabels": {"gpuprov.io/pool": "shared"},
        "matchExpressions": hostnames("gpu-a100-01", "gpu-a100-02"),
    }
    assert whole["spec"]["nodeSelector"] == {
        "matchLabels": {"gpuprov.io/pool": "whole_card"},
        "matchExpressions": hostnames("gpu-h200-01"),
    }
    assert (shared["spec"]["concurrency"], whole["spec"]["concurrency"]) == (2, 1)
    assert shared["spec"]["cordon"] is True and "drain" not in shared["spec"]
    assert shared["spec"]["upgrade"]["image"] == IMAGE
    assert shared["spec"]["upgrade"]["args"][:2] == ["--config-map", "gpuprov-fleet-shared"]
    # The pool's own taint is tolerated, or the Job could not land on its node.
    assert shared["spec"]["tolerations"] == [
        {"key": "gpuprov.io/pool", "operator": "Equal", "value": "shared", "effect": "NoSchedule"}
    ]
    assert shared["metadata"]["namespace"] == "system-upgrade"
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role"):
        assert any(k == kind for k, _ in found), kind


def test_each_node_gets_its_own_plan_document_that_reads_back(tmp_path):
    found = objects(tmp_path)
    data = found["ConfigMap", "gpuprov-fleet-shared"]["data"]
    assert sorted(data) == ["files.json", "gpu-a100-01.json", "gpu-a100-02.json"]
    plan = read(json.loads(data["gpu-a100-02.json"]), "gpu-a100-02.json")
    (host,) = plan.hosts
    assert (host.name, host.mode, host.sharing.replicas) == ("gpu-a100-02", "shared", 4)


def test_a_changed_replica_count_changes_only_the_shared_pools_version(tmp_path):
    before, same, after = objects(tmp_path, 4), objects(tmp_path, 4), objects(tmp_path, 5)

    def version(found, name):
        return found["Plan", name]["spec"]["version"]

    assert version(before, "gpuprov-shared") == version(same, "gpuprov-shared")
    assert version(before, "gpuprov-shared") != version(after, "gpuprov-shared")
    assert version(before, "gpuprov-whole-card") == version(after, "gpuprov-whole-card")


def test_a_pool_whose_hosts_disagree_on_concurrency_is_refused(tmp_path):
    inventory = INVENTORY.replace('"gpu-a100-02"]', '("gpu-a100-02", {"fleet_concurrency": 3})]')
    result = render(tmp_path, inventory=inventory)
    assert result.exit_code == 2, result.output
    assert "fleet_concurrency" in result.stderr and "2, 3" in result.stderr
    assert "Traceback" not in result.output


def test_a_bad_concurrency_and_a_bare_image_name_are_bad_input(tmp_path):
    result = render(
        tmp_path, inventory=INVENTORY.replace('"fleet_concurrency": 2', '"fleet_concurrency": 0')
    )
    assert result.exit_code == 2 and "fleet_concurrency" in result.stderr, result.output
    directory = tmp_path / "bare"
    directory.mkdir()
    path = write_inventory(directory, INVENTORY.replace("REPLICAS", "4"))
    bare = CliRunner().invoke(main, ["kube", "render", str(path), "--fleet", "--image", "gpuprov"])
    assert bare.exit_code == 2 and "--image" in bare.stderr, bare.output


def test_pools_whose_labels_cannot_tell_them_apart_are_refused(tmp_path):
    # Every host gets the same label: a Plan selecting it would take the other pool's nodes.
    directory = tmp_path / "same"
    directory.mkdir()
    path = write_inventory(
        directory,
        INVENTORY.replace("REPLICAS", "4"),
        inv='kube_node_labels = {"gpuprov.io/gpu": "yes"}\n',
    )
    result = CliRunner().invoke(main, ["kube", "render", str(path), "--fleet", "--image", IMAGE])
    assert result.exit_code == 2, result.output
    assert "kube_node_labels" in result.stderr and "cannot select" in result.stderr


def test_a_node_name_longer_than_a_label_value_is_refused(tmp_path):
    # The Plan selects its nodes by kubernetes.io/hostname, whose value is at most 63 characters.
    name = "gpu-" + "a" * 60
    inventory = INVENTORY.replace(
        '"gpu-a100-02"]', f'("gpu-a100-02", {{"kube_node_name": "{name}"}})]'
    )
    result = render(tmp_path, inventory=inventory)
    assert result.exit_code == 2, result.output
    assert "gpu-a100-02" in result.stderr and "kube_node_name" in result.stderr
    assert name in result.stderr and "Traceback" not in result.output
    assert render(tmp_path, inventory=inventory.replace(name, name[:63])).exit_code == 0


def test_version_is_stable_and_follows_the_documents():
    assert fleet.version_of({"a": {"x": 1}}) == fleet.version_of({"a": {"x": 1}})
    assert fleet.version_of({"a": {"x": 1}}) != fleet.version_of({"a": {"x": 2}})


def test_a_repository_key_on_the_controller_travels_in_the_config_map(tmp_path):
    key = tmp_path / "repo.asc"
    key.write_bytes(b"-----BEGIN PGP PUBLIC KEY BLOCK-----\nx\n")
    inventory = INVENTORY.replace(
        '"fleet_concurrency": 2}', f'"fleet_concurrency": 2, "driver_repo_key": {str(key)!r}}}'
    )
    result = render(tmp_path, inventory=inventory)
    assert result.exit_code == 0, result.output
    stream = result.stdout.split("# file: fleet.yaml\n", 1)[1].split("\n---\n# file:", 1)[0]
    (cm,) = [
        d
        for d in yaml.safe_load_all(stream)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuprov-fleet-shared"
    ]
    (name,) = json.loads(cm["data"]["files.json"]).values()
    assert base64.b64decode(cm["binaryData"][name]) == key.read_bytes()
