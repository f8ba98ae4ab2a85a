"""HTTP/1.1 over TLS with bounded time, memory and descriptors per client.

Mirrors ``k8s.io/apiserver/pkg/server/secure_serving.go`` (``SecureServingInfo.Serve``),
whose ``http.Server`` sets ``ReadHeaderTimeout`` 32 s, ``IdleTimeout`` 90 s,
``MaxHeaderBytes`` 1 MiB and TCP keep-alive every 3 minutes, and counts TLS handshake
errors (``apiserver_tls_handshake_errors_total``, logged at ``--v=5``). A Go server also
leans on cheap goroutines and on Go raising the descriptor limit to its hard maximum; a
Python process pays for each open connection, so this server adds what Go does not need
(:class:`ServingLimits`):

* a **connection cap** shared fairly between client IPs: at the cap, a client holding its
  share already is refused before any TLS work, and any other client's new connection
  displaces the connection that has waited longest without a request being answered (in its
  TLS handshake, reading a request, or idle between requests) among those of clients above
  their share; a connection whose request is being answered is never displaced. Slow or
  idle clients therefore cannot lock out a kubelet probe, reconnecting in a loop costs them
  an accept and a close rather than a handshake, and the process never runs out of
  descriptors (the cap stays below ``RLIMIT_NOFILE``, see :func:`connection_cap`);
* **deadlines per stage**, none of them reset by a trickle of bytes: the TLS handshake
  (10 s), the request head and body (32 s from the handshake's end, or from the first byte
  on a kept-alive connection; kube's ``ReadHeaderTimeout``), the idle time between requests
  (90 s, ``IdleTimeout``), and the answer including writing it out (60 s);
* **sizes**: a request head (request line and headers) above 32 KiB is answered 431, a body
  above 64 KiB 413 (none of the endpoints reads a body); kube allows 1 MiB of headers, which
  at the cap would be a GiB here. One request is read at a time per connection; pipelined
  bytes beyond one more request close the connection.

TLS handshakes are paced: at most :data:`HANDSHAKES_PER_TICK` handshake steps per
event-loop iteration, the waiting ones newest first, so a flood of new connections costs the
loop a bounded slice per iteration instead of one long stall.

HTTP parsing is h11's; TLS runs on ``ssl.SSLObject`` over memory BIOs inside one
``asyncio.Protocol`` per connection, so a connection in its handshake is counted and can
be displaced like any other (asyncio's own TLS transport hides it until the handshake ends
and keeps a 256 KiB buffer per connection).
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import enum
import http
import resource
import socket
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import h11

from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()

BACKLOG = 4096
"""``listen(2)`` backlog; the kernel caps it at ``net.core.somaxconn`` (Go passes that value).
A full backlog drops SYNs, and a dropped SYN costs a client a 1 s retransmission."""
ACCEPTS_PER_TICK = 64
"""Connections accepted per event-loop iteration at most; the rest wait in the kernel's queue."""
SWEEP_INTERVAL = 0.25
"""Seconds between deadline sweeps (deadlines are enforced to within this)."""
FD_RESERVE = 256
"""Descriptors kept for everything but the endpoint's connections (API client pool, watches,
files, the listening socket)."""
HANDSHAKES_PER_TICK = 8
"""TLS handshake steps run per event-loop iteration (a step with a ClientHello costs about
0.2-0.5 ms of CPU); more wait for the next iterations."""
VICTIM_SCAN = 256
"""How many of the longest-waiting connections are searched for one of a client above its share."""
CAP_LOG_INTERVAL = 60.0
"""Seconds between log lines saying the connection cap was reached."""
READ_CHUNK = 16384
"""Plaintext bytes handed to h11 at a time (one TLS record at most)."""


