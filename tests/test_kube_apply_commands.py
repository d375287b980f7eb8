"""`gpuprov kube apply`: which kubectl commands and objects gpuprov sends.

kubectl here is a recorded stand-in (a script first on PATH that logs each call and its stdin
and answers from a fixed node list): these tests check gpuprov's command construction and its
taint arithmetic, not how an API server takes them. That needs a real API server (issue #13,
the lab's Kubernetes node). The kubeconfig checks run the real kubectl, which parses a
kubeconfig offline.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys

import pytest
import yaml
from click.testing import CliRunner
from gpuprov_lab import kubebuild

from gpuprov.cli import main
from inventories import write_inventory

FAKE_KUBECTL = f"""\
#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
stdin = "" if sys.stdin.isatty() else sys.stdin.read()
with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
    log.write(json.dumps({{"args": args, "stdin": stdin}}) + "\\n")
verb = args[2]
if os.environ.get("FAKE_KUBECTL_DOWN") and verb != "config":
    sys.exit("The connection to the server 10.0.0.1:6443 was refused - did you specify the "
             "right host or port?")
if verb == "config":
    print("{{}}")
elif verb == "get":
    print(open(os.environ["FAKE_KUBECTL_NODES"]).read())
elif verb == "apply" and os.environ.get("FAKE_KUBECTL_FORBID"):
    sys.exit('Error from server (Forbidden): nodes "gpu-1" is forbidden: User "viewer" '
             'cannot patch resource "nodes" in API group "" at the cluster scope')
elif verb == "diff":
    print("diff -u -N /tmp/LIVE/v1.Node..gpu-1 /tmp/MERGED/v1.Node..gpu-1")
    sys.exit(1)
"""

INVENTORY = """\
    shared = (["gpu-1", "gpu-2"], {"gpu_model": "A100-80GB", "gpu_count": 2,
                                   "time_slicing_replicas": 4})
    whole_card = (["gpu-3"], {"gpu_model": "H200-141GB", "gpu_count": 1})
