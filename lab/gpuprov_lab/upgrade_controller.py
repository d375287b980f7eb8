"""Rancher's system-upgrade-controller v0.20.1 on the controller machine, against an API server:
it watches ``upgrade.cattle.io/v1`` Plans in one namespace and creates one Job per matching node.

The binary is the project's shared build (``shared/bin/system-upgrade-controller.xz``,
decompressed once into ``/var/tmp/gpuprov-bin`` and checked against the README's sha256).
Outside a pod it takes (rancher/system-upgrade-controller at v0.20.1, ``main.go:37-118``):
``SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG`` (it does not read ``$KUBECONFIG``),
``--name`` and ``--namespace`` (both required; Plans, Jobs and Secrets are watched only there,
``pkg/upgrade/controller.go:96-116``); leader election is off unless asked for. At start it
reads the namespace ``kube-system`` (its UID is the cluster id) and creates or updates the Plan
CRD from the copy embedded in the binary (``controller.go:130-195``, ``pkg/crds/crds.go``):
``start`` waits for that CRD to be served.

A node is a candidate of a Plan when it matches ``spec.nodeSelector`` and carries
``kubernetes.io/hostname`` (``pkg/upgrade/plan/plan.go:143-168``); its Job is
``apply-<plan>-on-<node>-with-<hash>`` in the Plan's namespace (``pkg/upgrade/job/job.go:184-186``).

>>> job_name_prefix("gpuprov-shared", "lab-a100-01.lab")
'apply-gpuprov-shared-on-lab-a100-01-with-'
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuprov_lab import consumer, plugin_service

BUILD = "system-upgrade-controller"  # shared/bin/<BUILD>.xz
NAMESPACE = "system-upgrade"
NAME = "system-upgrade-controller"
PLAN_CRD = "plans.upgrade.cattle.io"


def binary() -> Path:
    return plugin_service.binary(BUILD)


def job_name_prefix(plan: str, node: str) -> str:
    """The name of the Job a Plan makes for ``node``, up to its hash (``job.go:184-186``)."""
    return f"apply-{plan}-on-{node.split('.', 1)[0]}-with-"


def start(
    kubeconfig: Path,
    workdir: Path,
    namespace: str = NAMESPACE,
    name: str = NAME,
    job_env: dict[str, str] | None = None,
    timeout: float = 90.0,
) -> consumer.Consumer:
    """The controller for Plans in ``namespace`` (made here). ``job_env``: its
    ``SYSTEM_UPGRADE_JOB_*`` settings (e.g. ``SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH``).
    Returns once the API server serves the Plan CRD the controller created."""
    program = binary()
    handle = consumer.Consumer("system-upgrade-controller", workdir, kubeconfig)
    consumer.apply(
        kubeconfig, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    env = {
        **os.environ,
        **(job_env or {}),
        "SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG": str(kubeconfig),
        "SYSTEM_UPGRADE_CONTROLLER_NAME": name,
        "SYSTEM_UPGRADE_CONTROLLER_NAMESPACE": namespace,
    }
    handle.start_process("system-upgrade-controller", [str(program)], env=env)
    handle.wait("Plan CRD", lambda: _established(kubeconfig), timeout, "system-upgrade-controller")
    return handle


def stop(workdir: Path) -> None:
    """End the controller started in ``workdir`` (its CRD and Plans stay, as in a cluster)."""
    consumer.stop(workdir)


def _established(kubeconfig: Path) -> bool:
    crd = consumer.get_json(kubeconfig, "crd", PLAN_CRD)
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
