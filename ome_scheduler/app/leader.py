"""Lease leader election with client-go's resource-lock semantics.

Mirrors ``k8s.io/client-go/tools/leaderelection/leaderelection.go`` and ``resourcelock/leaselock.go``:

* the lock is the ``coordination.k8s.io/v1`` Lease ``resourceNamespace/resourceName``;
  the identity is ``{hostname}_{uuid}``;
* acquiring: GET the Lease (POST it when missing); a Lease held by someone else is taken
  over only after this candidate has seen the same (holder, renewTime) record unchanged for
  ``leaseDuration`` seconds of its own clock; taking it sets ``acquireTime`` and increments
  ``leaseTransitions``; every write is a PUT with the observed ``resourceVersion`` (optimistic
  concurrency: a 409 means somebody else won);
* renewing: every ``retryPeriod``; if no renewal succeeds for ``renewDeadline`` the leader
  has lost the lease and the process exits non-zero at once (as kube-scheduler does). A
  renewal that finds another holder in the Lease ends leadership at once, without waiting
  out ``renewDeadline`` (client-go would keep polling until then);
* fencing: :meth:`LeaderElector.renewed_at` (the monotonic time of the last successful
  renewal, None when not leading) feeds the scheduler's fence (``framework/fence.py``), so
  nothing is bound once the last renewal is ``renewDeadline`` old, even by a process too
  stalled to exit;
* releasing on graceful shutdown (``ReleaseOnCancel``): the renewal loop is stopped and has
  ended first (as client-go releases only after its renew loop returned), so nothing can
  take the Lease back; then the holder is cleared and the lease duration set to 1 s, so a
  standby takes over immediately.

The elector should get a client of its own (``KubeClient.derive``; kube-scheduler builds a
``leader-election`` client the same way), so Bindings, events and reviews never queue in
front of a renewal.

Times are seconds. ``leader_election_master_status{name}`` is 1 while leading, 0 otherwise.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import anyio
import msgspec

from ome_scheduler.config.types import LeaderElection
from ome_scheduler.kube.client import PRIORITY_CRITICAL, ApiError, KubeClient, hostname
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.util.timestamps import now_micro

log = get_logger()
JITTER = 1.2
"""client-go ``JitterFactor``: acquisition retries wait ``retryPeriod`` x [1, 1.2)."""


class LeaseSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    """``coordinationv1.LeaseSpec`` (``k8s.io/api/coordination/v1/types.go``): times are
    ``metav1.MicroTime`` text, the duration whole seconds."""

    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(msgspec.Struct, rename="camel", omit_defaults=True):
    """The Lease object. ``metadata`` stays a plain dict so a PUT writes back every field it
    read (labels, annotations, ownerReferences...): a PUT replaces the whole object, and
    client-go's LeaseLock likewise updates the object it got."""

    metadata: dict[str, Any] = {}
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)
    api_version: str = "coordination.k8s.io/v1"
    kind: str = "Lease"


_DEC = msgspec.json.Decoder(Lease)


