"""The in-cluster deploy end to end on the lab: `gpuprov kube apply --fleet` puts the Plans, the
plan documents and the Jobs' RBAC into the lab's API server; the real system-upgrade-controller
v0.20.1 (on the controller machine, ``gpuprov_lab.upgrade_controller``) makes one Job per node,
and the lab's real kubelets run them: SUC's cordon container (the lab's kubectl image,
``SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE``), then the fleet image (``gpuprov fleet image`` on a Debian
base) through the real containerd, host network and PID namespace, the host's root at /host,
reaching the API server at the `kubernetes` Service's address (the lab's DNAT stands in for
kube-proxy, ``gpuprov_lab.network``). `gpuprov fleet apply` deploys through pyinfra's @chroot
connector and annotates its Node; SUC labels it with the plan's hash and uncordons it.

Shown: one Job per node, each pod run on its node, at most ``fleet_concurrency`` of a Plan at
once (the lab has one node per pool, so one: tests/test_fleet_suc.py shows 2 of 3 in one pool);
verify agrees afterwards; an unchanged apply starts no Job; a changed replica count re-runs the
shared pool's Plan only; a host broken by hand fails its Job (backoff limit 0), its node is left
failed and without the new hash, the others done, and verify names it. The module leaves the
lab as it found it (Plans, Jobs, namespace, node labels and annotations gone, nodes uncordoned,
the shared host deployed to the lab's own plan over SSH), also when its set-up fails half-way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from gpuprov_lab import fleet_image, images, kubebuild, upgrade_controller

from gpuprov.core.cluster import fleet
from gpuprov.core.disruption import device_gpus, gpu_of
from gpuprov.host.contract import (
    FLEET_APPLIED,
    FLEET_FAILED,
    FLEET_NAMESPACE,
    FLEET_PLAN_ANNOTATION,
    FLEET_RESULT_ANNOTATION,
    POD_RESOURCES_SOCKET,
)

pytestmark = pytest.mark.lab

SHARED, MIG, WHOLE = "lab-a100-01", "lab-h100-01", "lab-h200-01"
DRAIN_NAMESPACE = "gpuprov-lab-fleet-drain"
AGENT = "/usr/lib/gpuprov/agent.pyz"
PLAN_LABEL = "plan.upgrade.cattle.io/"
CONCURRENCY = 1  # fleet_concurrency's default, which the lab's inventory keeps
# SUC's Job settings: a failed Job is not retried and a stuck one ends in minutes.
JOB_ENV = {
    "SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT": "0",
    "SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS": "300",
}
REPLICAS = "\nshared = (hosts('shared'), {{'time_slicing_replicas': {}}})\n"


@pytest.fixture(scope="module")
def cluster(lab, deployed, tmp_path_factory):
    """SUC running against the lab with the kubectl and fleet images in every host (each is
    selected by its pool's Plan). Afterwards, the lab as before."""
    state = lab.run_dir.read_state()
    handle = None
    try:
        kubectl = images.kubectl_archive(
            Path(state["base"]), Path(lab.kube["kubectl"]), kubebuild.KUBERNETES_VERSION
        )
        fleet_archive = fleet_image.ensure(Path(lab.kube["kubectl"]))
        took = images.import_archives(lab.run_dir, lab.names, [kubectl.path, fleet_archive])
        print("images imported: " + ", ".join(f"{h} {s:.1f} s" for h, s in took.items()))
        handle = upgrade_controller.start(
            lab.kubeconfig,
            tmp_path_factory.mktemp("suc"),
            job_env={**JOB_ENV, "SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE": kubectl.name},
        )
        yield lab
    finally:
        if handle:
            handle.stop()
        restore(lab)


def restore(lab) -> None:
    """No Plan, Job or fleet mark left; every node schedulable; the drain test's pods gone; the
    shared and MIG hosts (the ones whose plans the module changes) at the lab's plan again."""
    lab.kubectl("delete", "namespace", FLEET_NAMESPACE, "--ignore-not-found", "--timeout=120s",
                timeout=150)  # fmt: skip
    for node in lab.names:
        lab.kubectl("label", "node", node, *(f"{PLAN_LABEL}{plan}-" for plan in pools(lab)))
        lab.kubectl("annotate", "node", node, f"{FLEET_PLAN_ANNOTATION}-",
                    f"{FLEET_RESULT_ANNOTATION}-")  # fmt: skip
        lab.kubectl("uncordon", node)
    lab.kubectl("delete", "namespace", DRAIN_NAMESPACE, "--ignore-not-found", "--timeout=120s",
                timeout=150)  # fmt: skip
    lab.deploy(None, "--limit", SHARED, "--limit", MIG)
    lab.wait_planned_allocatable(90, ready=True)


def apply(lab, inventory: Path | None = None) -> None:
    result = lab._gpuprov(
        "kube", "apply", str(inventory or lab.inventory), "--kubeconfig", str(lab.kubeconfig),
        "--fleet", "--image", fleet_image.IMAGE,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def get(lab, *what: str) -> dict:
    result = lab.kubectl("get", *what, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def pools(lab) -> dict[str, list[str]]:
    """Plan name -> the lab's nodes in its pool (the lab's node names are its host names)."""
    out: dict[str, list[str]] = {}
    for name in lab.names:
        out.setdefault(fleet.plan_name(lab.host(name).group), []).append(name)
    return out


def failed(job: dict) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)


def job_names(lab) -> set[str]:
    return {j["metadata"]["name"] for j in get(lab, "-n", FLEET_NAMESPACE, "jobs")["items"]}


def run_plans(
    lab,
    before: set[str],
    fail: str | None = None,
    timeout: float = 300,
    only: str | None = None,
    expect: dict[str, list[str]] | None = None,
) -> tuple[dict, dict, dict]:
    """Wait until every Plan (or the Plan ``only``) is through (each node labelled with its Plan's hash, or, for node
    ``fail``, its Job of that hash failed), watching the Jobs: the Jobs not in ``before``
    (name -> (plan, node)), the most Jobs of a Plan running at once, and the Plans' hashes. Any
    other new Job that fails ends the wait at once, with its pod's log (an earlier test's
    failed Job stays in the namespace)."""
    expect = {p: nodes for p, nodes in (expect or pools(lab)).items() if only in (None, p)}
    seen: dict[str, tuple[str, str]] = {}
    most: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while True:
        jobs = get(lab, "-n", FLEET_NAMESPACE, "jobs")["items"]
        running: dict[str, int] = {}
        failed_jobs = set()
        for job in jobs:
            labels = job["metadata"]["labels"]
            plan, node = labels["upgrade.cattle.io/plan"], labels["upgrade.cattle.io/node"]
            if job["metadata"]["name"] not in before:
                seen[job["metadata"]["name"]] = (plan, node)
            if (job.get("status") or {}).get("active"):
                running[plan] = running.get(plan, 0) + 1
            if failed(job) and job["metadata"]["name"] not in before:
                # A Job carries its Plan's hash as the label its node gets (job.go:167-180).
                failed_jobs.add((node, labels.get(PLAN_LABEL + plan)))
                assert node == fail, f"{job['metadata']['name']} failed:\n{pod_log(lab, job)}"
        for plan, count in running.items():
            most[plan] = max(most.get(plan, 0), count)
        hashes = {
            p["metadata"]["name"]: (p.get("status") or {}).get("latestHash")
            for p in get(lab, "-n", FLEET_NAMESPACE, "plans.upgrade.cattle.io")["items"]
        }
        labels = {
            n["metadata"]["name"]: n["metadata"]["labels"] for n in get(lab, "nodes")["items"]
        }
        through = all(
            hashes.get(plan)
            and (
                labels[node].get(PLAN_LABEL + plan) == hashes[plan]
                or (node == fail and (node, hashes[plan]) in failed_jobs)
            )
            for plan, nodes in expect.items()
            for node in nodes
        )
        if through:
            return seen, most, hashes
        assert time.monotonic() < deadline, (
            f"Plans not through after {timeout:.0f} s: jobs {seen}, plans {hashes}:\n"
            f"{lab_tail(lab)}"
        )
        time.sleep(1)


def pod_log(lab, job: dict) -> str:
    selector = f"job-name={job['metadata']['name']}"
    got = lab.kubectl("-n", FLEET_NAMESPACE, "logs", "-l", selector, "--all-containers",
                      "--tail=40")  # fmt: skip
    return got.stdout + got.stderr


def lab_tail(lab) -> str:
    pods = lab.kubectl("-n", FLEET_NAMESPACE, "get", "pods", "-o", "wide")
    return pods.stdout + pods.stderr


def job_pod(lab, job: str) -> dict:
    pods = get(lab, "-n", FLEET_NAMESPACE, "pods", "-l", f"job-name={job}")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def node_marks(lab, node: str) -> tuple[dict[str, str], dict[str, str], bool]:
    got = get(lab, "node", node)
    return (
        got["metadata"]["labels"],
        got["metadata"].get("annotations", {}),
        bool(got["spec"].get("unschedulable")),
    )


def quiet(lab, seconds: float = 15) -> list[str]:
    """The Jobs made in the next ``seconds`` (SUC re-queues an updated Plan within a second)."""
    before = {j["metadata"]["name"] for j in get(lab, "-n", FLEET_NAMESPACE, "jobs")["items"]}
    time.sleep(seconds)
    after = {j["metadata"]["name"] for j in get(lab, "-n", FLEET_NAMESPACE, "jobs")["items"]}
    return sorted(after - before)


def test_suc_runs_one_job_per_node_on_the_kubelets_then_an_unchanged_apply_runs_none(cluster):
    started, before = time.monotonic(), job_names(cluster)
    apply(cluster)
    seen, most, hashes = run_plans(cluster, before)
    print(f"first rollout: {time.monotonic() - started:.1f} s, jobs {sorted(seen)}")
    expect = pools(cluster)
    assert sorted(seen.values()) == sorted((p, n) for p, ns in expect.items() for n in ns), seen
    assert all(count <= CONCURRENCY for count in most.values()), most
    for job, (plan, node) in seen.items():
        pod = job_pod(cluster, job)
        # The kubelet of that node ran it to the end: cordon (init), then the deploy.
        assert pod["spec"]["nodeName"] == node and pod["status"]["phase"] == "Succeeded", pod
        init = pod["status"]["initContainerStatuses"]
        assert [c["name"] for c in init] == ["cordon"], init
        assert pod["spec"]["initContainers"][0]["image"].startswith(images.KUBECTL), pod
        labels, annotations, cordoned = node_marks(cluster, node)
        version = get(cluster, "-n", FLEET_NAMESPACE, "plans.upgrade.cattle.io", plan)["spec"][
            "version"
        ]
        assert labels[PLAN_LABEL + plan] == hashes[plan]
        assert annotations[FLEET_PLAN_ANNOTATION] == version
        assert annotations[FLEET_RESULT_ANNOTATION] == FLEET_APPLIED
        assert not cordoned, f"{node} left cordoned"
    verify = cluster.verify(None, "--kubeconfig", str(cluster.kubeconfig))
    assert verify.returncode == 0, verify.stdout + verify.stderr

    apply(cluster)  # the same inventory: the same versions, nothing to run
    assert quiet(cluster) == []


def test_a_changed_replica_count_reruns_the_shared_pool_only(cluster, tmp_path):
    _, _, before = run_plans(cluster, set())
    inventory = cluster.inventory_copy(tmp_path, REPLICAS.format(5))
    jobs = job_names(cluster)
    apply(cluster, inventory)
    seen, _, after = run_plans(cluster, jobs)
    shared = fleet.plan_name("shared")
    assert list(seen.values()) == [(shared, SHARED)], seen
    assert after[shared] != before[shared]
    assert {p: h for p, h in after.items() if p != shared} == {
        p: h for p, h in before.items() if p != shared
    }
    verify = cluster.verify(inventory, "--kubeconfig", str(cluster.kubeconfig))
    assert verify.returncode == 0, verify.stdout + verify.stderr


# The shared host regrouped into the whole-card pool: two nodes of one pool, one Job at a time.
REGROUPED = "\nwhole_card = (whole_card[0] + shared[0], whole_card[1])\nshared = ([], shared[1])\n"
SETTLE = 60  # seconds: a kubelet reports what its plugin advertises every 10 s


def test_two_nodes_of_one_pool_take_their_jobs_one_at_a_time(cluster, tmp_path):
    inventory = cluster.inventory_copy(tmp_path, REGROUPED)
    whole = fleet.plan_name("whole_card")
    jobs = job_names(cluster)
    apply(cluster, inventory)
    seen, most, _ = run_plans(cluster, jobs, expect={whole: [SHARED, WHOLE]}, only=whole)
    # Both nodes of the pool ran the new plan, never both at once (fleet_concurrency 1).
    assert sorted(n for p, n in seen.values() if p == whole) == [SHARED, WHOLE], seen
    assert most[whole] == CONCURRENCY == 1, most
    cluster.wait_nodes(
        lambda nodes: nodes[SHARED]["allocatable"].get("nvidia.com/gpu") == "8",
        SETTLE,
        f"{SHARED} advertising 8 whole cards",
    )
    verify = cluster.verify(inventory, "--kubeconfig", str(cluster.kubeconfig))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # and back to the lab's grouping, through the Jobs again. Back to plans these nodes ran
    # before: while such a run's Job is kept (SUC's Job TTL, 900 s by default), SUC finds that
    # Job by its name and makes none, and the node is never labelled (seen here). So, as
    # docs/fleet.md tells a user, the finished Jobs go first.
    cleared = cluster.kubectl(
        "-n", FLEET_NAMESPACE, "delete", "jobs", "--all", "--wait=true", "--timeout=120s",
        timeout=150,
    )  # fmt: skip
    assert cleared.returncode == 0, cleared.stderr
    apply(cluster)
    seen, _, _ = run_plans(cluster, set())
    assert {(fleet.plan_name("shared"), SHARED), (whole, WHOLE)} <= set(seen.values()), seen
    cluster.wait_planned_allocatable(SETTLE, ready=True)
    verify = cluster.verify(None, "--kubeconfig", str(cluster.kubeconfig))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_host_broken_by_hand_fails_its_job_and_verify_names_it(cluster, tmp_path):
    _, _, before = run_plans(cluster, set())
    inventory = cluster.inventory_copy(tmp_path, REPLICAS.format(6))
    # Where the deploy installs the agent, a directory: the upload fails, as would a full disk.
    cluster.run(SHARED, f"mv {AGENT} {AGENT}.saved && mkdir {AGENT}")
    try:
        jobs = job_names(cluster)
        apply(cluster, inventory)
        seen, _, after = run_plans(cluster, jobs, fail=SHARED)
        shared = fleet.plan_name("shared")
        assert list(seen.values()) == [(shared, SHARED)], seen
        job = next(iter(seen))
        assert job_pod(cluster, job)["status"]["phase"] == "Failed"
        labels, annotations, _ = node_marks(cluster, SHARED)
        assert annotations[FLEET_RESULT_ANNOTATION] == FLEET_FAILED
        assert labels.get(PLAN_LABEL + shared) != after[shared], labels
        for node in cluster.names:
            if node != SHARED:
                labels, annotations, cordoned = node_marks(cluster, node)
                plan = fleet.plan_name(cluster.host(node).group)
                assert labels[PLAN_LABEL + plan] == after[plan] == before[plan]
                assert annotations[FLEET_RESULT_ANNOTATION] == FLEET_APPLIED and not cordoned
        verify = cluster.verify(
            inventory, "--kubeconfig", str(cluster.kubeconfig), "--format", "json"
        )
        assert verify.returncode == 1, verify.stdout + verify.stderr  # drift, not bad input
        report = json.loads(verify.stdout)
        drifted = {h["name"] for h in report["hosts"] if h["findings"]}
        assert drifted == {SHARED}, report  # the broken host alone; the others as planned
    finally:
        cluster.run(SHARED, f"rm -rf {AGENT} && mv {AGENT}.saved {AGENT}")


def mig_pod(name: str) -> dict:
    """A pod bound to the MIG host by name, holding one 3g.40gb (the lab's layout has one per
    GPU, so two such pods are on two GPUs)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": DRAIN_NAMESPACE},
        "spec": {
            "nodeName": MIG,
            "terminationGracePeriodSeconds": 1,
            "containers": [images.sleeper({"nvidia.com/mig-3g.40gb": 1})],
        },
    }


def drain_pods(lab) -> dict[str, tuple[str, int, str]]:
    """Pod name -> (UID, restarts, phase) of the drain test's pods not being deleted."""
    out = {}
    for pod in get(lab, "-n", DRAIN_NAMESPACE, "pods")["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        statuses = pod["status"].get("containerStatuses") or [{}]
        restarts = sum(c.get("restartCount", 0) for c in statuses)
        out[pod["metadata"]["name"]] = (pod["metadata"]["uid"], restarts, pod["status"]["phase"])
    return out


def held_gpus(lab) -> dict[str, int]:
    """Pod name -> the GPU of the MIG device the kubelet gave it, as the host's probe reads the
    kubelet's pod-resources API."""
    document = json.loads(
        lab.run(MIG, f"python3 {AGENT} probe --pod-resources {POD_RESOURCES_SOCKET}").stdout
    )
    by_uuid = device_gpus(document)
    return {
        row["pod"]: gpu_of(row["device_ids"][0], by_uuid)
        for row in document["pod_resources"]["containers"]
        if row["namespace"] == DRAIN_NAMESPACE
    }


def test_a_mig_relayout_in_the_job_evicts_only_the_pod_on_that_gpu(cluster, tmp_path):
    """The Job drains as the SSH deploy does (the GPU-scoped drain, kubectl in the fleet image
    with the Job's account): the pod on the re-laid GPU is evicted, the other keeps running."""
    made = cluster.kubectl("create", "namespace", DRAIN_NAMESPACE)
    assert made.returncode == 0, made.stderr
    deadline = time.monotonic() + 60
    while cluster.kubectl("-n", DRAIN_NAMESPACE, "get", "serviceaccount/default").returncode:
        assert time.monotonic() < deadline, "no default service account in the namespace"
        time.sleep(1)
    for name in ("on-a", "on-b"):
        created = cluster.kubectl("create", "-f", "-", input_text=json.dumps(mig_pod(name)))
        assert created.returncode == 0, created.stderr
    deadline = time.monotonic() + 180
    while sorted(p[2] for p in drain_pods(cluster).values()) != ["Running", "Running"]:
        assert time.monotonic() < deadline, cluster.pods_not_running(DRAIN_NAMESPACE)
        time.sleep(2)
    gpus = held_gpus(cluster)
    assert len(set(gpus.values())) == 2, gpus
    before = drain_pods(cluster)
    relaid = gpus["on-a"]
    inventory = cluster.inventory_copy(
        tmp_path,
        f"\nmig = (mig[0], {{**mig[1], 'mig_layout_by_gpu': {{{relaid}: {{'7g.80gb': 1}}}}}})\n",
    )
    jobs = job_names(cluster)
    apply(cluster, inventory)
    # The MIG pool's Plan only: the shared pool's version may be one whose Job an earlier test
    # ran already, which SUC does not make again (a Job of that name exists).
    mig_plan = fleet.plan_name(cluster.host(MIG).group)
    seen, _, _ = run_plans(cluster, jobs, only=mig_plan)
    (job,) = [name for name, (plan, _) in seen.items() if plan == mig_plan]
    log = pod_log(cluster, get(cluster, "-n", FLEET_NAMESPACE, "job", job))
    assert f"evicted pod {DRAIN_NAMESPACE}/on-a (GPU {relaid})" in log, log
    after = drain_pods(cluster)
    assert "on-a" not in after, after  # a bare pod, evicted: gone
    assert after["on-b"] == before["on-b"]  # the same pod, never restarted
    gpu = cluster.probe(MIG)["gpus"][relaid]
    assert [gi["profile"] for gi in gpu["gpu_instances"]] == ["7g.80gb"], gpu
    labels, annotations, cordoned = node_marks(cluster, MIG)
    assert annotations[FLEET_RESULT_ANNOTATION] == FLEET_APPLIED and not cordoned
