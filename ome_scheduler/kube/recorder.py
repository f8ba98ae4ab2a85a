"""Events (``events.k8s.io/v1``) and the pod ``PodScheduled`` condition.

Mirrors client-go's ``tools/events`` broadcaster as kube-scheduler uses it: the reporting
controller is the profile's scheduler name and the reporting instance
``{schedulerName}-{hostname}``; an event isomorphic to one recorded in the last 6 minutes
(same regarding object and resourceVersion, type, action, reason, controller, and note) becomes a
series (one PATCH to ``count: 2``, or a create with that series when the PATCH finds no event,
as ``recordEvent`` does; later repeats are only counted), and failed writes are retried up to
12 times about 10 s apart. The PodScheduled condition is patched like
``updatePod`` in ``schedule_one.go``: only when status, reason or message change, keeping
``lastTransitionTime`` when the status does not. Writes run in the background so a slow API
server never stalls a scheduling cycle; at most ``max_pending`` events and as many status
patches queue up, and what comes beyond is dropped (client-go's broadcaster queues 1,000
events and drops the rest, ``watch.DropIfChannelFull``).

Events go through a client of their own, as kube-scheduler's ``eventClient``: its own rate
limiter and connection pool, and at most ``EVENT_IN_FLIGHT`` requests on the wire
(client-go's broadcaster writes one event at a time). During a burst, events then take a small
share of the API server and queue up behind the Bindings, catching up once the burst is over.

Status writes of one pod go out one after the other, in the order they were made, so the last
decision is the one the pod shows (two concurrent patches could otherwise land in either order).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
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
"""Seconds an event stays in the series cache (client-go ``tools/events`` ``finishTime``)."""

STATUS_SETTLE_TIMEOUT = 5.0
"""Seconds a Binding waits at most for the pod's earlier status writes (:meth:`Recorder.status_settled`)."""


def truncate_message(msg: str) -> str:
    """``truncateMessage``: events' note is capped at 1024 bytes (UTF-8, what kube-apiserver
    validates) with `` ...``; the cut never splits a character."""
    raw = msg.encode()
    if len(raw) <= NOTE_LENGTH_LIMIT:
        return msg
    return raw[: NOTE_LENGTH_LIMIT - 4].decode(errors="ignore") + " ..."


