"""Delegated authentication (TokenReview) and authorization (SubjectAccessReview), cached,
deduplicated and rate-limited.

Mirrors kube-scheduler's delegated authn/authz from ``k8s.io/apiserver``:

* ``pkg/server/options/authentication.go`` and ``authenticatorfactory/delegating.go``: one
  TTL for both outcomes of a TokenReview (``CacheTTL`` 10 s:
  ``cache.New(tokenAuth, false, ttl, ttl)``), errors not cached; a 10 s review timeout;
* ``pkg/authentication/token/cache/cached_token_authenticator.go``: the cache is keyed by an
  HMAC of the token (a per-process random key: a memory dump does not give usable token
  hashes), and concurrent requests with one token share one review in flight;
* ``pkg/server/options/authorization.go``: SubjectAccessReview answers cached 10 s when
  allowed and 10 s when denied.

kube bounds the reviews only by its review client's QPS (200, burst 400). Here random bearer
tokens must not become an API-server flood, so a review that has to be *sent* (no cache entry,
none in flight) also needs a token from two buckets (:class:`ReviewLimits`): one per client
IP (5/s, burst 10) and one for the process (20/s, burst 40). Without a token the request is
answered 429 with ``Retry-After: 1`` (kube's answer when it sheds load) and nothing is sent.
Cache hits and joined reviews cost nothing. Successes and failures live in separate bounded
caches, so a flood of bad tokens cannot evict the good ones.

The reviews go through their own :class:`~ome_scheduler.kube.client.KubeClient` (its own
connections, rate limiter and in-flight gate), as kube's delegated authn/authz build their
own clients: review traffic never queues in front of the scheduler's Bindings and Lease
renewals.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import msgspec

from ome_scheduler.kube.client import ApiError, KubeClient
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()

T = TypeVar("T")

CACHE_TTL = 10.0
"""Seconds a TokenReview or SubjectAccessReview answer is reused, success or failure (kube's
delegated authn/authz default)."""
THROTTLE_LOG_INTERVAL = 60.0
"""Seconds between log lines saying the review rate limit was reached."""
CACHE_MAX = 4096
"""Entries per cache (four caches: authn success/failure, authz allow/deny); the least recently
written go first."""


@dataclass(frozen=True)
class ReviewLimits:
    """How many reviews may be sent: ``qps``/``burst`` for the process, ``client_qps``/
    ``client_burst`` per client IP (at most ``max_clients`` IPs remembered); ``timeout`` is
    each review's deadline in seconds; ``cache_size`` bounds each of the four caches."""

    qps: float = 20.0
    burst: int = 40
    client_qps: float = 5.0
    client_burst: int = 10
    max_clients: int = 4096
    timeout: float = 10.0
    cache_size: int = CACHE_MAX


class RateLimited(Exception):
    """A review was needed but the budget is spent; answer 429 with ``Retry-After``."""

    retry_after = 1


