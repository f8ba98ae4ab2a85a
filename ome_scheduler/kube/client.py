"""The one door to the API server: an async HTTP client with client-go's manners.

Credentials come from kr8s (kubeconfig, including ``certificate-authority-data``, client
certificates and tokens, or the in-cluster service account); requests go through our own
``aiohttp`` session, because kr8s rebuilds its client on any 401/403, wraps every object in a
costly Box and has no QPS limit, and because httpx's
connection pool costs grow with the number of requests in flight (measured: 70 % of the
scheduler's CPU at a few hundred binds per second; aiohttp's stays flat). Like client-go:

* a token bucket enforces ``clientConnection.qps``/``burst`` (default 50/100);
* 429 and 5xx answers (and transport errors) are retried with backoff, honouring
  ``Retry-After``; a 401 re-reads the credentials once (rotated service-account tokens);
* every request has timeouts; watches get a read timeout longer than their server timeout;
* at most ``max_in_flight`` requests are on the wire; the rest wait in a :class:`PriorityGate`
  so Bindings and Lease renewals overtake status patches and events when the API server is
  the bottleneck (kube-scheduler gets the same effect from separate clients for events and
  from API Priority and Fairness). A request still waiting for a slot is dropped when its
  ``abandon`` future completes, which is how the nominatedNodeName patch of a gang member
  whose gang was just allowed gives way to its Binding at once.

Errors are raised as :class:`ApiError` carrying the ``metav1.Status`` code, reason and
message; unreachable servers as :class:`aiohttp.ClientError` or :class:`TimeoutError`.

:class:`Reachability` records when the server last answered (any HTTP status, any watch
chunk) and when a request last failed in transport; informers use it to tell a quiet watch
from a dead path (:meth:`KubeClient.probe`), and the Binding gate (``kube/binding.py``) to know
whether the scheduler's view may have missed something while the server was out of reach.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import msgspec

from ome_scheduler.api.core import PodHead
from ome_scheduler.api.meta import Status
from ome_scheduler.kube.credentials import default_kubeconfig

USER_AGENT = "ome-scheduler/0.1.0"
_STATUS = msgspec.json.Decoder(Status)
_ENC = msgspec.json.Encoder()
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, ConnectionError)
"""What a request raises when the server cannot be reached or stops answering."""

PRIORITY_CRITICAL = 0
"""Bindings and Lease renewals: what loses work or leadership when late."""
PRIORITY_DEFAULT = 1
"""Reads, token reviews, volume patches."""
PRIORITY_STATUS = 2
"""Pod status patches (PodScheduled condition, nominatedNodeName)."""
PRIORITY_EVENTS = 3
"""Event creates and series patches."""


class ApiError(Exception):
    """An API request failed: HTTP ``code``, ``metav1.Status`` ``reason`` and ``message``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


PROBE_PATH = "/version"
"""What :meth:`KubeClient.probe` GETs: served by every API server without etcd, to anyone."""


class Reachability:
    """When the API server last answered and when a request to it last failed in transport.

    Times are ``time.monotonic()`` seconds, 0 for never. An *answer* is any HTTP response
    (an error status too: the server was reached) or a chunk of a watch stream; a *failure*
    is a transport error (refused, reset, timed out, a stream cut short) or a watch found
    stalled. Written by :class:`KubeClient` and the informers, read by the informers'
    stall detection and the Binding gate.
    """

    def __init__(self) -> None:
        self.last_answer = 0.0
        self.last_failure = 0.0

    def answered(self) -> None:
        """The server answered just now."""
        self.last_answer = time.monotonic()

    def failed(self) -> None:
        """A request or watch just failed in transport (or was found stalled)."""
        self.last_failure = time.monotonic()


class TokenBucket:
    """client-go's flowcontrol token bucket: ``qps`` tokens per second, at most ``burst`` saved."""

    def __init__(self, qps: float, burst: int) -> None:
        self.rate = float(qps)
        self.cap = float(max(1, burst))
        self.tokens = self.cap
        self.last = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Take one token, sleeping until it is earned; ``qps <= 0`` disables the limit.

        A caller that had to sleep leaves the bucket empty: the token it waited for is spent
        and nothing accrued during the sleep is banked.
        """
        if self.rate <= 0:
            return
        # The lock serialises waiters, so tokens are handed out in arrival order.
        async with self._lock:
            now = time.monotonic()
            self.tokens = min(self.cap, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.rate)
                self.tokens = 0.0
                self.last = time.monotonic()
            else:
                self.tokens -= 1


class PriorityGate:
    """At most ``capacity`` holders at once; waiters are admitted lowest priority first, FIFO
    within a priority. Cancelling a waiter gives its turn to the next one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.in_use = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        """Requests waiting for a slot (cancelled waiters leave lazily, so they are skipped)."""
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    async def acquire(self, priority: int) -> None:
        """Wait for a slot; lower ``priority`` values are admitted first.

        Raises:
            asyncio.CancelledError: cancelled while waiting (no slot is held afterwards).
        """
        # Fast path only when nobody queues: a free slot must not let a newcomer overtake a
        # waiter that release() is about to admit.
        if self.in_use < self.capacity and not self._waiters:
            self.in_use += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # admitted and cancelled in the same tick: pass the slot on
            raise

    def release(self) -> None:
        """Give back a slot and admit the best waiters that fit, skipping cancelled ones."""
        self.in_use -= 1
        while self._waiters and self.in_use < self.capacity:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                self.in_use += 1
                fut.set_result(None)