@dataclass(frozen=True)
class ServingLimits:
    """Per-connection limits of :class:`HttpsServer`; seconds and bytes."""

    max_connections: int = 1024
    """Open connections at most (see :func:`connection_cap` for the descriptor bound)."""
    handshake_timeout: float = 10.0
    """From accept to a finished TLS handshake."""
    read_header_timeout: float = 32.0
    """From a request's first byte (or the handshake's end) to its last byte, body included."""
    idle_timeout: float = 90.0
    """Keep-alive time between an answer and the next request's first byte."""
    response_timeout: float = 60.0
    """From a complete request to its answer written out."""
    max_header_bytes: int = 32 * 1024
    """Request line plus headers; more is answered 431."""
    max_body_bytes: int = 64 * 1024
    """Request body; more is answered 413."""
    keepalive_period: int = 180
    """TCP keep-alive probe interval, seconds (``defaultKeepAlivePeriod``)."""
    shutdown_grace: float = 2.0
    """On stop, how long answers in progress may finish."""


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit, as the Go runtime does at start-up
    (Go 1.19+); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(wanted: int, fd_limit: int | None = None) -> int:
    """``wanted`` bounded so the endpoint's connections leave :data:`FD_RESERVE` descriptors
    free under ``fd_limit`` (default: the current soft ``RLIMIT_NOFILE``); at least 16."""
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(16, min(wanted, fd_limit - FD_RESERVE))


@dataclass(frozen=True)
class Request:
    """One complete request: ``path`` is percent-decoded and without the query; header names
    are lower case (repeated headers joined with ``", "``); ``client`` is the peer's IP."""

    method: str
    path: str
    headers: dict[str, str]
    client: str


