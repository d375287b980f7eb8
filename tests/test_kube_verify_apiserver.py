"""`gpuprov verify --kubeconfig` against a real kube-apiserver (etcd, client certificates, RBAC)
with the real kubectl: the host side from a probe snapshot of a simulated MIG host
(tests/test_verify.py's SimHost), the cluster side from one ``kubectl get nodes``.

No kubelet runs here: each Node's ``status.allocatable`` and ``capacity`` are set through the
status subresource, as a kubelet reports them after the device plugin registered; a real kubelet
on the lab hosts is future work (issue #12). Labels and taints come from `gpuprov kube apply`.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner
from gpuprov_lab import kubebuild
from gpuprov_lab.controlplane import Identity
from gpuprov_lab.sim.contract import SIM_ENV
from kube_cluster import control_plane, node
from test_verify import SimHost, snapshot

from gpuprov.cli import main
from gpuprov.controller.bundle import write_bundle
from tests.containerd_binaries import debian_containerd, running_containerd

# What the SimHost plans (2 x A100-80GB, 3g.40gb + 2g.20gb + 2 x 1g.10gb each, mixed) as a
# kubelet reports it; pods is the default maxPods of a MIG host.
ADVERTISED = {
    "nvidia.com/mig-3g.40gb": "2",
    "nvidia.com/mig-2g.20gb": "2",
    "nvidia.com/mig-1g.10gb": "4",
    "pods": "110",
    "cpu": "16",
}


@pytest.fixture(scope="module")
def plane():
    """One control plane for the module; the built kubectl first on PATH."""
    with pytest.MonkeyPatch.context() as patch:
        kubectl = kubebuild.binaries()["kubectl"]
        patch.setenv("PATH", f"{kubectl.parent}{os.pathsep}{os.environ['PATH']}")
        started = control_plane()
        try:
            assert started.kubectl("create", "namespace", "nvidia-device-plugin").returncode == 0
            yield started
        finally:
            started.stop()


@pytest.fixture
def host(plane, tmp_path, monkeypatch, request):
    """A simulated MIG host matching its plan, its probe snapshot saved, and its Node
    (named after the test) registered with ``allocatable`` as planned and gpuprov's labels."""
    sim = SimHost(tmp_path)
    monkeypatch.setenv(SIM_ENV, str(sim.state))
    write_bundle(str(sim.agent))
    sim.node = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[5:55].strip("-")
    sim.write(kube_node_name=sim.node)
    sim.files()
    sim.gpus()
    sim.snapshots = tmp_path / "snapshots"
    with running_containerd(debian_containerd(), sim.containerd):  # the probe asks containerd
        snapshot(sim, sim.snapshots)
    node(plane, sim.node, ADVERTISED)
    applied = CliRunner().invoke(
        main, ["kube", "apply", str(sim.inventory), "--kubeconfig", str(plane.admin_kubeconfig)]
    )
    assert applied.exit_code == 0, applied.output
    return sim


def verify(sim, kubeconfig, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        [
            "verify",
            str(sim.inventory),
            "--snapshot-dir",
            str(sim.snapshots),
            "--kubeconfig",
            str(kubeconfig),
            *args,
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def findings(sim, kubeconfig) -> list[tuple[str, str, str]]:
    code, out = verify(sim, kubeconfig, "--format", "json")
    [report] = json.loads(out)["hosts"]
    assert code == (0 if report["status"] == "ok" else 1)
    return [(f["check"], f["expected"], f["found"]) for f in report["findings"]]


def test_a_node_advertising_the_plan_verifies_clean(plane, host):
    code, out = verify(host, plane.admin_kubeconfig)
    assert code == 0, out
    assert "1 host: 1 ok" in out


def test_allocatable_short_of_the_plan_is_exit_1_naming_node_and_resource(plane, host):
    node(plane, host.node, {**ADVERTISED, "nvidia.com/mig-1g.10gb": "2"})
    assert findings(host, plane.admin_kubeconfig) == [
        ("kube-allocatable", "nvidia.com/mig-1g.10gb: 4", "nvidia.com/mig-1g.10gb: 2")
    ]
    code, out = verify(host, plane.admin_kubeconfig)
    assert code == 1
    assert "node " in out and host.node[:10] in out  # the hint names the node
    assert "1 drift (@local)" in out


def test_a_cordoned_node_is_a_finding(plane, host):
    assert plane.kubectl("cordon", host.node).returncode == 0
    assert findings(host, plane.admin_kubeconfig) == [
        ("kube-cordon", "schedulable", "cordoned (spec.unschedulable)")
    ]


def test_pods_other_than_the_planned_max_pods_is_a_finding(plane, host):
    node(plane, host.node, {**ADVERTISED, "pods": "250"})
    assert findings(host, plane.admin_kubeconfig) == [("kube-pods", "pods: 110", "pods: 250")]


def test_a_label_changed_by_hand_is_a_finding(plane, host):
    relabel = ["label", "node", host.node, "nvidia.com/device-plugin.config=whole", "--overwrite"]
    assert plane.kubectl(*relabel).returncode == 0
    assert findings(host, plane.admin_kubeconfig) == [
        (
            "kube-label",
            "nvidia.com/device-plugin.config=mig-mixed",
            "nvidia.com/device-plugin.config=whole",
        )
    ]


def test_a_node_not_in_the_cluster_is_named(plane, host, tmp_path):
    # A new file: pyinfra caches an inventory's code by file name within a process.
    host.inventory = tmp_path / "renamed.py"
    host.write(kube_node_name="gpu-never-joined")
    assert findings(host, plane.admin_kubeconfig) == [
        ("kube-node", "node gpu-never-joined", "no node gpu-never-joined")
    ]


def test_an_api_server_that_is_down_is_a_named_finding_not_a_crash(plane, host, tmp_path):
    config = json.loads(plane.admin_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"  # nothing listens there
    down = tmp_path / "down.kubeconfig"
    down.write_text(json.dumps(config))
    [(check, expected, found)] = findings(host, down)
    assert (check, expected) == ("kube-api", "the API server answers")
    assert found.startswith("listing nodes failed: the API server is unreachable")


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "kubeconfig not found"),
        ("clusters: [", "not a usable kubeconfig: error: error loading config file"),
    ],
)
def test_a_bad_kubeconfig_is_exit_2(plane, host, tmp_path, text, message):
    config = tmp_path / "bad.kubeconfig"
    if text is not None:
        config.write_text(text)
    code, out = verify(host, config)
    assert code == 2, out
    assert out.startswith(f"error: {config}: --kubeconfig: ")
    assert message in out


