"""The lab's queues end to end, with the real Kueue and the real Volcano run by `gpuprov lab up
--queues` against the lab's API server, and the lab inventory's queues applied by `gpuprov kube
apply --queues`: jobs for the teams are admitted or held by the queue system, and the pods it
lets go run on the pool's host through the real scheduler, kubelet and device plugin.

One queue system at a time, on the session's lab (its hosts untouched): Kueue for the first
class, then `lab up --queues volcano` replaces it for the second, and the module ends with
`lab up` alone, which stops Volcano; the queue objects are deleted, so the later modules'
`verify --kubeconfig` sees none.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from gpuprov_lab import procs
from gpuprov_lab.images import sleeper

pytestmark = pytest.mark.lab

SHARED, MIG, WHOLE = "lab-a100-01", "lab-h100-01", "lab-h200-01"
POOL = "gpuprov.io/pool"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's queue label (pkg/constants)
SETTLE = 60  # seconds: what the deploy changed, in the nodes' allocatable
RUNNING = 120  # seconds: a pod from creation to Running (measured 2-3 s; 2 shared cores)
VOLCANO_NS = "gpuprov-lab-queues"


def gpuprov(lab, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(lab.bin / "gpuprov"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=lab.env,
    )


def lab_up(lab, *args: str) -> None:
    result = gpuprov(lab, "lab", "up", *args)
    assert result.returncode == 0, result.stdout + result.stderr


def kube_apply(lab, queues: str, inventory=None) -> None:
    result = gpuprov(
        lab, "kube", "apply", str(inventory or lab.inventory), "--kubeconfig",
        str(lab.kubeconfig), "--queues", queues,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def create(lab, document: dict) -> None:
    result = lab.kubectl("create", "-f", "-", input_text=json.dumps(document))
    assert result.returncode == 0, result.stderr


def get(lab, *what: str) -> dict:
    result = lab.kubectl("get", *what, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait(predicate, timeout: float, last=lambda: None):
    """Poll ``predicate`` until it returns something true (returned); fail after ``timeout``
    seconds with ``last()``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not so after {timeout:.0f} s: {last()}")
        time.sleep(1)


def running_pods(lab, namespace: str, selector: str) -> dict[str, str]:
    """Pod name -> node of the Running pods matching ``selector``."""
    pods = get(lab, "pods", "-n", namespace, "-l", selector)["items"]
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if p["status"].get("phase") == "Running"
    }


def queue_status(lab) -> dict | None:
    return json.loads(gpuprov(lab, "lab", "status", "--format", "json").stdout)["queues"]


def webhook_configurations(lab) -> list[str]:
    listed = lab.kubectl(
        "get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
    )
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


# --- Kueue


def kueue_job(name: str, team: str, parallelism: int, shares: int) -> dict:
    """A batch/v1 Job for ``team``'s LocalQueue: ``parallelism`` pods, each asking for
    ``shares`` nvidia.com/gpu.shared, with no node selector or toleration of its own (Kueue
    adds the flavor's when it admits the Job)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": team, "labels": {QUEUE_LABEL: team}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"test": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [sleeper({"nvidia.com/gpu.shared": shares})],
                },
            },
        },
    }


def workload(lab, team: str, job: str) -> dict | None:
    """The Kueue Workload of ``job`` (owned by it), None before Kueue made it."""
    for item in get(lab, "workloads.kueue.x-k8s.io", "-n", team)["items"]:
        if any(o["name"] == job for o in item["metadata"].get("ownerReferences", [])):
            return item
    return None


def condition(item: dict | None, kind: str) -> dict | None:
    conditions = (item or {}).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), None)


def shared_usage(lab, queue: str) -> dict:
    """The ClusterQueue's usage of nvidia.com/gpu.shared in flavor ``shared``
    (``status.flavorsUsage``: total and borrowed)."""
    status = get(lab, "clusterqueue", queue).get("status", {})
    for flavor in status.get("flavorsUsage", []):
        if flavor["name"] == "shared":
            for resource in flavor["resources"]:
                if resource["name"] == "nvidia.com/gpu.shared":
                    return {k: str(resource.get(k, 0)) for k in ("total", "borrowed")}
    return {}


def delete_jobs(lab, team: str, *names: str) -> None:
    result = lab.kubectl(
        "-n", team, "delete", "job", "--ignore-not-found", "--cascade=foreground",
        "--wait=true", "--timeout=120s", *names, timeout=150,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module", autouse=True)
def no_queues_left(lab):
    """After the module: no queue system, and none of gpuprov's Volcano Queues (deleted once
    Volcano's webhooks are gone: they refuse deleting a queue that is not closed)."""
    yield
    lab_up(lab)
    lab.kubectl(
        "delete", "queues.scheduling.volcano.sh", "-l", "app.kubernetes.io/managed-by=gpuprov",
        "--ignore-not-found", "--timeout=60s", timeout=90,
    )  # fmt: skip


