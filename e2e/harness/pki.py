"""The local control plane's PKI: a CA, leaf certificates for every component, and kubeconfigs.

``write_pki`` writes a fresh set of keys and certificates into a directory (the cluster's
``<state_dir>/pki``); ``write_client_kubeconfig`` and ``kubeconfig_dict`` build the kubeconfigs
that the admin user, the components and token users authenticate with; ``webhook_pki`` makes the
CA and serving certificate of a controller's admission webhook (the LeaderWorkerSet controller's).
Nothing here starts a process or talks to the API server. Keys are EC P-256 (the ServiceAccount
signing key and webhook keys are RSA 2048); certificates are valid for 365 days, back-dated one
hour against clock skew.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)

#: Client identities: file name -> (CN, O). kwok uses the admin identity.
CLIENT_IDENTITIES: Final[Mapping[str, tuple[str, tuple[str, ...]]]] = {
    "admin": ("admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
}

#: DNS SANs of the apiserver's serving certificate (with IP SANs 127.0.0.1 and 10.0.0.1).
APISERVER_DNS_NAMES: Final = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


_PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class _KeyPair:
    cert: x509.Certificate
    key: _PrivateKey


def _name(cn: str, orgs: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, key: _PrivateKey, *, ca: bool) -> x509.CertificateBuilder:
    """The fields a CA and a leaf share: names, key, serial, validity, BasicConstraints, KeyUsage.

    A CA may sign certificates and CRLs; a leaf only makes digital signatures.
    """
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


def _new_key(kind: str) -> _PrivateKey:
    """A fresh private key: ``ec`` (P-256) or ``rsa`` (2048 bits)."""
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _make_ca(cn: str, *, key_kind: str = "ec", orgs: Sequence[str] = (), dns: Sequence[str] = ()) -> _KeyPair:
    key = _new_key(key_kind)
    builder = _builder(_name(cn, orgs), _name(cn, orgs), key, ca=True).add_extension(
        x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
    )
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    return _KeyPair(builder.sign(key, hashes.SHA256()), key)


def _make_leaf(
    ca: _KeyPair,
    cn: str,
    *,
    orgs: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    key_kind: str = "ec",
) -> _KeyPair:
    key = _new_key(key_kind)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        _builder(_name(cn, orgs), ca.cert.subject, key, ca=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def _key_pem(key: _PrivateKey) -> bytes:
    """``key`` as unencrypted TraditionalOpenSSL PEM (PKCS#1 for RSA, SEC 1 for EC)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _write_key(path: Path, key: _PrivateKey) -> None:
    """Write ``key`` as unencrypted TraditionalOpenSSL PEM, readable by the owner only."""
    path.write_bytes(_key_pem(key))
    path.chmod(0o600)


def _write_pair(pki: Path, name: str, pair: _KeyPair) -> None:
    (pki / f"{name}.crt").write_bytes(pair.cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki / f"{name}.key", pair.key)


def write_pki(pki: Path) -> None:
    """Write a fresh PKI into ``pki``.

    Files: ``ca.{crt,key}`` (cluster CA, also KCM's CSR signer); ``apiserver.{crt,key}`` (serving,
    SANs 127.0.0.1, localhost, kubernetes[.default[.svc[.cluster.local]]], 10.0.0.1);
    ``<client>.{crt,key}`` for admin (O=system:masters), kube-controller-manager and kube-scheduler;
    ``front-proxy-ca.crt`` and ``front-proxy-client.{crt,key}`` (request-header auth);
    ``sa.key`` (RSA 2048, TraditionalOpenSSL PEM) and ``sa.pub``. Keys are EC P-256 except sa.key.
    Certificates are valid for 365 days.
    """
    pki.mkdir(parents=True, exist_ok=True)
    ca = _make_ca("ome-local-ca")
    _write_pair(pki, "ca", ca)
    apiserver = _make_leaf(ca, "kube-apiserver", server=True, dns=APISERVER_DNS_NAMES, ips=("127.0.0.1", "10.0.0.1"))
    _write_pair(pki, "apiserver", apiserver)
    for fname, (cn, orgs) in CLIENT_IDENTITIES.items():
        _write_pair(pki, fname, _make_leaf(ca, cn, orgs=orgs, client=True))
    front_ca = _make_ca("ome-local-front-proxy-ca")
    _write_pair(pki, "front-proxy-ca", front_ca)
    _write_pair(pki, "front-proxy-client", _make_leaf(front_ca, "front-proxy-client", client=True))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki / "sa.key", sa)
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def webhook_pki(ca_name: str, ca_org: str, dns: Sequence[str], ips: Sequence[str]) -> dict[str, bytes]:
    """A webhook's CA and serving certificate in the layout of a cert-controller rotator's Secret.

    Returns PEM bytes under the Secret's keys: ``ca.crt`` and ``ca.key`` (a CA whose subject is
    ``O=<ca_org>, CN=<ca_name>`` and whose one SAN is ``DNS:<ca_name>``: the rotator verifies the
    CA against that name, and parses its key as PKCS#1, hence RSA), ``tls.crt`` and ``tls.key``
    (a server certificate the CA signed for ``dns`` and ``ips``, CN the first DNS name).
    """
    ca = _make_ca(ca_name, key_kind="rsa", orgs=(ca_org,), dns=(ca_name,))
    leaf = _make_leaf(ca, dns[0], server=True, dns=dns, ips=ips, key_kind="rsa")
    return {
        "ca.crt": ca.cert.public_bytes(serialization.Encoding.PEM),
        "ca.key": _key_pem(ca.key),
        "tls.crt": leaf.cert.public_bytes(serialization.Encoding.PEM),
        "tls.key": _key_pem(leaf.key),
    }


