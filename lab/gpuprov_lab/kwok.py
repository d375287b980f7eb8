"""kwok v0.8.0: thousands of fake Nodes, Ready, in a real API server, for gpuprov at fleet size.

The ``kwok`` controller (``sigs.k8s.io/kwok/cmd/kwok``, built once from the Go module proxy into
``/var/tmp/gpuprov-kwok-v0.8.0/``; v0.8.0 is the newest release the proxy lists) runs on the
controller machine against the API server and plays "stages" on the Nodes it manages: here
those annotated ``kwok.x-k8s.io/node: fake`` (``--manage-nodes-with-annotation-selector``),
as kwokctl's own node template marks them (``kustomize/kwokctl/resource/node.yaml``). The
stages are kwok's own at the same tag, copied from the module source: ``node-initialize``
(``kustomize/stage/node/fast``: Ready, and ``status.allocatable``/``capacity`` kept as the
Node was created), ``node-heartbeat-with-lease`` (a Lease in ``kube-node-lease`` renewed for
each node, as a kubelet does), and the pod stages of ``kustomize/stage/pod/fast`` (a pod bound
to a fake node becomes Running; one owned by a Job then Succeeds). Without stages the
controller refuses to start (``pkg/kwok/cmd/root.go:155-178``). With neither
``serverAddress`` nor ``nodePort`` it opens no port (``root.go:319-323``).

A fake Node is created whole by gpuprov (``fake_node``): labels, taints and the GPU allocatable a
plan says, then made Ready by kwok; no kubelet, no device plugin.

>>> node = fake_node("kwok-0001", {"gpuprov.io/pool": "shared"}, {"nvidia.com/gpu.shared": "32"})
>>> node["metadata"]["annotations"], node["status"]["allocatable"]["nvidia.com/gpu.shared"]
({'kwok.x-k8s.io/node': 'fake'}, '32')
"""

from __future__ import annotations

import ipaddress
import json
import sys
import tempfile
from pathlib import Path

import yaml

from gpuprov_lab import consumer, gobuild
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import CACHE

MODULE = "sigs.k8s.io/kwok"
VERSION = "v0.8.0"
# Measured on the 2-core CI machine: 71 s after Kubernetes and Kueue; 3 min 56 s to 4 min 13 s
# (110 s of CPU) on a busy machine.
COLD_BUILD_MINUTES = 2
MANAGED = ("kwok.x-k8s.io/node", "fake")  # the annotation kwok manages Nodes by
LEASE_SECONDS = 40  # kwok's default and the kubelet's (nodeLeaseDurationSeconds)
STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
DEFAULT_ALLOCATABLE = {"cpu": "32", "memory": "256Gi", "pods": "110"}  # kwokctl's node template
_FIRST_IP = ipaddress.ip_address("198.18.0.1")  # RFC 2544's benchmark range: no real host


def cache_dir() -> Path:
    return CACHE / f"gpuprov-kwok-{VERSION}"


def binary() -> Path:
    return cache_dir() / "kwok"


def ensure(log=sys.stderr) -> Path:
    """The cache directory with the binary and the stages, built when missing."""
    if binary().is_file():
        return cache_dir()
    print(
        f"building kwok {VERSION} into {cache_dir()}: once per machine; about "
        f"{COLD_BUILD_MINUTES} minutes cold on 2 cores",
        file=log,
    )
    gobuild.copy_tree(
        gobuild.source(MODULE, VERSION) / "kustomize" / "stage", cache_dir() / "stage"
    )
    gobuild.build(
        MODULE,
        VERSION,
        "cmd/kwok",
        binary(),
        ldflags=f"-X {MODULE}/pkg/consts.Version={VERSION}",
        log=log,
    )
    return cache_dir()


def configuration(lease_seconds: int = LEASE_SECONDS) -> list[dict]:
    """What kwok reads with ``--config``: its options and the stages it plays."""
    # kwok leaves a KwokConfiguration from --config undefaulted (0 workers is an error at
    # start): its defaults (pkg/apis/config/v1alpha1/zz_generated.defaults.go) are given here.
    options = {
        "manageAllNodes": False,
        "manageNodesWithAnnotationSelector": "=".join(MANAGED),
        "nodeLeaseDurationSeconds": lease_seconds,
        "cidr": "10.0.0.0/24",
        "nodeLeaseParallelism": 4,
        "nodePlayStageParallelism": 4,
        "podPlayStageParallelism": 4,
        "podsOnNodeSyncParallelism": 1,
    }
    documents: list[dict] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "metadata": {"name": "gpuprov-lab"},
            "options": options,
        }
    ]
    for stage in STAGES:
        documents.append(yaml.safe_load((cache_dir() / "stage" / stage).read_text()))
    return documents


def fake_node(
    name: str,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    taints: list[dict] | None = None,
    index: int = 0,
) -> dict:
    """A Node for kwok to manage, as kwokctl's template makes one, with gpuprov's labels,
    taints and allocatable (added to ``DEFAULT_ALLOCATABLE``; capacity the same)."""
    resources = {**DEFAULT_ALLOCATABLE, **(allocatable or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {MANAGED[0]: MANAGED[1]},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": taints or []},
        "status": {
            "addresses": [{"type": "InternalIP", "address": str(_FIRST_IP + index)}],
            "allocatable": resources,
            "capacity": dict(resources),
        },
    }


def create_nodes(kubeconfig: Path, nodes: list[dict]) -> None:
    """Create ``nodes`` (one ``kubectl create`` of a List: one request per Node)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": nodes}, f)
        f.flush()
        consumer.kubectl(kubeconfig, "create", "-f", f.name, "-o", "name", timeout=3600)


def ready_nodes(kubeconfig: Path, selector: str = "type=kwok") -> tuple[int, int]:
    """(Ready, all) among the Nodes that match ``selector``, as the API server shows them."""
    path = '{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'
    result = consumer.kubectl(
        kubeconfig, "get", "nodes", "-l", selector, "-o", f"jsonpath={path}", timeout=300
    )
    states = result.stdout.split()
    return states.count("True"), len(states)


def start(
    kubeconfig: Path, workdir: Path, lease_seconds: int = LEASE_SECONDS, timeout: float = 60.0
) -> consumer.Consumer:
    """The kwok controller for the fake Nodes of this API server. Returns once it has reached
    the API server and chosen its Nodes (its log's ``Watch nodes``, after which it starts its
    controllers and prints nothing more)."""
    ensure()
    handle = consumer.Consumer("kwok", workdir, kubeconfig)
    config = workdir / "kwok.yaml"
    config.write_text(yaml.safe_dump_all(configuration(lease_seconds), sort_keys=False))
    handle.start_process(
        "kwok", [str(binary()), f"--kubeconfig={kubeconfig}", f"--config={config}"]
    )
    handle.wait("Watch nodes", lambda: _watching(handle.log("kwok")), timeout, "kwok")
    return handle


def stop(workdir: Path) -> None:
    """End the kwok controller started in ``workdir`` (its Nodes stay, NotReady once a
    controller manager sees their Leases expire)."""
    consumer.stop(workdir)


def _watching(log: Path) -> bool:
    try:
        return '"msg":"Watch nodes"' in log.read_text(errors="replace")
    except OSError:
        return False


if __name__ == "__main__":  # `python -m gpuprov_lab.kwok`: what .ci/run does before the tests
    try:
        print(ensure())
    except LabError as e:
        sys.exit(f"error: {e}")
