"""The Plans of `gpuprov kube apply --fleet` driven by the real system-upgrade-controller v0.20.1
against a real API server: one Job per node of a pool, never more than `fleet_concurrency` at
once; a changed replica count makes Jobs for the shared pool only; an unchanged apply makes no
Job; a failed Job leaves its node without the plan's label, the others labelled.

No kubelet runs here: the test finishes each Job the controller starts (its status, as the Job
controller writes it when the pod ends), which is all the controller reads of it
(``pkg/upgrade/handle_batch.go``: the Complete or Failed condition). What the Job's container
does on a node is tests/lab/test_fleet_job.py's.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timezone

import lab_consumers
import pytest
from click.testing import CliRunner
from gpuprov_lab import upgrade_controller
from kube_cluster import control_plane

from gpuprov.cli import main
from gpuprov.core.cluster import fleet
from gpuprov.host.contract import FLEET_NAMESPACE
from inventories import write_inventory

SHARED = ["suc-a100-01", "suc-a100-02", "suc-a100-03"]
WHOLE = ["suc-h200-01"]
INVENTORY = """
shared = ({shared!r}, {{"gpu_model": "A100-80GB", "gpu_count": 2,
          "time_slicing_replicas": {replicas}, "fleet_concurrency": 2}})
whole_card = ({whole!r}, {{"gpu_model": "H200-141GB", "gpu_count": 4}})
"""
IMAGE = "gpuprov.invalid/gpuprov-fleet:test"
PLAN_LABEL = "plan.upgrade.cattle.io/"


@pytest.fixture(scope="module")
def cluster():
    lab_consumers.require_shared()
    plane = control_plane()
    handle = None
    try:
        assert plane.kubectl("create", "namespace", "nvidia-device-plugin").returncode == 0
        handle = upgrade_controller.start(plane.admin_kubeconfig, lab_consumers.workdir("fleet"))
        for name in SHARED + WHOLE:
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            }
            assert lab_consumers.create(plane, node).returncode == 0
        yield plane
    finally:
        if handle:
            handle.stop()
        plane.stop()


def inventory(tmp_path, replicas: int, shared=SHARED, whole=WHOLE):
    directory = tmp_path / f"inv-{replicas}-{time.monotonic_ns()}"
    directory.mkdir()
    return write_inventory(
        directory, INVENTORY.format(shared=shared, whole=whole, replicas=replicas)
    )


def apply(plane, tmp_path, replicas: int, **pools) -> None:
    path = inventory(tmp_path, replicas, **pools)
    result = CliRunner().invoke(
        main,
        ["kube", "apply", str(path), "--kubeconfig", str(plane.admin_kubeconfig), "--fleet",
         "--image", IMAGE],
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def jobs(plane) -> list[dict]:
    return lab_consumers.get(plane, "jobs", "-n", FLEET_NAMESPACE)["items"]


def finish(plane, job: dict, ok: bool) -> None:
    """The status the Job controller writes when the Job's pod ends."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    kinds = ("SuccessCriteriaMet", "Complete") if ok else ("FailureTarget", "Failed")
    status = {
        "startTime": now,
        "conditions": [
            {"type": k, "status": "True", "lastTransitionTime": now, "lastProbeTime": now,
             "reason": "Test", "message": "finished by the test"}
            for k in kinds
        ],
        **({"succeeded": 1, "completionTime": now} if ok else {"failed": 1}),
    }  # fmt: skip
    # Started first, then ended: the API server takes a Job's status only in that order.
    for step in ({"startTime": now}, status):
        current = lab_consumers.get(plane, "job", "-n", FLEET_NAMESPACE, job["metadata"]["name"])
        current["status"] = {**current.get("status", {}), **step}
        result = subprocess.run(
            [plane.kubectl_path, f"--kubeconfig={plane.admin_kubeconfig}", "replace",
             "--subresource=status", "-f", "-"],
            input=json.dumps(current), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr


def run_plans(plane, fail: str | None = None, timeout: float = 120) -> tuple[dict, dict]:
    """Finish every Job the controller starts (the one of node ``fail`` as failed) until none
    is left to start: the nodes each Job was for (plan -> nodes, in order) and the most Jobs
    of a plan running at once."""
    seen: dict[str, list[str]] = {}
    most: dict[str, int] = {}
    done: set[str] = set()
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 10:  # the controller re-queues a plan within a second
        assert time.monotonic() < deadline, f"Jobs still coming after {timeout}s: {seen}"
        # A Job finished before (by an earlier run) stays until its TTL: it is not running.
        running = [
            j
            for j in jobs(plane)
            if j["metadata"]["name"] not in done and not (j.get("status") or {}).get("conditions")
        ]
        # Only the Jobs of nodes in the plan's `applying` run (SUC sets parallelism 1 then).
        active = [j for j in running if j["spec"].get("parallelism")]
        for job in active:
            labels = job["metadata"]["labels"]
            seen.setdefault(labels["upgrade.cattle.io/plan"], []).append(
                labels["upgrade.cattle.io/node"]
            )
        for plan in {j["metadata"]["labels"]["upgrade.cattle.io/plan"] for j in active}:
            count = sum(
                1 for j in active if j["metadata"]["labels"]["upgrade.cattle.io/plan"] == plan
            )
            most[plan] = max(most.get(plan, 0), count)
        if active:
            quiet_since = time.monotonic()
        for job in active:
            finish(plane, job, ok=job["metadata"]["labels"]["upgrade.cattle.io/node"] != fail)
            done.add(job["metadata"]["name"])
        time.sleep(1)
    return seen, most


def node_labels(plane) -> dict[str, dict[str, str]]:
    items = lab_consumers.get(plane, "nodes")["items"]
    return {
        n["metadata"]["name"]: {
            k: v for k, v in n["metadata"]["labels"].items() if k.startswith(PLAN_LABEL)
        }
        for n in items
    }


def plan_hash(plane, pool: str) -> str:
    plan = lab_consumers.get(
        plane, "plans.upgrade.cattle.io", "-n", FLEET_NAMESPACE, fleet.plan_name(pool)
    )
    return plan["status"]["latestHash"]


def test_one_job_per_node_within_concurrency_then_only_the_changed_pool_reruns(cluster, tmp_path):
    apply(cluster, tmp_path, replicas=4)
    seen, most = run_plans(cluster)
    assert sorted(seen["gpuprov-shared"]) == SHARED and seen["gpuprov-whole-card"] == WHOLE
    assert most["gpuprov-shared"] == 2, most  # fleet_concurrency: 2 of the 3 at once, never 3
    labels = node_labels(cluster)
    first = plan_hash(cluster, "shared")
    assert all(labels[n] == {PLAN_LABEL + "gpuprov-shared": first} for n in SHARED), labels
    whole = plan_hash(cluster, "whole_card")
    assert labels[WHOLE[0]] == {PLAN_LABEL + "gpuprov-whole-card": whole}

    # The same inventory again: nothing to run.
    apply(cluster, tmp_path, replicas=4)
    assert run_plans(cluster)[0] == {}

    # A changed replica count: the shared pool's Plan only.
    apply(cluster, tmp_path, replicas=5)
    seen, most = run_plans(cluster)
    assert list(seen) == ["gpuprov-shared"] and sorted(seen["gpuprov-shared"]) == SHARED, seen
    assert plan_hash(cluster, "shared") != first
    assert plan_hash(cluster, "whole_card") == whole


def test_a_failed_job_leaves_its_node_without_the_new_label_and_the_others_done(cluster, tmp_path):
    apply(cluster, tmp_path, replicas=6)
    run_plans(cluster, fail=SHARED[1])
    latest = plan_hash(cluster, "shared")
    labels = node_labels(cluster)
    assert labels[SHARED[1]].get(PLAN_LABEL + "gpuprov-shared") != latest, labels
    for node in (SHARED[0], SHARED[2]):
        assert labels[node][PLAN_LABEL + "gpuprov-shared"] == latest, labels


def test_a_regrouped_node_gets_a_job_of_its_new_pool_only(cluster, tmp_path):
    # SHARED[2] moves to the whole-card pool. `kube apply` writes the ConfigMaps and Plans, then
    # patches the Nodes: in between, the node still carries the shared pool's labels while the
    # shared Plan has a new version (its pool lost a node) whose ConfigMap no longer holds the
    # node's document. Here that moment is held: the fleet objects alone, as `kube render
    # --fleet` writes them, then the controller's Jobs; then `kube apply`, which patches the node.
    run_plans(cluster)
    moved = {"shared": SHARED[:2], "whole": WHOLE + SHARED[2:]}
    out = tmp_path / "rendered"
    rendered = CliRunner().invoke(
        main,
        ["kube", "render", str(inventory(tmp_path, 6, **moved)), "--fleet", "--image", IMAGE,
         "--out", str(out)],
    )  # fmt: skip
    assert rendered.exit_code == 0, rendered.output
    applied = cluster.kubectl(
        "apply", "--server-side", "--field-manager=gpuprov", "--force-conflicts",
        "-f", str(out / "fleet.yaml"),
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    seen, _ = run_plans(cluster)
    # No Job for the moved node from the pool it is leaving, nor yet from the one it joins.
    assert sorted(seen["gpuprov-shared"]) == SHARED[:2] and seen["gpuprov-whole-card"] == WHOLE
    assert labelled(cluster, SHARED[2]) == "shared"

    apply(cluster, tmp_path, 6, **moved)  # the node patched: now the whole-card Plan's
    seen, _ = run_plans(cluster)
    assert seen == {"gpuprov-whole-card": [SHARED[2]]}, seen
    assert labelled(cluster, SHARED[2]) == "whole_card"
    assert node_labels(cluster)[SHARED[2]][PLAN_LABEL + "gpuprov-whole-card"] == plan_hash(
        cluster, "whole_card"
    )

    # The last shared hosts regrouped too: the shared pool's Plan and documents go with it.
    apply(cluster, tmp_path, 6, shared=[], whole=WHOLE + SHARED)
    for kind, name in (("plans.upgrade.cattle.io", "gpuprov-shared"),
                       ("configmap", "gpuprov-fleet-shared")):  # fmt: skip
        got = cluster.kubectl("get", "-n", FLEET_NAMESPACE, kind, name)
        assert got.returncode != 0 and "NotFound" in got.stderr, (got.stdout, got.stderr)
    seen, _ = run_plans(cluster)
    assert list(seen) == ["gpuprov-whole-card"], seen
    assert sorted(seen["gpuprov-whole-card"]) == sorted(WHOLE + SHARED), seen


def labelled(plane, node: str) -> str:
    """The pool label ``kube apply`` gives ``node``."""
    return lab_consumers.get(plane, "node", node)["metadata"]["labels"]["gpuprov.io/pool"]