@pytest.fixture(scope="class")
def kueue_lab(lab, deployed):
    """The deployed lab with Kueue and the lab inventory's queues and node labels; afterwards
    its jobs and queue objects deleted, while Kueue runs (it owns their finalizers)."""
    lab_up(lab, "--queues", "kueue")
    kube_apply(lab, "kueue")
    for team in ("team-a", "team-b"):
        wait(
            lambda team=team: (
                lab.kubectl("-n", team, "get", "serviceaccount/default").returncode == 0
            ),
            60,
        )
    lab.wait_planned_allocatable(SETTLE, ready=True)
    try:
        yield lab
    finally:
        for team in ("team-a", "team-b"):
            lab.kubectl("-n", team, "delete", "jobs", "--all", "--cascade=foreground",
                        "--timeout=120s", timeout=150)  # fmt: skip
        lab.kubectl(
            "delete", "localqueues.kueue.x-k8s.io,clusterqueues,resourceflavors", "-A",
            "-l", "app.kubernetes.io/managed-by=gpuprov", "--timeout=120s", timeout=150,
        )  # fmt: skip
        lab.kubectl("delete", "namespace", "team-a", "team-b", "--wait=false")


@pytest.mark.usefixtures("kueue_lab")
class TestKueue:
    def test_lab_up_with_queues_starts_kueue_with_its_webhooks_and_status_shows_it(self, lab):
        shown = queue_status(lab)
        assert shown["system"] == "kueue" and shown["running"] is True, shown
        assert [p["name"] for p in shown["processes"]] == ["kueue"]
        assert [n for n in webhook_configurations(lab) if "/kueue-" in n], "no Kueue webhooks"
        text = gpuprov(lab, "lab", "status").stdout
        assert any(line.split()[:3] == ["kueue", "kueue", "yes"] for line in text.splitlines())

    def test_a_team_a_job_for_2_shares_is_admitted_to_the_shared_flavor_and_runs_there(self, lab):
        # 2 pods of one share: the plan refuses a pod more than one shared GPU
        # (time_slicing_fail_requests_greater_than_one; the device plugin's Allocate fails it).
        create(lab, kueue_job("two-shares", "team-a", 2, 1))
        admitted = wait(
            lambda: condition(workload(lab, "team-a", "two-shares"), "Admitted"),
            60,
            lambda: workload(lab, "team-a", "two-shares"),
        )
        assert admitted["status"] == "True", admitted
        (assignment,) = workload(lab, "team-a", "two-shares")["status"]["admission"][
            "podSetAssignments"
        ]
        assert assignment["flavors"] == {"nvidia.com/gpu.shared": "shared"}
        pods = wait(
            lambda: (
                (found := running_pods(lab, "team-a", "test=two-shares"))
                and len(found) == 2
                and found
            ),
            RUNNING,
            lambda: get(lab, "pods", "-n", "team-a")["items"],
        )
        assert list(pods.values()) == [SHARED, SHARED]
        assert shared_usage(lab, "team-a") == {"total": "2", "borrowed": "0"}

    def test_a_job_beyond_team_as_quota_borrows_from_the_cohort_while_team_b_is_idle(self, lab):
        # team-a: 16 of the host's 32 shares; 2 used above, 15 more is 1 above the quota.
        assert shared_usage(lab, "team-b") in ({}, {"total": "0", "borrowed": "0"})
        create(lab, kueue_job("borrow", "team-a", 15, 1))
        admitted = wait(
            lambda: condition(workload(lab, "team-a", "borrow"), "Admitted"),
            60,
            lambda: workload(lab, "team-a", "borrow"),
        )
        assert admitted["status"] == "True", admitted
        # Kueue writes the ClusterQueue's usage after the admission, not with it.
        wait(
            lambda: shared_usage(lab, "team-a") == {"total": "17", "borrowed": "1"},
            30,
            lambda: shared_usage(lab, "team-a"),
        )
        pods = wait(
            lambda: (found := running_pods(lab, "team-a", "test=borrow")) and len(found) == 15
            and found,
            RUNNING,
            lambda: get(lab, "pods", "-n", "team-a", "-l", "test=borrow")["items"],
        )  # fmt: skip
        assert set(pods.values()) == {SHARED}

    def test_the_same_job_stays_pending_when_team_a_may_not_borrow(self, lab, tmp_path):
        delete_jobs(lab, "team-a", "borrow")
        wait(lambda: shared_usage(lab, "team-a").get("total") == "2", 60)
        # team-a without a cohort: its ClusterQueue cannot borrow (docs/kubernetes.md#queues).
        alone = lab.inventory_copy(
            tmp_path, group_data_code='\nkube_queues["team-a"].pop("cohort")\n'
        )
        kube_apply(lab, "kueue", alone)
        assert "cohortName" not in get(lab, "clusterqueue", "team-a")["spec"]
        create(lab, kueue_job("no-borrow", "team-a", 15, 1))
        held = wait(
            lambda: (c := condition(workload(lab, "team-a", "no-borrow"), "QuotaReserved"))
            and c["status"] == "False" and c,
            60,
            lambda: workload(lab, "team-a", "no-borrow"),
        )  # fmt: skip
        assert (
            "insufficient unused quota for nvidia.com/gpu.shared in flavor shared"
            in (held["message"])
        ), held
        assert get(lab, "job", "no-borrow", "-n", "team-a")["spec"]["suspend"] is True
        assert get(lab, "pods", "-n", "team-a", "-l", "test=no-borrow")["items"] == []
        assert shared_usage(lab, "team-a") == {"total": "2", "borrowed": "0"}
        delete_jobs(lab, "team-a", "no-borrow", "two-shares")

    def test_the_shared_host_moved_to_whole_card_leaves_the_queues_above_live_capacity(
        self, lab, tmp_path
    ):
        moved = lab.inventory_copy(
            tmp_path,
            inventory_code=(
                f"\n# {SHARED} moved from shared to whole_card.\n"
                f"whole_card = (whole_card[0] + [h for h in shared[0] if h[0] == {SHARED!r}], "
                "whole_card[1])\n"
                f"shared = ([h for h in shared[0] if h[0] != {SHARED!r}], shared[1])\n"
            ),
        )
        try:
            lab.deploy(moved)
            lab.kube_apply(moved)  # the node's pool label and taint
            lab.wait_nodes(
                lambda nodes: (
                    nodes[SHARED]["allocatable"].get("nvidia.com/gpu") == "8"
                    and nodes[SHARED]["allocatable"].get("nvidia.com/gpu.shared", "0") == "0"
                ),
                SETTLE,
                f"{SHARED} advertising 8 whole cards",
            )
            result = lab.verify(moved, "--kubeconfig", str(lab.kubeconfig), "--format", "json")
            assert result.returncode == 1, result.stdout + result.stderr
            rows = {h["name"]: h["findings"] for h in json.loads(result.stdout)["hosts"]}
            for team, quota in (("team-a", 16), ("team-b", 16)):
                (finding,) = [
                    f for f in rows[f"queue {team}"] if "nvidia.com/gpu.shared" in f["found"]
                ]
                assert finding["check"] == "kube-queues"
                assert finding["found"].startswith(
                    f"nvidia.com/gpu.shared: quota {quota}, the ClusterQueues' quotas sum to 32"
                ), finding
                assert (
                    "live capacity 0 on 0 schedulable nodes with gpuprov.io/pool=shared"
                    in (finding["found"])
                ), finding
            # Kueue, for its part, keeps the shared flavor's quota: nothing checks it there.
            assert kueue_shared_quota(lab, "team-a") == "16"
        finally:
            lab.deploy()
            lab.kube_apply()
            lab.wait_planned_allocatable(SETTLE, ready=True)


