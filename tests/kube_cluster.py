"""The lab's real control plane (etcd + kube-apiserver) for tests, started once per session.

The binaries come from ``gpuprov_lab.kubebuild``: ``.ci/run`` builds them before the tests, and
the first test that needs them builds them when they are missing. Only a machine without Go
skips these tests (saying so), and not under CI, where that is a failure: a test that skips in
CI tests nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
from gpuprov_lab import kubebuild
from gpuprov_lab.controlplane import ControlPlane

from tests import scratch

NEEDED = ("etcd", "kube-apiserver", "kubectl")


def control_plane() -> ControlPlane:
    """A started control plane; the built kubectl comes first on PATH (gpuprov runs `kubectl`)."""
    binaries = kubebuild.binaries()
    missing = [name for name in NEEDED if not binaries[name].is_file()]
    if missing and shutil.which("go"):
        binaries = kubebuild.ensure()  # a first run on a machine builds them (tens of minutes)
    elif missing:
        message = f"no {', '.join(missing)} in {kubebuild.cache_dir()} and no Go to build them"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    if os.geteuid() != 0:
        pytest.skip("the lab control plane runs as root")
    plane = ControlPlane(scratch.directory("kube"), "127.0.0.1", port=None)
    plane.start(binaries)
    os.environ["PATH"] = f"{binaries['kubectl'].parent}{os.pathsep}{os.environ['PATH']}"
    return plane


def node(plane: ControlPlane, name: str, allocatable: dict[str, str] | None = None) -> None:
    """A Node object, as a kubelet registers it (no kubelet runs: its status is set here)."""
    document = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    _apply(plane, document)
    if allocatable is not None:
        patch = {"status": {"allocatable": allocatable, "capacity": allocatable}}
        result = plane.kubectl(
            "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )
        assert result.returncode == 0, result.stderr


def bound_pod(
    plane: ControlPlane,
    name: str,
    node_name: str,
    phase: str | None = None,
    labels: dict[str, str] | None = None,
) -> None:
    """A pod bound to ``node_name`` and owned by a ReplicaSet, as a workload's pods are, with
    ``labels`` besides its ``app``.

    The namespace's ``default`` service account is made here: kube-controller-manager, which
    makes it in a cluster, does not run in the lab.
    """
    _apply(
        plane,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": "default"},
        },
    )
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-rs", "namespace": "default"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]},
            },
        },
    }
    _apply(plane, rs)
    uid = json.loads(plane.kubectl("get", "rs", f"{name}-rs", "-o", "json").stdout)["metadata"][
        "uid"
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": name, **(labels or {})},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{name}-rs",
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "registry.invalid/none"}],
        },
    }
    _apply(plane, pod)
    if phase:
        patch = json.dumps({"status": {"phase": phase}})
        result = plane.kubectl(
            "patch", "pod", name, "--subresource=status", "--type=merge", "-p", patch
        )
        assert result.returncode == 0, result.stderr


def _apply(plane: ControlPlane, document: dict) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(document, f)
        f.flush()
        result = plane.kubectl("apply", "-f", f.name)
    assert result.returncode == 0, result.stderr