def kubeconfig_dict(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict[str, Any]:
    """Return a one-context kubeconfig (named ``ome-local``) with base64-embedded credentials."""

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ome-local", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "ome-local", "context": {"cluster": "ome-local", "user": user}}],
        "current-context": "ome-local",
        "preferences": {},
    }


def write_kubeconfig(path: Path, cfg: Mapping[str, Any]) -> Path:
    """Write the kubeconfig ``cfg`` as YAML at ``path``, readable by the owner only; return ``path``."""
    path.write_text(yaml.safe_dump(dict(cfg), sort_keys=False))
    path.chmod(0o600)
    return path


def write_client_kubeconfig(path: Path, server: str, pki: Path, ident: str) -> Path:
    """Write a kubeconfig at ``path`` for the client identity ``ident`` (a key of CLIENT_IDENTITIES).

    It trusts ``<pki>/ca.crt`` for ``server`` and authenticates with ``<pki>/<ident>.{crt,key}``; the
    user is named after the certificate's CN. Returns ``path``; raises KeyError for an unknown identity.
    """
    user = CLIENT_IDENTITIES[ident][0]
    cfg = kubeconfig_dict(
        server,
        (pki / "ca.crt").read_bytes(),
        (pki / f"{ident}.crt").read_bytes(),
        (pki / f"{ident}.key").read_bytes(),
        user,
    )
    return write_kubeconfig(path, cfg)


def write_token_kubeconfig(path: Path, server: str, ca_file: Path, token: str) -> Path:
    """Write a kubeconfig at ``path`` that trusts ``ca_file`` and sends a bearer ``token``; return ``path``."""
    cfg = kubeconfig_dict(server, ca_file.read_bytes(), b"", b"", "token-user")
    cfg["users"] = [{"name": "token-user", "user": {"token": token}}]
    return write_kubeconfig(path, cfg)


def admin_ssl_context(pki: Path) -> ssl.SSLContext:
    """A client TLS context that trusts ``<pki>/ca.crt`` and presents the admin certificate."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx
