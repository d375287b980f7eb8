"""`verify --canary`'s cluster edge against a real kube-apiserver (etcd, RBAC) with the real
kubectl: the canary pods as the API server stores them, their wait bounded by canary_timeout,
and their deletion on every way out (an interrupt included). No scheduler or kubelet runs here,
so no pod is placed: that end to end is tests/lab/test_canary.py's.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from gpuprov_lab import kubebuild
from kube_cluster import control_plane

from gpuprov.controller.inventory import load
from gpuprov.controller.kube.canary import CanaryRun
from gpuprov.controller.kube.kubectl import Kubectl
from gpuprov.core.checks import canary as canary_check
from gpuprov.core.plan import build
from gpuprov.host.contract import CANARY_LABEL, CANARY_NAMESPACE

DATA = {"gpu_model": "A100-80GB", "gpu_count": 2, "canary_timeout": 3,
        "canary_image": "registry.invalid/canary:1", "canary_command": ["sleep", "9"]}  # fmt: skip
MIG = {"mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, "mig_strategy": "mixed"}
INVENTORY = (
    f"shared = [('node-a', {{**{DATA!r}, 'time_slicing_replicas': 4}})]\n"
    f"mig = [('node-b', {{**{DATA!r}, **{MIG!r}}})]\n"
)


@pytest.fixture(scope="module")
def plane():
    with pytest.MonkeyPatch.context() as patch:
        kubectl = kubebuild.binaries()["kubectl"]
        patch.setenv("PATH", f"{kubectl.parent}{os.pathsep}{os.environ['PATH']}")
        started = control_plane()
        try:
            yield started
        finally:
            started.stop()


@pytest.fixture
def cluster(tmp_path):
    (tmp_path / "inv.py").write_text(INVENTORY)
    return build(load(str(tmp_path / "inv.py")))


def pods(plane) -> list[dict]:
    result = plane.kubectl("-n", CANARY_NAMESPACE, "get", "pods", "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["items"]


def default_account(plane) -> None:
    """What kube-controller-manager makes in a new namespace (it does not run here)."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "default", "namespace": CANARY_NAMESPACE}}  # fmt: skip
    for _ in range(30):
        made = Kubectl(str(plane.admin_kubeconfig)).run(
            "apply", "-f", "-", stdin=json.dumps(account)
        )
        if made.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(made.stderr)


def test_one_pod_per_node_and_resource_is_stored_then_deleted_after_the_timeout(plane, cluster):
    plane.kubectl("create", "namespace", CANARY_NAMESPACE)
    default_account(plane)
    started = time.monotonic()
    with CanaryRun(str(plane.admin_kubeconfig), cluster) as run:
        stored = pods(plane)
        outcomes = run.wait()
    waited = time.monotonic() - started
    assert run.error is None
    assert sorted(
        (p["metadata"]["annotations"]["gpuprov.io/host"],
         next(iter(p["spec"]["containers"][0]["resources"]["limits"])))
        for p in stored
    ) == [
        ("node-a", "nvidia.com/gpu.shared"),
        ("node-b", "nvidia.com/mig-1g.10gb"),
        ("node-b", "nvidia.com/mig-2g.20gb"),
        ("node-b", "nvidia.com/mig-3g.40gb"),
    ]  # fmt: skip
    assert {p["metadata"]["labels"][CANARY_LABEL] for p in stored} == {run.run_id}
    assert {p["spec"]["containers"][0]["image"] for p in stored} == {"registry.invalid/canary:1"}
    # Not placed (no scheduler): each waited its canary_timeout, then is canary-pending.
    assert 3 <= waited < 60
    assert {o.state for o in outcomes.values()} == {canary_check.NOT_SCHEDULED}
    findings = run.findings(outcomes, {})
    assert [f.check for f in findings["node-a"]] == ["canary-pending"]
    assert len(findings["node-b"]) == 3
    assert pods(plane) == []


def test_an_interrupt_while_waiting_still_deletes_the_pods(plane, cluster):
    plane.kubectl("create", "namespace", CANARY_NAMESPACE)
    default_account(plane)
    with pytest.raises(KeyboardInterrupt):
        with CanaryRun(str(plane.admin_kubeconfig), cluster):
            assert len(pods(plane)) == 4
            raise KeyboardInterrupt  # Ctrl-C (SIGTERM is turned into the same)
    assert pods(plane) == []


class _SigtermAfterCreate(Kubectl):
    """The real kubectl; SIGTERM lands on this process right after the pods were stored, while
    the run is still being entered (as a ``kill`` during a slow API server would)."""

    def create(self, manifests: str) -> str:
        created = super().create(manifests)
        os.kill(os.getpid(), signal.SIGTERM)
        return created


def test_sigterm_while_the_pods_are_created_still_deletes_them(plane, cluster):
    plane.kubectl("create", "namespace", CANARY_NAMESPACE)
    default_account(plane)
    before = signal.getsignal(signal.SIGTERM)
    client = _SigtermAfterCreate(str(plane.admin_kubeconfig))
    with pytest.raises(KeyboardInterrupt):
        with CanaryRun(str(plane.admin_kubeconfig), cluster, client=client):
            raise AssertionError("the run was entered although SIGTERM came during its set-up")
    assert pods(plane) == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_pods_of_another_run_are_left_alone(plane, cluster):
    plane.kubectl("create", "namespace", CANARY_NAMESPACE)
    default_account(plane)
    other = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "someone-elses", "namespace": CANARY_NAMESPACE,
                          "labels": {CANARY_LABEL: "another-run"}},
             "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}  # fmt: skip
    client = Kubectl(str(plane.admin_kubeconfig))
    assert client.run("create", "-f", "-", stdin=json.dumps(other)).returncode == 0
    try:
        with CanaryRun(str(plane.admin_kubeconfig), cluster):
            assert len(pods(plane)) == 5
        assert [p["metadata"]["name"] for p in pods(plane)] == ["someone-elses"]
    finally:
        plane.kubectl("-n", CANARY_NAMESPACE, "delete", "pod", "someone-elses", "--wait=false")
