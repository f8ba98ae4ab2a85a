"""HttpsServer's limits, on a real listening socket with real TLS clients.

Each test serves a small handler with shortened limits and drives it the way a hostile or
clumsy client would: dribbling a request head, saying nothing after connecting, idling
after an answer, opening more connections than the cap, sending oversized heads and
bodies, pipelining, or stalling the handler; then checks what the client saw and why the
server says it closed the connection (``HttpsServer.closed``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from ome_scheduler.serving.endpoints import listen_socket
from ome_scheduler.serving.secure_serving import HttpsServer, Request, Response, ServingLimits, connection_cap
from ome_scheduler.serving.tls import DynamicServingCert, TLSPolicy

CERTS = DynamicServingCert(None, None)


def client_ctx(**kw: Any) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for k, v in kw.items():
        if k == "ciphers":
            ctx.set_ciphers(v)
        else:
            setattr(ctx, k, v)
    return ctx


async def ok(req: Request) -> Response:
    return Response(200, "text/plain", f"{req.method} {req.path}".encode())


@asynccontextmanager
async def serving(
    handler: Callable[[Request], Awaitable[Response]] = ok, certs: DynamicServingCert = CERTS, **limits: Any
) -> AsyncIterator[tuple[HttpsServer, int]]:
    srv = HttpsServer(handler, lambda: certs.context, ServingLimits(**limits))
    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop = asyncio.Event()
    task = asyncio.create_task(srv.serve(sock, stop))
    for _ in range(200):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            break
        except ConnectionRefusedError:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # let the probe connection above be accounted and dropped
    try:
        yield srv, port
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def tls(
    port: int, ctx: ssl.SSLContext | None = None, source: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=ctx or client_ctx(), local_addr=(source, 0))


async def read_response(r: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status = int((await r.readline()).split()[1])
    headers: dict[str, str] = {}
    while (line := await r.readline()) not in (b"\r\n", b""):
        k, v = line.decode().split(":", 1)
        headers[k.lower()] = v.strip()
    body = await r.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def closed_within(r: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closed the connection (EOF or reset)."""
    t0 = time.monotonic()
    try:
        while await asyncio.wait_for(r.read(4096), seconds):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    return time.monotonic() - t0


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())


def test_a_request_head_must_be_complete_within_the_read_timeout_however_it_trickles() -> None:
    async def main() -> None:
        async with serving(read_header_timeout=0.6) as (srv, port):
            r, w = await tls(port)
            w.write(b"GET /healthz HTTP/1.1\r\n")
            t0 = time.monotonic()

            async def dribble() -> None:
                for i in range(40):  # a header line every 0.1 s: bytes keep coming
                    await asyncio.sleep(0.1)
                    w.write(b"X-%d: y\r\n" % i)

            d = asyncio.create_task(dribble())
            await closed_within(r, 3)
            elapsed = time.monotonic() - t0
            d.cancel()
            assert 0.5 <= elapsed <= 1.3, elapsed
            assert srv.closed == {"read_timeout": 1}

    run(main)


def test_a_silent_connection_is_dropped_at_the_handshake_timeout() -> None:
    async def main() -> None:
        async with serving(handshake_timeout=0.4) as (srv, port):
            r, _ = await asyncio.open_connection("127.0.0.1", port)  # TCP only, no ClientHello
            elapsed = await closed_within(r, 3)
            assert 0.3 <= elapsed <= 1.0, elapsed
            assert srv.closed == {"handshake_timeout": 1}

    run(main)


def test_an_idle_keep_alive_connection_is_closed_with_close_notify() -> None:
    async def main() -> None:
        async with serving(idle_timeout=0.5) as (srv, port):
            r, w = await tls(port)
            w.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await read_response(r))[0] == 200
            t0 = time.monotonic()
            assert await asyncio.wait_for(r.read(), 3) == b""  # a clean TLS EOF, not a reset
            assert 0.4 <= time.monotonic() - t0 <= 1.1
            assert srv.closed == {"idle_timeout": 1}

    run(main)


def test_keep_alive_serves_several_requests_and_pipelined_ones_in_order() -> None:
    async def main() -> None:
        async with serving() as (_, port):
            r, w = await tls(port)
            w.write(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two?q=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await read_response(r))[2] == b"GET /one"
            assert (await read_response(r))[2] == b"GET /two"
            w.write(b"GET /thr%65e HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await read_response(r))[2] == b"GET /three"  # percent-decoded, as Go's URL.Path

    run(main)


def test_at_the_cap_a_probe_displaces_the_longest_waiting_connection_of_the_crowding_client() -> None:
    async def main() -> None:
        async with serving(max_connections=4) as (srv, port):
            slow = []
            for source in ("127.0.0.3", "127.0.0.1", "127.0.0.1", "127.0.0.1"):
                r, w = await tls(port, source=source)
                w.write(b"GET /healthz HTTP/1.1\r\n")  # never finished
                slow.append((r, w))
                await asyncio.sleep(0.05)
            assert srv.open_connections == 4
            # The kubelet's address holds nothing: it gets in, at the expense of the oldest
            # connection of the client above its share (127.0.0.1: 3 > 4 // 3), not of the
            # older connection of 127.0.0.3.
            r, w = await tls(port, source="127.0.0.2")
            w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await read_response(r))[:1] == (200,)
            assert srv.closed == {"evicted": 1}
            assert await closed_within(slow[1][0], 2) < 2
            assert srv.open_connections == 4
            # 127.0.0.1 reconnecting at the cap is over its share: refused before any TLS work.
            with pytest.raises((ConnectionResetError, ssl.SSLError, asyncio.IncompleteReadError)):
                await tls(port, source="127.0.0.1")
            await asyncio.sleep(0.05)
            assert srv.closed == {"evicted": 1, "refused": 1}

    run(main)


