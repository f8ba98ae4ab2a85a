"""Informer behaviour when the API server misbehaves: client-go's backoff and short-watch guard,
stalled-watch detection, staleness and relists (against a small real HTTP server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from ome_scheduler.api.core import Node
from ome_scheduler.kube import informer as informer_mod
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Backoff, Informer

NODE = {"metadata": {"name": "n1", "resourceVersion": "5"}}


class WatchServer:
    """LIST and WATCH of ``/api/v1/nodes`` and ``GET /version``, each with a chosen behaviour.

    ``watch``: ``"close"`` (accept, then end the stream at once), ``"stall"`` (accept, then send
    nothing), ``"error"`` (answer 500). ``probe``: ``"ok"`` or ``"stall"``. ``list_failures``:
    LISTs answered 403 (not retried by the client) before one succeeds. Arrival times are recorded per kind.
    """

    def __init__(self) -> None:
        self.watch = "stall"
        self.probe = "ok"
        self.list_failures = 0
        self.lists: list[float] = []
        self.watches: list[float] = []
        self.probes: list[float] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> WatchServer:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self._nodes)
        app.router.add_get("/version", self._version)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _nodes(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            self.lists.append(time.monotonic())
            if self.list_failures > 0:
                self.list_failures -= 1
                return web.json_response({"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403)
            return web.json_response({"metadata": {"resourceVersion": "10"}, "items": [NODE]})
        self.watches.append(time.monotonic())
        if self.watch == "error":
            return web.json_response({"kind": "Status", "code": 500, "reason": "InternalError"}, status=500)
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if self.watch == "stall":
            await asyncio.sleep(3600)
        await resp.write_eof()
        return resp

    async def _version(self, request: web.Request) -> web.Response:
        self.probes.append(time.monotonic())
        if self.probe == "stall":
            await asyncio.sleep(3600)
        return web.json_response({"gitVersion": "v1.35.4"})


async def until(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait (polling every 10 ms) until ``pred()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def run_informer(
    configure: Callable[[WatchServer], None],
    seconds: float,
    during: Callable[[Informer[Node]], Awaitable[Any]] | None = None,
) -> tuple[WatchServer, Informer[Node]]:
    """Run an informer of nodes against a fresh WatchServer for ``seconds``; ``during`` runs meanwhile."""

    async def main() -> tuple[WatchServer, Informer[Node]]:
        async with WatchServer() as srv:
            configure(srv)
            client = KubeClient(srv.url, False, "t", qps=0, burst=1)
            inf: Informer[Node] = Informer(client, "/api/v1/nodes", Node, name="nodes")
            task = asyncio.create_task(inf.run())
            try:
                if during is not None:
                    await during(inf)
                await asyncio.sleep(seconds)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()
            return srv, inf

    return asyncio.run(main())


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    now = [0.0]
    b = Backoff(initial=1.0, cap=8.0, reset_after=60.0, jitter=0.0, clock=lambda: now[0])
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    b.reset()
    assert b.next() == 1.0
    assert b.next() == 2.0
    now[0] += 61.0  # two minutes without a failure: the server has been healthy
    assert b.next() == 1.0
    jittered = Backoff(initial=1.0, jitter=0.2)
    assert all(1.0 <= jittered.next() <= 1.2 for _ in range(1)) and 2.0 <= jittered.next() <= 2.4


def test_a_watch_that_closes_at_once_is_not_reopened_in_a_hot_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def close(srv: WatchServer) -> None:
        srv.watch = "close"

    srv, inf = run_informer(close, 3.0)
    # Without client-go's short-watch guard the informer would re-open as fast as the server
    # answers (hundreds of watches in 3 s); with it, each very short watch backs off
    # (0.8 s, 1.6 s ... +20 %) and is followed by a LIST, which does not reset the backoff.
    assert 2 <= len(srv.watches) <= 3, srv.watches
    assert len(srv.lists) == len(srv.watches)
    gaps = [b - a for a, b in zip(srv.watches, srv.watches[1:], strict=False)]
    assert 0.8 <= gaps[0] <= 1.2
    if len(gaps) > 1:
        assert gaps[1] >= 1.6


def test_the_backoff_resets_after_a_successful_list(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fast(Backoff):
        def __init__(self) -> None:
            super().__init__(initial=0.05, cap=5.0)

    monkeypatch.setattr(informer_mod, "Backoff", Fast)

    def configure(srv: WatchServer) -> None:
        srv.list_failures = 4  # backs off 0.05, 0.1, 0.2, 0.4 s
        srv.watch = "error"  # then every watch fails

    srv, _ = run_informer(configure, 1.5)
    assert len(srv.lists) >= 6
    # The first LIST that succeeded is the fifth; its watch failed, and the LIST after that
    # came after the initial delay (0.05 s + jitter), not after the 0.8 s the failures had grown to.
    first_ok = srv.lists[4]
    failed_watch = next(t for t in srv.watches if t >= first_ok)
    next_list = next(t for t in srv.lists if t > failed_watch)
    assert next_list - failed_watch < 0.15, next_list - failed_watch


def _fast_stall_detection(monkeypatch: pytest.MonkeyPatch, silence_max: float = 30.0) -> None:
    monkeypatch.setattr(informer_mod, "WATCH_QUIET", 0.3)
    monkeypatch.setattr(informer_mod, "ANSWER_FRESH", 0.1)
    monkeypatch.setattr(informer_mod, "PROBE_TIMEOUT", 0.3)
    monkeypatch.setattr(informer_mod, "WATCH_SILENCE_MAX", silence_max)


def test_a_stalled_watch_is_abandoned_once_the_server_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    _fast_stall_detection(monkeypatch)
    stale_seen: list[bool] = []

    async def watch_it(inf: Informer[Node]) -> None:
        await inf.synced.wait()
        assert not inf.stale
        await until(lambda: inf.stale)
        stale_seen.append(inf.stale)

    def stall(srv: WatchServer) -> None:
        srv.watch = "stall"
        srv.probe = "stall"

    srv, inf = run_informer(stall, 1.2, during=watch_it)
    assert stale_seen == [True]
    assert srv.probes, "the quiet watch's server was probed"
    # Abandoned WATCH_QUIET + PROBE_TIMEOUT (0.6 s) after the watch opened, then a LIST after the
    # backoff (0.8 s + jitter): the informer re-reads rather than resuming.
    detected = srv.lists[1] - srv.watches[0]
    assert 0.6 + 0.8 <= detected <= 0.6 + 0.96 + 0.2, detected
    assert not inf.stale  # that LIST completed


def test_a_quiet_watch_of_a_server_that_answers_is_kept_until_bookmarks_are_overdue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fast_stall_detection(monkeypatch, silence_max=1.0)

    def quiet(srv: WatchServer) -> None:
        srv.watch = "stall"
        srv.probe = "ok"

    srv, _ = run_informer(quiet, 2.4)
    assert len(srv.probes) >= 2  # checked every ANSWER_FRESH after WATCH_QUIET
    # Kept past WATCH_QUIET + PROBE_TIMEOUT; abandoned only at WATCH_SILENCE_MAX, then re-listed.
    assert len(srv.lists) >= 2
    assert srv.lists[1] - srv.watches[0] >= 1.0 + 0.8


def test_request_relist_abandons_the_watch_and_lists_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _fast_stall_detection(monkeypatch)
    asked: list[float] = []

    async def kick(inf: Informer[Node]) -> None:
        await inf.synced.wait()
        await asyncio.sleep(0.1)
        asked.append(time.monotonic())
        assert not inf.current_since(asked[0])
        inf.request_relist()
        await until(lambda: inf.current_since(asked[0]))

    def quiet(srv: WatchServer) -> None:
        srv.watch = "stall"

    srv, inf = run_informer(quiet, 0.2, during=kick)
    assert len(srv.lists) == 2 and srv.lists[1] - asked[0] < 0.2
    assert len(srv.watches) == 2
    assert not inf.stale
