"""The real queue and fleet consumers (Kueue, Volcano, system-upgrade-controller, kwok) for
tests, started against the test control plane of ``kube_cluster`` on 127.0.0.1.

Kueue and kwok are built by ``.ci/run`` before the tests (``gpuprov_lab.kueue``,
``gpuprov_lab.kwok``), and by the first test that needs them when they are missing; Volcano and
the system-upgrade-controller are ``shared/bin``'s builds. Only a machine without Go or without
the shared directory skips, saying so, and not under CI, where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from gpuprov_lab import consumer, plugin_service, procs
from gpuprov_lab.controlplane import ControlPlane

from tests import scratch


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_shared() -> None:
    """The shared binaries and CRD copies are there (GPUPROV_SHARED_BIN moves them)."""
    if not (plugin_service.shared_bin() / "README.md").is_file():
        _unavailable(
            f"no {plugin_service.shared_bin()} (set GPUPROV_SHARED_BIN to the shared/bin directory)"
        )


def require_built(module) -> None:
    """``module.ensure()`` (gpuprov_lab.kueue or .kwok) has its cache, building it with Go."""
    if not module.binary().is_file() and not shutil.which("go"):
        _unavailable(f"no {module.binary()} and no Go to build it")
    module.ensure()


def workdir(name: str) -> Path:
    return scratch.directory(name)


def create(plane: ControlPlane, document: dict) -> subprocess.CompletedProcess:
    """``kubectl create -o json`` of one object: the object as stored, after the admission
    webhooks, on stdout (the result is not checked: tests look at refusals too)."""
    return subprocess.run(
        [
            plane.kubectl_path,
            f"--kubeconfig={plane.admin_kubeconfig}",
            "create",
            "-o",
            "json",
            "-f",
            "-",
        ],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
    )


def get(plane: ControlPlane, *what: str) -> dict:
    result = plane.kubectl("get", *what, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_torn_down(handle: consumer.Consumer) -> None:
    """No process of ``handle`` alive and nothing listening where it served."""
    alive = [n for n in handle.processes() if procs.alive(handle.pidfile(n))]
    assert alive == [], f"still running after stop: {alive}"
    listening = [e for e in handle.endpoints if consumer.listening(*e)]
    assert listening == [], f"still listening after stop: {listening}"
