"""A real Kubernetes control plane for the lab: etcd and kube-apiserver on this machine, with the
certificates, the service-account keys and an admin kubeconfig it makes itself, and (for a lab
that runs pods) kube-scheduler and kube-controller-manager beside them.

The API server serves TLS on ``address:port`` with client-certificate authentication and RBAC
(``--authorization-mode=Node,RBAC``); the admin identity is in group ``system:masters``. Each lab
node gets a client certificate of its own (``system:node:<name>`` in ``system:nodes``), the
identity the Node authorizer expects from a kubelet
(https://kubernetes.io/docs/reference/access-authn-authz/node/). The scheduler and the controller
manager get theirs as kubeadm makes them: user ``system:kube-scheduler`` and
``system:kube-controller-manager``, no group, the users the API server's bootstrap RBAC policy
binds its ClusterRoles of the same names to (kubernetes
plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go, v1.34.4; kubeadm
cmd/kubeadm/app/phases/kubeconfig/kubeconfig.go).

Everything lives in one directory; ``stop`` ends every process by pid file.

>>> plane = ControlPlane(Path("/tmp/gpuprov-lab/kube"), "10.200.0.1")   # doctest: +SKIP
>>> plane.start(kubebuild.ensure())                                      # doctest: +SKIP
>>> plane.start_controllers(kubebuild.ensure())                          # doctest: +SKIP
>>> plane.kubectl("get", "nodes").stdout                                 # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpuprov_lab import procs
from gpuprov_lab.errors import LabError

API_PORT = 16443  # not 6443: a real API server may already listen there on this machine
SERVICE_CIDR = "10.96.0.0/24"
# The `kubernetes` Service's ClusterIP, the range's first address (the API server allocates it
# to that Service), port 443: where a pod's in-cluster client connects (KUBERNETES_SERVICE_HOST
# and _PORT, set by the kubelet). The server certificate names it, as kubeadm's does
# (cmd/kubeadm/app/util/pkiutil: the first address of the service subnet among the SANs).
SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
SERVICE_PORT = 443
_VALID = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Identity:
    """A client certificate's subject: user (CN) and groups (O)."""

    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity("gpuprov-admin", ("system:masters",))
# The API server's client certificate for the kubelets' API (logs, exec, port-forward), kubeadm's
# `apiserver-kubelet-client`; the lab's kubelets accept any certificate of the lab CA.
KUBELET_CLIENT = Identity("kube-apiserver-kubelet-client")
SCHEDULER = Identity("system:kube-scheduler")
CONTROLLER_MANAGER = Identity("system:kube-controller-manager")
# The processes of a control plane, in the order `stop` ends them (etcd last), and their pid files
# in its directory. The scheduler and the controller manager run only after `start_controllers`.
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd")
_PIDFILE = {
    "etcd": "etcd.pid",
    "kube-apiserver": "apiserver.pid",
    "kube-scheduler": "scheduler.pid",
    "kube-controller-manager": "controller-manager.pid",
}
READY_TIMEOUT = 60.0  # seconds; the API server took 2-3 s, the controllers' first sync about 2 s


def node_identity(name: str) -> Identity:
    """The identity the Node authorizer expects from the kubelet of node ``name``.

    >>> node_identity("lab-a100-01")
    Identity(user='system:node:lab-a100-01', groups=('system:nodes',))
    """
    return Identity(f"system:node:{name}", ("system:nodes",))


