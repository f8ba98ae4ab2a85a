"""Wires one scheduler process together and runs it: config, client, informers, loop, shutdown.

Start-up order, as kube-scheduler's ``cmd/kube-scheduler/app/server.go`` ``Run``: load and
validate the configuration (exit 1 with a message naming the argument when invalid), build
the frameworks (plugin argument validation), connect to the API server, start the informers
of :data:`INFORMERS`, wait for them to sync (optional ones, such as PodGroups whose CRD may be
missing, only as long as a plugin asks), elect a leader, then run the scheduling loop, the
queue flushes, the plugins' background tasks and the PodGroup status keeper
(``controllers/podgroupstatus.py``) until SIGTERM or SIGINT. ``SIGUSR2`` runs the cache debugger
(``app/debugger.py``: a dump, and a comparison with a fresh LIST, in the log).

Structured concurrency is anyio's on the asyncio backend: one root task group holds every
long-running task; a stop request cancels the step waiting for it, and the graceful shutdown
ends by cancelling the group.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from ome_scheduler import logs
from ome_scheduler.app.debugger import CacheDebugger
from ome_scheduler.app.gcpolicy import freeze_long_lived, refreeze_forever
from ome_scheduler.app.informers import INFORMERS, build_informer
from ome_scheduler.app.leader import LeaderElector
from ome_scheduler.app.options import Options, apply_flags, master_error, name_origins
from ome_scheduler.app.watchdog import LoopWatchdog, stall_bound
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.load import load_config
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.controllers.podgroupstatus import PodGroupStatusKeeper
from ome_scheduler.framework.fence import Fence
from ome_scheduler.kube.binding import GatedBinder
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.credentials import credentials_error
from ome_scheduler.kube.podgroupwriter import PodGroupWriter
from ome_scheduler.kube.recorder import Recorder
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from ome_scheduler.serving.endpoints import HealthState, SecureEndpoint, listen_socket
from ome_scheduler.serving.secure_serving import raise_fd_limit
from ome_scheduler.serving.tls import DynamicServingCert, TLSPolicy

log = logs.get_logger()


LEASE_CONNECTIONS = 2
"""Connections (and requests in flight) of the leader elector's own API client: one renewal
is in flight at a time, a second connection covers the release racing a renewal's reply."""


