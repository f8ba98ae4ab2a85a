"""Events (``events.k8s.io/v1``) and the pod ``PodScheduled`` condition, with bounded writes.

Mirrors client-go's ``tools/events`` broadcaster as kube-scheduler uses it: the reporting
controller is the profile's scheduler name and the reporting instance
``{schedulerName}-{hostname}``; an event isomorphic to one recorded before becomes a *series*:
the first repeat PATCHes ``series.count: 2`` (or creates the event with that series when the
PATCH finds none, as ``recordEvent`` does), later repeats are only counted, and the count is
written when the series finishes (no repeat for ``FINISH_TIME``, 6 minutes) or every
``SERIES_REFRESH`` (30 minutes) while it goes on, as ``finishSeries`` and
``refreshExistingEventSeries`` do. Failed creates are retried up to 12 times about 10 s apart.

Where it deliberately writes less than upstream (issue 30: a gang retrying under node churn
wrote 8,786 status patches and 8,110 events for 24 pods):

* **Isomorphic means the same failure in substance.** client-go's key holds the regarding
  object's ``resourceVersion`` but not the note, and every PodScheduled patch changes the pod's
  resourceVersion, so upstream writes a new event per attempt whose message changed, if only in
  ``0/N nodes``. Here the key holds the note's *substance* (:func:`substance`: every run of
  digits is one ``#``) instead of the resourceVersion: attempts that fail for the same reasons
  are one series, a failure for new reasons is a new event.
* **PodScheduled=False is patched only when it changes in substance** (status, reason, or the
  message's substance), unlike ``updatePod`` in ``schedule_one.go``, which patches on any
  message change; ``lastTransitionTime`` is kept while the status stays False.
* **A write budget per object and reason** (``WRITE_BURST`` writes at once, then one every
  ``WRITE_REFILL`` seconds: at most 6 + 6 per minute and reason for each pod): a write over
  budget waits, and a newer one of the same kind replaces it while it waits (a newer event of
  the same reason supersedes an unwritten one; a newer PodScheduled patch supersedes a queued
  one). So one tenant's failing pods cannot fill the events client and delay another
  namespace's events: their writes stay within the budget whatever their retry rate.

Writes run in the background so a slow API server never stalls a scheduling cycle; at most
``max_pending`` events and as many status patches queue up, and what comes beyond is dropped
(client-go's broadcaster queues 1,000 events and drops the rest, ``watch.DropIfChannelFull``).
Events go through a client of their own, as kube-scheduler's ``eventClient``: its own rate
limiter and connection pool, and at most ``EVENT_IN_FLIGHT`` requests on the wire.

Status writes of one pod go out one after the other, in the order they were made, so the last
decision is the one the pod shows (two concurrent patches could otherwise land in either order).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import anyio

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.kube.client import PRIORITY_EVENTS, PRIORITY_STATUS, ApiError, KubeClient, hostname
from ome_scheduler.logs import get_logger
from ome_scheduler.util.timestamps import now_micro, now_rfc3339

log = get_logger()
NOTE_LENGTH_LIMIT = 1024
"""Maximum event ``note`` size in bytes (``events.k8s.io/v1`` validation)."""
_KINDS: dict[type[Any], tuple[str, str]] = {
    Pod: ("Pod", "v1"),
    Node: ("Node", "v1"),
    PodGroup: ("PodGroup", "scheduling.x-k8s.io/v1alpha1"),
}
"""An event's ``regarding`` kind and apiVersion by record type."""
EVENT_IN_FLIGHT = 2
"""Event writes on the wire at once (client-go's broadcaster sends them one by one)."""
DROP_LOG_INTERVAL = 10.0
"""Seconds between two "dropping" log lines while writes are being dropped."""
FINISH_TIME = 6 * 60.0
"""Seconds without a repeat after which a series is finished (client-go ``tools/events`` ``finishTime``)."""
SERIES_REFRESH = 30 * 60.0
"""Seconds between two writes of a running series' count (client-go ``refreshTime``)."""
WRITE_BURST = 6
"""Writes one object may make at once per reason (events) or for its status (the budget's burst)."""
WRITE_REFILL = 10.0
"""Seconds per write the budget refills: after the burst, one write every 10 s (6 per minute)."""
MAINTAIN_INTERVAL = 1.0
"""Seconds between two passes of the background task that sends writes waiting for budget and
finishes or refreshes series."""

