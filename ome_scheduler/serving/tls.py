"""The serving certificate and TLS policy of the HTTPS endpoint.

Mirrors two parts of ``k8s.io/apiserver``:

* ``pkg/server/secure_serving.go`` (``SecureServingInfo.tlsConfig``): TLS 1.2 at least
  (``--tls-min-version``, default ``VersionTLS12``), cipher suites from ``--tls-cipher-suites``
  in Go's IANA names. kube-scheduler's default list is Go's, which still carries four ECDHE
  CBC-SHA1 suites; this endpoint serves only its AEAD part (:data:`DEFAULT_CIPHER_SUITES`:
  ECDHE key exchange with AES-GCM or ChaCha20-Poly1305; TLS 1.3's three suites are AEAD by
  construction). RSA key exchange, CBC, 3DES and RC4 suites, and TLS 1.0/1.1, are refused as
  flag values (kube accepts them with a warning). TLS renegotiation and compression are off.
* ``pkg/server/dynamiccertificates`` (``DynamicCertKeyPairContent``): with
  ``--tls-cert-file``/``--tls-private-key-file`` the pair is re-read when either file changes
  (checked every :data:`RELOAD_INTERVAL` seconds, and re-read anyway every
  :data:`RESYNC_INTERVAL`, like kube's one-minute resync); new connections get the new pair,
  open ones keep theirs. A pair that does not load (a half-written rotation, a key that does
  not match) is logged and the previous one stays in service.

Without the two files a self-signed ECDSA certificate for ``localhost``/``127.0.0.1`` is
generated at start-up and kept in memory (loaded through an anonymous ``memfd``; nothing is
written to disk, which suits a read-only root filesystem).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ome_scheduler.logs import get_logger

log = get_logger()

RELOAD_INTERVAL = 1.0
"""Seconds between checks of the certificate files' metadata (size, mtime, inode)."""
RESYNC_INTERVAL = 60.0
"""Seconds after which the files are re-read even if their metadata did not change."""

TLS12_AEAD_SUITES: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
"""Go/IANA name -> OpenSSL name of every TLS 1.2 suite served, in Go's preference order."""
_ALIASES = {
    # Go's older spellings, still accepted by component-base's --tls-cipher-suites.
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
"""TLS 1.3 suites: all AEAD and always enabled; naming them in --tls-cipher-suites changes nothing
(as in Go, which does not make TLS 1.3 suites configurable)."""
DEFAULT_CIPHER_SUITES = tuple(TLS12_AEAD_SUITES)
"""The TLS 1.2 suites served when --tls-cipher-suites is not given: all of :data:`TLS12_AEAD_SUITES`."""
TLS_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}
"""--tls-min-version values served (component-base's names)."""


def parse_min_version(value: str | None) -> ssl.TLSVersion:
    """``--tls-min-version`` as an ``ssl.TLSVersion`` (None: TLS 1.2).

    Raises:
        ValueError: naming the flag, for TLS 1.0/1.1 and unknown names.
    """
    if not value:
        return ssl.TLSVersion.TLSv1_2
    if value in TLS_VERSIONS:
        return TLS_VERSIONS[value]
    if value in ("VersionTLS10", "VersionTLS11"):
        raise ValueError(f'invalid argument "{value}" for "--tls-min-version" flag: TLS 1.0 and 1.1 are not served')
    raise ValueError(
        f'invalid argument "{value}" for "--tls-min-version" flag: supported values: {", ".join(TLS_VERSIONS)}'
    )


def parse_cipher_suites(names: Sequence[str] | None) -> tuple[str, ...]:
    """``--tls-cipher-suites`` (Go/IANA names) as OpenSSL names of the TLS 1.2 suites to serve.

    None or empty gives :data:`DEFAULT_CIPHER_SUITES`. TLS 1.3 names are accepted and ignored.

    Raises:
        ValueError: naming the flag and the suite, for a suite that is not ECDHE with an AEAD
            cipher (RSA key exchange, CBC, 3DES, RC4, unknown names), or when only TLS 1.3
            names are given.
    """
    if not names:
        return tuple(TLS12_AEAD_SUITES[n] for n in DEFAULT_CIPHER_SUITES)
    out: list[str] = []
    for raw in names:
        name = _ALIASES.get(raw.strip(), raw.strip())
        if name in TLS13_SUITES:
            continue
        if name not in TLS12_AEAD_SUITES:
            raise ValueError(
                f'invalid argument "{raw}" for "--tls-cipher-suites" flag: not served; allowed values: '
                + ", ".join((*TLS12_AEAD_SUITES, *TLS13_SUITES))
                + " (ECDHE key exchange with an AEAD cipher only)"
            )
        if TLS12_AEAD_SUITES[name] not in out:
            out.append(TLS12_AEAD_SUITES[name])
    if not out:
        raise ValueError(
            'invalid argument for "--tls-cipher-suites" flag: name at least one TLS 1.2 suite '
            f"({', '.join(TLS12_AEAD_SUITES)})"
        )
    return tuple(out)


