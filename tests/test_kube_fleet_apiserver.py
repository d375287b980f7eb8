"""`gpuprov kube apply --fleet` against a real kube-apiserver holding system-upgrade-controller
v0.20.1's own Plan CRD (the shared copy of ``pkg/crds/yaml/generated``, as the controller
creates it at start): every object is accepted, and each Plan comes back with its spec whole
(a structural schema drops a field it does not know, silently: a field of ours that SUC has
not would be missing here)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from click.testing import CliRunner
from gpuprov_lab import consumer
from kube_cluster import control_plane

from gpuprov.cli import main
from gpuprov.controller.kube.incluster import ApiClient
from gpuprov.core.cluster.fleet import JOB_ACCOUNT
from gpuprov.host.contract import FLEET_NAMESPACE
from inventories import write_inventory

INVENTORY = """
shared = (["fleet-a100-01", "fleet-a100-02"], {"gpu_model": "A100-80GB", "gpu_count": 2,
          "time_slicing_replicas": 4, "fleet_concurrency": 2})
whole_card = (["fleet-h200-01"], {"gpu_model": "H200-141GB", "gpu_count": 4})
"""
IMAGE = "registry.example/gpuprov-fleet:1"


@pytest.fixture(scope="module")
def plane():
    started = control_plane()
    try:
        assert started.kubectl("create", "namespace", "nvidia-device-plugin").returncode == 0
        consumer.apply(
            started.admin_kubeconfig, consumer.reference_crds("system-upgrade-controller-v0.20.1")
        )
        yield started
    finally:
        started.stop()


def test_the_plans_are_accepted_by_the_real_crd_with_every_field_kept(plane, tmp_path):
    path = write_inventory(tmp_path, INVENTORY)
    kubeconfig = str(plane.admin_kubeconfig)
    assert (
        plane.kubectl(
            "wait", "--for=condition=Established", "crd/plans.upgrade.cattle.io", "--timeout=60s"
        ).returncode
        == 0
    )
    rendered = CliRunner().invoke(main, ["kube", "render", str(path), "--fleet", "--image", IMAGE])
    assert rendered.exit_code == 0, rendered.output
    applied = CliRunner().invoke(
        main, ["kube", "apply", str(path), "--kubeconfig", kubeconfig, "--fleet", "--image", IMAGE]
    )
    assert applied.exit_code == 0, applied.output
    got = json.loads(
        plane.kubectl("get", "plans.upgrade.cattle.io", "-n", "system-upgrade", "-o", "json").stdout
    )
    plans = {p["metadata"]["name"]: p["spec"] for p in got["items"]}
    assert sorted(plans) == ["gpuprov-shared", "gpuprov-whole-card"]

    stream = rendered.stdout.split("# file: fleet.yaml\n", 1)[1].split("\n---\n# file:", 1)[0]
    want = {
        d["metadata"]["name"]: d["spec"]
        for d in yaml.safe_load_all(stream)
        if d and d["kind"] == "Plan"
    }
    for name, spec in want.items():
        assert plans[name] == spec, name
    maps = json.loads(
        plane.kubectl(
            "get", "configmap", "gpuprov-fleet-shared", "-n", "system-upgrade", "-o", "json"
        ).stdout
    )
    assert sorted(maps["data"]) == ["files.json", "fleet-a100-01.json", "fleet-a100-02.json"]
    # The Job's account may read its pool's ConfigMap and patch nodes, and nothing of Secrets.
    account = "system:serviceaccount:system-upgrade:gpuprov-fleet"
    for verb, what, allowed in (
        ("get", "configmap/gpuprov-fleet-shared", "yes"),
        ("patch", "nodes", "yes"),
        ("get", "secrets", "no"),
    ):
        result = plane.kubectl("auth", "can-i", verb, what, "-n", "system-upgrade", "--as", account)
        assert result.stdout.strip() == allowed, (verb, what, result.stdout, result.stderr)


def test_the_jobs_kubeconfig_lets_the_real_kubectl_do_what_the_drain_does(plane, tmp_path):
    """The kubeconfig `fleet apply` writes for the deploy's drain (the pod's token by file, its
    CA), given a real token of the Jobs' account: kubectl reads it, and the account may do
    what the GPU-scoped drain and `kubectl drain` do, and no more."""
    path = write_inventory(tmp_path, INVENTORY)
    kubeconfig = str(plane.admin_kubeconfig)
    applied = CliRunner().invoke(
        main, ["kube", "apply", str(path), "--kubeconfig", kubeconfig, "--fleet", "--image", IMAGE]
    )
    assert applied.exit_code == 0, applied.output
    token = plane.kubectl("create", "token", JOB_ACCOUNT, "-n", FLEET_NAMESPACE)
    assert token.returncode == 0, token.stderr
    (tmp_path / "token").write_text(token.stdout.strip())
    admin = yaml.safe_load(plane.admin_kubeconfig.read_text())["clusters"][0]["cluster"]
    client = ApiClient(admin["server"], "unused", admin["certificate-authority"])
    job_kubeconfig = tmp_path / "job.kubeconfig"
    job_kubeconfig.write_text(json.dumps(client.kubeconfig(tmp_path / "token")))

    def as_job(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(job_kubeconfig), *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    whoami = as_job("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert whoami.stdout == f"system:serviceaccount:{FLEET_NAMESPACE}:{JOB_ACCOUNT}", whoami.stderr
    for allowed, *question in (
        ("yes", "get", "nodes"),
        ("yes", "patch", "nodes"),
        ("yes", "list", "pods"),
        ("yes", "create", "pods", "--subresource=eviction"),
        ("yes", "list", "poddisruptionbudgets.policy"),
        ("yes", "get", "daemonsets.apps"),
        ("no", "delete", "pods"),
        ("no", "delete", "nodes"),
        ("no", "list", "secrets"),
    ):
        result = as_job("auth", "can-i", *question, "-A")
        assert result.stdout.strip() == allowed, (question, result.stdout, result.stderr)
