"""Kueue v0.17.0 on the controller machine: its controller manager built from the Go module
proxy, its CRDs, and its admission webhooks called by the API server at this machine's address.

Built once into ``/var/tmp/gpuprov-kueue-v0.17.0/`` (``ensure``): the binary
(``sigs.k8s.io/kueue/cmd/kueue``, 169 s cold on the 2-core CI machine after the Kubernetes
build), and from the module source at the same tag the CRDs (``config/components/crd/bases``, checked against the shared
``SHA256SUMS``) and the webhook configurations (``config/components/webhook``).

Running outside a pod (``start``), from Kueue's source at v0.17.0:

- ``--config FILE``, a ``config.kueue.x-k8s.io/v1beta2`` ``Configuration``
  (``cmd/kueue/main.go:126-129``); the API server from ``--kubeconfig``
  (controller-runtime's flag, read by ``ctrl.GetConfigOrDie``, ``main.go:236``).
- ``internalCertManagement.enable: false``: otherwise Kueue makes its own CA and certificate for
  ``kueue-webhook-service.kueue-system.svc`` in a Secret (``main.go:253-258,277-283``;
  ``apis/config/v1beta2/defaults.go:34-35,86-91``), a name the API server cannot reach here.
  The webhook server then reads ``tls.crt``/``tls.key`` from ``webhook.certDir``
  (``pkg/config/config.go:167-192``; default ``/tmp/k8s-webhook-server/serving-certs``,
  ``defaults.go:37``), and the metrics server reads them from the fixed
  ``/etc/kueue/metrics/certs`` (``main.go:205-222``), even with metrics off. The process runs
  in a mount namespace of its own where this run's directory is bound there, so two Kueues
  never share those files and none is written into the machine's ``/etc`` (only the empty
  mount point is made).
- ``featureGates: {VisibilityOnDemand: false}``: the visibility API server (on by default,
  ``pkg/features/kube_features.go:375-378``) would read certificates from ``/visibility`` and
  listen on 8082 (``pkg/visibility/server.go:65,110-112``); nothing here uses it.
- ``leaderElection.leaderElect: false`` (one replica; ``pkg/config/config.go:124-131``),
  ``metrics.bindAddress: "0"`` (off), ``health.healthProbeBindAddress`` on a free port:
  ``/readyz`` answers only once the webhook server is up (``main.go:527-553``), which is what
  ``start`` waits for.
- ``namespace: kueue-system`` (``defaults.go:33,55-63``; made here): Kueue's own namespace,
  excluded from the pod webhook and from ``managedJobsNamespaceSelector``
  (``defaults.go:111-119``). No webhook Service name is needed with internal cert management
  off (``defaults.go:86-91``).
- Webhooks: every path in ``config/components/webhook/manifests.yaml`` is served, the disabled
  integrations' ones by a no-op webhook (``pkg/controller/jobframework/setup.go:107-111``), so
  the configurations are applied whole, with ``clientConfig.url`` instead of the Service and the
  namespace selectors of that folder's ``kustomization.yaml`` (pods, deployments and
  statefulsets outside ``kube-system`` and ``kueue-system``).

>>> cfg = configuration("127.0.0.1", 9443, 8081, Path("/run/k"))
>>> cfg["webhook"], cfg["integrations"]["frameworks"]
({'host': '127.0.0.1', 'port': 9443, 'certDir': '/run/k'}, ['batch/job', 'pod'])
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import yaml

from gpuprov_lab import consumer, gobuild, webhook_tls
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import CACHE

MODULE = "sigs.k8s.io/kueue"
VERSION = "v0.17.0"
NAMESPACE = "kueue-system"
INTEGRATIONS = ("batch/job", "pod")
# Measured on the 2-core CI machine: 169 s after the Kubernetes build (its dependencies are
# other versions, so little is shared); 6 min 52 s from nothing on a busy machine.
COLD_BUILD_MINUTES = 3
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in cmd/kueue/main.go:206
_WEBHOOK_SOURCE = "config/components/webhook"
_CRD_SOURCE = "config/components/crd/bases"


def cache_dir() -> Path:
    return CACHE / f"gpuprov-kueue-{VERSION}"


def binary() -> Path:
    return cache_dir() / "kueue"


def ensure(log=sys.stderr) -> Path:
    """The cache directory with the binary, the CRDs and the webhook files, built when missing.

    The files are copied from the module source before the binary is built: a cache with a
    binary is complete, and a warm one costs a few ``stat`` calls.
    """
    if binary().is_file():
        return cache_dir()
    print(
        f"building Kueue {VERSION} into {cache_dir()}: once per machine; about "
        f"{COLD_BUILD_MINUTES} minutes cold on 2 cores",
        file=log,
    )
    src = gobuild.source(MODULE, VERSION)
    gobuild.copy_tree(src / _CRD_SOURCE, cache_dir() / "crds")
    gobuild.copy_tree(src / _WEBHOOK_SOURCE, cache_dir() / "webhook")
    consumer.checked_crds(_crd_files(cache_dir() / "crds"))
    gobuild.build(
        MODULE,
        VERSION,
        "cmd/kueue",
        binary(),
        ldflags=f"-X {MODULE}/pkg/version.GitVersion={VERSION}",
        log=log,
    )
    return cache_dir()


def crds() -> list[dict]:
    """Kueue's CRDs at ``VERSION``, each checked against the shared ``SHA256SUMS``."""
    return consumer.checked_crds(_crd_files(cache_dir() / "crds"))