@dataclass(frozen=True)
class TLSPolicy:
    """Protocol versions and TLS 1.2 suites (OpenSSL names) of every serving context."""

    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    cipher_suites: tuple[str, ...] = tuple(TLS12_AEAD_SUITES.values())

    @classmethod
    def from_flags(cls, min_version: str | None, cipher_suites: Sequence[str] | None) -> TLSPolicy:
        """The policy of ``--tls-min-version`` and ``--tls-cipher-suites``.

        Raises:
            ValueError: a flag value is not served (see :func:`parse_min_version`,
                :func:`parse_cipher_suites`).
        """
        return cls(parse_min_version(min_version), parse_cipher_suites(cipher_suites))

    def context(self) -> ssl.SSLContext:
        """A server context with this policy and no certificate yet."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        ctx.maximum_version = ssl.TLSVersion.MAXIMUM_SUPPORTED
        ctx.set_ciphers(":".join(self.cipher_suites))
        # Renegotiation lets one client make the server redo handshakes at will; compression
        # leaks secrets (CRIME). OpenSSL 3 defaults to no compression, set it anyway.
        ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
        # No session tickets (TLS 1.2 and 1.3): probes and scrapers do not resume sessions,
        # and issuing tickets costs a third of each handshake's CPU.
        ctx.options |= ssl.OP_NO_TICKET
        ctx.num_tickets = 0
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


def self_signed_pem(host: str = "localhost") -> tuple[bytes, bytes]:
    """A self-signed serving certificate and key (PEM), valid one year, SANs localhost/127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(time.time())}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(host), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _load_pem_pair(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load a PEM certificate chain and key given as bytes into ``ctx``.

    ``load_cert_chain`` only reads paths: an anonymous in-memory file gives it one without
    writing the private key to disk (and works on a read-only root filesystem). Loading the
    bytes already read (rather than the paths again) also means the pair checked is the pair
    served, even while a rotation rewrites the files.

    Raises:
        ssl.SSLError: not a PEM certificate and its matching private key.
    """
    fd = os.memfd_create("ome-scheduler-serving", os.MFD_CLOEXEC)
    try:
        os.write(fd, cert.rstrip(b"\n") + b"\n" + key)
        # A password callback, so an encrypted key fails instead of prompting on the terminal.
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=lambda: b"")
    finally:
        os.close(fd)


def _stat_key(path: str) -> tuple[int, int, int, int] | None:
    """What changes when a file is rewritten or its symlink swapped (Secret volumes swap ``..data``)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class DynamicServingCert:
    """The serving certificate and the TLS context built on it (``dynamiccertificates``).

    :attr:`context` is the context for the next connection. With files, :meth:`check` (called
    by :meth:`run` every :data:`RELOAD_INTERVAL` seconds) installs a new context when the
    files' content changed and loads; :attr:`generation` counts installed contexts.

    Raises (constructor):
        ValueError: only one of the files was given, a file is missing, or the pair does not
            load; the message names the flag or the files.
    """

    def __init__(self, cert_file: str | None, key_file: str | None, policy: TLSPolicy | None = None) -> None:
        self.policy = policy or TLSPolicy()
        self.cert_file = cert_file or None
        self.key_file = key_file or None
        self.generation = 0
        self._content: tuple[bytes, bytes] | None = None
        self._stat: tuple[object, object] = (None, None)
        self._read_at = 0.0
        self._last_error = ""
        if self.cert_file or self.key_file:
            # Checked up front so the error names the flag; ssl's own errors say neither which
            # file nor which flag.
            if not (self.cert_file and self.key_file):
                raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
            for path, flag in ((self.cert_file, "--tls-cert-file"), (self.key_file, "--tls-private-key-file")):
                if not os.path.isfile(path):
                    raise ValueError(f"{flag} {path}: no such file")
            err = self._reload()
            if err:
                raise ValueError(err)
        else:
            cert, key = self_signed_pem()
            ctx = self.policy.context()
            _load_pem_pair(ctx, cert, key)
            self.context = ctx
            self.generation = 1

    @property
    def dynamic(self) -> bool:
        """True when the pair comes from files (and is reloaded)."""
        return self.cert_file is not None

    def _reload(self) -> str:
        """Read both files; install a new context if their content changed. Returns an error or ''."""
        assert self.cert_file and self.key_file
        self._stat = (_stat_key(self.cert_file), _stat_key(self.key_file))
        self._read_at = time.monotonic()
        try:
            with open(self.cert_file, "rb") as f:
                cert = f.read()
            with open(self.key_file, "rb") as f:
                key = f.read()
        except OSError as exc:
            return f"cannot read {exc.filename}: {exc.strerror}"
        if self._content == (cert, key):
            return ""
        ctx = self.policy.context()
        try:
            _load_pem_pair(ctx, cert, key)
        except ssl.SSLError as exc:
            return (
                f"{self.cert_file} and {self.key_file} are not a PEM certificate and its private key "
                f"({exc.reason or exc})"
            )
        self._content = (cert, key)
        self.context = ctx
        self.generation += 1
        return ""

    def check(self) -> bool:
        """Reload when the files changed (or :data:`RESYNC_INTERVAL` passed); True when a new
        pair was installed. A pair that does not load is logged once and the old one kept."""
        if not self.dynamic:
            return False
        assert self.cert_file and self.key_file
        stat = (_stat_key(self.cert_file), _stat_key(self.key_file))
        if stat == self._stat and time.monotonic() - self._read_at < RESYNC_INTERVAL:
            return False
        before = self.generation
        err = self._reload()
        if err:
            if err != self._last_error:
                log.error("serving certificate not reloaded; keeping the previous one", error=err)
            self._last_error = err
            return False
        self._last_error = ""
        if self.generation != before:
            log.info("serving certificate reloaded", v=0, certFile=self.cert_file, keyFile=self.key_file)
            return True
        return False

    async def run(self, stop: anyio.Event) -> None:
        """Call :meth:`check` every :data:`RELOAD_INTERVAL` seconds until ``stop`` is set."""
        if not self.dynamic:
            return
        while not stop.is_set():
            with anyio.move_on_after(RELOAD_INTERVAL):
                await stop.wait()
            self.check()
