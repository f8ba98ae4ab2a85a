"""The HTTPS app (SecureApp + Reviews + HealthState), served over TLS on a random port, with a
real HTTP server playing kube-apiserver for TokenReview and SubjectAccessReview.

The contract is kube-scheduler's delegated authn/authz (``k8s.io/apiserver``): no token is
``system:anonymous``; a token the API server does not accept is 401 on every path; a denied
SubjectAccessReview is 403; the always-allow paths skip authorization; ``system:masters``
skips it too; both reviews are cached, failures included. Beyond kube: concurrent requests
with one token share one review, reviews that would have to be sent beyond the per-client
and per-process limits are answered 429 instead, and the reviews go through a client of their
own, so parked reviews never hold up the scheduler's Bindings.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from ome_scheduler.kube.client import KubeClient
from ome_scheduler.metrics import Metrics
from ome_scheduler.serving import delegated_auth
from ome_scheduler.serving.delegated_auth import ReviewLimits
from ome_scheduler.serving.endpoints import HealthState, SecureEndpoint, listen_socket
from ome_scheduler.serving.tls import DynamicServingCert
from tests.support.apiserver import FakeApiServer

TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SARS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALWAYS_ALLOW = ("/healthz", "/readyz", "/livez")
ALICE = {"username": "alice", "uid": "u-alice", "groups": ["scrapers", "system:authenticated"]}


@dataclass
class Served:
    api: FakeApiServer
    health: HealthState
    session: aiohttp.ClientSession
    base: str
    endpoint: SecureEndpoint
    main: KubeClient
    """The scheduler's own client, the one ``endpoint`` derived its reviews' client from."""

    async def get(
        self, path: str, token: str | None = None, source: str | None = None, **headers: str
    ) -> tuple[int, str, bytes]:
        """GET ``path`` (from the loopback address ``source``, on a new connection, if given)."""
        h = dict(headers)
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if source is None:
            async with self.session.get(self.base + path, headers=h) as r:
                return r.status, r.headers.get("Content-Type", ""), await r.read()
        conn = aiohttp.TCPConnector(ssl=False, local_addr=(source, 0))
        async with aiohttp.ClientSession(connector=conn) as session, session.get(self.base + path, headers=h) as r:
            return r.status, r.headers.get("Content-Type", ""), await r.read()


@asynccontextmanager
async def secure_app(
    always_allow: Sequence[str] = ALWAYS_ALLOW, review_limits: ReviewLimits | None = None
) -> AsyncIterator[Served]:
    async with FakeApiServer() as api:
        api.users["alice-token"] = ALICE
        api.users["bob-token"] = {"username": "bob", "groups": ["system:authenticated"]}
        api.users["root-token"] = {"username": "root", "groups": ["system:masters", "system:authenticated"]}
        api.allowed.add(("alice", "/metrics", "get"))
        health = HealthState()
        main = api.client(qps=50, burst=100)
        endpoint = SecureEndpoint(main, Metrics(), health, always_allow, review_limits)
        sock = listen_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        stop = asyncio.Event()
        task = asyncio.create_task(endpoint.serve(sock, DynamicServingCert(None, None), stop))
        for _ in range(250):  # until the server listens on the bound socket
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except ConnectionRefusedError:
                await asyncio.sleep(0.02)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as session:
            served = Served(api, health, session, f"https://127.0.0.1:{port}", endpoint, main)
            try:
                yield served
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
                await endpoint.close()


def run(main: Callable[[Served], Awaitable[None]], **kw: Any) -> None:
    async def wrapper() -> None:
        async with secure_app(**kw) as s:
            await main(s)

    asyncio.run(wrapper())


def test_always_allowed_paths_are_served_without_any_review() -> None:
    async def main(s: Served) -> None:
        s.health.synced = True
        for path in ALWAYS_ALLOW:
            status, ctype, body = await s.get(path)
            assert (status, ctype, body) == (200, "text/plain; charset=utf-8", b"ok"), path
        assert s.api.requests == []  # anonymous, no TokenReview, no SubjectAccessReview

    run(main)


def test_responses_carry_kube_style_headers() -> None:
    async def main(s: Served) -> None:
        async with s.session.get(s.base + "/healthz") as r:
            assert r.headers["Cache-Control"] == "no-cache, private"
            assert r.headers["X-Content-Type-Options"] == "nosniff"

    run(main)


def test_invalid_token_is_401_on_every_path_even_always_allowed_ones() -> None:
    async def main(s: Served) -> None:
        for path in ("/healthz", "/livez", "/readyz", "/metrics", "/nope"):
            status, ctype, body = await s.get(path, token="garbage")
            assert status == 401, path
            assert ctype == "application/json"
            assert b'"reason":"Unauthorized"' in body and b'"code":401' in body
        reviews = s.api.sent("POST", TOKENREVIEWS)
        assert len(reviews) == 1  # the failure is cached too
        assert reviews[0].body["spec"] == {"token": "garbage"}
        assert reviews[0].body["kind"] == "TokenReview"
        assert s.api.sent("POST", SARS) == []

    run(main)


def test_anonymous_metrics_is_403_after_a_subject_access_review() -> None:
    async def main(s: Served) -> None:
        status, _, body = await s.get("/metrics")
        assert status == 403
        assert body == b'forbidden: User "system:anonymous" cannot get path "/metrics"\n'
        assert s.api.sent("POST", TOKENREVIEWS) == []
        (sar,) = s.api.sent("POST", SARS)
        assert sar.body["spec"] == {
            "user": "system:anonymous",
            "groups": ["system:unauthenticated"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        }

    run(main)


def test_authenticated_but_not_authorized_is_403() -> None:
    async def main(s: Served) -> None:
        status, _, body = await s.get("/metrics", token="bob-token")
        assert status == 403
        assert body == b'forbidden: User "bob" cannot get path "/metrics"\n'

    run(main)


def test_authorized_user_gets_metrics_and_the_reviews_are_cached() -> None:
    async def main(s: Served) -> None:
        status, ctype, body = await s.get("/metrics", token="alice-token")
        assert status == 200
        assert ctype.startswith("text/plain")
        assert b"leader_election_master_status" in body
        (sar,) = s.api.sent("POST", SARS)
        assert sar.body["spec"] == {
            "user": "alice",
            "uid": "u-alice",
            "groups": ["scrapers", "system:authenticated"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        }
        for _ in range(3):
            assert (await s.get("/metrics", token="alice-token"))[0] == 200
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 1
        assert len(s.api.sent("POST", SARS)) == 1
        # a different user is reviewed on its own
        assert (await s.get("/metrics", token="bob-token"))[0] == 403
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 2
        assert len(s.api.sent("POST", SARS)) == 2
        # the denial is cached as well
        assert (await s.get("/metrics", token="bob-token"))[0] == 403
        assert len(s.api.requests) == 4

    run(main)


def test_openmetrics_when_asked() -> None:
    async def main(s: Served) -> None:
        status, ctype, body = await s.get(
            "/metrics", token="alice-token", Accept="application/openmetrics-text; version=1.0.0"
        )
        assert status == 200
        assert ctype.startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")

    run(main)


def test_system_masters_skip_authorization() -> None:
    async def main(s: Served) -> None:
        assert (await s.get("/metrics", token="root-token"))[0] == 200
        assert (await s.get("/somewhere", token="root-token"))[0] == 404
        assert s.api.sent("POST", SARS) == []

    run(main)


def test_unknown_path_is_authorized_first_then_404() -> None:
    async def main(s: Served) -> None:
        assert (await s.get("/healthz/ping"))[0] == 403  # always-allow paths match exactly
        s.api.allowed.add(("alice", "/debug", "get"))
        status, _, body = await s.get("/debug", token="alice-token")
        assert (status, body) == (404, b"404 page not found\n")

    run(main)


def test_always_allow_paths_are_configurable() -> None:
    async def main(s: Served) -> None:
        assert (await s.get("/metrics"))[0] == 200
        assert (await s.get("/healthz"))[0] == 403  # no longer exempt
        assert len(s.api.sent("POST", SARS)) == 1

    run(main, always_allow=["/metrics"])


def test_readyz_reflects_sync_and_shutdown() -> None:
    async def main(s: Served) -> None:
        status, _, body = await s.get("/readyz")
        assert status == 500
        assert body == b"[-]sched-handler-sync failed: reason withheld\nreadyz check failed\n"
        s.health.synced = True
        assert await s.get("/readyz") == (200, "text/plain; charset=utf-8", b"ok")
        s.health.shutting_down = True
        status, _, body = await s.get("/readyz")
        assert status == 500
        assert body == b"[-]shutdown failed: reason withheld\nreadyz check failed\n"
        assert (await s.get("/livez"))[0] == 200  # shutting down is no liveness failure

    run(main)


def test_healthz_and_livez_reflect_the_leader_election_watchdog() -> None:
    async def main(s: Served) -> None:
        s.health.synced = True
        leader_ok = [True]
        s.health.leader_ok = lambda: leader_ok[0]
        assert (await s.get("/healthz"))[0] == 200
        leader_ok[0] = False
        for path in ("/healthz", "/livez"):
            status, _, body = await s.get(path)
            assert status == 500, path
            assert b"[-]leaderElection failed" in body
        leader_ok[0] = True
        assert (await s.get("/livez"))[0] == 200

    run(main)


def test_healthz_and_livez_fail_after_an_event_loop_stall() -> None:
    """The endpoint runs on the loop it reports on: it answers once the stall is over, with the
    stall the watchdog recorded (``LoopWatchdog.problem``); /readyz is not affected."""

    async def main(s: Served) -> None:
        s.health.synced = True
        problem: list[str | None] = [None]
        s.health.loop_problem = lambda: problem[0]
        assert (await s.get("/livez"))[0] == 200
        problem[0] = "event loop stalled for 3.1s, 0.2s ago"
        for path in ("/healthz", "/livez"):
            status, _, body = await s.get(path)
            assert status == 500, path
            assert body == b"[+]ping ok\n[-]event-loop failed: reason withheld\nhealthz check failed\n"
        assert (await s.get("/readyz"))[0] == 200
        problem[0] = None
        assert (await s.get("/healthz"))[0] == 200

    run(main)


def test_review_failure_is_500_not_a_decision() -> None:
    async def main(s: Served) -> None:
        s.api.fail("POST", TOKENREVIEWS, 403)
        status, _, body = await s.get("/metrics", token="alice-token")
        assert status == 500
        assert body == b"Internal Server Error: authorization check failed\n", body
        # nothing was cached: the next request is reviewed again and succeeds
        assert (await s.get("/metrics", token="alice-token"))[0] == 200
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 2

    run(main)


def test_review_server_errors_are_retried_once() -> None:
    async def main(s: Served) -> None:
        s.api.fail("POST", SARS, 503)
        assert (await s.get("/metrics", token="alice-token"))[0] == 200
        assert len(s.api.sent("POST", SARS)) == 2

    run(main)


def test_reviews_expire_after_the_cache_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delegated_auth, "CACHE_TTL", 0.2)

    async def main(s: Served) -> None:
        assert (await s.get("/metrics", token="alice-token"))[0] == 200
        assert (await s.get("/metrics", token="alice-token"))[0] == 200
        assert len(s.api.requests) == 2  # one TokenReview, one SubjectAccessReview
        await asyncio.sleep(0.3)
        s.api.allowed.clear()  # RBAC changed meanwhile
        assert (await s.get("/metrics", token="alice-token"))[0] == 403
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 2
        assert len(s.api.sent("POST", SARS)) == 2

    run(main)


def test_plain_http_is_not_answered() -> None:
    async def main(s: Served) -> None:
        plain = s.base.replace("https://", "http://")
        with pytest.raises(aiohttp.ClientError):
            async with s.session.get(plain + "/healthz") as r:
                await r.read()
        assert (await s.get("/healthz"))[0] == 200  # TLS still served

    run(main)


def test_concurrent_requests_with_one_token_share_one_review() -> None:
    async def main(s: Served) -> None:
        held = s.api.hold("POST", TOKENREVIEWS)
        requests = [asyncio.create_task(s.get("/metrics", token="garbage")) for _ in range(10)]
        await asyncio.wait_for(held.arrived.wait(), 5)
        await asyncio.sleep(0.2)  # every request is in by now, waiting on the one review
        held.release.set()
        assert [r[0] for r in await asyncio.gather(*requests)] == [401] * 10
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 1

    run(main)


def test_reviews_beyond_a_clients_budget_are_429_and_never_sent() -> None:
    async def main(s: Served) -> None:
        assert (await s.get("/metrics", token="t1"))[0] == 401
        assert (await s.get("/metrics", token="t2"))[0] == 401
        async with s.session.get(s.base + "/metrics", headers={"Authorization": "Bearer t3"}) as r:
            assert (r.status, r.headers["Retry-After"], r.headers["Content-Type"]) == (429, "1", "application/json")
            body = await r.json()
        assert (body["reason"], body["code"], body["details"]) == ("TooManyRequests", 429, {"retryAfterSeconds": 1})
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 2
        # A cached answer costs nothing, and another client has a budget of its own.
        assert (await s.get("/metrics", token="t1"))[0] == 401
        assert (await s.get("/metrics", token="t3", source="127.0.0.2"))[0] == 401
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 3
        assert s.endpoint.reviews.throttled == {"tokenreview": 1, "subjectaccessreview": 0}
        # Health probes carry no token: never reviewed, never throttled.
        assert (await s.get("/healthz"))[0] == 200

    run(main, review_limits=ReviewLimits(client_qps=0.001, client_burst=2, qps=100, burst=100))


def test_the_process_budget_bounds_reviews_from_many_clients() -> None:
    async def main(s: Served) -> None:
        codes = [(await s.get("/metrics", token=f"t{i}", source=f"127.0.0.{i}"))[0] for i in range(2, 8)]
        assert codes == [401, 401, 401, 429, 429, 429]
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 3
        # Anonymous requests to unknown paths need SubjectAccessReviews: the same budget.
        assert (await s.get("/anything", source="127.0.0.9"))[0] == 429
        assert s.api.sent("POST", SARS) == []

    run(main, review_limits=ReviewLimits(qps=0.001, burst=3, client_qps=100, client_burst=100))


def test_a_flood_of_bad_tokens_does_not_evict_good_answers() -> None:
    async def main(s: Served) -> None:
        assert (await s.get("/metrics", token="alice-token"))[0] == 200
        for i in range(20):
            assert (await s.get("/metrics", token=f"random-{i}"))[0] == 401
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 21
        assert (await s.get("/metrics", token="alice-token"))[0] == 200
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 21  # alice is still cached
        assert (await s.get("/metrics", token="random-0"))[0] == 401
        assert len(s.api.sent("POST", TOKENREVIEWS)) == 22  # the failure cache holds only 4

    big = 10**6
    run(main, review_limits=ReviewLimits(cache_size=4, qps=big, burst=big, client_qps=big, client_burst=big))


def test_parked_reviews_never_hold_up_the_schedulers_bindings() -> None:
    async def main(s: Served) -> None:
        held = s.api.hold("POST", TOKENREVIEWS, times=100)
        requests = [
            asyncio.create_task(s.get("/metrics", token=f"flood-{i}", source=f"127.0.1.{i}")) for i in range(1, 31)
        ]
        await asyncio.wait_for(held.arrived.wait(), 5)
        await asyncio.sleep(0.3)
        reviews = s.endpoint.review_client.gate
        assert reviews.in_use == 8 and len(reviews) == 22  # the reviews' own client is saturated
        t0 = time.monotonic()
        await asyncio.wait_for(s.main.bind("ns", "pod-a", "uid-a", "node-1"), 2)
        assert time.monotonic() - t0 < 0.5
        assert s.main.gate.in_use == 0 and len(s.api.sent("POST", "/api/v1/namespaces/ns/pods/pod-a/binding")) == 1
        held.release.set()
        assert {r[0] for r in await asyncio.gather(*requests)} == {401}

    run(main)