def kueue_shared_quota(lab, queue: str) -> str:
    for group in get(lab, "clusterqueue", queue)["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            if flavor["name"] == "shared":
                for resource in flavor["resources"]:
                    if resource["name"] == "nvidia.com/gpu.shared":
                        return str(resource["nominalQuota"])
    return ""


# --- Volcano


def volcano_job(name: str, queue: str, mig_1g: int) -> dict:
    """A Volcano Job in ``queue``: one pod asking for ``mig_1g`` nvidia.com/mig-1g.10gb, with
    the mig pool's node selector and toleration (Volcano adds none). The request is written
    out: Volcano's job controller sums the template's ``requests`` into the PodGroup's
    ``minResources`` (what the queue's capability is checked against at enqueue), and only a
    Pod, not a Job's template, has them defaulted from its limits."""
    worker = sleeper({"nvidia.com/mig-1g.10gb": mig_1g})
    worker["resources"]["requests"] = worker["resources"]["limits"]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": VOLCANO_NS},
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": {"test": name}},
                        "spec": {
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1,
                            "nodeSelector": {POOL: "mig"},
                            "tolerations": [
                                {
                                    "key": POOL,
                                    "operator": "Equal",
                                    "value": "mig",
                                    "effect": "NoSchedule",
                                }
                            ],  # fmt: skip
                            "containers": [worker],
                        },
                    },
                }
            ],
        },
    }


