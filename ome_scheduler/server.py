"""HTTPS on ``--bind-address:--secure-port``: ``/healthz``, ``/livez``, ``/readyz`` and ``/metrics``.

Mirrors kube-scheduler's secure serving (``cmd/kube-scheduler/app/server.go`` and
``k8s.io/apiserver`` delegated authn/authz):

* TLS only. Without ``--tls-cert-file``/``--tls-private-key-file`` a self-signed ECDSA
  certificate for ``localhost``/``127.0.0.1`` is generated at start-up and kept in memory
  (loaded through an anonymous ``memfd``; nothing is written to disk, which suits a
  read-only root filesystem).
* Authentication by TokenReview with anonymous enabled: no bearer token is
  ``system:anonymous`` (group ``system:unauthenticated``); a token the API server does not
  accept is answered 401, on every path.
* Authorization by SubjectAccessReview (non-resource path, verb = lowercase method), except
  for ``--authorization-always-allow-paths`` (default ``/healthz``, ``/readyz``, ``/livez``)
  and the ``system:masters`` group; denied is 403.
* Reviews are cached for 10 s, keyed by a SHA-256 of the token; the cache is bounded.
* ``/healthz`` and ``/livez`` include the leader-election watchdog (fails when this leader
  has not renewed its lease for lease duration + 20 s); ``/readyz`` fails until the informers
  have synced and while shutting down.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ome_scheduler.kube.client import TRANSPORT_ERRORS, ApiError, KubeClient
from ome_scheduler.logs import get_logger

log = get_logger()
CACHE_TTL = 10.0
"""Seconds a TokenReview or SubjectAccessReview answer is reused (kube's delegated authn/authz default)."""
CACHE_MAX = 4096
"""Entries per review cache; the least recently written go first, so random tokens cannot grow it."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


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


def server_ssl_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext:
    """The serving TLS context: the given files, or an in-memory self-signed pair.

    Raises:
        ValueError: only one of the two files was given.
        OSError / ssl.SSLError: unreadable or mismatching files.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    if cert_file or key_file:
        # Checked up front so the error names the flag; ssl's own errors say neither which
        # file nor which flag.
        if not (cert_file and key_file):
            raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
        for path, flag in ((cert_file, "--tls-cert-file"), (key_file, "--tls-private-key-file")):
            if not os.path.isfile(path):
                raise ValueError(f"{flag} {path}: no such file")
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as exc:
            raise ValueError(
                f"{cert_file} and {key_file} are not a PEM certificate and its private key ({exc.reason or exc})"
            ) from None
        return ctx
    cert, key = self_signed_pem()
    # load_cert_chain only reads paths: an anonymous in-memory file gives it one without
    # writing the private key to disk (and works on a read-only root filesystem).
    fd = os.memfd_create("ome-scheduler-serving", os.MFD_CLOEXEC)
    try:
        os.write(fd, cert + key)
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return ctx


class _TTLCache:
    """A small LRU-by-write cache whose entries expire after :data:`CACHE_TTL` seconds."""

    def __init__(self) -> None:
        self._d: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, key: str) -> Any | None:
        v = self._d.get(key)
        if v is None or v[0] < time.monotonic():
            self._d.pop(key, None)
            return None
        return v[1]

    def put(self, key: str, value: Any) -> None:
        self._d[key] = (time.monotonic() + CACHE_TTL, value)
        self._d.move_to_end(key)
        while len(self._d) > CACHE_MAX:
            self._d.popitem(last=False)


class UserInfo(msgspec.Struct):
    """``authenticationv1.UserInfo``: who a TokenReview says the caller is."""

    username: str = ""
    uid: str = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}


class _TRStatus(msgspec.Struct):
    authenticated: bool = False
    user: UserInfo = msgspec.field(default_factory=UserInfo)
    error: str = ""


class _TokenReview(msgspec.Struct):
    status: _TRStatus = msgspec.field(default_factory=_TRStatus)


class _SARStatus(msgspec.Struct):
    allowed: bool = False
    reason: str = ""


class _SAR(msgspec.Struct):
    status: _SARStatus = msgspec.field(default_factory=_SARStatus)


ANONYMOUS = UserInfo(username="system:anonymous", groups=["system:unauthenticated"])