@dataclass
class _Cached:
    """An event recently created: where it lives, when (``time.time()``), and its repeats."""

    name: str
    namespace: str
    created: float
    body: dict[str, Any]
    count: int = 1


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
        self._events: set[asyncio.Task[None]] = set()
        self._status: set[asyncio.Task[None]] = set()
        self._status_last: dict[str, asyncio.Future[None]] = {}
        self._superseded: dict[str, asyncio.Future[None]] = {}
        """Per pod: completed by :meth:`status_settled` to drop its PodScheduled=False writes not yet sent."""
        """Per pod (uid): completes when the pod's last queued status write has ended."""
        self.max_pending = max_pending
        self.dropped = 0
        """Writes dropped because ``max_pending`` of their kind were already queued."""
        self._drop_logged = -DROP_LOG_INTERVAL

    def _status_write(
        self, pod: Pod, patch: dict[str, Any], abandon: asyncio.Future[Any] | None = None
    ) -> Coroutine[Any, Any, None]:
        """The status PATCH of ``pod``, sent only after the pod's previous status write ended.

        With ``abandon``, a write still waiting for its predecessor when ``abandon`` completes
        is dropped (as :meth:`KubeClient.request` drops one still waiting for a slot).
        """
        key = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        prev = self._status_last.get(key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._status_last[key] = done

        def finish(_: object = None) -> None:
            # ``done`` means this write and every earlier one of the pod have ended.
            if not done.done():
                done.set_result(None)
            if self._status_last.get(key) is done:
                del self._status_last[key]
                self._superseded.pop(key, None)  # nothing of this pod is queued any more

        async def write() -> None:
            chained = False
            try:
                if prev is not None and not prev.done():
                    waits: list[asyncio.Future[Any]] = [prev] if abandon is None else [prev, abandon]
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    if abandon is not None and abandon.done():
                        if not prev.done():  # dropped, but ends only with its predecessor
                            chained = True
                            prev.add_done_callback(finish)
                        return
                await self._patch_status(pod, patch, abandon=abandon)
            finally:
                if not chained:
                    finish()

        return write()

    async def status_settled(self, uid: str, namespace: str, name: str, timeout: float = STATUS_SETTLE_TIMEOUT) -> None:
        """Before the pod's Binding: drop its ``PodScheduled=False`` writes not yet sent (the
        Binding supersedes them; a failed Binding records a new one) and wait (at most
        ``timeout`` seconds) for the one already on the wire, so none lands after the Binding
        that set ``PodScheduled=True``. Bindings never queue behind status writes this way."""
        key = uid or f"{namespace}/{name}"
        superseded = self._superseded.pop(key, None)
        if superseded is not None and not superseded.done():
            superseded.set_result(None)
        last = self._status_last.get(key)
        if last is not None and not last.done():
            await asyncio.wait([last], timeout=timeout)

    def _full(self, tasks: set[asyncio.Task[None]]) -> bool:
        """Whether ``max_pending`` writes of this kind wait already; if so, one more is dropped
        (counted in :attr:`dropped`, logged at most every ``DROP_LOG_INTERVAL`` seconds)."""
        # Bounded so that an unreachable API server cannot grow memory without limit; events and
        # status patches are best effort (the next attempt writes them again).
        if len(tasks) < self.max_pending:
            return False
        self.dropped += 1
        now = time.monotonic()
        if now - self._drop_logged >= DROP_LOG_INTERVAL:
            self._drop_logged = now
            log.error("dropping API writes: too many pending", pending=len(tasks), dropped=self.dropped)
        return True

    def _spawn(self, coro: Any, tasks: set[asyncio.Task[None]]) -> None:
        """Run one write in the background, or drop it when ``max_pending`` of its kind wait."""
        if self._full(tasks):
            coro.close()
            return
        t = asyncio.get_running_loop().create_task(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    async def close(self) -> None:
        """Close the events client's connections (after :meth:`drain`)."""
        if self.events_client is not self.client:
            await self.events_client.close()

    def pending(self) -> int:
        """Event and status writes queued or on the wire."""
        return len(self._events) + len(self._status)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (bounded, ``timeout`` seconds) for pending writes, e.g. at shutdown."""
        tasks = [*self._events, *self._status]
        if tasks:
            with anyio.move_on_after(timeout):
                await asyncio.wait(tasks)  # waiting cancels no write

    def event(
        self, regarding: Pod | Node | PodGroup, *, controller: str, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Record an event about a pod, node or PodGroup (``Eventf``).

        The event lives in the object's namespace; a node's in ``default``, as client-go's
        recorder files events about cluster-scoped objects.
        """
        md = regarding.metadata
        kind, api_version = _KINDS[type(regarding)]
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
        now = time.time()
        while self._cache:  # insertion order is creation order: expire from the front
            k0, first = next(iter(self._cache.items()))
            if now - first.created <= FINISH_TIME:
                break
            del self._cache[k0]
        # client-go's key leaves the note out and counts on the object's resourceVersion to change
        # between different messages; our status patch and its informer update can lag behind
        # the next attempt, so a new message would be swallowed as a repeat: the note is in.
        key = (type_, action, reason, controller, kind, md.namespace, md.name, md.uid, md.resource_version, note)
        cached = self._cache.get(key)
        if cached is not None:
            # Only the first repeat is written (it turns the event into a series); later ones are
            # counted locally, so a pod failing every backoff does not cost a write per attempt.
            cached.count += 1
            if cached.count == 2:
                self._spawn(self._patch_series(cached), self._events)
            return
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
        self._cache[key] = _Cached(name, namespace, now, body)
        self._spawn(self._create(body), self._events)

    async def _create(self, body: dict[str, Any]) -> None:
        """POST an event, retrying transport errors and 5xx up to 12 times about 10 s apart."""
        ns = body["metadata"]["namespace"]
        for attempt in range(12):
            try:
                await self.events_client.post(
                    f"/apis/events.k8s.io/v1/namespaces/{ns}/events", body, retries=0, priority=PRIORITY_EVENTS
                )
                return
            except ApiError as exc:
                # 409: the event exists already (an earlier attempt landed). Other 4xx would fail
                # again, so only 5xx falls through to the retry.
                if exc.code == 409 or exc.code < 500:
                    if exc.code != 409:
                        log.error("unable to write event", reason=body["reason"], error=str(exc))
                    return
            except Exception as exc:
                if attempt == 11:
                    log.error("unable to write event (retry limit exceeded!)", error=str(exc))
                    return
            await asyncio.sleep(10.0 * (0.75 + random.random() / 2))

    async def _patch_series(self, c: _Cached) -> None:
        """Mark event ``c`` as a series of 2 (``recordEvent``'s isomorphic-event path)."""
        series = {"count": 2, "lastObservedTime": now_micro()}
        try:
            await self.events_client.patch(
                f"/apis/events.k8s.io/v1/namespaces/{c.namespace}/events/{c.name}",
                {"series": series},
                retries=2,
                priority=PRIORITY_EVENTS,
            )
        except ApiError as exc:
            if exc.code == 404:  # deleted, or its create has not landed yet: create it as a series
                await self._create({**c.body, "series": series})
            else:
                log.info("unable to update event series", v=4, eventName=c.name, error=str(exc))
        except Exception as exc:
            log.info("unable to update event series", v=4, eventName=c.name, error=str(exc))

    def pod_scheduled_false(self, pod: Pod, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        """Set ``PodScheduled=False`` with ``reason``/``message`` (and clear nominatedNodeName)."""
        cond = next((c for c in pod.status.conditions if c.type == "PodScheduled"), None)
        needs_cond = cond is None or cond.status != "False" or cond.reason != reason or cond.message != message
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
        if self._full(self._status):  # checked before the write is queued behind the pod's last one
            return
        key = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        superseded = self._superseded.get(key)
        if superseded is None:
            superseded = self._superseded[key] = asyncio.get_running_loop().create_future()
        self._spawn(self._status_write(pod, {"status": status}, abandon=superseded), self._status)

    async def nominate(self, pod: Pod, node: str, abandon: asyncio.Future[Any] | None = None) -> None:
        """Set ``status.nominatedNodeName`` before a Permit wait (NominatedNodeNameForExpectation,
        on by default in 1.35), so the pod shows where it is about to go.

        When ``abandon`` (the Permit wait) completes before the patch was sent, the patch is
        dropped: the pod is about to be bound, the case upstream skips too ("otherwise the pod
        will be soon bound anyway", ``pkg/scheduler/schedule_one.go`` bindingCycle)."""
        if pod.status.nominated_node_name == node:
            return
        await self._status_write(pod, {"status": {"nominatedNodeName": node}}, abandon=abandon)

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