def test_with_more_clients_than_connections_a_newcomer_still_gets_one() -> None:
    async def main() -> None:
        async with serving(max_connections=2) as (srv, port):
            slow = []
            for source in ("127.0.0.3", "127.0.0.4"):
                r, w = await tls(port, source=source)
                w.write(b"GET /healthz HTTP/1.1\r\n")
                slow.append((r, w))
                await asyncio.sleep(0.05)
            # Three clients for two connections: the share is one each, nobody is above it,
            # so the newcomer displaces the longest-waiting connection of all.
            r, w = await tls(port, source="127.0.0.2")
            w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await read_response(r))[:1] == (200,)
            assert await closed_within(slow[0][0], 2) < 2
            assert srv.closed == {"evicted": 1}

    run(main)


def test_a_connection_being_answered_is_never_displaced() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def stall(req: Request) -> Response:
            await release.wait()
            return await ok(req)

        async with serving(stall, max_connections=2) as (srv, port):
            busy = []
            for _ in range(2):
                r, w = await tls(port)
                w.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
                busy.append((r, w))  # a collected writer would close its connection
            await asyncio.sleep(0.2)
            assert srv.stages() == {"busy": 2}
            r, _ = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
            assert await closed_within(r, 2) < 2
            assert srv.closed == {"refused": 1}
            release.set()
            for r, _ in busy:
                assert (await read_response(r))[2] == b"GET /slow"

    run(main)


