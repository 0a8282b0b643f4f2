"""The webhook's serving certificate as values: made, read back from its Secret, and judged due for renewal.

The operator makes its own (runtime/webhook_certs.py writes the Secret, loads the files kopf serves from and puts
the CA into its ValidatingWebhookConfiguration), as Kueue and KEDA do with cert-controller, so that the Helm chart
renders the same bytes every time: no key or certificate material is generated in a template.

A CA (ECDSA P-256, valid CA_DAYS) signs a serving certificate (valid CERT_DAYS) for the webhook Service's DNS names
(and the host of a webhook URL). The serving certificate is renewed when a third of its life is left, when its
names differ from the ones wanted, or on request; the CA is replaced when a third of its own life is left, and
for one serving period both CAs stay in the bundle the API server trusts, so that no request fails while the
configuration and the files catch up. Nothing here reads a clock: `now` is given.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
CERT_DAYS = 365
RENEW_WHEN_LEFT = 1 / 3  # of the validity
BACKDATE = dt.timedelta(minutes=5)  # clocks of the API server and the operator may differ a little
KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")


@dataclass(frozen=True)
class Bundle:
    """What the Secret holds, PEM: the CAs the API server is to trust (newest first), the newest CA's key, and the
    serving certificate and its key."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    def data(self) -> dict[str, str]:
        """The Secret's `data` (base64)."""
        return {k: base64.b64encode(v).decode() for k, v in zip(KEYS, (self.ca_crt, self.ca_key, self.tls_crt, self.tls_key), strict=True)}

    @property
    def ca_bundle(self) -> str:
        """The caBundle of the webhook configuration (base64 of the PEM CAs)."""
        return base64.b64encode(self.ca_crt).decode()


def from_data(data: dict[str, str] | None) -> Bundle | None:
    """The bundle a Secret's `data` holds, or None when a key is missing or a value is not a certificate or key."""
    if not data or any(not data.get(k) for k in KEYS):
        return None
    try:
        raw = [base64.b64decode(data[k], validate=True) for k in KEYS]
        x509.load_pem_x509_certificates(raw[0])
        serialization.load_pem_private_key(raw[1], None)
        x509.load_pem_x509_certificate(raw[2])
        serialization.load_pem_private_key(raw[3], None)
    except (ValueError, TypeError):
        return None
    return Bundle(*raw)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _ca(common_name: str, now: dt.datetime) -> tuple[bytes, bytes]:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _serving(names: list[str], ca_crt: bytes, ca_key: bytes, now: dt.datetime) -> tuple[bytes, bytes]:
    ca = x509.load_pem_x509_certificate(ca_crt)
    signer = serialization.load_pem_private_key(ca_key, None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = _key()
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE).not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue(names: list[str], now: dt.datetime, common_name: str = "vllm-pooling-operator-webhook-ca") -> Bundle:
    """A new CA and a serving certificate for `names` (the first is the subject)."""
    ca_crt, ca_key = _ca(common_name, now)
    return Bundle(ca_crt, ca_key, *_serving(names, ca_crt, ca_key, now))


def _due(cert: x509.Certificate, now: dt.datetime) -> bool:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) * RENEW_WHEN_LEFT


def names_of(bundle: Bundle) -> list[str]:
    """The names (DNS and IP) the serving certificate is for."""
    cert = x509.load_pem_x509_certificate(bundle.tls_crt)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n.value) for n in san]


def renewal(bundle: Bundle | None, names: list[str], now: dt.datetime) -> str | None:
    """Why the serving certificate must be made again now, or None while it serves."""
    if bundle is None:
        return "no certificate yet"
    cert = x509.load_pem_x509_certificate(bundle.tls_crt)
    if sorted(names_of(bundle)) != sorted(names):
        return f"it is for {', '.join(sorted(names_of(bundle)))}, not {', '.join(sorted(names))}"
    newest_ca = x509.load_pem_x509_certificates(bundle.ca_crt)[0]
    if _due(newest_ca, now):
        return f"its CA expires {newest_ca.not_valid_after_utc:%Y-%m-%d}"
    if _due(cert, now):
        return f"it expires {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def renew(bundle: Bundle | None, names: list[str], now: dt.datetime) -> Bundle:
    """A serving certificate for `names`, signed by the bundle's CA while that CA has more than a third of its life
    left; else by a new CA, the old one kept in the bundle (while valid) so that clients holding either trust it."""
    if bundle is None:
        return issue(names, now)
    cas = x509.load_pem_x509_certificates(bundle.ca_crt)
    if not _due(cas[0], now):
        return Bundle(bundle.ca_crt, bundle.ca_key, *_serving(names, bundle.ca_crt, bundle.ca_key, now))
    fresh = issue(names, now, cas[0].subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)  # type: ignore[arg-type]
    kept = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in cas[:1] if c.not_valid_after_utc > now)
    return Bundle(fresh.ca_crt + kept, fresh.ca_key, fresh.tls_crt, fresh.tls_key)


def expires(bundle: Bundle) -> dt.datetime:
    """When the serving certificate expires."""
    return x509.load_pem_x509_certificate(bundle.tls_crt).not_valid_after_utc