class Reviews:
    """Delegated authentication (TokenReview) and authorization (SubjectAccessReview), cached."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._authn = _TTLCache()
        self._authz = _TTLCache()

    async def authenticate(self, token: str) -> UserInfo | None:
        """The token's user, or None when the API server does not authenticate it."""
        key = hashlib.sha256(token.encode()).hexdigest()
        hit = self._authn.get(key)
        # Rejections are cached too (as False), so a client retrying a bad token does not cost
        # a TokenReview per request.
        if hit is not None:
            return hit if isinstance(hit, UserInfo) else None
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        raw = await self.client.post("/apis/authentication.k8s.io/v1/tokenreviews", body, retries=1, timeout=10.0)
        tr = msgspec.json.decode(raw, type=_TokenReview)
        result: UserInfo | bool = tr.status.user if tr.status.authenticated else False
        self._authn.put(key, result)
        return result if isinstance(result, UserInfo) else None

    async def authorize(self, user: UserInfo, path: str, verb: str) -> bool:
        """Whether ``user`` may ``verb`` (``get``...) the non-resource ``path`` (a SubjectAccessReview).

        Raises:
            ApiError / transport errors: the review could not be made (the caller answers 500).
        """
        # Keyed by user, uid, groups, path and verb; NUL separators keep the fields apart.
        key = hashlib.sha256(
            f"{user.username}\0{user.uid}\0{','.join(user.groups)}\0{path}\0{verb}".encode()
        ).hexdigest()
        hit = self._authz.get(key)
        if hit is not None:
            return bool(hit)
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        raw = await self.client.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews", body, retries=1, timeout=10.0
        )
        allowed = msgspec.json.decode(raw, type=_SAR).status.allowed
        self._authz.put(key, allowed)
        return allowed


class HealthState:
    """What the health endpoints report; set by the app."""

    def __init__(self) -> None:
        self.synced = False
        self.shutting_down = False
        self.leader_ok: Callable[[], bool] = lambda: True


class SecureApp:
    """A raw ASGI application for the five endpoints."""

    def __init__(
        self, reviews: Reviews, registry: CollectorRegistry, health: HealthState, always_allow: Sequence[str]
    ) -> None:
        self.reviews = reviews
        self.registry = registry
        self.health = health
        self.always_allow = set(always_allow)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point: answer lifespan messages, and one response per HTTP request."""
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            status, ctype, body = await self._handle(path, method, headers)
        # Failing closed: when the API server cannot review the request, nothing is served.
        except (*TRANSPORT_ERRORS, ApiError, OSError, msgspec.DecodeError) as exc:
            log.error("delegated authentication or authorization failed", path=path, error=str(exc))
            status, ctype, body = (
                500,
                "text/plain; charset=utf-8",
                b"Internal Server Error: authorization check failed\n",
            )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", ctype.encode()),
                    (b"cache-control", b"no-cache, private"),
                    (b"x-content-type-options", b"nosniff"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _handle(self, path: str, method: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request: authenticate, authorize, then serve."""
        text = "text/plain; charset=utf-8"
        user = ANONYMOUS
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
            if token:
                found = await self.reviews.authenticate(token)
                # A token that fails is 401 even on always-allowed paths, as with kube's
                # delegated authentication: only a request with no token is anonymous.
                if found is None:
                    return (
                        401,
                        "application/json",
                        (
                            b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                            b'"message":"Unauthorized","reason":"Unauthorized","code":401}\n'
                        ),
                    )
                user = found
        # system:masters skips the review, as kube's delegated authorization (alwaysAllowGroups).
        if path not in self.always_allow and "system:masters" not in user.groups:
            if not await self.reviews.authorize(user, path, method.lower()):
                msg = f'forbidden: User "{user.username}" cannot {method.lower()} path "{path}"'
                return 403, text, msg.encode() + b"\n"
        if path in ("/healthz", "/livez"):
            # Liveness includes the lease watchdog, so the kubelet restarts a leader stuck
            # without renewing.
            if self.health.leader_ok():
                return 200, text, b"ok"
            return 500, text, b"[+]ping ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n"
        if path == "/readyz":
            if self.health.shutting_down:
                return 500, text, b"[-]shutdown failed: reason withheld\nreadyz check failed\n"
            if not self.health.synced:
                return 500, text, b"[-]sched-handler-sync failed: reason withheld\nreadyz check failed\n"
            return 200, text, b"ok"
        if path == "/metrics":
            encoder, ctype = choose_encoder(headers.get("accept", ""))
            return 200, ctype, encoder(self.registry)
        return 404, text, b"404 page not found\n"


def listen_socket(bind_address: str, port: int) -> socket.socket:
    """Bind the serving TCP socket, early, so a bad address or a busy port fails at start-up.

    Raises:
        OSError: the address does not resolve (``socket.gaierror``), is not local, or the port
            is taken.
    """
    family = socket.AF_INET6 if ":" in bind_address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR: a restarted scheduler can rebind while old connections sit in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((bind_address, port))
    except OSError:
        sock.close()
        raise
    return sock


async def serve(app: SecureApp, sock: socket.socket, ssl_context: ssl.SSLContext, stop: anyio.Event) -> None:
    """Serve ``app`` over TLS on the bound ``sock`` until ``stop`` is set (hypercorn; no signal
    handlers installed)."""
    from hypercorn.asyncio import serve as hserve
    from hypercorn.config import Config, Sockets

    # Hypercorn would build its own TLS context and sockets from file paths and bind strings;
    # overriding these hands it the context and the socket made at start-up instead.
    class _Cfg(Config):
        def create_ssl_context(self) -> ssl.SSLContext:
            return ssl_context

        @property
        def ssl_enabled(self) -> bool:
            return True

        def create_sockets(self) -> Sockets:
            return Sockets([sock], [], [])

    cfg = _Cfg()
    cfg.accesslog = None
    cfg.errorlog = None
    cfg.graceful_timeout = 2.0
    await hserve(app, cfg, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
