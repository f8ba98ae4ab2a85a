"""HTTPS on ``--bind-address:--secure-port``: ``/healthz``, ``/livez``, ``/readyz`` and ``/metrics``.

Mirrors kube-scheduler's secure serving (``cmd/kube-scheduler/app/server.go`` and
``k8s.io/apiserver`` delegated authn/authz). The parts:

* :mod:`ome_scheduler.serving.secure_serving`: HTTP/1.1 over TLS with timeouts, a connection cap and
  request size limits; :mod:`ome_scheduler.serving.tls`: TLS 1.2+ with AEAD suites only, and the
  serving certificate, reloaded when its files change (self-signed and in memory without
  ``--tls-cert-file``/``--tls-private-key-file``);
* :mod:`ome_scheduler.serving.delegated_auth`: TokenReview with anonymous enabled (no bearer token is
  ``system:anonymous``, group ``system:unauthenticated``; a token the API server does not
  accept is answered 401, on every path), SubjectAccessReview for non-resource paths (verb =
  lowercase method), both cached 10 s for either outcome, one review in flight per key, and
  rate-limited (429 beyond the limits);
* here, :class:`SecureApp`: authorization is skipped for ``--authorization-always-allow-paths``
  (default ``/healthz``, ``/readyz``, ``/livez``) and the ``system:masters`` group; denied is
  403; ``/healthz`` and ``/livez`` include the leader-election watchdog (fails when this leader
  has not renewed its lease for lease duration + 20 s) and the event loop's health (fails for
  10 s after the loop stalled, ``ome_scheduler/app/watchdog.py``); ``/readyz`` fails until the
  informers have synced and while shutting down.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

import anyio
import msgspec
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ome_scheduler.kube.client import TRANSPORT_ERRORS, ApiError, KubeClient
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.serving.delegated_auth import ANONYMOUS, RateLimited, ReviewLimits, Reviews
from ome_scheduler.serving.secure_serving import HttpsServer, Request, Response, ServingLimits, connection_cap
from ome_scheduler.serving.tls import DynamicServingCert

log = get_logger()
_TEXT = "text/plain; charset=utf-8"
_UNAUTHORIZED = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"Unauthorized","reason":"Unauthorized","code":401}\n'
)
_TOO_MANY = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"Too many requests, please try again later.","reason":"TooManyRequests",'
    b'"details":{"retryAfterSeconds":1},"code":429}\n'
)


class HealthState:
    """What the health endpoints report; set by the app."""

    def __init__(self) -> None:
        self.synced = False
        self.shutting_down = False
        self.leader_ok: Callable[[], bool] = lambda: True
        self.loop_problem: Callable[[], str | None] = lambda: None
        """None while the event loop is healthy, else the stall it had (``LoopWatchdog.problem``)."""


class SecureApp:
    """The endpoints behind authentication and authorization: ``await app(request)`` answers
    one :class:`~ome_scheduler.serving.secure_serving.Request`."""

    def __init__(
        self, reviews: Reviews, registry: CollectorRegistry, health: HealthState, always_allow: Sequence[str]
    ) -> None:
        self.reviews = reviews
        self.registry = registry
        self.health = health
        self.always_allow = set(always_allow)

    async def __call__(self, request: Request) -> Response:
        """Authenticate, authorize, serve; review failures fail closed (500), a spent review
        budget is 429."""
        try:
            return await self._handle(request)
        except RateLimited as exc:
            return Response(429, "application/json", _TOO_MANY, (("retry-after", str(exc.retry_after)),))
        # Failing closed: when the API server cannot review the request, nothing is served.
        except (*TRANSPORT_ERRORS, ApiError, OSError, msgspec.DecodeError) as exc:
            log.error("delegated authentication or authorization failed", path=request.path, error=str(exc))
            return Response(500, _TEXT, b"Internal Server Error: authorization check failed\n")

    async def _handle(self, request: Request) -> Response:
        """One request: authenticate, authorize, then serve."""
        path, method = request.path, request.method
        user = ANONYMOUS
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            token = auth[7:].strip()
            if token:
                found = await self.reviews.authenticate(token, request.client)
                # A token that fails is 401 even on always-allowed paths, as with kube's
                # delegated authentication: only a request with no token is anonymous.
                if found is None:
                    return Response(401, "application/json", _UNAUTHORIZED)
                user = found
        # system:masters skips the review, as kube's delegated authorization (alwaysAllowGroups).
        if path not in self.always_allow and "system:masters" not in user.groups:
            if not await self.reviews.authorize(user, path, method.lower(), request.client):
                msg = f'forbidden: User "{user.username}" cannot {method.lower()} path "{path}"'
                return Response(403, _TEXT, msg.encode() + b"\n")
        if path in ("/healthz", "/livez"):
            # Liveness includes the lease watchdog, so the kubelet restarts a leader stuck
            # without renewing, and the loop's health, so it restarts a loop that keeps stalling.
            if not self.health.leader_ok():
                return Response(
                    500, _TEXT, b"[+]ping ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n"
                )
            stall = self.health.loop_problem()
            if stall is not None:
                log.info("liveness check failed", v=2, path=path, reason=stall)
                body = b"[+]ping ok\n[-]event-loop failed: reason withheld\nhealthz check failed\n"
                return Response(500, _TEXT, body)
            return Response(200, _TEXT, b"ok")
        if path == "/readyz":
            if self.health.shutting_down:
                return Response(500, _TEXT, b"[-]shutdown failed: reason withheld\nreadyz check failed\n")
            if not self.health.synced:
                return Response(500, _TEXT, b"[-]sched-handler-sync failed: reason withheld\nreadyz check failed\n")
            return Response(200, _TEXT, b"ok")
        if path == "/metrics":
            encoder, ctype = choose_encoder(request.headers.get("accept", ""))
            return Response(200, ctype, encoder(self.registry))
        return Response(404, _TEXT, b"404 page not found\n")


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


REVIEW_CONNECTIONS = 8
"""Connections (and requests in flight) of the reviews' own API client."""