class KubeClient:
    """HTTP access to one API server.

    Use :meth:`connect` to build one from a kubeconfig path (``None``: ``$KUBECONFIG``,
    ``~/.kube/config``, then the in-cluster service account). The session is created lazily
    on the running event loop.
    """

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | bool,
        token: str | None,
        *,
        qps: float,
        burst: int,
        auth: Any = None,
        max_connections: int = 100,
        max_in_flight: int = 32,
    ) -> None:
        self.server = server.rstrip("/")
        self._auth = auth
        self._token = token
        self._ssl: ssl.SSLContext | bool = ssl_context
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.limiter = TokenBucket(qps, burst)
        self.gate = PriorityGate(max_in_flight)
        self.reach = Reachability()
        """When the server last answered and last failed (see :class:`Reachability`)."""
        self._probe: asyncio.Future[bool] | None = None

    def derive(
        self, *, qps: float, burst: int, max_in_flight: int, max_connections: int, user_agent: str | None = None
    ) -> KubeClient:
        """A second client to the same server with the same credentials but its own connection
        pool, rate limiter and in-flight gate: traffic sent through it never waits behind, nor
        delays, this client's requests (kube's delegated authn/authz build their own clients
        from a copy of the ``rest.Config`` the same way). ``user_agent`` is appended to the
        User-Agent as ``/{user_agent}`` (client-go's ``rest.AddUserAgent``)."""
        client = KubeClient(
            self.server,
            self._ssl,
            self._token,
            qps=qps,
            burst=burst,
            auth=self._auth,
            max_connections=max_connections,
            max_in_flight=max_in_flight,
        )
        if user_agent:
            client._headers["User-Agent"] = f"{self._headers['User-Agent']}/{user_agent}"
        return client

    @property
    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session (30 s total / 10 s connect timeouts), created on first use.

        Created lazily because a session binds to the running event loop, which does not
        exist yet when the client is built; a closed session is replaced.
        """
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                base_url=self.server,
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl),
                timeout=aiohttp.ClientTimeout(total=30.0, connect=10.0),
                read_bufsize=1 << 20,
            )
        return self._session

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, *, qps: float = 50.0, burst: int = 100, master: str | None = None
    ) -> KubeClient:
        """Load credentials with kr8s and open a client; ``master`` overrides the server URL.

        Raises:
            ValueError: no usable credentials were found.
        """
        from kr8s._auth import KubeAuth

        auth = KubeAuth(kubeconfig=kubeconfig or default_kubeconfig(), url=master)
        await auth.reauthenticate()
        ctx = await auth.ssl_context()  # type: ignore[no-untyped-call]
        return cls(auth.server, ctx, auth.token, qps=qps, burst=burst, auth=auth)

    async def close(self) -> None:
        """Close the HTTP session and its connections (the client reopens one if used again)."""
        if self._session is not None:
            await self._session.close()

    async def _reauth(self) -> None:
        """Re-read credentials (rotated service-account token) and swap the bearer header."""
        if self._auth is None:
            return
        await self._auth.reauthenticate()
        tok = self._auth.token
        if tok and tok != self._token:
            self._token = tok
            self._headers["Authorization"] = f"Bearer {tok}"
            if self._session is not None:
                self._session.headers["Authorization"] = f"Bearer {tok}"

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        retries: int = 5,
        timeout: float | None = None,
        priority: int = PRIORITY_DEFAULT,
        abandon: asyncio.Future[Any] | None = None,
        transport_retries: int | None = None,
        guard: Callable[[], None] | None = None,
    ) -> bytes:
        """Send one request (rate limited, retried) and return the response body.

        ``retries`` bounds the retries of 429 and 5xx answers, ``transport_retries`` (default:
        ``retries``) those of transport errors (a Binding's caller retries those itself, after
        checking that its view of the cluster is current).
        ``priority`` orders it among requests waiting for a slot (``PRIORITY_*``, lower first).
        ``timeout`` (seconds) replaces the session's 30 s total timeout for this request. When
        ``abandon`` completes before the request got a slot, it is dropped unsent and
        ``b""`` is returned; once sent, a request is never abandoned. ``guard`` is called
        right before each attempt is sent, after the slot and the rate limiter: what it
        raises ends the request unsent (the leader's fence, ``framework/fence.py``).

        Raises:
            ApiError: a non-2xx answer after retries.
            aiohttp.ClientError / TimeoutError: the server could not be reached after retries.
            Exception: whatever ``guard`` raised.
        """
        content = None if body is None else (body if isinstance(body, bytes) else _ENC.encode(body))
        headers = {"Content-Type": content_type} if content is not None else None
        tmo = aiohttp.ClientTimeout(total=timeout) if timeout is not None else None
        max_transport = retries if transport_retries is None else transport_retries
        attempt = 0
        transport_attempt = 0
        reauthed = False
        while True:
            if not await self._admit(priority, abandon):
                return b""
            try:
                await self.limiter.acquire()
                if guard is not None:
                    guard()
                async with self.session.request(
                    method, path, params=params, data=content, headers=headers, timeout=tmo
                ) as r:
                    data = await r.read()
                    status = r.status
                    retry_after = r.headers.get("Retry-After")
                    reason = r.reason or ""
                self.reach.answered()
            except TRANSPORT_ERRORS:
                self.reach.failed()
                if transport_attempt >= max_transport:
                    raise
                transport_attempt += 1
                failed = True
            else:
                failed = False
            finally:
                # The slot is held only while on the wire: a request sleeping before its retry
                # must not block higher-priority requests.
                self.gate.release()
            if failed:
                await asyncio.sleep(min(5.0, 0.2 * 2**transport_attempt) * (0.5 + random.random()))
                continue
            if status < 300:
                return data
            # A 401 most often means the projected service-account token was rotated: re-read
            # it once; a second 401 is a real authentication failure.
            if status == 401 and not reauthed and self._auth is not None:
                reauthed = True
                await self._reauth()
                continue
            # 429 (API Priority and Fairness) and 5xx are transient; 501 Not Implemented is not.
            if (status == 429 or status >= 500) and status != 501 and attempt < retries:
                attempt += 1
                delay = min(5.0, 0.2 * 2**attempt)
                if retry_after and retry_after.isdigit():
                    delay = float(retry_after)
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                continue
            raise _api_error(status, reason, data)

    async def _admit(self, priority: int, abandon: asyncio.Future[Any] | None) -> bool:
        """Take a gate slot; False (holding none) when ``abandon`` completes first."""
        if abandon is None:
            await self.gate.acquire(priority)
            return True
        if abandon.done():
            return False
        acq = asyncio.ensure_future(self.gate.acquire(priority))
        await asyncio.wait((acq, abandon), return_when=asyncio.FIRST_COMPLETED)
        if acq.done():
            return True  # admitted: the request goes out even if abandon completed meanwhile
        acq.cancel()
        try:
            await acq
        except asyncio.CancelledError:
            return False
        return True  # admitted in the same tick as the cancel

    async def get(self, path: str, params: dict[str, str] | None = None, **kw: Any) -> bytes:
        """GET ``path`` with query ``params``; see :meth:`request` for ``kw`` and errors."""
        return await self.request("GET", path, params=params, **kw)

    async def post(self, path: str, body: Any, **kw: Any) -> bytes:
        """POST ``body`` (JSON-encoded unless bytes); see :meth:`request` for ``kw`` and errors."""
        return await self.request("POST", path, body=body, **kw)

    async def put(self, path: str, body: Any, **kw: Any) -> bytes:
        """PUT (replace) an object; an outdated ``metadata.resourceVersion`` raises ``ApiError`` 409."""
        return await self.request("PUT", path, body=body, **kw)

    async def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json", **kw: Any) -> bytes:
        """PATCH with ``content_type`` (JSON merge patch by default); see :meth:`request`."""
        return await self.request("PATCH", path, body=body, content_type=content_type, **kw)

    async def delete(self, path: str, **kw: Any) -> bytes:
        """DELETE ``path``; see :meth:`request` for ``kw`` and errors."""
        return await self.request("DELETE", path, **kw)

    async def watch_lines(
        self, path: str, params: dict[str, str], read_timeout: float, on_open: Callable[[], None] | None = None
    ) -> AsyncIterator[bytes]:
        """Stream a watch: yield each non-empty line (one JSON event) until the server closes.

        ``read_timeout`` (seconds) bounds the silence between chunks; it should exceed the
        watch's ``timeoutSeconds`` so the server, not the client, ends a quiet watch (the
        informer detects a stalled watch much sooner). ``on_open`` is called once the server
        accepted the watch (a 2xx status). Rate limited but outside the in-flight gate (a
        watch holds its connection for minutes), and not retried: the informer owns the retry.
        Every chunk received counts as an answer in :attr:`reach`; a transport error as a failure.

        Raises:
            ApiError: the server refused the watch (410 Gone among others).
            aiohttp.ClientError / TimeoutError: the connection failed or was cut mid-stream.
        """
        await self.limiter.acquire()
        tmo = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=read_timeout)
        try:
            async for line in self._watch_stream(path, params, tmo, on_open):
                yield line
        except TRANSPORT_ERRORS:
            self.reach.failed()
            raise

    async def _watch_stream(
        self, path: str, params: dict[str, str], tmo: aiohttp.ClientTimeout, on_open: Callable[[], None] | None
    ) -> AsyncIterator[bytes]:
        """The body of :meth:`watch_lines`: one GET, split into lines."""
        async with self.session.get(path, params=params, timeout=tmo) as r:
            self.reach.answered()
            if r.status == 401 and self._auth is not None:
                await self._reauth()  # the informer's retry then watches with the new token
            if r.status >= 300:
                raise _api_error(r.status, r.reason or "", await r.read())
            if on_open is not None:
                on_open()
            buf = b""
            async for chunk in r.content.iter_any():
                self.reach.answered()
                buf += chunk  # a chunk may end mid-event, or hold several events
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[:i], buf[i + 1 :]
                    if line:
                        yield line
            if buf.strip():
                yield buf

    async def probe(self, timeout: float) -> bool:
        """Whether the API server answers a GET of :data:`PROBE_PATH` within ``timeout`` seconds.

        Any HTTP status counts (the server was reached); a transport error or the timeout does
        not. Outside the rate limiter and the in-flight gate, never retried; concurrent callers
        share one probe. Updates :attr:`reach` either way.
        """
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._send_probe(timeout))
        return await asyncio.shield(self._probe)

    async def _send_probe(self, timeout: float) -> bool:
        """One probe GET (see :meth:`probe`)."""
        try:
            async with self.session.get(PROBE_PATH, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                await r.read()
        except TRANSPORT_ERRORS:
            self.reach.failed()
            return False
        self.reach.answered()
        return True

    async def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        transport_retries: int = 3,
        guard: Callable[[], None] | None = None,
    ) -> None:
        """POST the Binding of a pod to a node (``pods/{name}/binding``).

        A 409 because the pod is already bound to ``node`` (a retry meeting the Binding an
        earlier attempt made) is success. ``transport_retries`` bounds the retries after
        transport errors (``kube/binding.py`` passes 0 and decides itself); ``guard`` runs
        right before each attempt is sent (see :meth:`request`).

        Raises:
            ApiError: the API server refused the Binding.
            aiohttp.ClientError / TimeoutError: it could not be sent or its answer was lost.
            Exception: whatever ``guard`` raised.
        """
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            await self.post(
                f"{path}/binding",
                body,
                retries=3,
                transport_retries=transport_retries,
                priority=PRIORITY_CRITICAL,
                guard=guard,
            )
        except ApiError as exc:
            # A retry after a lost response meets the binding it already made: 409 "already
            # assigned". Bound to the node we chose (and the same pod), it is our success.
            if exc.code != 409 or not await self._bound_to(path, uid, node):
                raise

    async def _bound_to(self, path: str, uid: str, node: str) -> bool:
        """Whether the pod at ``path`` (with ``uid``, when given) is bound to ``node`` now."""
        try:
            raw = await self.get(path, priority=PRIORITY_CRITICAL)
        except ApiError:
            return False
        pod = _POD_HEAD.decode(raw)
        return pod.spec.node_name == node and (not uid or pod.metadata.uid == uid)


_POD_HEAD = msgspec.json.Decoder(PodHead)


def _api_error(status: int, reason: str, data: bytes) -> ApiError:
    """An ApiError from a ``metav1.Status`` body; proxies and old servers may send plain text."""
    try:
        st = _STATUS.decode(data)
        return ApiError(status, st.reason or reason, st.message or data[:500].decode(errors="replace"))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ApiError(status, reason, data[:500].decode(errors="replace"))


def hostname() -> str:
    """This machine's host name (the pod name in a cluster): part of event and lease identities."""
    return socket.gethostname()
