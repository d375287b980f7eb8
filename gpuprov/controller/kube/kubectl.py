"""The one edge of gpuprov.controller.kube: the real ``kubectl`` client, run on the controller.

>>> client = Kubectl("~/.kube/config")      # doctest: +SKIP
>>> sorted(client.nodes())                  # doctest: +SKIP
['gpu-a100-01', 'gpu-h100-01']
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuprov.core.cluster.nodes import NodeChange
from gpuprov.core.errors import InputError, Problem
from gpuprov.host.contract import KUBE_FIELD_MANAGER

# kubectl's words for an API server it could not reach (client-go's connection errors).
_UNREACHABLE = (
    "The connection to the server",
    "Unable to connect to the server",
    "connection refused",
    "no such host",
    "i/o timeout",
)
# The API server's Forbidden message (apiserver/pkg/endpoints/handlers/responsewriters, forbidden).
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)" '
    r'in API group "(?P<group>[^"]*)" (?P<scope>at the cluster scope|in the namespace "[^"]*")'
)


_NO_NAMESPACE = re.compile(r'\(NotFound\): namespaces "([^"]+)" not found')

# Nodes per list call: client-go's pager default (tools/pager DefaultPageSize) and kubectl's
# --chunk-size. At 5,000 Nodes of a kubelet's size (docs/performance.md), pages of 1,000 save
# 0.3 CPU-s of kubectl start-ups and add 73 MiB to the controller's peak (81 -> 154 MiB).
NODE_PAGE = 500
# What gpuprov reads of a Node (the comparison, the node changes of `kube apply`, cordoning,
# capacity − allocatable: the devices a plugin marked unhealthy, docs/health.md); the
# rest (status.images, conditions, nodeInfo, managedFields: most of a real node's size) is
# dropped as each page is read. A key the Node lacks stays absent: `kube apply` patches a
# missing labels or annotations map whole, an existing one key by key.
NODE_FIELDS = {
    "metadata": ("name", "labels", "annotations"),
    "spec": ("taints", "unschedulable"),
    "status": ("capacity", "allocatable"),
}


class KubectlError(Exception):
    """kubectl ran and failed (API server down, no permission, conflict): its message."""


class Kubectl:
    def __init__(self, kubeconfig: str, binary: str = "kubectl", timeout: float = 60.0):
        self.kubeconfig = kubeconfig
        self.binary = binary
        self.timeout = timeout  # seconds one kubectl call may take

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        command = [self.binary, "--kubeconfig", self.kubeconfig, *args]
        try:
            # No terminal for kubectl to prompt on (an exec credential plugin asking for a login).
            extra = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
            return subprocess.run(
                command,
                capture_output=True,
                text=True,
                check=False,
                timeout=self.timeout,
                **extra,
            )
        except subprocess.TimeoutExpired:
            raise KubectlError(
                f"the API server did not answer within {self.timeout:.0f} s (kubectl {args[0]})"
            ) from None
        except OSError as e:
            raise KubectlError(f"cannot run {self.binary}: {e}") from None

    def _ok(self, what: str, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        if result.returncode != 0:
            raise KubectlError(f"{what} failed: {explain(result.stderr)}")
        return result.stdout

    def check_kubeconfig(self) -> None:
        """InputError (exit 2) unless the kubeconfig loads and names a current context;
        kubectl itself parses it, offline."""
        if not Path(self.kubeconfig).expanduser().is_file():
            raise InputError([Problem(self.kubeconfig, "kubeconfig not found", key="--kubeconfig")])
        try:
            result = self.run("config", "view", "--minify", "-o", "json")
        except KubectlError as e:
            raise InputError([Problem(self.kubeconfig, str(e), key="--kubeconfig")]) from None
        if result.returncode != 0:
            raise InputError(
                [
                    Problem(
                        self.kubeconfig,
                        f"not a usable kubeconfig: {_last_lines(result.stderr)}",
                        key="--kubeconfig",
                    )
                ]
            )

    def nodes(self, page: int = NODE_PAGE) -> dict[str, dict[str, Any]]:
        """Every node of the cluster (name -> the Node's ``NODE_FIELDS``), read with the list
        API's ``limit`` and ``continue``: ceil(nodes / ``page``) list calls, which together are
        one consistent snapshot (the API server pins the first call's resourceVersion), each
        under the time limit. ``kubectl get --raw`` passes the API server's JSON through
        unparsed, where ``kubectl get nodes -o json`` decodes and re-encodes every node: at
        5,000 kwok Nodes 4.1 CPU-s and 361 MiB of kubectl, against 0.7 CPU-s for the ten pages
        and 52 MiB for each."""
        found: dict[str, dict[str, Any]] = {}
        token = ""
        seen: set[str] = set()
        while True:
            path = f"/api/v1/nodes?limit={page}"
            if token:
                path += f"&continue={quote(token, safe='')}"
            text = self._ok("listing nodes", "get", "--raw", path)
            try:
                listed = json.loads(text)
                for item in listed["items"]:
                    found[item["metadata"]["name"]] = _needed(item)
                token = (listed.get("metadata") or {}).get("continue") or ""
            except (ValueError, KeyError, TypeError, AttributeError):
                raise KubectlError(f"listing nodes: not a node list: {text[:200]!r}") from None
            if not token:
                return found
            if token in seen:  # a list that would never end
                raise KubectlError("listing nodes: the API server repeated a continue token")
            seen.add(token)

    def labelled(self, resource: str, selector: str) -> list[dict[str, Any]] | None:
        """The objects of ``resource`` (``clusterqueues.kueue.x-k8s.io``) carrying the label
        ``selector``, or None when the API server does not serve that resource (its CRD is not
        installed)."""
        result = self.run("get", resource, "-l", selector, "-o", "json")
        if result.returncode != 0:
            if "the server doesn't have a resource type" in result.stderr:
                return None
            raise KubectlError(f"listing {resource} failed: {explain(result.stderr)}")
        try:
            return list(json.loads(result.stdout)["items"])
        except (ValueError, KeyError, TypeError):
            raise KubectlError(f"listing {resource}: not a list: {result.stdout[:200]!r}") from None

    def cordon(self, name: str) -> None:
        """Mark node ``name`` unschedulable (``kubectl cordon``: spec.unschedulable only)."""
        self._ok(f"cordoning node {name}", "cordon", name)

    def apply(self, manifests: str) -> str:
        """Server-side apply under gpuprov's field manager; gpuprov's keys win conflicts."""
        return self._ok(
            "kubectl apply",
            "apply",
            "--server-side",
            f"--field-manager={KUBE_FIELD_MANAGER}",
            "--force-conflicts",
            "-f",
            "-",
            stdin=manifests,
        )

    def create(self, manifests: str) -> str:
        """Create the objects of ``manifests`` (JSON or YAML); fails if one exists."""
        return self._ok("kubectl create", "create", "-f", "-", stdin=manifests)

    def delete(self, namespace: str, objects: list[tuple[str, str]], dry_run: bool = False) -> str:
        """Delete ``objects`` (resource, name) of ``namespace``, those there; kubectl's report
        (one line per object deleted). ``dry_run``: the API server checks it and keeps nothing."""
        out = []
        for resource in dict.fromkeys(r for r, _ in objects):
            names = [n for r, n in objects if r == resource]
            out.append(
                self._ok(
                    f"deleting {resource}",
                    "delete",
                    "-n",
                    namespace,
                    resource,
                    *names,
                    "--ignore-not-found",
                    *(["--dry-run=server"] if dry_run else []),
                )
            )
        return "".join(out)

    def diff(self, manifests: str) -> str:
        """What :meth:`apply` would change (``kubectl diff`` exits 1 when something differs)."""
        result = self.run(
            "diff",
            "--server-side",
            f"--field-manager={KUBE_FIELD_MANAGER}",
            "--force-conflicts",
            "-f",
            "-",
            stdin=manifests,
        )
        if result.returncode > 1:
            raise KubectlError(f"kubectl diff failed: {explain(result.stderr)}")
        return result.stdout

    def patch_node(self, change: NodeChange, dry_run: bool = False) -> None:
        """Send ``change`` as one JSON patch; it fails whole if the node's taints changed since
        they were read (its ``test`` op), so a taint another controller added is never dropped.
        ``dry_run``: the API server checks it (permissions, the ``test`` op) and keeps nothing."""
        result = self.run(
            "patch",
            "node",
            change.node,
            "--type=json",
            f"--field-manager={KUBE_FIELD_MANAGER}",
            *(["--dry-run=server"] if dry_run else []),
            "-p",
            json.dumps(change.json_patch()),
        )
        if result.returncode == 0:
            return
        reason = explain(result.stderr)
        if change.taints is not None and "The request is invalid" in result.stderr:
            # What the API server answers when the JSON patch's `test` op fails.
            reason = (
                "its taints changed since gpuprov read them (another controller?): "
                "nothing was changed on it; run apply again"
            )
        raise KubectlError(f"changing node {change.node} failed: {reason}")


def _needed(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` cut to ``NODE_FIELDS``.

    >>> _needed({"metadata": {"name": "n1", "uid": "u"}, "status": {"images": [], "allocatable": {}}})
    {'metadata': {'name': 'n1'}, 'spec': {}, 'status': {'allocatable': {}}}
    """
    return {
        part: {key: node[part][key] for key in keys if key in (node.get(part) or {})}
        for part, keys in NODE_FIELDS.items()
    }


def missing_permissions(stderr: str) -> list[str]:
    """Each permission the API server refused, as ``VERB RESOURCE`` and where.

    >>> missing_permissions('Error from server (Forbidden): nodes "n1" is forbidden: User "ro" '
    ...     'cannot patch resource "nodes" in API group "" at the cluster scope')
    ['user "ro" may not patch nodes (API group core, at the cluster scope)']
    """
    out = []
    for m in _FORBIDDEN.finditer(stderr):
        group = m["group"] or "core"
        text = f'user "{m["user"]}" may not {m["verb"]} {m["resource"]} (API group {group}, {m["scope"]})'
        if text not in out:
            out.append(text)
    return out


def explain(stderr: str) -> str:
    """kubectl's failure in one line: the permissions refused, an unreachable API server, or
    kubectl's last lines."""
    refused = missing_permissions(stderr)
    if refused:
        return "missing permission: " + "; ".join(refused)
    namespace = _NO_NAMESPACE.search(stderr)
    if namespace:
        return (
            f"namespace {namespace[1]} does not exist: create it (`kubectl create namespace "
            f"{namespace[1]}`) or pass the device plugin's --namespace"
        )
    last = _last_lines(stderr)
    if any(marker in stderr for marker in _UNREACHABLE):
        return f"the API server is unreachable: {last}"
    return last


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-count:]) or "no message"
