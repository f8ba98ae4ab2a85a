"""The scheduler's side of the HTTPS load test, run as its own process.

``python -m tests.support.https_load_target --api URL`` wires what ``ome_scheduler.app.run.App`` wires
around one API client, against the API server at ``URL``:

* the HTTPS endpoint as the scheduler runs it (:class:`~ome_scheduler.serving.endpoints.SecureEndpoint`:
  reviews on a client derived from the main one, default limits) on ``127.0.0.1``, with the
  self-signed certificate;
* a Lease leader elector on the main client, renewing every ``--retry-period`` seconds (kube's 15 s / 10 s / 2 s by default);
* ``--binders`` tasks POSTing pod Bindings through the main client (``KubeClient.bind``,
  ``PRIORITY_CRITICAL``) back to back, so their rate is what the main client allows.

It prints ``PORT <n>`` once serving, runs until its stdin closes, then prints one JSON line:
the monotonic times of every successful renewal and every completed Binding, whether the
lease was lost, the endpoint's connection counters, the reviews sent and throttled, and its
own peak RSS and CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from ome_scheduler.app.leader import LeaderElector
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.metrics import Metrics
from ome_scheduler.serving.endpoints import HealthState, SecureEndpoint, listen_socket
from ome_scheduler.serving.secure_serving import raise_fd_limit
from ome_scheduler.serving.tls import DynamicServingCert


@dataclass
class RecordingElector(LeaderElector):
    """A LeaderElector that notes the monotonic time of every successful acquire or renew."""

    renewals: list[float] = field(default_factory=list)
    failed_attempts: list[str] = field(default_factory=list)

    durations: list[float] = field(default_factory=list)

    async def try_acquire_or_renew(self) -> bool:
        t0 = time.monotonic()
        try:
            ok = await super().try_acquire_or_renew()
            self.durations.append(time.monotonic() - t0)
        except Exception as exc:
            self.failed_attempts.append(repr(exc))
            raise
        if ok:
            self.renewals.append(time.monotonic())
        else:
            self.failed_attempts.append("not renewed")
        return ok


async def main(args: argparse.Namespace) -> None:
    client = KubeClient(args.api, False, "scheduler-token", qps=args.qps, burst=args.burst)
    metrics = Metrics()
    health = HealthState()
    health.synced = True
    endpoint = SecureEndpoint(client, metrics, health, ["/healthz", "/readyz", "/livez"])
    elector = RecordingElector(
        client,
        namespace="kube-system",
        name="ome-scheduler",
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        metrics=metrics,
    )
    binds: list[float] = []
    bind_errors: list[str] = []
    lost: list[float] = []
    stop = anyio.Event()

    health.leader_ok = elector.healthy

    async def binder(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                await client.bind("load", f"pod-{i}-{n}", f"uid-{i}-{n}", f"node-{n % 50}")
                binds.append(time.monotonic())
            except Exception as exc:
                bind_errors.append(repr(exc))

    lags: list[tuple[float, float]] = []

    async def loop_lag() -> None:
        """How late a 50 ms sleep wakes up: the event loop's stalls, as the scheduler would feel them."""
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append((t, time.monotonic() - t - 0.05))

    async def wait_stdin_closed() -> None:
        await anyio.to_thread.run_sync(sys.stdin.read)
        stop.set()

    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    certs = DynamicServingCert(None, None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(endpoint.serve, sock, certs, stop)
        await elector.acquire()
        tg.start_soon(elector.renew_forever, lambda: lost.append(time.monotonic()))
        for i in range(args.binders):
            tg.start_soon(binder, i)
        tg.start_soon(loop_lag)
        print(f"PORT {port}", flush=True)
        await wait_stdin_closed()
        await asyncio.sleep(0.2)
        tg.cancel_scope.cancel()
    server = endpoint.server
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {
        "renewals": elector.renewals,
        "failed_renewals": elector.failed_attempts,
        "renewal_durations": sorted(elector.durations)[-3:],
        "loop_lags": lags,
        "binds": binds,
        "bind_errors": bind_errors[:5],
        "bind_error_count": len(bind_errors),
        "lost": lost,
        "accepted": server.accepted if server is not None else 0,
        "peak_connections": server.peak_connections if server is not None else 0,
        "closed": dict(server.closed) if server is not None else {},
        "max_connections": endpoint.limits.max_connections,
        "reviews_sent": endpoint.reviews.sent,
        "reviews_throttled": endpoint.reviews.throttled,
        "max_rss_mib": ru.ru_maxrss // 1024,
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
    }
    await endpoint.close()
    await client.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--api", required=True)
    p.add_argument("--qps", type=float, default=100.0)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--binders", type=int, default=8)
    p.add_argument("--lease-duration", type=float, default=15.0)
    p.add_argument("--renew-deadline", type=float, default=10.0)
    p.add_argument("--retry-period", type=float, default=2.0)
    raise_fd_limit()
    asyncio.run(main(p.parse_args()))