STATUS_SETTLE_TIMEOUT = 5.0
"""Seconds a Binding waits at most for the pod's earlier status writes (:meth:`Recorder.status_settled`)."""

_DIGITS = re.compile(r"[0-9]+")


def truncate_message(msg: str) -> str:
    """``truncateMessage``: events' note is capped at 1024 bytes (UTF-8, what kube-apiserver
    validates) with `` ...``; the cut never splits a character."""
    raw = msg.encode()
    if len(raw) <= NOTE_LENGTH_LIMIT:
        return msg
    return raw[: NOTE_LENGTH_LIMIT - 4].decode(errors="ignore") + " ..."


def substance(message: str) -> str:
    """What a scheduling message says, without its counts: every run of digits becomes ``#``.

    ``0/5000 nodes are available: 12 Insufficient cpu.`` and ``0/4990 nodes are available: 10
    Insufficient cpu.`` are the same failure; ``... 3 node(s) had untolerated taint ...`` is
    another. Two messages with equal substance are one event series and one PodScheduled state.
    """
    return _DIGITS.sub("#", message)


class _Budget:
    """A token bucket: ``WRITE_BURST`` tokens, one more every ``WRITE_REFILL`` seconds."""

    __slots__ = ("at", "tokens")

    def __init__(self, now: float) -> None:
        self.tokens = float(WRITE_BURST)
        self.at = now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(WRITE_BURST), self.tokens + (now - self.at) / WRITE_REFILL)
        self.at = now

    def take(self, now: float) -> bool:
        """Spend one token if there is one."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: one is there now)."""
        self._refill(now)
        return max(0.0, (1.0 - self.tokens) * WRITE_REFILL)

    def full(self, now: float) -> bool:
        """Whether the bucket is full again (it can be forgotten)."""
        self._refill(now)
        return self.tokens >= WRITE_BURST


@dataclass(eq=False)
class _Cached:
    """One event: its body, where it lives, its repeats, and what of it was written.

    ``count`` is how often it happened, ``written`` the count the API server has (0: not
    created yet), ``observed`` when (``time.time()``) it last happened, ``written_at`` when the
    count was last written."""

    key: tuple[Any, ...]
    slot: tuple[str, str]
    """(object, reason): whose write budget it spends, and which unwritten event it supersedes."""
    name: str
    namespace: str
    body: dict[str, Any]
    observed: float
    count: int = 1
    written: int = 0
    written_at: float = 0.0
    writing: bool = False
    refused: bool = False
    """The API server refused it (a 4xx, or 12 failed tries): nothing more is written of it."""

    def due(self) -> bool:
        """Whether a write is owed now: the create, or the first repeat (the series of 2)."""
        if self.writing or self.refused:
            return False
        return self.written == 0 or (self.count >= 2 and self.written == 1)


@dataclass(eq=False)
class _StatusWrite:
    """One status PATCH waiting in its pod's lane."""

    patch: dict[str, Any]
    done: asyncio.Future[None]
    abandon: asyncio.Future[Any] | None = None
    scheduled_false: bool = False
    """A PodScheduled=False patch: budgeted, superseded by a newer one, dropped by a Binding."""


@dataclass(eq=False)
class _Lane:
    """A pod's status writes, sent one after the other by one worker task."""

    queue: deque[_StatusWrite] = field(default_factory=deque)
    on_wire: _StatusWrite | None = None
    worker: asyncio.Task[None] | None = None