class ControlPlane:
    """etcd + kube-apiserver with their files in ``directory``, serving on ``address``."""

    def __init__(self, directory: Path, address: str, port: int | None = API_PORT):
        """``port=None`` takes a free port (tests run several control planes side by side)."""
        self.dir = directory
        self.address = address
        self.port = port or _free_port(address)
        self.etcd_client, self.etcd_peer = _free_port("127.0.0.1"), _free_port("127.0.0.1")
        # The scheduler's and the controller manager's own HTTPS ports (healthz, metrics): free
        # ones on loopback, not their defaults 10259 and 10257, which another cluster on this
        # machine may hold.
        self.scheduler_port = _free_port("127.0.0.1")
        self.controller_manager_port = _free_port("127.0.0.1")
        self.kubectl_path = "kubectl"  # the built one once started

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    def start(self, binaries: dict[str, Path], timeout: float = 60.0) -> None:
        """Make the certificates (once) and start etcd and the API server; wait until healthy."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if binaries.get("kubectl") and Path(binaries["kubectl"]).is_file():
            self.kubectl_path = str(binaries["kubectl"])
        self._pki()
        kubelet_cert, kubelet_key = self._client_cert(KUBELET_CLIENT)
        etcd_data = self.dir / "etcd"
        procs.start(
            [
                str(binaries["etcd"]),
                "--name=gpuprov-lab",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls=http://127.0.0.1:{self.etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{self.etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer}",
                f"--initial-cluster=gpuprov-lab=http://127.0.0.1:{self.etcd_peer}",
                "--log-level=warn",
            ],
            pidfile(self.dir, "etcd"),
            log=self.dir / "etcd.log",
        )
        pki = self.dir / "pki"
        procs.start(
            [
                str(binaries["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_client}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # `kubectl logs` reaches a pod's kubelet: with a client certificate, at the
                # Node's InternalIP (the default tries the Hostname first, which this machine's
                # resolver does not know).
                f"--kubelet-client-certificate={kubelet_cert}",
                f"--kubelet-client-key={kubelet_key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
            pidfile(self.dir, "kube-apiserver"),
            log=self.dir / "apiserver.log",
        )
        self.kubeconfig(self.admin_kubeconfig, ADMIN)
        self._wait_ready(timeout)

    def start_controllers(self, binaries: dict[str, Path]) -> None:
        """Start kube-scheduler and kube-controller-manager against the running API server, as
        kubeadm runs them (its static pod manifests, cmd/kubeadm/app/phases/controlplane/
        manifests.go): their own kubeconfig for the API, and the same one for delegated
        authentication and authorization of their HTTPS port. Returns once both run;
        ``wait_controllers`` waits until they serve.

        Not kubeadm's: ``--leader-elect=false`` (one instance of each; no lease to renew every
        2 s) and free loopback ports (``scheduler_port``, ``controller_manager_port``).
        """
        pki = self.dir / "pki"
        scheduler = self.kubeconfig(self.dir / "scheduler.kubeconfig", SCHEDULER)
        manager = self.kubeconfig(self.dir / "controller-manager.kubeconfig", CONTROLLER_MANAGER)
        procs.start(
            [
                str(binaries["kube-scheduler"]),
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                *_own_port_authentication(pki),
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
            pidfile(self.dir, "kube-scheduler"),
            log=self.dir / "scheduler.log",
        )
        procs.start(
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={manager}",
                f"--authentication-kubeconfig={manager}",
                f"--authorization-kubeconfig={manager}",
                *_own_port_authentication(pki),
                "--bind-address=127.0.0.1",
                f"--secure-port={self.controller_manager_port}",
                # Published into every namespace as the kube-root-ca.crt config map, which each
                # pod's service-account volume mounts (a pod without it never starts:
                # 'configmap "kube-root-ca.crt" not found').
                f"--root-ca-file={pki / 'ca.crt'}",
                # The key the API server verifies service-account tokens with (its
                # --service-account-key-file is this key's public half).
                f"--service-account-private-key-file={pki / 'sa.key'}",
                # Each controller calls the API as its own service account (kubeadm does): the
                # token path every pod's credentials take is in use from the start.
                "--use-service-account-credentials=true",
                # Certificate signing requests (a kubelet's client certificate rotation) are
                # signed by the lab CA, as kubeadm's controller manager signs them.
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
            pidfile(self.dir, "kube-controller-manager"),
            log=self.dir / "controller-manager.log",
        )

    def wait_controllers(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until the scheduler and the controller manager answer ``/healthz`` and the
        controllers have done what every pod needs: the ``default`` service account and the
        ``kube-root-ca.crt`` config map in namespace ``default``. Raises LabError with their
        logs when one ends or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        for name, port in (
            ("kube-scheduler", self.scheduler_port),
            ("kube-controller-manager", self.controller_manager_port),
        ):
            self._wait(name, lambda port=port: healthz(port), deadline)
        self._wait(
            "the default service account and kube-root-ca.crt",
            lambda: (
                self.kubectl(
                    "-n", "default", "get", "serviceaccount/default", "configmap/kube-root-ca.crt"
                ).returncode
                == 0
            ),
            deadline,
        )

    def _wait(self, what: str, ready, deadline: float) -> None:
        while not ready():
            dead = [c for c in COMPONENTS if started(self.dir, c) and not alive(self.dir, c)]
            if dead or time.monotonic() > deadline:
                logs = "".join(
                    f"\n--- {c}:\n{log_tail(self.dir, c)}" for c in dead or COMPONENTS[:2]
                )
                state = f"{', '.join(dead)} ended" if dead else "timed out"
                raise LabError(f"the lab control plane: waiting for {what}: {state}{logs}")
            time.sleep(0.3)

    def ports(self) -> dict[str, int]:
        """Component -> the TCP port it serves on (what `lab down` must leave free)."""
        return {
            "etcd": self.etcd_client,
            "etcd-peer": self.etcd_peer,
            "kube-apiserver": self.port,
            "kube-scheduler": self.scheduler_port,
            "kube-controller-manager": self.controller_manager_port,
        }

    def stop(self) -> None:
        stop(self.dir)

    def running(self) -> bool:
        return running(self.dir)

    def kubeconfig(self, path: Path, identity: Identity) -> Path:
        """Write a kubeconfig for ``identity`` (a client certificate signed by the lab CA)."""
        cert, key = self._client_cert(identity)
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpuprov-lab",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.dir / "pki" / "ca.crt"),
                    },
                }
            ],
            "users": [
                {"name": identity.user, "user": {"client-certificate": cert, "client-key": key}}
            ],
            "contexts": [
                {"name": "lab", "context": {"cluster": "gpuprov-lab", "user": identity.user}}
            ],
            "current-context": "lab",
        }
        path.write_text(json.dumps(document, indent=2) + "\n")  # JSON is YAML
        path.chmod(0o600)
        return path

    def kubectl(self, *args: str, kubeconfig: Path | None = None, timeout: float = 60.0):
        """Run kubectl (the built one, else the machine's) against this control plane."""
        config = kubeconfig or self.admin_kubeconfig
        return subprocess.run(
            [self.kubectl_path, f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    # --- readiness

    def _wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.dir / "pki" / "ca.crt"))
        cert, key = self._client_cert(ADMIN)
        context.load_cert_chain(cert, key)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not self.running():
                break
            try:
                with urllib.request.urlopen(
                    f"{self.server}/readyz", context=context, timeout=2
                ) as r:
                    if r.status == 200:
                        return
            except OSError as e:
                last = str(e)
            time.sleep(0.5)
        log = (self.dir / "apiserver.log").read_text(errors="replace")[-1500:]
        raise LabError(f"the lab API server did not become ready ({last}):\n{log}")

    # --- certificates

    def _pki(self) -> None:
        pki = self.dir / "pki"
        if (pki / "apiserver.crt").exists():
            return
        pki.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuprov-lab-ca")])
        ca = (
            _builder(ca_name, ca_name, ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        _write(pki / "ca.crt", ca.public_bytes(serialization.Encoding.PEM))
        _write(pki / "ca.key", _private(ca_key))
        server_key = ec.generate_private_key(ec.SECP256R1())
        names = [
            x509.DNSName(n)
            for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
        ]
        ips = [
            x509.IPAddress(ipaddress.ip_address(a)) for a in (self.address, "127.0.0.1", SERVICE_IP)
        ]
        server = (
            _builder(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                ca_name,
                server_key.public_key(),
            )
            .add_extension(x509.SubjectAlternativeName(names + ips), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write(pki / "apiserver.crt", server.public_bytes(serialization.Encoding.PEM))
        _write(pki / "apiserver.key", _private(server_key))
        sa_key = ec.generate_private_key(ec.SECP256R1())
        _write(pki / "sa.key", _private(sa_key))
        _write(
            pki / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    def _client_cert(self, identity: Identity) -> tuple[str, str]:
        pki = self.dir / "pki"
        stem = pki / identity.user.replace(":", "_")
        cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
        if not cert_path.exists():
            ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
            ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
            key = ec.generate_private_key(ec.SECP256R1())
            subject = x509.Name(
                [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in identity.groups]
                + [x509.NameAttribute(NameOID.COMMON_NAME, identity.user)]
            )
            cert = (
                _builder(subject, ca.subject, key.public_key())
                .add_extension(
                    x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                    critical=False,
                )
                .sign(ca_key, hashes.SHA256())
            )
            _write(key_path, _private(key))
            _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return str(cert_path), str(key_path)


def stop(directory: Path) -> None:
    """End the controllers, the API server, then etcd, of the control plane in ``directory``
    (fine when down, or when only some of them ran)."""
    for component in COMPONENTS:
        procs.stop(pidfile(directory, component))


def pidfile(directory: Path, component: str) -> Path:
    """The pid file of ``component`` (one of ``COMPONENTS``) in ``directory``.

    >>> pidfile(Path("/k"), "kube-scheduler")
    PosixPath('/k/scheduler.pid')
    """
    return directory / _PIDFILE[component]


def started(directory: Path, component: str) -> bool:
    """``component`` was started in ``directory`` (its pid file exists)."""
    return pidfile(directory, component).exists()


def alive(directory: Path, component: str) -> bool:
    return procs.alive(pidfile(directory, component))


def running(directory: Path) -> bool:
    """etcd and the API server of the control plane in ``directory`` are alive, and so is every
    other component that was started there."""
    return all(
        alive(directory, c)
        for c in COMPONENTS
        if c in ("etcd", "kube-apiserver") or started(directory, c)
    )


def _own_port_authentication(pki: Path) -> list[str]:
    """How the scheduler and the controller manager authenticate clients of their HTTPS port:
    certificates of the lab CA, given, not looked up. kubeadm lets them read the CAs from the
    ``extension-apiserver-authentication`` config map; the lab's API server has no front proxy
    (``--requestheader-client-ca-file``), and looking it up logged 'missing content for CA
    bundle "client-ca::kube-system::extension-apiserver-authentication::
    requestheader-client-ca-file"' several times a second."""
    return [f"--client-ca-file={pki / 'ca.crt'}", "--authentication-skip-lookup=true"]


def healthz(port: int, timeout: float = 2.0) -> bool:
    """``https://127.0.0.1:<port>/healthz`` answers ``ok``: the scheduler's and the controller
    manager's, served with a self-signed certificate they make in memory and open to anyone
    (``/healthz`` is in their ``--authorization-always-allow-paths`` by default)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/healthz", context=context, timeout=timeout
        ) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except OSError:
        return False


def log_tail(directory: Path, component: str, size: int = 1500) -> str:
    log = directory / _PIDFILE[component].replace(".pid", ".log")
    try:
        return log.read_text(errors="replace")[-size:]
    except OSError:
        return "(no log)"


def nodes(kubectl: str, kubeconfig: Path, timeout: float = 20.0) -> list[dict]:
    """The Nodes as the API server shows them: name, Ready, and the allocatable GPU resources
    (``nvidia.com/*``) and pods. Raises LabError with kubectl's words when it cannot list them.

    >>> _node_row({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "2", "pods":
    ...     "110", "nvidia.com/gpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    {'name': 'n', 'ready': True, 'allocatable': {'nvidia.com/gpu': '4', 'pods': '110'}}
    """
    try:
        result = subprocess.run(
            [kubectl, f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"kubectl get nodes: {e}") from None
    if result.returncode != 0:
        raise LabError(f"kubectl get nodes: {result.stderr.strip()}")
    return [_node_row(item) for item in json.loads(result.stdout)["items"]]


def env_with_kubectl(kubectl: str | None) -> dict[str, str]:
    """This process's environment with ``kubectl``'s directory first on PATH: gpuprov's deploy
    (cordon and drain) and ``verify --kubeconfig`` run `kubectl` by name, and the lab's is the
    API server's own version.

    >>> env_with_kubectl("/opt/k/kubectl")["PATH"].startswith("/opt/k:")
    True
    """
    env = dict(os.environ)
    if kubectl:
        env["PATH"] = f"{Path(kubectl).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _node_row(item: dict) -> dict:
    status = item.get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    allocatable = status.get("allocatable", {})
    shown = {
        k: v for k, v in sorted(allocatable.items()) if k.startswith("nvidia.com/") or k == "pods"
    }
    return {"name": item["metadata"]["name"], "ready": ready, "allocatable": shown}


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
    )


def _private(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)
