"""The node in Kubernetes: cordoned and drained around a disruptive change, then uncordoned.

``kubectl`` runs on the controller (where the kubeconfig is), not on the host. Two drains:
``drained`` evicts every pod of the node (``kubectl drain``); ``gpus_drained`` only the pods the
kubelet gave one of the touched devices, through the Eviction API (``policy/v1`` ``Eviction``
posted to the pod's ``eviction`` subresource, so disruption budgets hold), and waits until the
kubelet's pod-resources API, read on the host by the agent's probe, lists none of them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import gevent
from gevent import subprocess
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from gpuprov.controller.facts.probe import VerifyProbe
from gpuprov.core.checks import probe_document
from gpuprov.core.cluster.budgets import holding
from gpuprov.core.disruption import Holder, device_gpus, holders
from gpuprov.host.contract import (
    AGENT_PATH,
    POD_RESOURCES_SOCKET,
    POD_RESOURCES_SYNC_S,
    SUC_CONTROLLER_LABEL,
)

# How often the drain of touched GPUs evicts again (a refusal is answered 429) and reads the
# kubelet's pod-resources on the host: each round is one probe on the host.
EVICT_EVERY = 2.0
_REFUSED = "TooManyRequests"  # kubectl's words for a 429: a disruption budget said no
_GONE = "NotFound"


def _kubectl(
    host, kubeconfig: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess | None:
    command = ["kubectl", "--kubeconfig", kubeconfig, *args]
    try:
        return subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
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
        f"--pod-selector=!{SUC_CONTROLLER_LABEL}",
        f"--timeout={timeout}s",
    )


def _fail(host, message: str) -> bool:
    host.log_styled(f"gpuprov: {message}", fg="red", log_func=logger.error)
    return False


def _evict(host, kubeconfig: str, holder: Holder) -> tuple[str, str]:
    """POST an Eviction for the pod: ``("evicted" | "gone" | "refused" | "failed", why)``."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": holder.pod, "namespace": holder.namespace},
    }
    path = f"/api/v1/namespaces/{holder.namespace}/pods/{holder.pod}/eviction"
    result = _kubectl(host, kubeconfig, "create", "--raw", path, "-f", "-", stdin=json.dumps(body))
    if result is None:
        return "failed", "cannot run kubectl"
    why = result.stderr.strip()
    if result.returncode == 0:
        return "evicted", ""
    if _GONE in why:
        return "gone", why
    return ("refused" if _REFUSED in why else "failed"), why


def _budgets(host, kubeconfig: str, holder: Holder) -> list[str]:
    """The disruption budgets that hold the pod, as the API server shows them now."""
    pod = _kubectl(host, kubeconfig, "-n", holder.namespace, "get", "pod", holder.pod, "-o", "json")
    pdbs = _kubectl(host, kubeconfig, "-n", holder.namespace, "get", "pdb", "-o", "json")
    if pod is None or pdbs is None or pod.returncode or pdbs.returncode:
        return []
    try:
        return holding(json.loads(pod.stdout), json.loads(pdbs.stdout).get("items") or [])
    except ValueError:
        return []


def _holders(
    host, connector: dict, probe: tuple[str, str, str], devices: frozenset[str]
) -> list[Holder] | str:
    """The pods holding any of ``devices``, as the kubelet's pod-resources API lists them on
    the host now; a message when it cannot be read. ``probe`` is (command, agent, python)."""
    command, agent, python = probe
    ok, output = host.run_shell_command(command, print_output=False, **connector)
    if not ok:
        return f"the agent's probe failed: {' '.join(output.stderr_lines)[-300:]}"
    try:
        document = json.loads("\n".join(output.stdout_lines))
    except ValueError as e:
        return f"the agent's probe printed no JSON ({e})"
    checked, findings = probe_document.read(host.name, document, agent, python)
    if checked is None:
        return f"the agent's probe document: {findings[0].found}"
    section = checked.pod_resources or {}
    rows = section.get("containers")
    if rows is None:
        return []  # no kubelet socket: no pod holds anything
    if not isinstance(rows, list):
        return f"the kubelet's pod-resources API: {rows.get('error')}"
    # A kubelet that does not list every pod the runtime runs (it restarted moments ago) would
    # show a held GPU as free.
    unlisted = section.get("unlisted")
    if isinstance(unlisted, list) and unlisted:
        shown = ", ".join(unlisted[:8]) + (", ..." if len(unlisted) > 8 else "")
        return (
            f"the kubelet does not list {len(unlisted)} pods the container runtime runs "
            f"({shown}) after {POD_RESOURCES_SYNC_S:.0f} s"
        )
    if isinstance(unlisted, dict):
        host.log(
            f"cannot check that the kubelet lists every pod ({unlisted['error']}); "
            "taking its list as it is",
            logger.warning,
        )
    return holders(rows, devices, device_gpus({"gpus": checked.gpus}))


