"""The one edge of gpuprov.kube: the real ``kubectl`` client, run on the controller.

>>> client = Kubectl("~/.kube/config")      # doctest: +SKIP
>>> sorted(client.nodes())                  # doctest: +SKIP
['gpu-a100-01', 'gpu-h100-01']
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from gpuprov.contract import KUBE_FIELD_MANAGER
from gpuprov.errors import InputError, Problem
from gpuprov.kube.nodes import TaintChange


class KubectlError(Exception):
    """kubectl ran and failed (API server down, no permission, conflict): its message."""


class Kubectl:
    def __init__(self, kubeconfig: str, binary: str = "kubectl"):
        self.kubeconfig = kubeconfig
        self.binary = binary

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        command = [self.binary, "--kubeconfig", self.kubeconfig, *args]
        try:
            # No terminal for kubectl to prompt on (an exec credential plugin asking for a login).
            extra = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
            return subprocess.run(command, capture_output=True, text=True, check=False, **extra)
        except OSError as e:
            raise KubectlError(f"cannot run {self.binary}: {e}") from None

    def _ok(self, what: str, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        if result.returncode != 0:
            raise KubectlError(f"{what} failed: {_last_lines(result.stderr)}")
        return result.stdout

    def check_kubeconfig(self) -> None:
        """InputError (exit 2) unless the kubeconfig loads and names a current context;
        kubectl itself parses it, offline."""
        if not Path(self.kubeconfig).expanduser().is_file():
            raise InputError([Problem(self.kubeconfig, "kubeconfig not found", key="--kubeconfig")])
        result = self.run("config", "view", "--minify", "-o", "json")
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

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Every node of the cluster, in one list call: name -> the Node object."""
        listed = json.loads(self._ok("listing nodes", "get", "nodes", "-o", "json"))
        return {item["metadata"]["name"]: item for item in listed.get("items", [])}

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
            raise KubectlError(f"kubectl diff failed: {_last_lines(result.stderr)}")
        return result.stdout

    def set_taints(self, change: TaintChange) -> None:
        """Replace the node's taint list, if it still is what was read (JSON patch ``test``),
        so a taint another controller added in between is never dropped."""
        ops: list[dict[str, Any]] = []
        if change.raw_before:
            ops.append({"op": "test", "path": "/spec/taints", "value": list(change.raw_before)})
        ops.append({"op": "add", "path": "/spec/taints", "value": list(change.raw_after)})
        self._ok(
            f"setting the taints of node {change.node}",
            "patch",
            "node",
            change.node,
            "--type=json",
            f"--field-manager={KUBE_FIELD_MANAGER}",
            "-p",
            json.dumps(ops),
        )


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-count:]) or "no message"
