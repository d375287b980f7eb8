"""The node in Kubernetes: cordoned and drained around a disruptive change, then uncordoned.

``kubectl`` runs on the controller (where the kubeconfig is), not on the host.
"""

from __future__ import annotations

from gevent import subprocess
from pyinfra import logger
from pyinfra.api import FunctionCommand, operation


def _kubectl(host, kubeconfig: str, *args: str) -> subprocess.CompletedProcess | None:
    command = ["kubectl", "--kubeconfig", kubeconfig, *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as e:
        host.log_styled(f"gpuprov: cannot run kubectl: {e}", fg="red", log_func=logger.error)
        return None


def _run(host, kubeconfig: str, *args: str) -> bool:
    result = _kubectl(host, kubeconfig, *args)
    if result is not None and result.returncode != 0:
        host.log_styled(
            f"gpuprov: kubectl {' '.join(args)} failed: {result.stderr.strip()}",
            fg="red",
            log_func=logger.error,
        )
    return result is not None and result.returncode == 0


def _in_cluster(host, kubeconfig: str, node: str) -> bool | None:
    """True / False (NotFound: a node that has not joined yet) / None (kubectl failed)."""
    result = _kubectl(host, kubeconfig, "get", "node", node, "-o", "name")
    if result is None:
        return None
    if result.returncode == 0:
        return True
    if "NotFound" in result.stderr:
        host.log(f"node {node} is not in the cluster: nothing to cordon", logger.info)
        return False
    host.log_styled(
        f"gpuprov: kubectl get node {node} failed: {result.stderr.strip()}",
        fg="red",
        log_func=logger.error,
    )
    return None


def _drain(state, host, kubeconfig: str, node: str, timeout: int) -> bool:
    present = _in_cluster(host, kubeconfig, node)
    if not present:
        return present is False
    return _run(host, kubeconfig, "cordon", node) and _run(
        host,
        kubeconfig,
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--timeout={timeout}s",
    )


def _uncordon(state, host, kubeconfig: str, node: str) -> bool:
    present = _in_cluster(host, kubeconfig, node)
    if not present:
        return present is False
    return _run(host, kubeconfig, "uncordon", node)


@operation(is_idempotent=False)
def drained(node: str, kubeconfig: str, timeout: int = 300):
    """
    Cordon the node and evict its pods (DaemonSets stay) before a disruptive change.

    + node: Kubernetes node name
    + kubeconfig: local kubeconfig of the cluster
    + timeout: seconds ``kubectl drain`` may take

    **Example:**

    .. code:: python

        drained(node="gpu-h100-01", kubeconfig="~/.kube/config", timeout=300)
    """
    yield FunctionCommand(_drain, (kubeconfig, node, timeout), {})


@operation(is_idempotent=False)
def uncordoned(node: str, kubeconfig: str):
    """
    Let the scheduler use the node again after the change.

    + node: Kubernetes node name
    + kubeconfig: local kubeconfig of the cluster

    **Example:**

    .. code:: python

        uncordoned(node="gpu-h100-01", kubeconfig="~/.kube/config")
    """
    yield FunctionCommand(_uncordon, (kubeconfig, node), {})
