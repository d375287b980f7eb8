"""A serving certificate for a controller's admission webhooks, run outside any pod.

In a cluster, cert-manager or the controller itself signs a certificate for
``<service>.<namespace>.svc`` and the webhook configuration names that Service. The lab's
controllers run on the controller machine, where no Service routes: the API server calls them
by ``url: https://<address>:<port>/<path>``, so the certificate is for that IP address, signed
by a CA of its own whose certificate is the configurations' ``caBundle``.

>>> import tempfile
>>> tls = make(Path(tempfile.mkdtemp()), "127.0.0.1")
>>> tls.ca_bundle().startswith("LS0t")  # base64 of a PEM block
True
>>> sorted(p.name for p in (tls.ca, tls.cert, tls.key))
['ca.crt', 'tls.crt', 'tls.key']
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=30)


@dataclass(frozen=True)
class WebhookTLS:
    """The CA and the serving pair, as files named the way controller-runtime reads them
    (``tls.crt`` and ``tls.key`` in its ``certDir``)."""

    ca: Path
    cert: Path
    key: Path

    def ca_bundle(self) -> str:
        """The CA certificate as a webhook configuration's ``clientConfig.caBundle``."""
        return base64.b64encode(self.ca.read_bytes()).decode()


def make(directory: Path, address: str) -> WebhookTLS:
    """A new CA and a serving certificate for ``address`` (and localhost) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuprov-lab-webhook-ca")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    ips = {ipaddress.ip_address(address), ipaddress.ip_address("127.0.0.1")}
    names = [x509.DNSName("localhost"), *(x509.IPAddress(ip) for ip in sorted(ips, key=str))]
    serving = (
        _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]),
            ca_name,
            key.public_key(),
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    tls = WebhookTLS(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    _write(tls.ca, ca.public_bytes(serialization.Encoding.PEM))
    _write(tls.cert, serving.public_bytes(serialization.Encoding.PEM))
    _write(
        tls.key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return tls


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


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)