def configuration(
    address: str,
    webhook_port: int,
    health_port: int,
    cert_dir: Path,
    integrations: tuple[str, ...] = INTEGRATIONS,
) -> dict:
    """The ``Configuration`` Kueue reads with ``--config`` in the lab (see the module doc)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"{address}:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": address, "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(integrations)},
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(webhook_dir: Path, base_url: str, ca_bundle: str) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, calling ``base_url`` + each path.

    Named as a kustomize build of Kueue's default install names them (``kueue-`` prefix).
    """
    documents = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    selectors = _namespace_selectors(webhook_dir / "kustomization.yaml")
    for document in documents:
        document["metadata"]["name"] = f"kueue-{document['metadata']['name']}"
        for webhook in document["webhooks"]:
            service = webhook["clientConfig"].pop("service")
            webhook["clientConfig"]["url"] = base_url + service["path"]
            webhook["clientConfig"]["caBundle"] = ca_bundle
            if webhook["name"] in selectors.get(document["kind"], {}):
                webhook["namespaceSelector"] = selectors[document["kind"]][webhook["name"]]
    return documents


def start(
    kubeconfig: Path,
    address: str,
    workdir: Path,
    integrations: tuple[str, ...] = INTEGRATIONS,
    timeout: float = 120.0,
) -> consumer.Consumer:
    """Kueue's CRDs, webhook configurations and controller manager, serving its webhooks on
    ``address`` (an address of this machine the API server reaches). Returns once ``/readyz``
    answers; ``stop()`` removes the webhook configurations, then ends the process."""
    cache = ensure()
    handle = consumer.Consumer("kueue", workdir, kubeconfig)
    documents = crds()
    consumer.apply(kubeconfig, documents)
    consumer.wait_established(kubeconfig, [d["metadata"]["name"] for d in documents])
    consumer.apply(
        kubeconfig, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
    )
    tls = webhook_tls.make(workdir / "certs", address)
    webhook_port, health_port = consumer.free_ports(address, 2)
    handle.endpoints = [(address, webhook_port), (address, health_port)]
    config = workdir / "kueue-config.yaml"
    config.write_text(
        yaml.safe_dump(
            configuration(address, webhook_port, health_port, tls.cert.parent, integrations)
        )
    )
    webhooks = webhook_configurations(
        cache / "webhook", f"https://{address}:{webhook_port}", tls.ca_bundle()
    )
    for document in webhooks:
        handle.delete_on_stop(document["kind"], document["metadata"]["name"])
    consumer.apply(kubeconfig, webhooks)
    METRICS_CERTS.mkdir(parents=True, exist_ok=True)  # the mount point only
    handle.start_process(
        "kueue",
        [
            "unshare",
            "--mount",
            "--propagation=private",
            "--",
            "sh",
            "-c",
            'mount --bind "$0" "$1" && shift && exec "$@"',
            str(tls.cert.parent),
            str(METRICS_CERTS),
            str(binary()),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
        ],
    )
    handle.wait("/readyz", lambda: _ready(address, health_port), timeout, "kueue")
    return handle


def stop(workdir: Path) -> None:
    """End the Kueue started in ``workdir`` and remove its webhook configurations."""
    consumer.stop(workdir)


def _ready(address: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _crd_files(directory: Path) -> dict[str, bytes]:
    files = {f"kueue-{VERSION}/{p.name}": p.read_bytes() for p in sorted(directory.glob("*.yaml"))}
    if not files:
        raise LabError(f"no CRDs in {directory}")
    return files


def _namespace_selectors(kustomization: Path) -> dict[str, dict[str, dict]]:
    """kind -> webhook name -> namespaceSelector, from the folder's kustomize patches."""
    out: dict[str, dict[str, dict]] = {}
    for patch in yaml.safe_load(kustomization.read_text()).get("patches", []):
        document = yaml.safe_load(patch["patch"])
        for webhook in document.get("webhooks", []):
            if "namespaceSelector" in webhook:
                out.setdefault(document["kind"], {})[webhook["name"]] = webhook["namespaceSelector"]
    return out


if __name__ == "__main__":  # `python -m gpuprov_lab.kueue`: what .ci/run does before the tests
    try:
        print(ensure())
    except LabError as e:
        sys.exit(f"error: {e}")
