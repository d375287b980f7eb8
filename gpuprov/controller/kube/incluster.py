"""The Kubernetes API as a pod sees it: its service account's token and CA, the API server at
``KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`` (what every pod is given; kubernetes.io
docs "Accessing the Kubernetes API from a Pod"). Standard library only, two calls: the Job of
``kube render --fleet`` reads its pool's ConfigMap and writes its result on its Node; and, for
the deploy's own drain (kubectl, when the image has it), a kubeconfig of the same account.

>>> ApiClient("https://10.0.0.1:443", "t", None).url("/api/v1/nodes/n1")
'https://10.0.0.1:443/api/v1/nodes/n1'
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(Exception):
    """The API server refused a call or could not be reached."""


@dataclass(frozen=True)
class ApiClient:
    server: str
    token: str
    ca_file: str | None

    @classmethod
    def in_cluster(cls) -> ApiClient:
        host, port = (
            os.environ.get("KUBERNETES_SERVICE_HOST"),
            os.environ.get("KUBERNETES_SERVICE_PORT"),
        )
        if not host or not (ACCOUNT / "token").is_file():
            raise ApiError("not in a pod: no KUBERNETES_SERVICE_HOST or service account token")
        host = f"[{host}]" if ":" in host else host
        return cls(
            f"https://{host}:{port}",
            (ACCOUNT / "token").read_text().strip(),
            str(ACCOUNT / "ca.crt"),
        )

    def kubeconfig(self, token_file: Path = ACCOUNT / "token") -> dict[str, Any]:
        """A kubeconfig (``kind: Config``; JSON is YAML) for kubectl as this pod's account: the
        token by ``tokenFile`` (client-go re-reads it, so a rotated token is followed) and the
        service account's CA.

        >>> ApiClient("https://10.0.0.1:443", "t", None).kubeconfig()["users"][0]["user"]
        {'tokenFile': '/var/run/secrets/kubernetes.io/serviceaccount/token'}
        """
        cluster = {"server": self.server}
        if self.ca_file:
            cluster["certificate-authority"] = self.ca_file
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "in-cluster", "cluster": cluster}],
            "users": [{"name": "pod", "user": {"tokenFile": str(token_file)}}],
            "contexts": [
                {"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "pod"}}
            ],
            "current-context": "in-cluster",
        }

    def url(self, path: str) -> str:
        return self.server.rstrip("/") + path

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url(path), data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        context = ssl.create_default_context(cafile=self.ca_file)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise ApiError(
                f"{method} {path}: {e.code} {e.read().decode(errors='replace')[:300]}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise ApiError(f"{method} {path}: {e}") from None

    def config_map(self, namespace: str, name: str) -> tuple[dict[str, str], dict[str, bytes]]:
        """The ConfigMap's ``data`` and ``binaryData`` (decoded)."""
        got = self.call("GET", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}")
        binary = {k: base64.b64decode(v) for k, v in (got.get("binaryData") or {}).items()}
        return got.get("data") or {}, binary

    def annotate_node(self, node: str, annotations: dict[str, str]) -> None:
        """Set ``annotations`` on the Node (a merge patch: the node's other annotations stay)."""
        self.call(
            "PATCH",
            f"/api/v1/nodes/{quote(node)}",
            {"metadata": {"annotations": annotations}},
            "application/merge-patch+json",
        )