class Recorder:
    """Writes events and pod status patches through one client, in background tasks."""

    def __init__(
        self, client: KubeClient, *, events_client: KubeClient | None = None, max_pending: int = 10_000
    ) -> None:
        """``client`` patches pod status; ``events_client`` (default: derived from ``client``
        with the same QPS and burst and ``EVENT_IN_FLIGHT`` requests in flight) writes events."""
        self.client = client
        self.events_client = events_client or client.derive(
            qps=client.limiter.rate,
            burst=int(client.limiter.cap),
            max_in_flight=EVENT_IN_FLIGHT,
            max_connections=EVENT_IN_FLIGHT,
        )
        self.host = hostname()
        self._cache: dict[tuple[Any, ...], _Cached] = {}
        self._unwritten: dict[tuple[str, str], _Cached] = {}
        """Per (object, reason): its newest event not created yet (waiting for budget)."""
        self._owed: set[_Cached] = set()
        """Events with a write owed that waits for budget (a create or the series of 2)."""
        self._budgets: dict[Hashable, _Budget] = {}
        self._events: set[asyncio.Task[None]] = set()
        self._lanes: dict[str, _Lane] = {}
        """Per pod (uid, else namespace/name): its status writes in order."""
        self._maintainer: asyncio.Task[None] | None = None
        self._last_sweep = 0.0
        self.max_pending = max_pending
        self.dropped = 0
        """Writes dropped because ``max_pending`` of their kind were already queued."""
        self.superseded = 0
        """Writes never sent because a newer one of the same kind replaced them while they waited."""
        self._drop_logged = -DROP_LOG_INTERVAL

    # ---- budgets and the background pass --------------------------------------------------

    def _take(self, slot: Hashable, now: float) -> bool:
        b = self._budgets.get(slot)
        if b is None:
            b = self._budgets[slot] = _Budget(now)
        return b.take(now)

    def _ensure_maintainer(self) -> None:
        if self._maintainer is None or self._maintainer.done():
            self._maintainer = asyncio.get_running_loop().create_task(self._maintain_forever())

    async def _maintain_forever(self) -> None:
        while True:
            await asyncio.sleep(MAINTAIN_INTERVAL)
            self.maintain()

    def maintain(self, now: float | None = None) -> None:
        """Send the event writes whose budget has refilled; once a minute, finish series without a
        repeat for ``FINISH_TIME`` (writing their last count), refresh running ones every
        ``SERIES_REFRESH``, and forget events and budgets no longer needed."""
        now = time.time() if now is None else now
        for c in list(self._owed):
            if not c.due():
                self._owed.discard(c)
            elif self._take(c.slot, now):
                self._owed.discard(c)
                self._write_event(c)
        if now - self._last_sweep < 60.0:
            return
        self._last_sweep = now
        for key, c in list(self._cache.items()):
            if c.writing or c in self._owed:
                continue
            if c.refused:
                del self._cache[key]
                if self._unwritten.get(c.slot) is c:
                    del self._unwritten[c.slot]
                continue
            idle = now - c.observed
            if c.count > c.written and c.written >= 1 and (idle > FINISH_TIME or now - c.written_at > SERIES_REFRESH):
                if self._take(c.slot, now):
                    self._write_event(c)
                continue
            if idle > FINISH_TIME and c.count <= c.written:
                del self._cache[key]
                if self._unwritten.get(c.slot) is c:
                    del self._unwritten[c.slot]
        for slot in [k for k, b in self._budgets.items() if b.full(now)]:
            del self._budgets[slot]

    # ---- events ---------------------------------------------------------------------------

    def _full(self, pending: int) -> bool:
        """Whether ``max_pending`` writes of this kind wait already; if so, one more is dropped
        (counted in :attr:`dropped`, logged at most every ``DROP_LOG_INTERVAL`` seconds)."""
        # Bounded so that an unreachable API server cannot grow memory without limit; events and
        # status patches are best effort (the next attempt writes them again).
        if pending < self.max_pending:
            return False
        self.dropped += 1
        now = time.monotonic()
        if now - self._drop_logged >= DROP_LOG_INTERVAL:
            self._drop_logged = now
            log.error("dropping API writes: too many pending", pending=pending, dropped=self.dropped)
        return True

    def event(
        self, regarding: Pod | Node | PodGroup, *, controller: str, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Record an event about a pod, node or PodGroup (``Eventf``).

        The event lives in the object's namespace; a node's in ``default``, as client-go's
        recorder files events about cluster-scoped objects.
        """
        md = regarding.metadata
        kind, api_version = _KINDS[type(regarding)]
        now = time.time()
        key = (type_, action, reason, controller, kind, md.namespace, md.name, md.uid, substance(note))
        cached = self._cache.get(key)
        if cached is not None and now - cached.observed <= FINISH_TIME:
            cached.count += 1
            cached.observed = now
            self._want(cached, now)
            return
        if cached is not None:  # finished while nobody swept: its last count is owed first
            self._finish(cached)
        ref = {
            "kind": kind,
            "namespace": md.namespace,
            "name": md.name,
            "uid": md.uid,
            "apiVersion": api_version,
            "resourceVersion": md.resource_version,
        }
        if not md.namespace:
            del ref["namespace"]
        namespace = md.namespace or "default"
        name = f"{md.name}.{time.time_ns():x}"
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": now_micro(),
            "reportingController": controller,
            "reportingInstance": f"{controller}-{self.host}",
            "action": action,
            "reason": reason,
            "regarding": ref,
            "note": truncate_message(note),
            "type": type_,
        }
        slot = (md.uid or f"{kind}/{md.namespace}/{md.name}", reason)
        c = _Cached(key, slot, name, namespace, body, now)
        older = self._unwritten.get(slot)
        if older is not None and older.written == 0 and not older.writing:
            # A newer event of the same object and reason supersedes one still waiting for budget.
            self._cache.pop(older.key, None)
            self._owed.discard(older)
            self.superseded += 1
        self._cache[key] = c
        self._unwritten[slot] = c
        self._want(c, now)

    def _finish(self, c: _Cached) -> None:
        """Forget a finished event, writing its last count first if the API server lacks it."""
        del self._cache[c.key]
        self._owed.discard(c)
        if self._unwritten.get(c.slot) is c:
            del self._unwritten[c.slot]
        if c.count > c.written and c.written >= 1 and not c.writing:
            self._write_event(c)

    def _want(self, c: _Cached, now: float) -> None:
        """Write what ``c`` owes now if its budget allows, else leave it to :meth:`maintain`."""
        if not c.due():
            return
        if self._take(c.slot, now):
            self._write_event(c)
        else:
            self._owed.add(c)
            self._ensure_maintainer()

    def _write_event(self, c: _Cached) -> None:
        if self._full(len(self._events)):
            return
        self._ensure_maintainer()
        c.writing = True
        t = asyncio.get_running_loop().create_task(self._send_event(c))
        self._events.add(t)
        t.add_done_callback(self._events.discard)

    async def _send_event(self, c: _Cached) -> None:
        """Create the event (with its series when it repeated meanwhile), or write its count."""
        try:
            count = c.count
            series = {"count": count, "lastObservedTime": now_micro()} if count > 1 else None
            if c.written == 0:
                ok = await self._create({**c.body, "series": series} if series else c.body)
            else:
                ok = await self._patch_series(c, series or {"count": count, "lastObservedTime": now_micro()})
            if ok:
                c.written = count
                c.written_at = time.time()
                if self._unwritten.get(c.slot) is c:
                    del self._unwritten[c.slot]
            elif c.written == 0:
                c.refused = True
        finally:
            c.writing = False
        if c.due() and c.key in self._cache:  # it repeated while being created: the series is owed
            self._want(c, time.time())

    async def _create(self, body: dict[str, Any]) -> bool:
        """POST an event, retrying transport errors and 5xx up to 12 times about 10 s apart;
        returns whether the API server has it."""
        ns = body["metadata"]["namespace"]
        for attempt in range(12):
            try:
                await self.events_client.post(
                    f"/apis/events.k8s.io/v1/namespaces/{ns}/events", body, retries=0, priority=PRIORITY_EVENTS
                )
                return True
            except ApiError as exc:
                # 409: the event exists already (an earlier attempt landed). Other 4xx would fail
                # again, so only 5xx falls through to the retry.
                if exc.code == 409:
                    return True
                if exc.code < 500:
                    log.error("unable to write event", reason=body["reason"], error=str(exc))
                    return False
            except Exception as exc:
                if attempt == 11:
                    log.error("unable to write event (retry limit exceeded!)", error=str(exc))
                    return False
            await asyncio.sleep(10.0 * (0.75 + random.random() / 2))
        return False

    async def _patch_series(self, c: _Cached, series: dict[str, Any]) -> bool:
        """Write event ``c``'s series (``recordEvent``'s isomorphic-event path); a 404 (deleted,
        or its create has not landed) creates it with the series. Returns whether it landed."""
        try:
            await self.events_client.patch(
                f"/apis/events.k8s.io/v1/namespaces/{c.namespace}/events/{c.name}",
                {"series": series},
                retries=2,
                priority=PRIORITY_EVENTS,
            )
            return True
        except ApiError as exc:
            if exc.code == 404:
                return await self._create({**c.body, "series": series})
            log.info("unable to update event series", v=4, eventName=c.name, error=str(exc))
        except Exception as exc:
            log.info("unable to update event series", v=4, eventName=c.name, error=str(exc))
        return False

    # ---- pod status -----------------------------------------------------------------------

    def _lane_key(self, pod: Pod) -> str:
        return pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"

    def _queued(self) -> int:
        return sum(len(lane.queue) + (lane.on_wire is not None) for lane in self._lanes.values())

    def _enqueue(self, pod: Pod, w: _StatusWrite) -> None:
        key = self._lane_key(pod)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.queue.append(w)
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.get_running_loop().create_task(self._drive(key, lane, pod))

    async def _drive(self, key: str, lane: _Lane, pod: Pod) -> None:
        """Send the lane's writes one after the other; PodScheduled=False ones within the pod's budget."""
        try:
            while lane.queue:
                w = lane.queue[0]
                if w.abandon is not None and w.abandon.done():
                    lane.queue.popleft()
                    w.done.set_result(None)
                    continue
                if w.scheduled_false and not self._take(("status", key), time.time()):
                    # Over budget: wait (a newer PodScheduled=False replaces this one meanwhile).
                    await asyncio.sleep(self._budgets[("status", key)].wait(time.time()))
                    continue
                lane.queue.popleft()
                lane.on_wire = w
                try:
                    await self._patch_status(pod, w.patch, abandon=w.abandon)
                finally:
                    lane.on_wire = None
                    w.done.set_result(None)
        finally:
            if self._lanes.get(key) is lane and not lane.queue:
                del self._lanes[key]

    async def status_settled(self, uid: str, namespace: str, name: str, timeout: float = STATUS_SETTLE_TIMEOUT) -> None:
        """Before the pod's Binding: drop its ``PodScheduled=False`` writes not yet sent (the
        Binding supersedes them; a failed Binding records a new one) and wait (at most
        ``timeout`` seconds) for the one already on the wire, so none lands after the Binding
        that set ``PodScheduled=True``. Bindings never queue behind status writes this way."""
        lane = self._lanes.get(uid or f"{namespace}/{name}")
        if lane is None:
            return
        for w in [w for w in lane.queue if w.scheduled_false]:
            lane.queue.remove(w)
            w.done.set_result(None)
        waits = [w.done for w in (lane.on_wire, *lane.queue) if w is not None]
        if waits:
            await asyncio.wait(waits, timeout=timeout)

    async def close(self) -> None:
        """Close the events client's connections (after :meth:`drain`)."""
        if self._maintainer is not None:
            self._maintainer.cancel()
        if self.events_client is not self.client:
            await self.events_client.close()

    def pending(self) -> int:
        """Event and status writes queued or on the wire (event writes waiting for budget included)."""
        return len(self._events) + len(self._owed) + self._queued()

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (bounded, ``timeout`` seconds) for pending writes, e.g. at shutdown; event writes
        still waiting for budget are sent now (the budget protects others from a flood, not the
        last writes of a scheduler that stops)."""
        with anyio.move_on_after(timeout):
            while True:
                for c in list(self._owed):
                    self._owed.discard(c)
                    if c.due():
                        self._write_event(c)
                lanes = [lane.worker for lane in self._lanes.values() if lane.worker is not None]
                tasks = [*self._events, *lanes]
                if not tasks:
                    break
                await asyncio.wait(tasks)  # waiting cancels no write; a write may start another
        if self._maintainer is not None and not self._events and not self._owed:
            self._maintainer.cancel()
            self._maintainer = None

    def pod_scheduled_false(self, pod: Pod, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        """Set ``PodScheduled=False`` with ``reason``/``message`` (and clear nominatedNodeName),
        unless the pod shows that already in substance (:func:`substance`)."""
        cond = next((c for c in pod.status.conditions if c.type == "PodScheduled"), None)
        needs_cond = (
            cond is None
            or cond.status != "False"
            or cond.reason != reason
            or substance(cond.message) != substance(message)
        )
        needs_nnn = clear_nominated and bool(pod.status.nominated_node_name)
        if not needs_cond and not needs_nnn:
            return
        status: dict[str, Any] = {}
        if needs_cond:
            # The transition time moves only when the status does; a new reason or message
            # while still False keeps the time the pod first became unschedulable.
            transition = cond.last_transition_time if cond is not None and cond.status == "False" else None
            c: dict[str, Any] = {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": transition or now_rfc3339(),
            }
            if pod.metadata.generation:
                c["observedGeneration"] = pod.metadata.generation
            status["conditions"] = [c]
        if needs_nnn:
            status["nominatedNodeName"] = None  # null deletes the field in a strategic merge patch
        lane = self._lanes.get(self._lane_key(pod))
        if lane is not None and lane.queue and lane.queue[-1].scheduled_false:
            # A newer decision replaces the one still queued: one write instead of two.
            queued = lane.queue[-1]
            merged = {**queued.patch["status"], **status}
            if "conditions" in queued.patch["status"] and "conditions" not in status:
                merged["conditions"] = queued.patch["status"]["conditions"]
            queued.patch = {"status": merged}
            self.superseded += 1
            return
        if self._full(self._queued()):  # checked before the write is queued behind the pod's last one
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(pod, _StatusWrite({"status": status}, done, scheduled_false=True))

    async def nominate(self, pod: Pod, node: str, abandon: asyncio.Future[Any] | None = None) -> None:
        """Set ``status.nominatedNodeName`` before a Permit wait (NominatedNodeNameForExpectation,
        on by default in 1.35), so the pod shows where it is about to go.

        When ``abandon`` (the Permit wait) completes before the patch was sent, the patch is
        dropped: the pod is about to be bound, the case upstream skips too ("otherwise the pod
        will be soon bound anyway", ``pkg/scheduler/schedule_one.go`` bindingCycle)."""
        if pod.status.nominated_node_name == node:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(pod, _StatusWrite({"status": {"nominatedNodeName": node}}, done, abandon=abandon))
        # Returns when sent, or at once when the wait ends while the patch still queues (the
        # lane then drops it unsent).
        await asyncio.wait([done] if abandon is None else [done, abandon], return_when=asyncio.FIRST_COMPLETED)

    async def _patch_status(
        self, pod: Pod, patch: dict[str, Any], *, abandon: asyncio.Future[Any] | None = None
    ) -> None:
        """PATCH the pod's status subresource; a 404 (pod already deleted) is not an error."""
        md = pod.metadata
        try:
            await self.client.patch(
                f"/api/v1/namespaces/{md.namespace}/pods/{md.name}/status",
                patch,
                content_type="application/strategic-merge-patch+json",
                retries=3,
                priority=PRIORITY_STATUS,
                abandon=abandon,
            )
        except ApiError as exc:
            if exc.code != 404:
                log.error("error updating pod", pod=f"{md.namespace}/{md.name}", error=str(exc))
        except Exception as exc:
            log.error("error updating pod", pod=f"{md.namespace}/{md.name}", error=str(exc))