@dataclass
class LeaderElector:
    """One candidate for one Lease (client-go's ``LeaderElector``); durations in seconds."""

    client: KubeClient
    _: KW_ONLY
    namespace: str
    name: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    metrics: Metrics | None = None
    identity: str = field(default_factory=lambda: f"{hostname()}_{uuid.uuid4()}")
    """``{hostname}_{uuid}``, as kube-scheduler's ``--leader-elect`` identity."""
    is_leader: bool = field(default=False, init=False)
    last_renew: float = field(default=0.0, init=False)
    """Monotonic time of the last successful renewal."""
    _observed: LeaseSpec | None = field(default=None, init=False, repr=False)
    _observed_rv: str = field(default="", init=False, repr=False)
    _observed_time: float = field(default=0.0, init=False, repr=False)
    _released: bool = field(default=False, init=False, repr=False)
    _renew_scope: anyio.CancelScope | None = field(default=None, init=False, repr=False)
    _renew_ended: asyncio.Event | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.metrics is not None:
            self.metrics.leader_election_master_status.labels(self.name).set(0)

    @classmethod
    def from_config(cls, client: KubeClient, le: LeaderElection, metrics: Metrics | None = None) -> LeaderElector:
        """A candidate for the Lease that ``leaderElection`` (with the --leader-elect* flags) names."""
        elector = cls(client, namespace=le.resource_namespace, name=le.resource_name, metrics=metrics)
        elector.lease_duration, elector.renew_deadline = le.lease_duration, le.renew_deadline
        elector.retry_period = le.retry_period
        return elector

    @property
    def path(self) -> str:
        """The Lease's API path."""
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def _record(self, acquire_time: str | None, transitions: int) -> LeaseSpec:
        """The spec this candidate writes as holder, renewed now (``acquire_time`` None: now)."""
        now = now_micro()
        return LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.lease_duration),
            acquire_time=acquire_time or now,
            renew_time=now,
            lease_transitions=transitions,
        )

    def renewed_at(self) -> float | None:
        """Monotonic time of the last successful renewal (or acquisition) while leading; None
        when not leading (never acquired, lost, or released). The fence's input."""
        return self.last_renew if self.is_leader else None

    def other_holder(self) -> str | None:
        """The identity of another holder in the last Lease record read, or None."""
        holder = self._observed.holder_identity if self._observed is not None else None
        return holder if holder and holder != self.identity else None

    async def try_acquire_or_renew(self) -> bool:
        """``tryAcquireOrRenew``: one attempt; True when this candidate holds the lease now."""
        now = time.monotonic()
        try:
            raw = await self.client.get(self.path, priority=PRIORITY_CRITICAL)
        except ApiError as exc:
            if exc.code != 404:
                log.error("error retrieving resource lock", lease=f"{self.namespace}/{self.name}", error=str(exc))
                return False
            lease = Lease(metadata={"name": self.name, "namespace": self.namespace}, spec=self._record(None, 0))
            try:
                body = await self.client.post(
                    f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                    lease,
                    retries=0,
                    priority=PRIORITY_CRITICAL,
                )
            except ApiError as exc2:
                log.error("error initially creating leader election record", error=str(exc2))
                return False
            self._observe(_DEC.decode(body), now)
            return True
        current = _DEC.decode(raw)
        spec = current.spec
        # Expiry is judged on this process's monotonic clock, from when it saw the record last
        # change, never from the renewTime another machine wrote: the clocks need not agree.
        if (
            self._observed is None
            or spec.holder_identity != self._observed.holder_identity
            or spec.renew_time != self._observed.renew_time
        ):
            self._observed = spec
            self._observed_rv = current.metadata.get("resourceVersion", "")
            self._observed_time = now
        holder = spec.holder_identity or ""
        # The holder's own advertised duration counts (a leader configured with a longer lease).
        duration = float(spec.lease_duration_seconds or self.lease_duration)
        if holder and holder != self.identity and self._observed_time + duration > now:
            return False
        if holder == self.identity:
            new = self._record(spec.acquire_time, spec.lease_transitions or 0)
        else:
            new = self._record(None, (spec.lease_transitions or 0) + 1)  # a takeover
        # ``current`` still carries the resourceVersion read above: if anyone wrote the Lease
        # since, the PUT fails with 409 and this attempt loses.
        current.spec = new
        try:
            body = await self.client.put(self.path, current, retries=0, priority=PRIORITY_CRITICAL)
        except ApiError as exc:
            log.error("Failed to update lock", error=str(exc))
            return False
        self._observe(_DEC.decode(body), now)
        return True

    def _observe(self, lease: Lease, now: float) -> None:
        """Remember the record this candidate just wrote; ``now`` counts as a renewal."""
        self._observed = lease.spec
        self._observed_rv = lease.metadata.get("resourceVersion", "")
        self._observed_time = now
        self.last_renew = now

    def _set_leader(self, v: bool) -> None:
        """Set ``is_leader`` and ``leader_election_master_status``."""
        self.is_leader = v
        if self.metrics is not None:
            self.metrics.leader_election_master_status.labels(self.name).set(1 if v else 0)

    async def acquire(self) -> None:
        """Block until this candidate holds the lease (a released candidate may run again)."""
        self._released = False
        log.info("attempting to acquire leader lease", v=0, lease=f"{self.namespace}/{self.name}")
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self._set_leader(True)
                    log.info(
                        "successfully acquired lease",
                        v=0,
                        lease=f"{self.namespace}/{self.name}",
                        identity=self.identity,
                    )
                    return
            except Exception as exc:
                log.error("leader election attempt failed", error=repr(exc))
            await asyncio.sleep(self.retry_period * (1 + random.random() * (JITTER - 1)))

    async def renew_forever(self, on_lost: Callable[[], Awaitable[Any] | None]) -> None:
        """Renew every ``retry_period``; call ``on_lost`` once renewals fail for
        ``renew_deadline``, or at once when a renewal finds another holder. Returns without
        calling it when :meth:`release` stops the loop."""
        self._renew_ended = asyncio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._renew_scope = scope
                if self._released:
                    return
                why = await self._renew_until_lost()
        finally:
            self._renew_scope = None
            self._renew_ended.set()
        if scope.cancel_called or why is None:
            return  # released: leadership ended on purpose
        # No stepping down here: another candidate may hold the lease already, so the caller's
        # on_lost exits the process (as kube-scheduler does) instead of trying to unwind binding
        # cycles that are in flight; a restart comes back as a candidate with a fresh cache.
        self._set_leader(False)
        log.error("leaderelection lost", reason=why, lease=f"{self.namespace}/{self.name}")
        r = on_lost()
        if r is not None:
            await r

    async def _renew_until_lost(self) -> str | None:
        """client-go's renew loop: every ``retry_period``, retry until a renewal succeeds or
        ``renew_deadline`` has passed. Returns why leadership is lost, or None once released."""
        while True:
            await asyncio.sleep(self.retry_period)
            if self._released:
                return None
            ok = False
            with anyio.move_on_after(self.renew_deadline):
                while not ok:
                    if self._released:
                        return None
                    try:
                        ok = await self.try_acquire_or_renew()
                    except Exception as exc:
                        log.info("lease renewal attempt failed", v=2, error=repr(exc))
                    if not ok and (other := self.other_holder()) is not None:
                        return f"lease is held by {other}"
                    if not ok:
                        await asyncio.sleep(self.retry_period)
            if not ok:
                return "failed to renew lease"

    async def release(self) -> None:
        """``ReleaseOnCancel``: stop renewing, then clear the holder so a standby takes over at once.

        Leadership (and so the fence) ends before anything is sent; the renewal loop is
        cancelled and waited for, so no renewal can follow the release and take the Lease
        back. A release that meets a concurrent write (409) reads the Lease again.
        """
        self._released = True
        if not self.is_leader:
            return
        self._set_leader(False)
        if self._renew_scope is not None and self._renew_ended is not None:
            self._renew_scope.cancel()
            await self._renew_ended.wait()
        for _ in range(3):
            try:
                raw = await self.client.get(self.path, priority=PRIORITY_CRITICAL)
                current = _DEC.decode(raw)
                if current.spec.holder_identity != self.identity:
                    return  # someone else took it already: never clear another holder's record
                now = now_micro()
                # A 1 s duration and no holder: standbys may take over at their next retry
                # instead of waiting out the full leaseDuration.
                current.spec = LeaseSpec(
                    holder_identity=None,
                    lease_duration_seconds=1,
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=current.spec.lease_transitions,
                )
                await self.client.put(self.path, current, retries=1, priority=PRIORITY_CRITICAL)
                log.info("released leader lease", v=0, lease=f"{self.namespace}/{self.name}")
                return
            except ApiError as exc:
                if exc.code != 409:
                    log.error("failed to release lease", error=repr(exc))
                    return
            except Exception as exc:
                log.error("failed to release lease", error=repr(exc))
                return
        log.error("failed to release lease: it kept changing", lease=f"{self.namespace}/{self.name}")

    def healthy(self, tolerance: float = 20.0) -> bool:
        """The leader-election watchdog: False when leading but not renewed for lease + tolerance."""
        if not self.is_leader:
            return True
        return time.monotonic() - self.last_renew <= self.lease_duration + tolerance