def podgroup(lab, job: str) -> dict | None:
    """The PodGroup Volcano's job controller made for ``job``."""
    for item in get(lab, "podgroups.scheduling.volcano.sh", "-n", VOLCANO_NS)["items"]:
        if any(o["name"] == job for o in item["metadata"].get("ownerReferences", [])):
            return item
    return None


def podgroup_events(lab, name: str) -> list[dict]:
    result = lab.kubectl(
        "-n", VOLCANO_NS, "get", "events", "-o", "json",
        "--field-selector", f"involvedObject.kind=PodGroup,involvedObject.name={name}",
    )  # fmt: skip
    return json.loads(result.stdout)["items"] if result.returncode == 0 else []


@pytest.fixture(scope="class")
def volcano_lab(lab, deployed):
    """The deployed lab with Volcano (instead of Kueue) and the lab inventory's queues;
    afterwards the jobs' namespace deleted."""
    lab_up(lab, "--queues", "volcano")
    kube_apply(lab, "volcano")
    assert lab.kubectl("create", "namespace", VOLCANO_NS).returncode == 0
    wait(lambda: lab.kubectl("-n", VOLCANO_NS, "get", "serviceaccount/default").returncode == 0, 60)
    for team in ("team-a", "team-b"):
        wait(
            lambda team=team: get(lab, "queue", team).get("status", {}).get("state") == "Open",
            60,
        )
    lab.wait_planned_allocatable(SETTLE, ready=True)
    try:
        yield lab
    finally:
        lab.kubectl("delete", "namespace", VOLCANO_NS, "--timeout=120s", timeout=150)


@pytest.mark.usefixtures("volcano_lab")
class TestVolcano:
    def test_lab_up_with_other_queues_replaces_kueue_with_volcano(self, lab):
        shown = queue_status(lab)
        assert shown["system"] == "volcano" and shown["running"] is True, shown
        assert sorted(p["name"] for p in shown["processes"]) == [
            "vc-controller-manager",
            "vc-scheduler",
            "vc-webhook-manager",
        ]
        assert not [n for n in webhook_configurations(lab) if "/kueue-" in n]

    def test_a_team_b_job_for_a_mig_1g_instance_runs_on_the_mig_host(self, lab):
        create(lab, volcano_job("mig-one", "team-b", 1))
        pods = wait(
            lambda: running_pods(lab, VOLCANO_NS, "test=mig-one"),
            RUNNING,
            lambda: (podgroup(lab, "mig-one"), get(lab, "pods", "-n", VOLCANO_NS)["items"]),
        )
        assert list(pods.values()) == [MIG]
        (pod,) = get(lab, "pods", "-n", VOLCANO_NS, "-l", "test=mig-one")["items"]
        assert pod["spec"]["schedulerName"] == "volcano"
        assert podgroup(lab, "mig-one")["spec"]["queue"] == "team-b"

    def test_a_job_beyond_team_bs_capability_stays_pending_with_volcanos_reason(self, lab):
        capability = get(lab, "queue", "team-b")["spec"]["capability"]["nvidia.com/mig-1g.10gb"]
        # One instance runs (above): the whole capability more is beyond it.
        create(lab, volcano_job("beyond", "team-b", int(capability)))
        group = wait(lambda: podgroup(lab, "beyond"), 60)
        name = group["metadata"]["name"]
        event = wait(
            lambda: next(
                (
                    e
                    for e in podgroup_events(lab, name)
                    if "queue resource quota insufficient" in e["message"]
                ),
                None,
            ),
            60,
            lambda: (podgroup(lab, "beyond"), podgroup_events(lab, name)),
        )
        assert event["reason"] == "Unschedulable", event
        assert podgroup(lab, "beyond")["status"]["phase"] == "Pending"
        assert running_pods(lab, VOLCANO_NS, "test=beyond") == {}
        assert list(running_pods(lab, VOLCANO_NS, "test=mig-one").values()) == [MIG]


def test_lab_up_without_queues_stops_volcano_and_leaves_no_process_or_webhook(lab):
    shown = queue_status(lab)
    assert shown and shown["system"] == "volcano", shown
    pidfiles = sorted((lab.run_dir.path / "queues" / "volcano").glob("*.pid"))
    pids = [procs.read(p) for p in pidfiles]
    assert len(pids) == 3
    lab_up(lab)
    assert queue_status(lab) is None
    assert not (lab.run_dir.path / "queues").exists()
    assert None not in pids
    # Ended: a zombie counts as ended (init reaps the daemons `lab up` started, in its own time).
    assert [p for p in pids if not procs.wait_gone(p, 0.5)] == []
    assert not [n for n in webhook_configurations(lab) if "/kueue-" in n or "volcano" in n]
    # The lab as it was: its hosts and cluster up.
    status = json.loads(gpuprov(lab, "lab", "status", "--format", "json").stdout)
    assert status["state"] == "up"