def test_oversized_heads_and_bodies_are_refused() -> None:
    async def main() -> None:
        async with serving(max_header_bytes=1024, max_body_bytes=100) as (srv, port):
            big = b"X-Big: " + b"a" * 2000 + b"\r\n"
            r, w = await tls(port)
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")  # complete, in one piece
            status, headers, _ = await read_response(r)
            assert (status, headers["connection"]) == (431, "close")
            r, w = await tls(port)
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\n" + big)  # still arriving
            assert (await read_response(r))[0] == 431
            r, w = await tls(port)
            w.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n")
            assert (await read_response(r))[0] == 413
            r, w = await tls(port)
            w.write(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(3):
                w.write(b"40\r\n" + b"z" * 64 + b"\r\n")
            assert (await read_response(r))[0] == 413
            r, w = await tls(port)
            w.write(b"POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"b" * 100)
            assert (await read_response(r))[:1] == (200,)
            r, w = await tls(port)
            w.write(b"NOT HTTP AT ALL\r\n\r\n")
            assert (await read_response(r))[0] == 400
            await asyncio.sleep(0.1)
            assert srv.closed == {"header_too_large": 2, "body_too_large": 2, "bad_request": 1}

    run(main)


def test_pipelining_more_than_one_request_ahead_closes_the_connection() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def stall(req: Request) -> Response:
            await release.wait()
            return await ok(req)

        async with serving(stall, max_header_bytes=1024, max_body_bytes=100) as (srv, port):
            r, w = await tls(port)
            w.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /b HTTP/1.1\r\nX: " + b"p" * 5000)
            assert await closed_within(r, 2) < 2
            assert srv.closed == {"pipelined_too_much": 1}
            release.set()

    run(main)


def test_answers_carry_date_reason_and_kube_headers_and_head_has_no_body() -> None:
    async def main() -> None:
        async with serving() as (_, port):
            r, w = await tls(port)
            w.write(b"HEAD /x HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            line = await r.readline()
            assert line == b"HTTP/1.1 200 OK\r\n"
            head = (await r.readuntil(b"\r\n\r\n")).decode().lower()
            assert "content-length: 7" in head and "date: " in head
            assert "cache-control: no-cache, private" in head and "x-content-type-options: nosniff" in head
            status, headers, body = await read_response(r)  # the HEAD sent no body
            assert (status, body, headers["connection"]) == (200, b"GET /x", "close")
            assert await asyncio.wait_for(r.read(), 2) == b""

    run(main)


def test_a_hanging_handler_is_cut_at_the_response_timeout() -> None:
    cancelled = []

    async def hang(req: Request) -> Response:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(req.path)
            raise
        raise AssertionError

    async def main() -> None:
        async with serving(hang, response_timeout=0.5) as (srv, port):
            r, w = await tls(port)
            w.write(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
            elapsed = await closed_within(r, 3)
            assert 0.4 <= elapsed <= 1.2, elapsed
            await asyncio.sleep(0.05)
            assert srv.closed == {"response_timeout": 1} and cancelled == ["/hang"]

    run(main)


def test_stopping_lets_answers_in_progress_finish() -> None:
    async def slowish(req: Request) -> Response:
        await asyncio.sleep(0.3)
        return await ok(req)

    async def main() -> None:
        srv = HttpsServer(slowish, lambda: CERTS.context, ServingLimits(shutdown_grace=2.0))
        sock = listen_socket("127.0.0.1", 0)
        stop = asyncio.Event()
        task = asyncio.create_task(srv.serve(sock, stop))
        await asyncio.sleep(0.1)
        r, w = await tls(sock.getsockname()[1])
        w.write(b"GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.1)
        stop.set()
        assert (await read_response(r))[2] == b"GET /last"
        await asyncio.wait_for(task, 5)
        assert srv.open_connections == 0

    run(main)


@pytest.mark.parametrize(
    ("client", "served"),
    [
        ({}, "TLSv1.3 TLS_AES_256_GCM_SHA384"),
        ({"maximum_version": ssl.TLSVersion.TLSv1_2}, "TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256"),
        (
            {"maximum_version": ssl.TLSVersion.TLSv1_2, "ciphers": "ECDHE-ECDSA-AES256-GCM-SHA384"},
            "TLSv1.2 ECDHE-ECDSA-AES256-GCM-SHA384",
        ),
        (
            {"maximum_version": ssl.TLSVersion.TLSv1_2, "ciphers": "ECDHE-ECDSA-CHACHA20-POLY1305"},
            "TLSv1.2 ECDHE-ECDSA-CHACHA20-POLY1305",
        ),
        ({"maximum_version": ssl.TLSVersion.TLSv1_2, "ciphers": "ECDHE-ECDSA-AES128-SHA"}, None),  # CBC
        ({"maximum_version": ssl.TLSVersion.TLSv1_2, "ciphers": "ECDHE-ECDSA-AES256-SHA384"}, None),  # CBC
        ({"maximum_version": ssl.TLSVersion.TLSv1_2, "ciphers": "AES128-GCM-SHA256"}, None),  # RSA kex
        (
            {
                "minimum_version": ssl.TLSVersion.TLSv1_1,
                "maximum_version": ssl.TLSVersion.TLSv1_1,
                "ciphers": "DEFAULT:@SECLEVEL=0",
            },
            None,
        ),
    ],
)
def test_only_tls12_and_later_with_aead_suites_is_served(client: dict[str, Any], served: str | None) -> None:
    async def main() -> None:
        async with serving() as (srv, port):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1_1 is deprecated client-side too
                ctx = client_ctx(**client)
            if served is None:
                with pytest.raises(ssl.SSLError):
                    await tls(port, ctx)
                await asyncio.sleep(0.1)
                assert srv.closed == {"handshake_error": 1}
                return
            _, w = await tls(port, ctx)
            ssl_obj = w.get_extra_info("ssl_object")
            assert f"{ssl_obj.version()} {ssl_obj.cipher()[0]}" == served

    run(main)


def test_tls13_only_when_asked() -> None:
    async def main() -> None:
        certs = DynamicServingCert(None, None, TLSPolicy(min_version=ssl.TLSVersion.TLSv1_3))
        async with serving(certs=certs) as (_, port):
            with pytest.raises(ssl.SSLError):
                await tls(port, client_ctx(maximum_version=ssl.TLSVersion.TLSv1_2))
            _, w = await tls(port)
            assert w.get_extra_info("ssl_object").version() == "TLSv1.3"

    run(main)


def test_the_connection_cap_stays_below_the_descriptor_limit() -> None:
    assert connection_cap(1024, fd_limit=1048576) == 1024
    assert connection_cap(1024, fd_limit=1024) == 1024 - 256
    assert connection_cap(1024, fd_limit=100) == 16


def test_handshakes_are_paced_per_loop_iteration_newest_first() -> None:
    class FakeConn:
        def __init__(self, n: int, ran: list[int]) -> None:
            self.n, self.ran = n, ran

        def handshake_step(self) -> None:
            self.ran.append(self.n)

    async def main() -> None:
        srv = HttpsServer(ok, lambda: CERTS.context)
        ran: list[int] = []
        conns = [FakeConn(i, ran) for i in range(20)]
        granted = [srv._handshake_slot(c) for c in conns]
        assert granted == [True] * 8 + [False] * 12  # the rest wait for later iterations
        srv._forget(conns[19], None)  # closed while waiting: dropped from the queue
        await asyncio.sleep(0)  # next iteration: the newest waiting first
        assert ran == [18, 17, 16, 15, 14, 13, 12, 11]
        assert srv._handshake_slot(FakeConn(99, ran)) is False  # this iteration's budget is spent
        await asyncio.sleep(0)
        assert ran[8:] == [99, 10, 9, 8]

    run(main)