class App:
    """One scheduler process: informers, HTTPS endpoint, leader election and the loop.

    With leader election, the elector talks through a client of its own (``lease_client``:
    its own connections, rate limiter and in-flight gate, User-Agent ``.../leader-election``),
    as kube-scheduler's ``leaderElectionClient``: Bindings, events and TokenReviews never delay
    a renewal. The scheduler gets a :class:`Fence` fed by the elector's last renewal, and a
    :class:`LoopWatchdog` armed while leading ends the process when the event loop stalls
    (``watchdog.py``).
    """

    def __init__(
        self,
        opts: Options,
        cfg: KubeSchedulerConfiguration,
        client: KubeClient,
        listener: tuple[socket.socket, DynamicServingCert] | None = None,
    ) -> None:
        self.opts = opts
        self.listener = listener
        self.cfg = cfg
        self.client = client
        self.metrics = Metrics()
        self.health = HealthState()
        # Reviews get a client of their own (connections, rate limit, in-flight gate), so a
        # flood of bearer tokens never queues in front of Bindings and Lease renewals.
        self.endpoint = SecureEndpoint(client, self.metrics, self.health, opts.authorization_always_allow_paths)
        self.recorder = Recorder(client)
        le = cfg.leader_election
        self.elector: LeaderElector | None = None
        self.lease_client: KubeClient | None = None
        fence: Fence | None = None
        if le.leader_elect:
            cc = cfg.client_connection
            self.lease_client = client.derive(
                qps=cc.qps,
                burst=cc.burst,
                max_in_flight=LEASE_CONNECTIONS,
                max_connections=LEASE_CONNECTIONS,
                user_agent="leader-election",
            )
            self.elector = LeaderElector.from_config(self.lease_client, le, self.metrics)
            elector = self.elector
            self.health.leader_ok = lambda: elector.healthy()
            fence = Fence(elector.renewed_at, le.renew_deadline)
        # Bindings go out only from a view re-read since the API server was last out of reach,
        # and only to nodes the informer still has (kube/binding.py); the fence wraps it.
        # A Binding also waits for the pod's earlier status writes (a PodScheduled=False must not
        # land after the Binding's PodScheduled=True).
        self.binder = GatedBinder(client, status_settled=self.recorder.status_settled)
        self.scheduler = Scheduler(
            cfg, metrics=self.metrics, binder=self.binder, recorder=self.recorder, api_writer=client, fence=fence
        )
        if opts.pod_max_in_unschedulable_pods_duration is not None:
            self.scheduler.queue.max_in_unschedulable = opts.pod_max_in_unschedulable_pods_duration
        self.informers = {spec.name: (spec, build_informer(client, spec, self.scheduler)) for spec in INFORMERS}
        by_name = {name: inf for name, (_, inf) in self.informers.items()}
        self.binder.use(by_name.values(), nodes=by_name["nodes"], pods=by_name["pods"])
        self.debugger = CacheDebugger(client, self.scheduler, by_name)
        self.status_keeper: PodGroupStatusKeeper | None = None
        if opts.pod_group_status is not False:
            q = self.scheduler.queue
            self.status_keeper = PodGroupStatusKeeper(
                self.scheduler.pod_group_state,
                PodGroupWriter(client),
                self.metrics,
                busy=lambda: bool(len(q.active) or len(q.backoff) or len(q.gang_backoff)),
            )
        self.stop = anyio.Event()
        self.watchdog = LoopWatchdog(
            stall_bound(le.lease_duration, le.renew_deadline),
            metrics=self.metrics,
            armed=(lambda: elector.is_leader) if self.elector is not None else (lambda: False),
        )
        self.health.loop_problem = self.watchdog.problem

    async def wait_synced(self) -> None:
        """Wait for every informer's first list; optional ones (PodGroups) only as long as the
        plugins ask, and first, so gang members never see a "not resolvable" gap at start-up."""
        waits = self.scheduler.informer_sync_waits()
        for spec, inf in self.informers.values():
            if not spec.optional:
                continue
            wait = waits.get(spec.name, 0.0)
            if wait <= 0:
                continue
            with anyio.move_on_after(wait) as scope:
                await inf.synced.wait()
            if scope.cancelled_caught:
                log.info(spec.not_synced or f"{spec.name} informer not synced; continuing", v=0, waitedSeconds=wait)
        for spec, inf in self.informers.values():
            if not spec.optional:
                await inf.synced.wait()
        log.info("informers synced", v=2, nodes=self.scheduler.cache.num_nodes(), pods=len(self.scheduler.pods))
        # The cluster as listed lives long: out of the cyclic collector's sight (gcpolicy.py).
        took = freeze_long_lived()
        log.info("garbage collector froze the listed state", v=4, seconds=round(took, 3), frozen=gc.get_freeze_count())

    async def serve(self) -> None:
        """Run everything until ``stop`` is set, then shut down gracefully."""
        self.watchdog.start()
        try:
            await self._serve()
        finally:
            self.watchdog.stop()

    async def _serve(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watchdog.heartbeat)
            if self.listener is not None:
                sock, certs = self.listener
                tg.start_soon(self.endpoint.serve, sock, certs, self.stop)
            for _, inf in self.informers.values():
                tg.start_soon(inf.run)
            tg.start_soon(self._debug_on_signal)
            await self._unless_stopped(self.wait_synced)
            self.health.synced = True
            tg.start_soon(refreeze_forever)
            if self.elector is not None and not self.stop.is_set():
                await self._unless_stopped(self.elector.acquire)
                if self.elector.is_leader:
                    tg.start_soon(self.elector.renew_forever, self._lost_lease)
            if not self.stop.is_set():
                tg.start_soon(self.scheduler.queue.run)
                tg.start_soon(self.scheduler.run_background_tasks)
                tg.start_soon(self.debugger.settle_assumed_forever)
                if self.status_keeper is not None:
                    tg.start_soon(self.status_keeper.run)
                async with anyio.create_task_group() as loop:
                    loop.start_soon(self.scheduler.run)
                    await self.stop.wait()
                    await self._shutdown()
            tg.cancel_scope.cancel()

    async def _debug_on_signal(self) -> None:
        """Run the cache debugger at every SIGUSR2 (kube-scheduler's ``ListenForSignal``)."""
        with anyio.open_signal_receiver(signal.SIGUSR2) as signals:
            async for _ in signals:
                await self.debugger.run_once()

    async def _unless_stopped(self, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` to completion unless ``stop`` is set first (then cancel it)."""
        async with anyio.create_task_group() as tg:

            async def cancel_on_stop() -> None:
                await self.stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(cancel_on_stop)
            await step()
            tg.cancel_scope.cancel()

    async def _shutdown(self) -> None:
        """SIGTERM: take no new pods, abandon Permit waits, finish bindings, release the Lease,
        then flush events (they are no scheduling decision, so a standby need not wait for them)."""
        log.info("shutting down: no new scheduling cycles", v=0)
        self.health.shutting_down = True
        self.scheduler.stopping = True
        self.scheduler.queue.close()  # the loop's pop() returns None and the loop ends
        for wp in list(self.scheduler.waiting_pods()):
            wp.reject("", "scheduler is shutting down")
        t0 = time.monotonic()
        await self.scheduler.drain_bindings(timeout=10.0)
        log.info("bindings drained", v=2, seconds=round(time.monotonic() - t0, 3))
        if self.elector is not None:
            # Stops the renewal loop before clearing the holder: nothing takes the Lease back.
            await self.elector.release()
        await self.recorder.drain(timeout=5.0)

    async def close(self) -> None:
        """Close what the process opened besides the main client: the endpoint's review client,
        the recorder's events client and the elector's client."""
        await self.endpoint.close()
        await self.recorder.close()
        if self.lease_client is not None:
            await self.lease_client.close()

    def _lost_lease(self) -> None:
        """Leadership lost: stop at once so no second leader ever binds (kube-scheduler exits 1)."""
        log.error("leaderelection lost; exiting")
        sys.stderr.flush()
        os._exit(1)


def _fail(message: str) -> int:
    sys.stderr.write(f"Error: {message}\n")
    return 1


def _listener(opts: Options) -> tuple[socket.socket, DynamicServingCert] | str:
    """The HTTPS socket and serving certificate, or why they cannot be had (naming the flags)."""
    try:
        policy = TLSPolicy.from_flags(opts.tls_min_version, opts.tls_cipher_suites)
    except ValueError as exc:
        return str(exc)
    try:
        certs = DynamicServingCert(opts.tls_cert_file, opts.tls_private_key_file, policy)
    except (ValueError, OSError, ssl.SSLError) as exc:
        return f"invalid serving certificate (--tls-cert-file, --tls-private-key-file): {exc}"
    try:
        return listen_socket(opts.bind_address, opts.secure_port), certs
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return f"cannot listen on {opts.bind_address}:{opts.secure_port} (--bind-address, --secure-port): {reason}"


async def amain(opts: Options) -> int:
    """Validate everything that can be checked offline, connect, and run until stopped."""
    try:
        logs.configure(opts.v, opts.logging_format)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        cfg = load_config(opts.config)
        apply_flags(cfg, opts)
        Scheduler.check_config(cfg)
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}")
    if opts.master and (err := master_error(opts.master)) is not None:
        return _fail(name_origins(err, opts))
    try:
        stall = _test_stall_seconds()
    except ValueError as exc:
        return _fail(str(exc))
    listener: tuple[socket.socket, DynamicServingCert] | None = None
    if opts.secure_port:
        # Go raises the soft descriptor limit to the hard one at start-up; the endpoint's
        # connection cap is then sized below it.
        raise_fd_limit()
        got = _listener(opts)
        if isinstance(got, str):
            return _fail(name_origins(got, opts))
        listener = got
    kubeconfig = opts.kubeconfig or cfg.client_connection.kubeconfig or None
    try:
        client = await KubeClient.connect(
            kubeconfig, qps=cfg.client_connection.qps, burst=cfg.client_connection.burst, master=opts.master
        )
    except Exception as exc:
        if listener is not None:
            listener[0].close()
        return _fail(name_origins(credentials_error(kubeconfig, opts.master, exc), opts))
    try:
        app = App(opts, cfg, client, listener)
    except ConfigError as exc:
        await client.close()
        return _fail(f"invalid configuration: {exc}")
    log.info("starting ome-scheduler", v=0, profiles=list(app.scheduler.frameworks), server=client.server)
    if stall is not None:
        _install_test_stall(stall)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, app.stop)
            await app.serve()
            tg.cancel_scope.cancel()
    finally:
        await client.close()
        await app.recorder.close()
        await app.endpoint.close()
    log.info("ome-scheduler stopped", v=0)
    return 0


TEST_STALL_ENV = "OME_SCHEDULER_TEST_STALL_SIGNAL"
"""Test-only hook (the fault-injection suite, ``e2e/faults/``): when set to a number of
seconds, SIGUSR1 blocks the event loop for that long with ``time.sleep``, as a pathological
input or a paused VM would. Unset (always, outside tests), SIGUSR1 keeps its default action."""


def _test_stall_seconds() -> float | None:
    """The stall of :data:`TEST_STALL_ENV`, or None when unset.

    Raises:
        ValueError: the value is not a positive number of seconds.
    """
    raw = os.environ.get(TEST_STALL_ENV, "")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{TEST_STALL_ENV}: Invalid value: {raw!r}: must be a positive number of seconds")
    return seconds


def _install_test_stall(seconds: float) -> None:
    """Make SIGUSR1 block the running event loop for ``seconds`` (see :data:`TEST_STALL_ENV`)."""

    def stall() -> None:
        log.info("test hook: stalling the event loop", v=0, seconds=seconds)
        time.sleep(seconds)  # blocking on purpose: this is the fault being injected
        log.info("test hook: event loop resumed", v=0, seconds=seconds)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, stall)


async def _stop_on_signal(stop: anyio.Event) -> None:
    """Set ``stop`` at the first SIGTERM or SIGINT."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()
            return


def run(opts: Options) -> int:
    """Run until stopped; returns the process exit status."""
    return anyio.run(amain, opts)