def _drain_gpus(
    state,
    host,
    kubeconfig: str,
    node: str,
    timeout: int,
    devices: Sequence[str],
    probe: tuple[str, str, str],
    connector: dict,
) -> bool:
    present = _in_cluster(host, kubeconfig, node)
    if not present:
        return present is False
    if not _run(host, kubeconfig, "cordon", node):
        return False
    wanted = frozenset(devices)
    deadline = time.monotonic() + timeout
    evicted: set[str] = set()
    refused: dict[str, Holder] = {}
    while True:
        held = _holders(host, connector, probe, wanted)
        if isinstance(held, str):
            return _fail(
                host,
                f"cannot tell which pods hold the GPUs to change on {node}: {held}; nothing "
                "was changed (drain_scope: node drains the whole node instead)",
            )
        if not held:
            host.log(
                f"the GPUs to change on {node} are free ({len(evicted)} pods evicted)",
                logger.info,
            )
            return True
        for holder in held:
            if holder.name in evicted:
                continue
            outcome, why = _evict(host, kubeconfig, holder)
            if outcome in ("evicted", "gone"):
                evicted.add(holder.name)
                refused.pop(holder.name, None)
                gpus = ", ".join(str(i) for i in holder.gpus)
                host.log(f"evicted pod {holder.name} (GPU {gpus})", logger.info)
            elif outcome == "refused":
                refused[holder.name] = holder
            else:
                return _fail(host, f"cannot evict pod {holder.name}: {why}")
        if time.monotonic() >= deadline:
            break
        gevent.sleep(EVICT_EVERY)
    problems = []
    for holder in held:
        if holder.name in refused:
            budgets = _budgets(host, kubeconfig, holder) or ["a disruption budget"]
            problems.append(f"pod {holder.name}: eviction refused by {', '.join(budgets)}")
        else:
            problems.append(f"pod {holder.name}: evicted, still holds {', '.join(holder.devices)}")
    return _fail(
        host,
        f"the GPUs to change on {node} are not free after {timeout} s (drain_timeout): "
        + "; ".join(problems)
        + f"; nothing was changed, the node stays cordoned (kubectl uncordon {node})",
    )


def _uncordon(state, host, kubeconfig: str, node: str) -> bool:
    present = _in_cluster(host, kubeconfig, node)
    if not present:
        return present is False
    return _run(host, kubeconfig, "uncordon", node)


@operation(is_idempotent=False)
def drained(node: str, kubeconfig: str, timeout: int = 300):
    """
    Cordon the node and evict its pods (DaemonSets stay, and system-upgrade-controller's Job
    pods: the fleet Job that may be running this deploy) before a disruptive change.

    + node: Kubernetes node name
    + kubeconfig: local kubeconfig of the cluster
    + timeout: seconds ``kubectl drain`` may take

    **Example:**

    .. code:: python

        drained(node="gpu-h100-01", kubeconfig="~/.kube/config", timeout=300)
    """
    yield FunctionCommand(_drain, (kubeconfig, node, timeout), {})


@operation(is_idempotent=False)
def gpus_drained(
    node: str,
    kubeconfig: str,
    devices: Sequence[str],
    timeout: int = 300,
    agent_path: str = AGENT_PATH,
    python: str = "python3",
    runtime: str | None = None,
):
    """
    Cordon the node and evict only the pods that hold one of ``devices``, then wait until the
    kubelet lists none of them: the other pods keep running.

    + node: Kubernetes node name
    + kubeconfig: local kubeconfig of the cluster
    + devices: the device UUIDs the change takes (``gpuprov.core.disruption.touched``)
    + timeout: seconds the evictions (retried while a disruption budget refuses) and the wait
      may take
    + agent_path, python: the host agent, whose probe reads the kubelet's pod-resources
    + runtime: the container runtime's CRI socket: the kubelet's list is taken only once it
      names every pod the runtime runs (nothing is changed otherwise)

    **Example:**

    .. code:: python

        gpus_drained(node="gpu-h100-01", kubeconfig="~/.kube/config",
                     devices=["MIG-1b2c..."], timeout=300)
    """
    connector = {
        k: v
        for k, v in (host.current_op_global_arguments or {}).items()
        if k in CONNECTOR_ARGUMENT_KEYS
    }
    command = VerifyProbe().command(
        agent_path, python, pod_resources=POD_RESOURCES_SOCKET, runtime=runtime
    )
    probe = (command, agent_path, python)
    yield FunctionCommand(
        _drain_gpus, (kubeconfig, node, timeout, sorted(devices), probe, connector), {}
    )


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
