"""A hostile client of the HTTPS endpoint, run as its own process by the load test.

``python -m tests.support.loadgen --port P --slow N --rps R --seconds S [--host H]`` opens ``N`` slow
connections (from the ``--slow-sources`` addresses in turn; slowloris: two thirds finish the TLS handshake and then send one request header
line every few seconds without ever ending the request, one third open TCP and send nothing)
and reopens any the server closes, once a second, as slowloris tools do; meanwhile it sends
``R`` requests per second to ``/metrics``, each on a new TLS connection, with a random bearer
token, from the ``--sources`` addresses in turn (many tenant pods). After ``S`` seconds it prints one JSON line: connections opened, how many were open at
the end, and the status codes of the token requests.

TLS runs on ``ssl.SSLObject`` over memory BIOs inside plain ``asyncio.Protocol`` objects, so
thousands of connections cost little memory on this side too.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import secrets
import ssl
import time

_CLIENT_CTX = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
_CLIENT_CTX.check_hostname = False
_CLIENT_CTX.verify_mode = ssl.CERT_NONE


class SlowConn(asyncio.Protocol):
    """One slow connection: ``tls`` finishes the handshake, then dribbles request headers."""

    def __init__(self, tls: bool) -> None:
        self.tls = tls
        self.transport: asyncio.Transport | None = None
        self.open = False
        self.handshaken = False
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl = _CLIENT_CTX.wrap_bio(self._in, self._out, server_side=False)
        self._lines = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.open = True
        if self.tls:
            self._step()

    def _step(self) -> None:
        try:
            self._ssl.do_handshake()
            self.handshaken = True
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLError, OSError):
            self.close()
            return
        self._flush()
        if self.handshaken:
            self._write(b"GET /metrics HTTP/1.1\r\nHost: scheduler\r\n")

    def _flush(self) -> None:
        out = self._out.read()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)

    def _write(self, data: bytes) -> None:
        try:
            self._ssl.write(data)
        except (ssl.SSLError, OSError):
            self.close()
            return
        self._flush()

    def dribble(self) -> None:
        """One more header line (never the blank line that would end the request)."""
        if self.open and self.handshaken:
            self._lines += 1
            self._write(b"X-Slow-%d: %s\r\n" % (self._lines, b"a" * 16))

    def data_received(self, data: bytes) -> None:
        self._in.write(data)
        if not self.handshaken:
            self._step()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.abort()


async def slowloris(
    host: str, sources: list[str], port: int, n: int, until: float, stats: collections.Counter[str]
) -> list[SlowConn]:
    """Keep ``n`` slow connections open until ``until`` (loop time), reopening closed ones,
    from the ``sources`` addresses in turn (``""``: the kernel's choice)."""
    loop = asyncio.get_running_loop()
    conns: list[SlowConn | None] = [None] * n

    async def open_one(i: int) -> None:
        proto = SlowConn(tls=i % 3 != 0)
        source = sources[i % len(sources)]
        try:
            await loop.create_connection(lambda: proto, host, port, local_addr=(source, 0) if source else None)
        except OSError:
            stats["connect_errors"] += 1
            return
        stats["opened"] += 1
        conns[i] = proto

    tick = 0
    while loop.time() < until:
        closed = [i for i, c in enumerate(conns) if c is None or not c.open]
        for start in range(0, len(closed), 200):  # in batches, like a real tool ramping up
            await asyncio.gather(*(open_one(i) for i in closed[start : start + 200]))
            await asyncio.sleep(0.05)
        tick += 1
        if tick % 4 == 0:
            for c in conns:
                if c is not None:
                    c.dribble()
        await asyncio.sleep(1.0)
    return [c for c in conns if c is not None]


async def random_tokens(
    host: str,
    sources: list[str],
    port: int,
    rps: float,
    until: float,
    codes: collections.Counter[str],
    latencies: list[float],
) -> None:
    """``rps`` GET /metrics per second, each on a new TLS connection with a random token, from
    the ``sources`` addresses in turn (``""``: the kernel's choice)."""
    loop = asyncio.get_running_loop()

    async def one(source: str) -> None:
        t0 = loop.time()
        local = (source, 0) if source else None
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=_CLIENT_CTX, local_addr=local), 10)
            token = secrets.token_urlsafe(32)
            w.write(
                f"GET /metrics HTTP/1.1\r\nHost: scheduler\r\nAuthorization: Bearer {token}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            line = await asyncio.wait_for(r.readline(), 15)
            codes[line.split()[1].decode() if len(line.split()) > 1 else "none"] += 1
            latencies.append(loop.time() - t0)
            w.close()
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            codes[type(exc).__name__] += 1

    tasks: set[asyncio.Task[None]] = set()
    n = 0
    start = loop.time()
    while loop.time() < until:
        n += 1
        t = asyncio.ensure_future(one(sources[n % len(sources)]))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        await asyncio.sleep(max(0.0, start + n / rps - loop.time()))
    if tasks:
        await asyncio.wait(tasks, timeout=15)


async def main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + args.seconds
    stats: collections.Counter[str] = collections.Counter()
    codes: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    sources = args.sources.split(",") if args.sources else [""]
    t0 = time.monotonic()
    tokens = asyncio.ensure_future(
        random_tokens(args.host, sources, args.port, args.rps, until, codes, latencies)
        if args.rps > 0
        else asyncio.sleep(0)
    )
    slow_sources = args.slow_sources.split(",") if args.slow_sources else [""]
    conns = await slowloris(args.host, slow_sources, args.port, args.slow, until, stats)
    await tokens
    latencies.sort()
    out = {
        "seconds": round(time.monotonic() - t0, 1),
        "slow_opened": stats["opened"],
        "slow_connect_errors": stats["connect_errors"],
        "slow_open_at_end": sum(1 for c in conns if c.open),
        "token_requests": sum(codes.values()),
        "token_codes": dict(codes),
        "token_p50_s": round(latencies[len(latencies) // 2], 3) if latencies else None,
        "cpu_s": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime, 1),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--slow", type=int, default=2000)
    p.add_argument("--rps", type=float, default=100.0)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--sources", default="", help="comma-separated source IPs for the token requests")
    p.add_argument("--slow-sources", default="", help="comma-separated source IPs for the slow connections")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main(p.parse_args()))
