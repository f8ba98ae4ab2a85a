"""Wires the scheduler together and runs it: config, client, informers, loop, shutdown.

Start-up order, as kube-scheduler's ``app.Run``: load and validate the configuration (exit
1 with a message naming the argument when invalid), build the frameworks (plugin argument
validation), connect to the API server, start the informers for pods (non-terminal),
nodes, namespaces and PodGroups, wait for the core informers to sync and for the PodGroup
informer up to ``podGroupSyncTimeoutSeconds`` (the CRD may be missing: scheduling starts
anyway and picks PodGroups up when the CRD appears), then run the scheduling loop, the
queue flushes and the gang GC until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from ome_scheduler import logs
from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.load import load_config
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Informer
from ome_scheduler.kube.recorder import Recorder
from ome_scheduler.leader import LeaderElector
from ome_scheduler.metrics import Metrics
from ome_scheduler.options import Options, apply_flags
from ome_scheduler.scheduler import Scheduler
from ome_scheduler.server import HealthState, Reviews, SecureApp, listen_socket, serve, server_ssl_context

log = logs.get_logger()


class App:
    """One scheduler process."""

    def __init__(
        self,
        opts: Options,
        cfg: KubeSchedulerConfiguration,
        client: KubeClient,
        listener: tuple[socket.socket, ssl.SSLContext] | None = None,
    ) -> None:
        self.opts = opts
        self.listener = listener
        self.cfg = cfg
        self.client = client
        self.metrics = Metrics()
        self.recorder = Recorder(client)
        self.scheduler = Scheduler(cfg, metrics=self.metrics, binder=client, recorder=self.recorder)
        if opts.pod_max_in_unschedulable_pods_duration is not None:
            self.scheduler.queue.max_in_unschedulable = opts.pod_max_in_unschedulable_pods_duration
        s = self.scheduler
        self.informers: list[Informer[Any]] = [
            Informer(
                client,
                "/api/v1/pods",
                Pod,
                name="pods",
                params={"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
                on_add=s.on_pod_add,
                on_update=s.on_pod_update,
                on_delete=s.on_pod_delete,
                on_invalid=s.on_pod_invalid,
                keep_stale=True,
            ),
            Informer(
                client,
                "/api/v1/nodes",
                Node,
                name="nodes",
                on_add=s.on_node_add,
                on_update=s.on_node_update,
                on_delete=s.on_node_delete,
            ),
            Informer(
                client,
                "/api/v1/namespaces",
                Namespace,
                name="namespaces",
                on_add=s.on_namespace_add,
                on_update=s.on_namespace_update,
                on_delete=s.on_namespace_delete,
            ),
        ]
        # Storage objects for VolumeRestrictions, VolumeBinding and VolumeZone (issue 3).
        vs = s.volume_store()
        self.informers += [
            Informer(
                client,
                "/api/v1/persistentvolumes",
                PersistentVolume,
                name="persistentvolumes",
                on_add=vs.on_pv_add,
                on_update=vs.on_pv_update,
                on_delete=vs.on_pv_delete,
            ),
            Informer(
                client,
                "/api/v1/persistentvolumeclaims",
                PersistentVolumeClaim,
                name="persistentvolumeclaims",
                on_add=vs.on_pvc_add,
                on_update=vs.on_pvc_update,
                on_delete=vs.on_pvc_delete,
            ),
            Informer(
                client,
                "/apis/storage.k8s.io/v1/storageclasses",
                StorageClass,
                name="storageclasses",
                on_add=vs.on_class_add,
                on_update=vs.on_class_update,
                on_delete=vs.on_class_delete,
            ),
        ]
        self.pod_group_informer: Informer[PodGroup] = Informer(
            client,
            "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
            PodGroup,
            name="podgroups",
            on_add=s.on_pod_group_add,
            on_update=s.on_pod_group_update,
            on_delete=s.on_pod_group_delete,
            on_invalid=s.on_pod_group_invalid,
        )
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.health = HealthState()
        le = cfg.leader_election
        self.elector: LeaderElector | None = None
        if le.leader_elect:
            self.elector = LeaderElector(
                client,
                namespace=le.resource_namespace,
                name=le.resource_name,
                lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline,
                retry_period=le.retry_period,
                metrics=self.metrics,
            )
            elector = self.elector
            self.health.leader_ok = lambda: elector.healthy()

    async def wait_synced(self) -> None:
        # PodGroups first, so pods never see a "not resolvable" gap at start-up.
        timeouts = [p.args.pod_group_sync_timeout_seconds for p in self.scheduler.gang_plugins]
        wait = max((t for t in timeouts if t), default=0)
        if wait:
            try:
                await asyncio.wait_for(self.pod_group_informer.synced.wait(), timeout=wait)
            except TimeoutError:
                log.info(
                    "PodGroup informer not synced; continuing (is the PodGroup CRD installed?)", v=0, waitedSeconds=wait
                )
        for inf in self.informers:
            await inf.synced.wait()
        self.ready.set()
        log.info("informers synced", v=2, nodes=self.scheduler.cache.num_nodes(), pods=len(self.scheduler.pods))

    async def serve(self) -> None:
        """Run everything until ``stop`` is set, then shut down gracefully (raises _Shutdown)."""
        async with asyncio.TaskGroup() as tg:
            if self.listener is not None:
                sock, ssl_ctx = self.listener
                web = SecureApp(
                    Reviews(self.client), self.metrics.registry, self.health, self.opts.authorization_always_allow_paths
                )
                tg.create_task(serve(web, sock, ssl_ctx, self.stop))
            tg.create_task(self.pod_group_informer.run())
            for inf in self.informers:
                tg.create_task(inf.run())
            await self._until_stopped(self.wait_synced())
            self.health.synced = True
            if self.elector is not None and not self.stop.is_set():
                await self._until_stopped(self.elector.acquire())
                if self.elector.is_leader:
                    tg.create_task(self.elector.renew_forever(self._lost_lease))
            if not self.stop.is_set():
                tg.create_task(self.scheduler.queue.run())
                tg.create_task(self.scheduler.gc_loop())
                tg.create_task(self.scheduler.domain_metrics_loop())
                sched = tg.create_task(self.scheduler.run())
                await self.stop.wait()
                await self._shutdown(sched)
            raise _Shutdown

    async def _until_stopped(self, coro: Any) -> None:
        """Await ``coro`` unless ``stop`` is set first (then cancel it)."""
        task = asyncio.ensure_future(coro)
        stopper = asyncio.ensure_future(self.stop.wait())
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for t in (task, stopper):
            if t not in done:
                t.cancel()
        if task in done:
            task.result()

    async def _shutdown(self, sched: asyncio.Task[None]) -> None:
        """SIGTERM: take no new pods, abandon Permit waits, finish bindings, release the Lease,
        then flush events (they are no scheduling decision, so a standby need not wait for them)."""
        log.info("shutting down: no new scheduling cycles", v=0)
        self.health.shutting_down = True
        self.scheduler.stopping = True
        self.scheduler.queue.close()
        await sched
        for wp in list(self.scheduler.waiting_pods()):
            wp.reject("", "scheduler is shutting down")
        t0 = time.monotonic()
        await self.scheduler.drain_bindings(timeout=10.0)
        log.info("bindings drained", v=2, seconds=round(time.monotonic() - t0, 3))
        if self.elector is not None:
            await self.elector.release()
        await self.recorder.drain(timeout=5.0)

    def _lost_lease(self) -> None:
        """Leadership lost: stop at once so no second leader ever binds (kube-scheduler exits 1)."""
        log.error("leaderelection lost; exiting")
        sys.stderr.flush()
        os._exit(1)


class _Shutdown(Exception):
    pass


def master_error(master: str) -> str | None:
    """Why ``--master`` is not an API server URL, or None when it is one."""
    u = urllib.parse.urlsplit(master)
    if u.scheme in ("http", "https") and u.netloc:
        return None
    return f'invalid argument "{master}" for "--master" flag: not an http(s) URL such as https://10.0.0.1:6443'


def credentials_error(kubeconfig: str | None, master: str | None, exc: BaseException) -> str:
    """One line saying why no API client could be built, naming the flag or file at fault."""
    source = "--kubeconfig" if kubeconfig else "KUBECONFIG"
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if not path and not master:
        default = os.path.expanduser("~/.kube/config")
        if os.path.exists(default):
            path, source = default, "~/.kube/config"
        elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return (
                "no credentials: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, "
                "or run in a pod with a service account"
            )
    if path:
        for p in path.split(os.pathsep):
            if p and not os.path.isfile(p):
                return f"cannot read kubeconfig {p} ({source}): no such file"
            try:
                doc = yaml.safe_load(Path(p).read_text(encoding="utf-8")) if p else {}
            except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as err:
                return f"cannot read kubeconfig {p} ({source}): {err}"
            if p and not (isinstance(doc, dict) and isinstance(doc.get("clusters"), list)):
                return f"{p} ({source}) is not a kubeconfig: it needs clusters, users and contexts lists"
        return f"cannot load credentials from kubeconfig {path} ({source}): {type(exc).__name__}: {exc}"
    return f"cannot load credentials: {type(exc).__name__}: {exc}"


class _NoBinder:
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise RuntimeError("validation only")


def validate_profiles(cfg: KubeSchedulerConfiguration) -> None:
    """Build every profile's plugins once, so plugin arguments are checked before connecting.

    Raises:
        ConfigError: naming the profile, plugin and argument.
    """
    Scheduler(cfg, metrics=Metrics(), binder=_NoBinder(), recorder=None)


async def amain(opts: Options) -> int:
    try:
        logs.configure(opts.v, opts.logging_format)
    except ValueError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    try:
        cfg = load_config(opts.config)
        apply_flags(cfg, opts)
    except ConfigError as exc:
        sys.stderr.write(f"Error: invalid configuration: {exc}\n")
        return 1
    try:
        validate_profiles(cfg)
    except ConfigError as exc:
        sys.stderr.write(f"Error: invalid configuration: {exc}\n")
        return 1
    if opts.master and (err := master_error(opts.master)) is not None:
        sys.stderr.write(f"Error: {err}\n")
        return 1
    listener: tuple[socket.socket, ssl.SSLContext] | None = None
    if opts.secure_port:
        try:
            ctx = server_ssl_context(opts.tls_cert_file, opts.tls_private_key_file)
        except (ValueError, OSError, ssl.SSLError) as exc:
            sys.stderr.write(f"Error: invalid serving certificate (--tls-cert-file, --tls-private-key-file): {exc}\n")
            return 1
        try:
            listener = (listen_socket(opts.bind_address, opts.secure_port), ctx)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            sys.stderr.write(
                f"Error: cannot listen on {opts.bind_address}:{opts.secure_port} (--bind-address, --secure-port): "
                f"{reason}\n"
            )
            return 1
    kubeconfig = opts.kubeconfig or cfg.client_connection.kubeconfig or None
    try:
        client = await KubeClient.connect(
            kubeconfig, qps=cfg.client_connection.qps, burst=cfg.client_connection.burst, master=opts.master
        )
    except Exception as exc:
        sys.stderr.write(f"Error: {credentials_error(kubeconfig, opts.master, exc)}\n")
        if listener is not None:
            listener[0].close()
        return 1
    try:
        app = App(opts, cfg, client, listener)
    except ConfigError as exc:
        sys.stderr.write(f"Error: invalid configuration: {exc}\n")
        await client.close()
        return 1
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stop.set)
    log.info("starting ome-scheduler", v=0, profiles=list(app.scheduler.frameworks), server=client.server)
    try:
        await app.serve()
    except* _Shutdown:
        pass
    finally:
        await client.close()
    log.info("ome-scheduler stopped", v=0)
    return 0


def run(opts: Options) -> int:
    """Run until stopped; returns the process exit status."""
    return asyncio.run(amain(opts))