async def serve(
    app: SecureApp,
    sock: socket.socket,
    certs: DynamicServingCert,
    stop: anyio.Event,
    limits: ServingLimits | None = None,
    metrics: Metrics | None = None,
) -> HttpsServer:
    """Serve ``app`` over TLS on the bound ``sock`` until ``stop`` is set, reloading ``certs``
    when their files change; the socket is closed on return, and the server (with its
    connection counts) returned."""
    server = HttpsServer(app, lambda: certs.context, limits, metrics)
    async with anyio.create_task_group() as tg:
        tg.start_soon(certs.run, stop)
        await server.serve(sock, stop)
    return server


class SecureEndpoint:
    """The HTTPS endpoint of one process, wired as the scheduler runs it.

    The reviews go through ``client.derive(...)``: a client of their own with
    :data:`REVIEW_CONNECTIONS` connections and the review rate limit, never ``client``'s pool,
    rate limiter or priority gate, so Bindings and Lease renewals sent through ``client`` do
    not wait behind them. ``limits`` defaults to :class:`ServingLimits` with the connection
    cap sized below the descriptor limit (:func:`connection_cap`). Call :meth:`close` when done.
    """

    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        health: HealthState,
        always_allow: Sequence[str],
        review_limits: ReviewLimits | None = None,
        limits: ServingLimits | None = None,
    ) -> None:
        rl = review_limits or ReviewLimits()
        self.review_client = client.derive(
            qps=rl.qps, burst=rl.burst, max_in_flight=REVIEW_CONNECTIONS, max_connections=REVIEW_CONNECTIONS
        )
        self.reviews = Reviews(self.review_client, rl, metrics)
        self.app = SecureApp(self.reviews, metrics.registry, health, always_allow)
        self.metrics = metrics
        self.limits = limits or ServingLimits(max_connections=connection_cap(ServingLimits.max_connections))
        self.server: HttpsServer | None = None

    async def serve(self, sock: socket.socket, certs: DynamicServingCert, stop: anyio.Event) -> None:
        """Serve until ``stop`` is set (see :func:`serve`)."""
        self.server = HttpsServer(self.app, lambda: certs.context, self.limits, self.metrics)
        async with anyio.create_task_group() as tg:
            tg.start_soon(certs.run, stop)
            await self.server.serve(sock, stop)

    async def close(self) -> None:
        """Cancel the reviews in flight and close their client."""
        self.reviews.cancel()
        await self.review_client.close()