@dataclass(frozen=True)
class Response:
    """An answer: status, content type, body and extra headers."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]


class Stage(enum.Enum):
    """Where a connection is; every stage but ``BUSY`` may be displaced at the cap."""

    HANDSHAKE = "handshake"
    READING = "reading"
    BUSY = "busy"
    IDLE = "idle"


_TIMEOUT_REASON = {
    Stage.HANDSHAKE: "handshake_timeout",
    Stage.READING: "read_timeout",
    Stage.BUSY: "response_timeout",
    Stage.IDLE: "idle_timeout",
}
CLOSE_REASONS = (
    "evicted",
    "refused",
    "handshake_timeout",
    "read_timeout",
    "idle_timeout",
    "response_timeout",
    "handshake_error",
    "header_too_large",
    "body_too_large",
    "bad_request",
    "pipelined_too_much",
)
"""Why the server closed a connection (``ome_scheduler_secure_serving_closed_connections_total``)."""

_PLAIN = "text/plain; charset=utf-8"
_COMMON_HEADERS = ((b"cache-control", b"no-cache, private"), (b"x-content-type-options", b"nosniff"))


class _Date:
    """The ``Date`` header, formatted once per second."""

    second = -1
    value = b""

    @classmethod
    def get(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second = now
            cls.value = email.utils.formatdate(now, usegmt=True).encode()
        return cls.value


class HttpsServer:
    """Serves ``handler`` over TLS (contexts from ``tls_context()``, called per connection so a
    reloaded certificate applies to new connections) within ``limits``.

    At the connection cap a new connection from a client IP that already holds its share
    (the cap divided by the number of client IPs connected, the newcomer included; at least
    one) is refused
    before any TLS work; any other displaces the longest-waiting displaceable connection of a
    client above its share (or, failing that, the longest-waiting of all). A connection whose
    request is being answered is never displaced; when every connection is, the newcomer is
    refused.

    :attr:`closed` counts connections the server closed, by reason (:data:`CLOSE_REASONS`);
    :attr:`accepted` counts accepted connections, :attr:`open_connections` those open now and
    :attr:`peak_connections` the most open at once.
    """

    def __init__(
        self,
        handler: Handler,
        tls_context: Callable[[], ssl.SSLContext],
        limits: ServingLimits | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.handler = handler
        self.tls_context = tls_context
        self.limits = limits or ServingLimits()
        self.metrics = metrics
        self.accepted = 0
        self.peak_connections = 0
        self.closed: collections.Counter[str] = collections.Counter()
        self._conns: set[_Conn] = set()
        # Connections that may be displaced, oldest stage entry first (a dict keeps order).
        self._displaceable: dict[_Conn, None] = {}
        self._per_client: collections.Counter[str] = collections.Counter()  # open connections by client IP
        self._cap_logged = -CAP_LOG_INTERVAL
        self._handshake_budget = HANDSHAKES_PER_TICK
        # Connections waiting for a handshake slot, oldest first (popitem takes the newest).
        self._handshake_waiting: dict[_Conn, None] = {}
        self._tick_scheduled = False

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        return len(self._conns)

    def stages(self) -> collections.Counter[str]:
        """Open connections by :class:`Stage` value."""
        return collections.Counter(c.stage.value for c in self._conns)

    async def serve(self, sock: socket.socket, stop: anyio.Event) -> None:
        """Accept on the bound ``sock`` until ``stop`` is set, then close: answers in progress
        get :attr:`ServingLimits.shutdown_grace` seconds, every other connection is dropped.
        The socket is closed on return."""
        loop = asyncio.get_running_loop()
        # asyncio accepts up to ``backlog`` connections per readiness event: a small value
        # spreads an accept burst over loop iterations; the kernel's queue is then set long.
        server = await loop.create_server(lambda: _Conn(self), sock=sock, backlog=ACCEPTS_PER_TICK)
        sock.listen(BACKLOG)
        sweeper = asyncio.ensure_future(self._sweep())
        try:
            await stop.wait()
        finally:
            server.close()
            sweeper.cancel()
            for c in list(self._conns):
                if c.stage is not Stage.BUSY:
                    c.abort(None)
            try:
                answers = [c.task for c in self._conns if c.task is not None and not c.task.done()]
                if answers:
                    await asyncio.wait(answers, timeout=self.limits.shutdown_grace)
            finally:  # also when cancelled during the grace period
                for c in list(self._conns):
                    c.abort(None)

    async def _sweep(self) -> None:
        """Close every connection past its stage's deadline."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            now = loop.time()
            for c in [c for c in self._conns if c.deadline <= now]:
                reason = _TIMEOUT_REASON[c.stage]
                if c.stage is Stage.IDLE:
                    c.close(reason)  # nothing in flight: a polite close_notify
                else:
                    c.abort(reason)

    # ---- handshake pacing --------------------------------------------------------------

    def _handshake_slot(self, conn: _Conn) -> bool:
        """Whether ``conn`` may run a handshake step now.

        At most :data:`HANDSHAKES_PER_TICK` steps run per event-loop iteration, so a burst of
        new connections never stalls the loop (and the scheduler's Bindings and Lease
        renewals with it) for long. The others wait and are served newest first (adaptive
        LIFO, as overloaded servers do): a probe that just connected goes ahead of a flood's
        backlog, whose oldest members run into the handshake timeout instead.
        """
        if not self._tick_scheduled:
            self._tick_scheduled = True
            asyncio.get_running_loop().call_soon(self._next_tick)
        if self._handshake_budget > 0:
            self._handshake_budget -= 1
            return True
        self._handshake_waiting[conn] = None
        return False

    def _next_tick(self) -> None:
        """A new loop iteration: refill the handshake budget and run queued handshake steps."""
        self._tick_scheduled = False
        self._handshake_budget = HANDSHAKES_PER_TICK
        while self._handshake_waiting and self._handshake_budget > 0:
            conn, _ = self._handshake_waiting.popitem()  # newest first
            self._handshake_budget -= 1
            conn.handshake_step()
        if self._handshake_waiting and not self._tick_scheduled:
            self._tick_scheduled = True
            asyncio.get_running_loop().call_soon(self._next_tick)

    # ---- bookkeeping called by connections ---------------------------------------------

    def _admit(self, conn: _Conn) -> bool:
        """Register a new connection; at the cap, refuse it or displace another (see
        :class:`HttpsServer`)."""
        self.accepted += 1
        client = conn.client
        if len(self._conns) >= self.limits.max_connections:
            now = time.monotonic()
            if now - self._cap_logged >= CAP_LOG_INTERVAL:
                self._cap_logged = now
                log.info(
                    "HTTPS connection cap reached; refusing clients above their share, displacing waiting connections",
                    v=0,
                    maxConnections=self.limits.max_connections,
                    clients=len(self._per_client),
                    closed=dict(self.closed),
                )
            clients = len(self._per_client) + (0 if client in self._per_client else 1)
            share = max(1, self.limits.max_connections // clients)
            victim = None if self._per_client[client] >= share else self._victim(share)
            if victim is None:
                self._count("refused")
                return False
            victim.abort("evicted")
        self._conns.add(conn)
        self._per_client[client] += 1
        self.peak_connections = max(self.peak_connections, len(self._conns))
        self._gauge()
        return True

    def _victim(self, share: int) -> _Conn | None:
        """The longest-waiting displaceable connection of a client above ``share`` (looking at
        the :data:`VICTIM_SCAN` longest-waiting ones), else the longest-waiting of all."""
        for i, c in enumerate(self._displaceable):
            if self._per_client[c.client] > share:
                return c
            if i >= VICTIM_SCAN:
                break
        return next(iter(self._displaceable), None)

    def _enter(self, conn: _Conn, stage: Stage, timeout: float) -> None:
        """Move ``conn`` to ``stage`` with a fresh deadline ``timeout`` seconds away."""
        conn.stage = stage
        conn.deadline = asyncio.get_running_loop().time() + timeout
        self._displaceable.pop(conn, None)
        if stage is not Stage.BUSY:
            self._displaceable[conn] = None

    def _forget(self, conn: _Conn, reason: str | None) -> None:
        """Drop a closed connection (idempotent); count ``reason`` if given."""
        self._handshake_waiting.pop(conn, None)
        if conn in self._conns:
            self._conns.discard(conn)
            self._displaceable.pop(conn, None)
            left = self._per_client[conn.client] - 1
            if left > 0:
                self._per_client[conn.client] = left
            else:
                del self._per_client[conn.client]
            if reason:
                self._count(reason)
            self._gauge()

    def _count(self, reason: str) -> None:
        self.closed[reason] += 1
        if self.metrics is not None:
            self.metrics.serving_closed_connections.labels(reason).inc()
            if reason == "handshake_error":
                self.metrics.tls_handshake_errors.inc()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.serving_connections.set(len(self._conns))


class _Conn(asyncio.Protocol):
    """One TCP connection: TLS on memory BIOs, h11 for HTTP/1.1, one request at a time."""

    def __init__(self, server: HttpsServer) -> None:
        self.server = server
        self.limits = server.limits
        self.stage = Stage.HANDSHAKE
        self.deadline = float("inf")
        self.client = ""
        self.closing = False
        self.transport: asyncio.Transport | None = None
        self._tls: ssl.SSLObject | None = None
        # TLS and HTTP state come with admission (connection_made): a refused connection
        # costs no more than its accept.
        self._in: ssl.MemoryBIO
        self._out: ssl.MemoryBIO
        self._h11: h11.Connection
        self._eof = False
        self._body = 0
        self._pending = 0  # bytes received while an answer is in progress
        self._request: h11.Request | None = None
        self.task: asyncio.Future[None] | None = None
        """The answer in progress, if any."""
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None

    # ---- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Accept: count against the cap, set TCP keep-alive, start the handshake clock."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if peer else ""
        if not self.server._admit(self):
            self.closing = True
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, self.limits.keepalive_period)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, self.limits.keepalive_period)
            except OSError:
                pass
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self._tls = self.server.tls_context().wrap_bio(self._in, self._out, server_side=True)
        self.server._enter(self, Stage.HANDSHAKE, self.limits.handshake_timeout)

    def data_received(self, data: bytes) -> None:
        """Feed TLS; advance the handshake (when the server grants a slot this loop
        iteration), or decrypt and parse."""
        if self.closing or self._tls is None:
            return
        self._in.write(data)
        if self.stage is Stage.HANDSHAKE:
            if self.server._handshake_slot(self):
                self.handshake_step()
            return
        self._pump()

    def handshake_step(self) -> None:
        """Run the TLS handshake as far as the bytes received allow; then serve what follows."""
        if self.closing or self._tls is None or self.stage is not Stage.HANDSHAKE:
            return
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, OSError) as exc:
            self._flush()  # the alert, so the client learns why
            log.info("TLS handshake error", v=5, client=self.client, error=str(exc))
            self.abort("handshake_error")
            return
        self._flush()
        self.server._enter(self, Stage.READING, self.limits.read_header_timeout)
        self._pump()

    def eof_received(self) -> bool:
        """The peer closed its side: whatever is in flight is abandoned (as Go cancels the
        request of a connection that reads EOF)."""
        self.abort(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Closed by either side: forget it and cancel its answer."""
        self.closing = True
        self.server._forget(self, None)
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        """The transport's write buffer is full: the answer waits for the client to read."""
        self._write_paused = True

    def resume_writing(self) -> None:
        """The write buffer drained."""
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # ---- closing -----------------------------------------------------------------------

    def abort(self, reason: str | None) -> None:
        """Drop the connection at once (no TLS close_notify); count ``reason``."""
        if self.closing:
            return
        self.closing = True
        self.server._forget(self, reason)
        if self.transport is not None:
            self.transport.abort()

    def close(self, reason: str | None) -> None:
        """Send TLS close_notify and whatever is buffered, then close; count ``reason``."""
        if self.closing:
            return
        self.closing = True
        self.server._forget(self, reason)
        if self._tls is not None and self.stage is not Stage.HANDSHAKE:
            try:
                self._tls.unwrap()
            except (ssl.SSLError, OSError):
                pass  # SSLWantReadError: our close_notify is out, the peer's is not awaited
            self._flush()
        if self.transport is not None:
            self.transport.close()

    # ---- TLS and HTTP ------------------------------------------------------------------

    def _flush(self) -> None:
        """Send whatever TLS produced (handshake messages, records, alerts)."""
        out = self._out.read()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)

    def _pump(self) -> None:
        """Decrypt what has arrived and hand it to h11 a record at a time, acting on complete
        requests as they appear (so bytes that arrive while one is being answered are counted)."""
        assert self._tls is not None
        eof = False
        while not self.closing:
            try:
                chunk = self._tls.read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                chunk = b""
            except (ssl.SSLError, OSError):
                self.abort("bad_request")
                return
            if not chunk:
                eof = True
                break
            if self.stage is Stage.IDLE:
                self.server._enter(self, Stage.READING, self.limits.read_header_timeout)
            elif self.stage is Stage.BUSY:
                # Reading is paused while answering, so this is at most one socket read more.
                self._pending += len(chunk)
                if self._too_much_pipelined():
                    return
            self._h11.receive_data(chunk)
            self._process()
        self._flush()  # TLS 1.3 may answer reads (key updates)
        if eof and not self._eof and not self.closing:
            self._eof = True
            self._h11.receive_data(b"")
            self._process()

    def _too_much_pipelined(self) -> bool:
        """More than one more request is waiting behind the one being answered: close."""
        if self._pending > self.limits.max_header_bytes + self.limits.max_body_bytes:
            self.abort("pipelined_too_much")
            return True
        return False

    def _process(self) -> None:
        """Consume h11 events until a request is complete (then answer it) or data runs out."""
        while not self.closing and self.stage is not Stage.BUSY:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                self._refuse(status, "header_too_large" if status == 431 else "bad_request", str(exc))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                # h11 bounds only a head still arriving; one that came in a single read is
                # measured here (request line and header lines with their separators).
                size = len(event.method) + len(event.target) + 12
                size += sum(len(k) + len(v) + 4 for k, v in event.headers)
                if size > self.limits.max_header_bytes:
                    self._refuse(431, "header_too_large", "request header fields too large")
                    return
                self._request = event
                self._body = 0
                length = _header(event.headers, b"content-length")
                if length is not None and int(length) > self.limits.max_body_bytes:
                    self._refuse(413, "body_too_large", "request body too large")
                    return
            elif isinstance(event, h11.Data):
                self._body += len(event.data)
                if self._body > self.limits.max_body_bytes:
                    self._refuse(413, "body_too_large", "request body too large")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch()
            elif isinstance(event, h11.ConnectionClosed):
                self.close(None)
                return

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer ``status`` with ``Connection: close`` when HTTP still allows an answer, then close."""
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self._send(Response(status, _PLAIN, f"{message}\n".encode()), head=False, close=True)
        self.close(reason)

    def _dispatch(self) -> None:
        """A complete request: pause reading and answer it in a task."""
        req = self._request
        assert req is not None and self.transport is not None
        target = req.target.decode("latin-1")
        path = urllib.parse.unquote(urllib.parse.urlsplit(target).path or "/")
        headers: dict[str, str] = {}
        for name, value in req.headers:
            k = name.decode("latin-1")
            v = value.decode("latin-1")
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        request = Request(req.method.decode("latin-1"), path, headers, self.client)
        self._pending = len(self._h11.trailing_data[0])  # pipelined bytes already received
        if self._too_much_pipelined():
            return
        self.server._enter(self, Stage.BUSY, self.limits.response_timeout)
        self.transport.pause_reading()
        self.task = asyncio.ensure_future(self._answer(request))

    async def _answer(self, request: Request) -> None:
        """Run the handler, write its answer, then wait for the next request."""
        try:
            resp = await self.server.handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("serving request failed", path=request.path, error=repr(exc))
            resp = Response(500, _PLAIN, b"Internal Server Error\n")
        if self.closing:
            return
        self._send(resp, head=request.method == "HEAD", close=False)
        if self._h11.our_state is h11.MUST_CLOSE:
            self.close(None)
            return
        if self._write_paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
            if self.closing:
                return
        self._h11.start_next_cycle()
        assert self.transport is not None
        stage = Stage.READING if self._pending else Stage.IDLE
        timeout = self.limits.read_header_timeout if self._pending else self.limits.idle_timeout
        self.server._enter(self, stage, timeout)
        self.transport.resume_reading()
        self._process()  # a pipelined request may be complete already

    def _send(self, resp: Response, *, head: bool, close: bool) -> None:
        """Encode ``resp`` (no body for HEAD) through h11 and TLS."""
        assert self._tls is not None
        headers = [
            (b"content-type", resp.content_type.encode()),
            (b"content-length", str(len(resp.body)).encode()),
            (b"date", _Date.get()),
            *_COMMON_HEADERS,
            *((k.encode(), v.encode()) for k, v in resp.headers),
        ]
        if close:
            headers.append((b"connection", b"close"))
        try:
            data = self._h11.send(h11.Response(status_code=resp.status, headers=headers, reason=_reason(resp.status)))
            if not head and resp.body:
                data = (data or b"") + (self._h11.send(h11.Data(data=resp.body)) or b"")
            data = (data or b"") + (self._h11.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            log.error("cannot encode the answer", status=resp.status, error=str(exc))
            self.abort(None)
            return
        try:
            self._tls.write(data)
        except (ssl.SSLError, OSError):
            self.abort(None)
            return
        self._flush()


def _reason(status: int) -> bytes:
    """The reason phrase of ``status`` (``OK``, ``Not Found``...), as Go writes it."""
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _header(headers: Any, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case) in h11's header list, or None."""
    for k, v in headers:
        if k == name:
            return bytes(v)
    return None