class Bucket:
    """A token bucket that never waits: :meth:`take` says whether a token was available."""

    __slots__ = ("rate", "cap", "tokens", "last")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.cap = float(max(1, burst))
        self.tokens = self.cap
        self.last = time.monotonic()

    def take(self, now: float | None = None) -> bool:
        """Spend one token if there is one."""
        now = time.monotonic() if now is None else now
        self.tokens = min(self.cap, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class _TTLCache:
    """An LRU-by-write cache of at most ``size`` entries that expire ``CACHE_TTL`` seconds after
    being written (the TTL is read at write time, so tests may shorten it)."""

    def __init__(self, size: int = CACHE_MAX) -> None:
        self._d: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self.size = size

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: str) -> tuple[bool, Any]:
        """(found, value)."""
        v = self._d.get(key)
        if v is None:
            return False, None
        if v[0] < time.monotonic():
            del self._d[key]
            return False, None
        return True, v[1]

    def put(self, key: str, value: Any) -> None:
        """Store ``value`` for ``CACHE_TTL`` seconds."""
        self._d[key] = (time.monotonic() + CACHE_TTL, value)
        self._d.move_to_end(key)
        while len(self._d) > self.size:
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
TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECTACCESSREVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class Reviews:
    """TokenReviews and SubjectAccessReviews through ``client`` (a client of their own), with
    caches, one review in flight per key, and :class:`ReviewLimits`.

    :attr:`sent` counts reviews sent by kind (``tokenreview``, ``subjectaccessreview``) and
    :attr:`throttled` those refused by the limits.
    """

    def __init__(self, client: KubeClient, limits: ReviewLimits | None = None, metrics: Metrics | None = None) -> None:
        self.client = client
        self.limits = limits or ReviewLimits()
        self.metrics = metrics
        self._hmac_key = os.urandom(32)
        size = self.limits.cache_size
        self._authn_ok = _TTLCache(size)
        self._authn_fail = _TTLCache(size)
        self._authz_allow = _TTLCache(size)
        self._authz_deny = _TTLCache(size)
        self._inflight: dict[str, asyncio.Future[Any]] = {}
        self._bucket = Bucket(self.limits.qps, self.limits.burst)
        self._clients: OrderedDict[str, Bucket] = OrderedDict()
        self.sent = {"tokenreview": 0, "subjectaccessreview": 0}
        self.throttled = {"tokenreview": 0, "subjectaccessreview": 0}
        self._throttle_logged = -THROTTLE_LOG_INTERVAL

    def cancel(self) -> None:
        """Cancel the reviews in flight (at shutdown)."""
        for fut in list(self._inflight.values()):
            fut.cancel()

    def _key(self, *parts: str) -> str:
        return hmac.new(self._hmac_key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def _admit(self, kind: str, client: str) -> None:
        """Take a token for one review from ``client``'s bucket and the process's.

        Raises:
            RateLimited: either bucket is empty.
        """
        now = time.monotonic()
        b = self._clients.get(client)
        if b is None:
            b = self._clients[client] = Bucket(self.limits.client_qps, self.limits.client_burst)
            while len(self._clients) > self.limits.max_clients:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(client)
        if not (b.take(now) and self._bucket.take(now)):
            self.throttled[kind] += 1
            if self.metrics is not None:
                self.metrics.review_throttled.labels(kind).inc()
            if now - self._throttle_logged >= THROTTLE_LOG_INTERVAL:
                self._throttle_logged = now
                log.info(
                    "review rate limit reached; answering 429 without a review",
                    v=0,
                    review=kind,
                    client=client,
                    throttled=dict(self.throttled),
                )
            raise RateLimited(kind)

    async def _once(self, key: str, kind: str, client: str, review: Callable[[], Awaitable[T]]) -> T:
        """Join the review in flight for ``key``, or start one (within the limits).

        The review runs in a task of its own: a caller that goes away (its connection closed)
        does not cancel it for the others.
        """
        fut = self._inflight.get(key)
        if fut is None:
            self._admit(kind, client)
            self.sent[kind] += 1
            fut = asyncio.ensure_future(review())
            self._inflight[key] = fut

            def done(f: asyncio.Future[Any]) -> None:
                self._inflight.pop(key, None)
                if not f.cancelled():
                    f.exception()  # retrieved here; every waiter re-raises it

            fut.add_done_callback(done)
        result: T = await asyncio.shield(fut)
        return result

    def _record(self, kind: str, code: int) -> None:
        if self.metrics is None:
            return
        counter = (
            self.metrics.delegated_authn_requests if kind == "tokenreview" else self.metrics.delegated_authz_requests
        )
        counter.labels(str(code)).inc()

    async def _post(self, kind: str, path: str, body: dict[str, Any]) -> bytes:
        """POST a review once (one retry on 429/5xx), counting its outcome by HTTP code."""
        try:
            raw = await self.client.post(path, body, retries=1, timeout=self.limits.timeout)
        except ApiError as exc:
            self._record(kind, exc.code)
            raise
        except Exception:
            self._record(kind, 0)
            raise
        self._record(kind, 201)
        return raw

    async def authenticate(self, token: str, client: str = "") -> UserInfo | None:
        """The token's user, or None when the API server does not authenticate it.

        Raises:
            RateLimited: a review was needed and the limits refuse it.
            ApiError / transport errors / msgspec.DecodeError: the review failed (not cached;
                the caller answers 500).
        """
        key = self._key("authn", token)
        found, user = self._authn_ok.get(key)
        if found:
            return cast(UserInfo, user)
        found, _ = self._authn_fail.get(key)
        if found:
            return None

        async def review() -> UserInfo | None:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
            raw = await self._post("tokenreview", TOKENREVIEWS, body)
            st = msgspec.json.decode(raw, type=_TokenReview).status
            if st.authenticated:
                self._authn_ok.put(key, st.user)
                return st.user
            self._authn_fail.put(key, True)
            return None

        return await self._once(key, "tokenreview", client, review)

    async def authorize(self, user: UserInfo, path: str, verb: str, client: str = "") -> bool:
        """Whether ``user`` may ``verb`` (``get``...) the non-resource ``path`` (a SubjectAccessReview).

        Raises:
            RateLimited: a review was needed and the limits refuse it.
            ApiError / transport errors / msgspec.DecodeError: the review failed (the caller
                answers 500).
        """
        key = self._key("authz", user.username, user.uid, ",".join(user.groups), path, verb)
        if self._authz_allow.get(key)[0]:
            return True
        if self._authz_deny.get(key)[0]:
            return False

        async def review() -> bool:
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
            raw = await self._post("subjectaccessreview", SUBJECTACCESSREVIEWS, body)
            allowed = msgspec.json.decode(raw, type=_SAR).status.allowed
            (self._authz_allow if allowed else self._authz_deny).put(key, True)
            return allowed

        return await self._once(key, "subjectaccessreview", client, review)