def test_list_on_nodes_is_all_verify_needs_and_without_it_the_permission_is_named(
    plane, host, tmp_path
):
    config = plane.kubeconfig(tmp_path / "lister.kubeconfig", Identity("node-lister"))
    [(check, _, found)] = findings(host, config)
    assert check == "kube-api"
    assert 'missing permission: user "node-lister" may not list nodes' in found
    for args in (
        ["create", "clusterrole", "node-lister", "--verb=list", "--resource=nodes"],
        ["create", "clusterrolebinding", "node-lister", "--clusterrole=node-lister"]
        + ["--user=node-lister"],
    ):
        assert plane.kubectl(*args).returncode == 0
    assert findings(host, config) == []


def sicken(host) -> None:
    """GPU 0 of the host's snapshot saw an uncorrectable ECC error since the driver loaded."""
    path = host.snapshots / "@local.json"
    document = json.loads(path.read_text())
    document["health"]["gpus"][0]["ecc_uncorrected"] = {"volatile": 1, "aggregate": 1}
    path.write_text(json.dumps(document))


def unschedulable(plane, name: str) -> bool:
    result = plane.kubectl("get", "node", name, "-o", "jsonpath={.spec.unschedulable}")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip() == "true"


def test_a_node_with_an_unhealthy_gpu_is_named_for_cordoning_and_left_alone(plane, host):
    sicken(host)
    found = findings(host, plane.admin_kubeconfig)
    assert [check for check, _, _ in found] == ["ecc", "kube-cordon"]
    assert found[1][1:] == (
        "cordoned: a GPU on the host is unhealthy",
        f"node {host.node} is schedulable",
    )
    assert not unschedulable(plane, host.node)


def test_cordon_unhealthy_cordons_the_node_says_so_and_never_uncordons(plane, host):
    sicken(host)
    result = CliRunner().invoke(
        main,
        ["verify", str(host.inventory), "--snapshot-dir", str(host.snapshots)]
        + ["--kubeconfig", str(plane.admin_kubeconfig), "--cordon-unhealthy"],
    )
    assert result.exit_code == 1, result.output
    assert f"verify: cordoned node {host.node} (host @local: unhealthy GPU)" in result.stderr
    assert unschedulable(plane, host.node)
    # Cordoned already: it should stay so, and the advice is not "uncordon it".
    found = findings(host, plane.admin_kubeconfig)
    assert found[1][2] == f"node {host.node} is cordoned (spec.unschedulable)"
    # The GPU is fine again: verify cordons nothing more and uncordons nothing.
    snapshot_path = host.snapshots / "@local.json"
    document = json.loads(snapshot_path.read_text())
    document["health"]["gpus"][0]["ecc_uncorrected"] = {"volatile": 0, "aggregate": 1}
    snapshot_path.write_text(json.dumps(document))
    code, _ = verify(host, plane.admin_kubeconfig, "--cordon-unhealthy")
    assert code == 1  # the node is left cordoned, which is a finding of its own
    assert unschedulable(plane, host.node)


def test_cordon_unhealthy_leaves_a_healthy_node_schedulable(plane, host):
    code, out = verify(host, plane.admin_kubeconfig, "--cordon-unhealthy")
    assert code == 0, out
    assert not unschedulable(plane, host.node)


def test_cordon_unhealthy_without_patch_permission_is_a_named_finding(plane, host, tmp_path):
    sicken(host)
    config = plane.kubeconfig(tmp_path / "reader.kubeconfig", Identity("node-reader"))
    for args in (
        ["create", "clusterrole", "node-reader", "--verb=list", "--resource=nodes"],
        ["create", "clusterrolebinding", "node-reader", "--clusterrole=node-reader"]
        + ["--user=node-reader"],
    ):
        assert plane.kubectl(*args).returncode == 0
    code, out = verify(host, config, "--cordon-unhealthy", "--format", "json")
    assert code == 1
    [report] = json.loads(out)["hosts"]
    [(check, expected, found)] = [
        (f["check"], f["expected"], f["found"]) for f in report["findings"] if f["check"] != "ecc"
    ]
    assert (check, expected) == ("kube-api", f"node {host.node} cordoned")
    assert "node-reader" in found and "patch" in found
    assert not unschedulable(plane, host.node)
