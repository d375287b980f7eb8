"""`gpuprov verify --canary`'s pure parts: the canary pods from the plan, each pod's outcome from
the Pod object and its events as the API server gives them, and the device the kubelet says it
gave against the plan's GPUs and MIG devices (matched by UUID against the probe)."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner
from plans import plan_for
from probes import matching_probe

from gpuprov.cli import main
from gpuprov.core.checks import canary
from gpuprov.core.checks.probe_document import read
from gpuprov.core.cluster import canary_pods
from gpuprov.core.cluster.manifests import NodeState
from gpuprov.core.cluster.pools import Taint, pool_taints
from gpuprov.host.contract import CANARY_NAMESPACE, POD_RESOURCES_SOCKET

BALANCED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
TIMEOUT = 90


def mig_uuid(gpu: int, gi: int) -> str:
    return f"MIG-{gpu:08x}-{gi:04x}-0000-0000-000000000000"


def node_of(plan) -> NodeState:
    return NodeState(plan.name, plan.name, {"gpuprov.io/pool": plan.mode}, pool_taints(plan))


def probe_with(plan, rows):
    """The matching probe of ``plan``, each MIG device with its UUID, the kubelet listing
    ``rows`` (pod name, resource, device ids) in the canary namespace; as verify reads it."""
    document = matching_probe(plan)
    for gpu in document["gpus"]:
        for gi in gpu["gpu_instances"]:
            for ci in gi["compute_instances"]:
                ci["uuid"] = mig_uuid(gpu["index"], gi["id"])
    document["pod_resources"] = {
        "socket": POD_RESOURCES_SOCKET,
        "containers": [
            {"pod": pod, "namespace": CANARY_NAMESPACE, "container": canary.CONTAINER,
             "resource": resource, "device_ids": ids}
            for pod, resource, ids in rows
        ],
    }  # fmt: skip
    checked, findings = read(plan.name, document, "/usr/lib/gpuprov/agent.pyz", "python3")
    assert findings == []
    return checked


def the_canary(plan, resource):
    (found,) = [c for c in canary_pods.canaries([plan], [node_of(plan)]) if c.resource == resource]
    return found


RUNNING = canary.Outcome(canary.RUNNING, "n1", "")


@pytest.fixture
def shared(tmp_path):
    return plan_for(tmp_path, "shared", time_slicing_replicas=4)


@pytest.fixture
def mig(tmp_path):
    return plan_for(tmp_path, "mig", mig_layout=BALANCED, mig_strategy="mixed")


# --- the pods


def test_one_canary_per_planned_resource_asking_for_one_unit_on_its_pool(mig):
    pods = canary_pods.canaries([mig], [node_of(mig)])
    assert sorted(c.resource for c in pods) == sorted(mig.resources) == [
        "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"
    ]  # fmt: skip
    manifest = canary_pods.pod(pods[0], mig, node_of(mig), "run-1", "img:1", ["sleep", "9"])
    spec = manifest["spec"]
    assert spec["containers"][0]["resources"] == {"limits": {pods[0].resource: 1}}
    assert spec["containers"][0]["command"] == ["sleep", "9"]
    assert spec["nodeSelector"] == {"gpuprov.io/pool": "mig"}
    assert spec["tolerations"] == [
        {"key": "gpuprov.io/pool", "operator": "Equal", "value": "mig", "effect": "NoSchedule"}
    ]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert "nodeName" not in spec  # the scheduler places it
    assert (spec["restartPolicy"], spec["dnsPolicy"]) == ("Never", "Default")
    assert manifest["metadata"]["namespace"] == CANARY_NAMESPACE
    assert manifest["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpuprov",
        "gpuprov.io/canary": "run-1",
    }
    assert manifest["metadata"]["annotations"]["gpuprov.io/resource"] == pods[0].resource


def test_a_taint_without_a_value_is_tolerated_by_existence(mig):
    node = NodeState("n1", "n1", {}, (Taint("dedicated", "", "NoExecute"),))
    (first, *_) = canary_pods.canaries([mig], [node])
    assert canary_pods.pod(first, mig, node, "r", "i", ["true"])["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}
    ]


def test_pod_names_are_dns_labels_and_differ_per_node_and_resource():
    names = {
        canary_pods.pod_name("n" * 80, r)
        for r in ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me", "nvidia.com/gpu")
    }
    assert len(names) == 3
    assert all(len(n) <= 63 and n[0].isalnum() and n[-1].isalnum() for n in names)


def test_a_vgpu_host_gets_no_canary(tmp_path):
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour="hami")
    assert canary_pods.canaries([plan], [node_of(plan)]) == []


# --- the outcome of a pod


def test_a_running_pod_is_running():
    pod = {
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
    }
    assert canary.outcome(pod) == RUNNING


def test_an_unschedulable_pod_says_the_schedulers_reason():
    pod = {
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared."}
            ],
        },
    }  # fmt: skip
    assert canary.outcome(pod) == canary.Outcome(
        canary.NOT_SCHEDULED,
        None,
        "Unschedulable: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared.",
    )


def test_a_sandbox_the_runtime_could_not_start_is_the_last_warning_event():
    creating = {"waiting": {"reason": "ContainerCreating"}}
    pod = {
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Pending", "containerStatuses": [{"state": creating}]},
    }
    events = [
        {"type": "Normal", "reason": "Scheduled", "message": "assigned", "lastTimestamp": "2"},
        {"type": "Warning", "reason": "FailedCreatePodSandBox", "lastTimestamp": "3",
         "message": "fork/exec /usr/bin/nvidia-container-runtime.missing: no such file"},
        {"type": "Warning", "reason": "FailedCreatePodSandBox", "lastTimestamp": "1",
         "message": "an older one"},
        {"type": "Warning", "reason": "MissingClusterDNS", "message": "x", "lastTimestamp": "4"},
    ]  # fmt: skip
    result = canary.outcome(pod, events)
    assert result.state == canary.NOT_STARTED
    assert result.reason == (
        "FailedCreatePodSandBox: fork/exec /usr/bin/nvidia-container-runtime.missing: no such file"
    )


def test_a_container_that_could_not_start_says_its_reason():
    pod = {
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"reason": "StartError", "message": "hook failed"}}}
            ],
        },
    }
    assert canary.outcome(pod).reason == "StartError: hook failed"
    waiting = {"waiting": {"reason": "ErrImagePull", "message": "not found"}}
    pod["status"] = {"phase": "Pending", "containerStatuses": [{"state": waiting}]}
    assert canary.outcome(pod) == canary.Outcome(
        canary.NOT_STARTED, "n1", "ErrImagePull: not found"
    )


def test_a_pod_that_is_gone_did_not_run():
    assert canary.outcome(None).state == canary.NOT_SCHEDULED


# --- the findings


def test_a_shared_canary_with_a_replica_of_a_planned_gpu_passes(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    probe = probe_with(shared, [(c.name, c.resource, [probe_gpu(shared, 1) + "::3"])])
    assert canary.check(c, RUNNING, shared, probe, TIMEOUT) == []


def probe_gpu(plan, index):
    return matching_probe(plan)["gpus"][index]["uuid"]


def test_a_device_of_no_planned_gpu_is_canary_device(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    probe = probe_with(shared, [(c.name, c.resource, ["GPU-ffffffff-0000-0000-0000-0::0"])])
    (finding,) = canary.check(c, RUNNING, shared, probe, TIMEOUT)
    assert finding.check == "canary-device"
    assert finding.found == (
        "GPU-ffffffff-0000-0000-0000-0::0, not a planned device of nvidia.com/gpu.shared"
    )


def test_a_mig_canary_needs_a_device_of_its_own_profile(mig):
    c = the_canary(mig, "nvidia.com/mig-1g.10gb")
    probe = matching_probe(mig)
    gis = {
        (g["index"], gi["profile"]): gi["id"] for g in probe["gpus"] for gi in g["gpu_instances"]
    }
    one_g, two_g = mig_uuid(1, gis[(1, "1g.10gb")]), mig_uuid(1, gis[(1, "2g.20gb")])
    assert canary.check(c, RUNNING, mig, probe_with(mig, [(c.name, c.resource, [one_g])]), 9) == []
    (finding,) = canary.check(
        c, RUNNING, mig, probe_with(mig, [(c.name, c.resource, [two_g])]), TIMEOUT
    )
    assert (finding.check, finding.found) == (
        "canary-device",
        f"{two_g}, not a planned device of nvidia.com/mig-1g.10gb",
    )


def test_a_mig_device_outside_the_planned_layout_is_canary_device(mig):
    c = the_canary(mig, "nvidia.com/mig-1g.10gb")
    probe = probe_with(mig, [])
    (gpu, *_) = [g for g in probe.gpus if g["gpu_instances"]]
    extra = copy.deepcopy(next(gi for gi in gpu["gpu_instances"] if gi["profile"] == "1g.10gb"))
    extra["start"], extra["compute_instances"][0]["uuid"] = 6, "MIG-extra"
    gpu["gpu_instances"].append(extra)  # an instance the plan does not have, at slot 6
    rows = [{"pod": c.name, "namespace": CANARY_NAMESPACE, "container": "canary",
             "resource": c.resource, "device_ids": ["MIG-extra"]}]  # fmt: skip
    probe = type(probe)(**{**probe.__dict__, "pod_resources": {"socket": "s", "containers": rows}})
    assert [f.check for f in canary.check(c, RUNNING, mig, probe, TIMEOUT)] == ["canary-device"]


def test_other_pods_and_containers_on_the_node_are_not_the_canarys(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    probe = probe_with(shared, [("someone-else", c.resource, [probe_gpu(shared, 0) + "::0"])])
    (finding,) = canary.check(c, RUNNING, shared, probe, TIMEOUT)
    assert finding.found == "the kubelet lists 0 devices for it: none"


def test_an_unreadable_pod_resources_api_is_canary_device_with_why(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    probe = probe_with(shared, [])
    failed = {"socket": POD_RESOURCES_SOCKET, "containers": {"error": "gRPC status 7: denied"}}
    broken = type(probe)(**{**probe.__dict__, "pod_resources": failed})
    (finding,) = canary.check(c, RUNNING, shared, broken, TIMEOUT)
    assert finding.found == "the kubelet's pod-resources API: gRPC status 7: denied"
    older = type(probe)(**{**probe.__dict__, "pod_resources": None})
    (finding,) = canary.check(c, RUNNING, shared, older, TIMEOUT)
    assert finding.found == "the probe has no pod_resources section"


def test_a_pod_the_scheduler_did_not_place_is_canary_pending_with_its_reason(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    pending = canary.Outcome(canary.NOT_SCHEDULED, None, "Unschedulable: 0/3 nodes are available")
    (finding,) = canary.check(c, pending, shared, None, TIMEOUT)
    assert (finding.host, finding.check, finding.found) == (
        "n1",
        "canary-pending",
        "Unschedulable: 0/3 nodes are available",
    )
    assert finding.expected == (
        "a pod asking for one nvidia.com/gpu.shared scheduled on n1 within 90 s"
    )


def test_a_pod_that_did_not_start_is_canary_failed_with_the_containers_reason(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    failed = canary.Outcome(canary.NOT_STARTED, "n1", "FailedCreatePodSandBox: fork/exec x")
    (finding,) = canary.check(c, failed, shared, None, TIMEOUT)
    assert (finding.check, finding.found) == (
        "canary-failed",
        "FailedCreatePodSandBox: fork/exec x",
    )
    elsewhere = canary.Outcome(canary.RUNNING, "n2", "")
    (finding,) = canary.check(c, elsewhere, shared, None, TIMEOUT)
    assert (finding.check, finding.found) == ("canary-failed", "placed on n2")


@pytest.mark.parametrize(
    "args",
    [[], ["--kubeconfig", "k", "--snapshot-dir", "."], ["--kubeconfig", "k", "--cluster-only"]],
)
def test_canary_without_a_kubeconfig_or_with_no_live_probe_is_exit_2(tmp_path, args):
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "inv.py"), "--canary", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ")
    assert "--canary: needs --kubeconfig, and no --snapshot-dir or --cluster-only" in result.output


def test_a_long_reason_keeps_its_beginning_and_its_cause_at_the_end(shared):
    c = the_canary(shared, "nvidia.com/gpu.shared")
    reason = "FailedCreatePodSandBox: " + "x" * 600 + " fork/exec /usr/bin/r: no such file"
    failed = canary.Outcome(canary.NOT_STARTED, "n1", reason)
    (finding,) = canary.check(c, failed, shared, None, TIMEOUT)
    assert finding.found.startswith("FailedCreatePodSandBox: xxx")
    assert finding.found.endswith("fork/exec /usr/bin/r: no such file")
    assert " ... " in finding.found and len(finding.found) <= 400
