"""PKI for the local control plane: ``write_pki`` writes a CA, the components' serving cert, an admin client
cert, the front-proxy client cert and the service-account key pair into a folder, and ``kubeconfig_dict``/
``write_kubeconfig`` turn them into an admin kubeconfig for a given API server URL.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

SERVICE_CIDR = "10.96.0.0/16"  # its first address (the kubernetes Service) is among the serving cert's SANs


def write_pki(d: Path) -> dict[str, Path]:
    """CA, a serving cert for every component (SANs: loopback and the kubernetes Service names), an admin
    client cert (O=system:masters) and the service-account signing key pair."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    before, after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30)

    def pem_key(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def pem_cert(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vpo-e2e-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, orgs: list[str], sans: list[x509.GeneralName], usages: list[Any]) -> tuple[bytes, bytes]:
        return _leaf(ca, ca_key, cn, orgs, sans, usages, before, after)

    service_ip = next(iter(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]  # fmt: skip
    ips = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"), service_ip]
    sans = [x509.DNSName(n) for n in dns] + [x509.IPAddress(i) for i in ips]
    serving = leaf("vpo-e2e-serving", [], sans, [ExtendedKeyUsageOID.SERVER_AUTH])
    admin = leaf("vpo-e2e-admin", ["system:masters"], [], [ExtendedKeyUsageOID.CLIENT_AUTH])
    # the apiserver's identity towards aggregated APIs; also fills the requestheader CA that the
    # controller-manager and scheduler read for delegated authentication
    front_proxy = leaf("front-proxy-client", [], [], [ExtendedKeyUsageOID.CLIENT_AUTH])
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    files = {
        "ca.crt": pem_cert(ca),
        "ca.key": pem_key(ca_key),
        "serving.crt": serving[0],
        "serving.key": serving[1],
        "admin.crt": admin[0],
        "admin.key": admin[1],
        "front-proxy-client.crt": front_proxy[0],
        "front-proxy-client.key": front_proxy[1],
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_pub,
    }
    paths = {}
    for name, data in files.items():
        p = d / name
        p.write_bytes(data)
        if name.endswith(".key"):
            p.chmod(0o600)
        paths[name] = p
    return paths


def _leaf(ca: Any, ca_key: Any, cn: str, orgs: list[str], sans: list[Any], usages: list[Any],
          before: datetime.datetime, after: datetime.datetime) -> tuple[bytes, bytes]:
    """A leaf certificate signed by ``ca``: (certificate PEM, PKCS8 key PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    b = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = b.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def issue(pki: dict[str, Path], dest: Path, cn: str, dns: list[str], ips: list[str]) -> dict[str, Path]:
    """A certificate from the harness's CA for a server that is also a client (a third-party controller's webhook,
    aggregated API or gRPC peer): ``dest/tls.crt``, ``dest/tls.key`` and the CA as ``dest/ca.crt``, the names
    controller-runtime and KEDA look for in a cert dir."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca = x509.load_pem_x509_certificate(pki["ca.crt"].read_bytes())
    ca_key = serialization.load_pem_private_key(pki["ca.key"].read_bytes(), password=None)
    now = datetime.datetime.now(datetime.UTC)
    sans = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert, key = _leaf(ca, ca_key, cn, [], sans, usages, now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30))
    dest.mkdir(parents=True, exist_ok=True)
    out = {"tls.crt": dest / "tls.crt", "tls.key": dest / "tls.key", "ca.crt": dest / "ca.crt"}
    out["tls.crt"].write_bytes(cert)
    out["tls.key"].write_bytes(key)
    out["tls.key"].chmod(0o600)
    out["ca.crt"].write_bytes(pki["ca.crt"].read_bytes())
    return out


def kubeconfig_dict(server: str, pki: dict[str, Path], name: str = "vpo-e2e") -> dict[str, Any]:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(pki["ca.crt"])}}
        ],
        "users": [
            {
                "name": f"{name}-admin",
                "user": {
                    "client-certificate-data": b64(pki["admin.crt"]),
                    "client-key-data": b64(pki["admin.key"]),
                },
            }
        ],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": f"{name}-admin", "namespace": "default"}}
        ],
        "current-context": name,
    }


def write_kubeconfig(path: Path, server: str, pki: dict[str, Path]) -> None:
    """Write ``kubeconfig_dict(server, pki)`` to ``path`` (mode 0600, replaced atomically)."""
    import yaml

    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig_dict(server, pki), sort_keys=False))
    tmp.chmod(0o600)
    os.replace(tmp, path)