"""

# A foreign NoExecute taint carries timeAdded: it must come back byte for byte.
FOREIGN_TAINT = {
    "key": "node.kubernetes.io/unreachable",
    "effect": "NoExecute",
    "timeAdded": "2026-12-01T08:00:00Z",
}


def node(name, labels=None, annotations=None, taints=None) -> dict:
    out = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}}
    if annotations:
        out["metadata"]["annotations"] = annotations
    if taints is not None:
        out["spec"] = {"taints": taints}
    return out


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """The recorded stand-in: ``kubectl(nodes)`` sets the node list and returns the log."""
    script = tmp_path / "bin" / "kubectl"
    script.parent.mkdir()
    script.write_text(FAKE_KUBECTL)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "kubectl.log"
    nodes_file = tmp_path / "nodes.json"
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(log))
    monkeypatch.setenv("FAKE_KUBECTL_NODES", str(nodes_file))

    def calls(nodes: list[dict]) -> list[dict]:
        nodes_file.write_text(json.dumps({"kind": "List", "items": nodes}))
        return log

    return calls


def records(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def setup(tmp_path):
    inventory = write_inventory(tmp_path, INVENTORY)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return str(inventory), str(kubeconfig)


def apply(*args: str):
    return CliRunner().invoke(main, ["kube", "apply", *args])


def test_configmap_goes_by_server_side_apply_and_each_node_gets_one_json_patch(kubectl, setup):
    inventory, kubeconfig = setup
    log = kubectl([node("gpu-1"), node("gpu-2"), node("gpu-3")])
    result = apply(inventory, "--kubeconfig", kubeconfig)
    assert result.exit_code == 0, result.output
    calls = records(log)
    assert [c["args"][2:4] for c in calls] == [
        ["config", "view"],
        ["get", "--raw"],  # one page of the node list holds all three nodes
        ["apply", "--server-side"],
        ["patch", "node"],
        ["patch", "node"],
        ["patch", "node"],
    ]
    assert all(c["args"][:2] == ["--kubeconfig", kubeconfig] for c in calls)
    assert calls[2]["args"][2:] == [
        "apply",
        "--server-side",
        "--field-manager=gpuprov",
        "--force-conflicts",
        "-f",
        "-",
    ]
    sent = list(yaml.safe_load_all(calls[2]["stdin"]))
    assert [(d["kind"], d["metadata"]["name"]) for d in sent] == [
        ("ConfigMap", "gpuprov-device-plugin-configs"),
    ]
    assert sent[0]["metadata"]["namespace"] == "nvidia-device-plugin"
    assert sorted(sent[0]["data"]) == ["shared-r4", "whole"]
    assert [c["args"][4] for c in calls[3:]] == ["gpu-1", "gpu-2", "gpu-3"]
    assert calls[3]["args"][5:7] == ["--type=json", "--field-manager=gpuprov"]
    # Only gpuprov's keys: each label added into the node's map, nothing else of the node.
    assert json.loads(calls[3]["args"][-1]) == [
        {"op": "add", "path": "/metadata/labels/gpuprov.io~1pool", "value": "shared"},
        {
            "op": "add",
            "path": "/metadata/labels/nvidia.com~1device-plugin.config",
            "value": "shared-r4",
        },
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {
                "gpuprov.io/labels": "gpuprov.io/pool,nvidia.com/device-plugin.config",
                "gpuprov.io/taints": "gpuprov.io/pool:NoSchedule",
            },
        },
        {
            "op": "add",
            "path": "/spec/taints",
            "value": [{"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"}],
        },
    ]
    assert "node gpu-1: changed gpuprov.io/pool=shared" in result.output


def test_taints_are_patched_keeping_the_other_owners_taints(kubectl, setup):
    inventory, kubeconfig = setup
    log = kubectl([node("gpu-1", taints=[FOREIGN_TAINT]), node("gpu-2"), node("gpu-3")])
    result = apply(inventory, "--kubeconfig", kubeconfig, "--limit", "gpu-1")
    assert result.exit_code == 0, result.output
    (patch,) = [c for c in records(log) if c["args"][2] == "patch"]
    assert patch["args"][2:7] == [
        "patch",
        "node",
        "gpu-1",
        "--type=json",
        "--field-manager=gpuprov",
    ]
    ops = json.loads(patch["args"][-1])
    assert ops[-2:] == [
        # Only if nobody changed the list since it was read.
        {"op": "test", "path": "/spec/taints", "value": [FOREIGN_TAINT]},
        {
            "op": "add",
            "path": "/spec/taints",
            "value": [
                FOREIGN_TAINT,
                {"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"},
            ],
        },
    ]
    assert "taint +gpuprov.io/pool=shared:NoSchedule" in result.output


def test_a_pool_change_replaces_only_the_taint_gpuprov_set(kubectl, setup):
    inventory, kubeconfig = setup
    before = [
        {"key": "gpuprov.io/pool", "value": "mig", "effect": "NoSchedule"},  # gpuprov's, old
        {"key": "example.com/dedicated", "value": "team-a", "effect": "NoSchedule"},
    ]
    owned = {"gpuprov.io/taints": "gpuprov.io/pool:NoSchedule"}
    log = kubectl([node("gpu-1", annotations=owned, taints=before)])
    result = apply(inventory, "--kubeconfig", kubeconfig, "--limit", "gpu-1")
    assert result.exit_code == 0, result.output
    (patch,) = [c for c in records(log) if c["args"][2] == "patch"]
    assert json.loads(patch["args"][-1])[-1]["value"] == [
        {"key": "example.com/dedicated", "value": "team-a", "effect": "NoSchedule"},
        {"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"},
    ]
    assert "taint +gpuprov.io/pool=shared:NoSchedule" in result.output
    assert "taint -gpuprov.io/pool=mig:NoSchedule" in result.output


def test_a_node_already_as_planned_gets_no_taint_patch_and_nothing_reported(kubectl, setup):
    inventory, kubeconfig = setup
    done = node(
        "gpu-1",
        labels={"gpuprov.io/pool": "shared", "nvidia.com/device-plugin.config": "shared-r4"},
        annotations={
            "gpuprov.io/labels": "gpuprov.io/pool,nvidia.com/device-plugin.config",
            "gpuprov.io/taints": "gpuprov.io/pool:NoSchedule",
        },
        taints=[
            FOREIGN_TAINT,
            {"key": "gpuprov.io/pool", "value": "shared", "effect": "NoSchedule"},
        ],
    )
    log = kubectl([done])
    result = apply(inventory, "--kubeconfig", kubeconfig, "--limit", "gpu-1")
    assert result.exit_code == 0, result.output
    assert [c["args"][2] for c in records(log)] == ["config", "get", "apply"]
    assert "nodes: nothing to change (1 nodes checked)" in result.output


def test_limit_touches_only_those_nodes_but_the_configmap_keeps_every_config(kubectl, setup):
    inventory, kubeconfig = setup
    log = kubectl([node("gpu-1"), node("gpu-2"), node("gpu-3")])
    result = apply(inventory, "--kubeconfig", kubeconfig, "--limit", "whole_card")
    assert result.exit_code == 0, result.output
    calls = records(log)
    (configmap,) = yaml.safe_load_all(calls[2]["stdin"])
    # Server-side apply would take shared-r4 from gpu-1 and gpu-2 if it were left out.
    assert sorted(configmap["data"]) == ["shared-r4", "whole"]
    assert [c["args"][4] for c in calls if c["args"][2] == "patch"] == ["gpu-3"]


def test_a_node_not_in_the_cluster_is_skipped_never_created(kubectl, setup):
    inventory, kubeconfig = setup
    log = kubectl([node("gpu-1"), node("gpu-3")])
    result = apply(inventory, "--kubeconfig", kubeconfig)
    assert result.exit_code == 0, result.output
    assert "node gpu-2 (host gpu-2) is not in the cluster: skipped" in result.output
    patched = [c["args"][4] for c in records(log) if c["args"][2] == "patch"]
    assert patched == ["gpu-1", "gpu-3"]


def test_with_fleet_a_node_its_plan_cannot_select_is_named(kubectl, setup):
    # A Plan selects nodes by kubernetes.io/hostname (SUC's identity of a node): one set by hand
    # to something else leaves the node out of every Plan, so it is named; the rest goes on.
    inventory, kubeconfig = setup
    renamed = node("gpu-2")
    renamed["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-2.lan"
    log = kubectl([node("gpu-1"), renamed, node("gpu-3")])
    result = apply(inventory, "--kubeconfig", kubeconfig, "--fleet", "--image", "r.example/g:1")
    assert result.exit_code == 0, result.output
    assert "node gpu-2 (host gpu-2): its kubernetes.io/hostname is gpu-2.lan" in result.stderr
    assert "gpu-1 (host" not in result.stderr and "gpu-3 (host" not in result.stderr
    assert [c["args"][4] for c in records(log) if c["args"][2] == "patch"] == [
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]
    # The pools with no host (mig, vgpu) keep no Plan or documents; each Plan goes first.
    deletes = [c["args"][2:] for c in records(log) if c["args"][2] == "delete"]
    assert deletes == [
        ["delete", "-n", "system-upgrade", "plans.upgrade.cattle.io", "gpuprov-mig",
         "gpuprov-vgpu", "--ignore-not-found"],
        ["delete", "-n", "system-upgrade", "configmaps", "gpuprov-fleet-mig", "gpuprov-fleet-vgpu",
         "--ignore-not-found"],
    ]  # fmt: skip
    # --dry-run: the deletions are the API server's dry run too.
    log.unlink()
    dry = apply(inventory, "--kubeconfig", kubeconfig, "--fleet", "--image", "r.example/g:1",
                "--dry-run")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    deletes = [c["args"] for c in records(log) if c["args"][2] == "delete"]
    assert len(deletes) == 2 and all("--dry-run=server" in d for d in deletes), deletes
    # Without --fleet no Plan is applied or deleted, and nothing is said.
    log.unlink()
    assert "hostname" not in apply(inventory, "--kubeconfig", kubeconfig).stderr
    assert not [c for c in records(log) if c["args"][2] == "delete"]


def test_dry_run_shows_kubectls_diff_and_changes_nothing(kubectl, setup):
    inventory, kubeconfig = setup
    log = kubectl([node("gpu-1"), node("gpu-2"), node("gpu-3")])
    result = apply(inventory, "--kubeconfig", kubeconfig, "--dry-run")
    assert result.exit_code == 0, result.output
    calls = records(log)
    assert [c["args"][2] for c in calls] == ["config", "get", "diff", "patch", "patch", "patch"]
    assert calls[2]["args"][2:5] == ["diff", "--server-side", "--field-manager=gpuprov"]
    # The API server checks each node's patch and keeps nothing.
    assert all("--dry-run=server" in c["args"] for c in calls[3:])
    assert "diff -u -N" in result.output
    assert "node gpu-1: would change" in result.output
    assert "taint +gpuprov.io/pool=shared:NoSchedule" in result.output


def test_the_cluster_refusing_is_exit_1_with_kubectls_reason(kubectl, setup, monkeypatch):
    inventory, kubeconfig = setup
    kubectl([node("gpu-1"), node("gpu-2"), node("gpu-3")])
    monkeypatch.setenv("FAKE_KUBECTL_FORBID", "1")
    result = apply(inventory, "--kubeconfig", kubeconfig)
    assert result.exit_code == 1
    assert "kubectl apply failed" in result.output
    assert 'missing permission: user "viewer" may not patch nodes' in result.output
    assert "Traceback" not in result.output

    monkeypatch.setenv("FAKE_KUBECTL_DOWN", "1")
    result = apply(inventory, "--kubeconfig", kubeconfig)
    assert result.exit_code == 1
    assert "error: listing nodes failed: the API server is unreachable" in result.output


def test_a_node_list_that_never_ends_is_exit_1_not_a_loop(kubectl, setup, tmp_path):
    inventory, kubeconfig = setup
    kubectl([])
    # Every page answers with the same continue token, as a broken API server (or proxy) might.
    endless = {"kind": "NodeList", "metadata": {"continue": "same"}, "items": [node("gpu-1")]}
    (tmp_path / "nodes.json").write_text(json.dumps(endless))
    result = apply(inventory, "--kubeconfig", kubeconfig)
    assert result.exit_code == 1
    assert "the API server repeated a continue token" in result.output
    gets = [c["args"][2:] for c in records(tmp_path / "kubectl.log") if c["args"][2] == "get"]
    assert gets == [
        ["get", "--raw", "/api/v1/nodes?limit=500"],
        ["get", "--raw", "/api/v1/nodes?limit=500&continue=same"],  # "same" again: stop
    ]


@pytest.fixture
def real_kubectl(monkeypatch):
    """The pinned kubectl the lab builds (gpuprov_lab.kubebuild) first on PATH, built if missing;
    a machine without it and without Go falls back to its own kubectl."""
    binaries = kubebuild.binaries()
    if not binaries["kubectl"].is_file() and shutil.which("go"):
        binaries = kubebuild.ensure()
    if binaries["kubectl"].is_file():
        monkeypatch.setenv("PATH", f"{binaries['kubectl'].parent}{os.pathsep}{os.environ['PATH']}")
    elif shutil.which("kubectl") is None:
        pytest.fail("no kubectl: neither built (no Go) nor on PATH")


@pytest.mark.usefixtures("real_kubectl")
@pytest.mark.parametrize(
    "text, message",
    [
        ("clusters: [", "not a usable kubeconfig: error: error loading config file"),
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "current-context must exist"),
    ],
)
def test_a_bad_kubeconfig_is_exit_2_before_anything_is_sent(setup, tmp_path, text, message):
    inventory, kubeconfig = setup
    (tmp_path / "kubeconfig").write_text(text)
    result = apply(inventory, "--kubeconfig", kubeconfig)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {kubeconfig}: --kubeconfig: ")
    assert message in result.output


def test_a_missing_kubeconfig_is_exit_2(setup, tmp_path):
    inventory, _ = setup
    result = apply(inventory, "--kubeconfig", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert "kubeconfig not found" in result.output
