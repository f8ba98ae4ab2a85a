"""The leader keeps every PodGroup's status and its where/why annotations current.

scheduler-plugins ships a separate controller for PodGroup status
(``pkg/controllers/podgroup_controller.go``); ome-scheduler runs alone, so its leader does
that job, with the same phases (``api/scheduling.py``: ``Pending`` fewer than ``minMember``
members exist; ``Scheduling`` they exist, fewer are bound; ``Scheduled`` ``minMember`` bound;
``Running`` running plus succeeded reach ``minMember``; ``Failed`` a member failed and failed
+ running + succeeded reach it; ``Finished`` succeeded reach it; the last two are final),
``running``/``succeeded``/``failed`` counts and ``scheduleStartTime`` (when the gang first
left ``Pending``, as scheduler-plugins' coscheduling plugin stamped it). Where the gang is
pinned or bound, under which topology key, and while it waits the last reason a member could
not be scheduled go into the ``ome.io/placement*`` and ``ome.io/waiting-reason`` annotations
(the CRD's status has no ``conditions``).

How it stays off the binding hot path:

* while the scheduler has pods ready to schedule (its active or backoff queue is not empty) due
  writes wait, up to :data:`MAX_DEFER` seconds, so a burst of Bindings never shares the API
  server with them;
* the engine only marks gangs changed (``PodGroupState``: informer events for PodGroups and
  member pods, OMEGangPack's placement reports, the cycle's failure reasons); this keeper, a
  background task of the leader, looks at them every :data:`TICK` seconds;
* writes are coalesced: a changed gang is written :data:`DELAY` seconds after its first change
  (later changes in that window ride along) and never sooner than :data:`MIN_INTERVAL` after its
  previous write, so each PodGroup gets at most one status write and one annotation write per
  second, and only when what it shows differs from what the PodGroup already says;
* at most :data:`MAX_IN_FLIGHT` writes at once, all at the API client's lowest priority
  (``kube/podgroupwriter.py``), with conflicts re-read and retried there; a transient failure
  (5xx, 429, no answer) is retried with backoff up to :data:`RETRY_MAX`, any other refusal
  (403 without the RBAC rule, 422) waits for the gang's next change.

The keeper starts by marking every PodGroup changed, so a new leader reconciles them all
(writing only those that differ). Counting Succeeded and Failed members needs a LIST of the
gang's pods (the pod informer drops finished pods); it is done only after a member left the
informer, or when the PodGroup already shows finished members and this process has not
counted them yet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from ome_scheduler.api.scheduling import (
    ANN_PLACEMENT,
    ANN_PLACEMENT_DOMAIN,
    ANN_PLACEMENT_TOPOLOGY_KEY,
    ANN_WAITING_REASON,
    FINAL_PHASES,
    PHASE_FAILED,
    PHASE_FINISHED,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SCHEDULED,
    PHASE_SCHEDULING,
    PLACEMENT_BOUND,
    PodGroup,
    PodGroupStatus,
)
from ome_scheduler.backend.podgroups import PodGroupState
from ome_scheduler.framework.topology import describe, domain_value, is_composite
from ome_scheduler.framework.types import GangKey, split_gang_key
from ome_scheduler.kube.client import TRANSPORT_ERRORS, ApiError
from ome_scheduler.kube.podgroupwriter import GONE, WRITTEN, MemberCounts, PodGroupWriter
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.util.timestamps import now_rfc3339

log = get_logger()

MIN_INTERVAL = 1.0
"""Seconds between two writes of one PodGroup (each kind: status, annotations)."""
DELAY = 1.0
"""Seconds a changed gang waits before it is written, so the changes of a forming gang coalesce."""
MAX_DEFER = 5.0
"""Seconds a due write waits at most while the scheduler is busy (pods in its active or backoff queue)."""
TICK = 0.1
"""Seconds between two looks at the changed gangs."""
MAX_IN_FLIGHT = 4
"""PodGroup writes (each a status PUT and/or an annotation PATCH) in flight at once."""
RETRY_MAX = 60.0
"""Longest wait, in seconds, before a write that failed transiently (5xx, 429, no answer) is tried again."""
REASON_LIMIT = 1024
"""Bytes of a waiting reason kept in the annotation (the event note's limit)."""


@dataclass(frozen=True, slots=True)
class GangCounts:
    """One gang's members as the status counts them: all that exist, bound (or finished, which
    were bound), Running, Succeeded and Failed."""

    exist: int
    bound: int
    running: int
    succeeded: int
    failed: int


def placement_domain(topology_key: str, value: str) -> str:
    """The ``ome.io/placement-domain`` value: the domain's label value, or for a preferred level
    (§3.9) its path ``R=r,P=p`` (the key is then ``R>P``)."""
    return describe(topology_key, value) if is_composite(topology_key) else value


def phase_of(min_member: int, c: GangCounts, current: str) -> str:
    """The PodGroup phase for counts ``c`` (scheduler-plugins' controller rules, plus
    ``Scheduled``); a final phase (``Finished``, ``Failed``) never changes, and a PodGroup
    without a positive ``minMember`` (which no member can be scheduled for) stays ``Pending``."""
    if current in FINAL_PHASES:
        return current
    if min_member <= 0 or c.exist < min_member:
        return PHASE_PENDING
    phase = PHASE_SCHEDULING
    if c.succeeded + c.running >= min_member:
        phase = PHASE_RUNNING
    elif c.bound >= min_member:
        phase = PHASE_SCHEDULED
    if c.failed and c.failed + c.running + c.succeeded >= min_member:
        phase = PHASE_FAILED
    if c.succeeded >= min_member:
        phase = PHASE_FINISHED
    return phase


def desired_status(pg: PodGroup, c: GangCounts, now: str) -> PodGroupStatus:
    """The status ``pg`` should show for counts ``c``; fields this keeper does not own
    (``occupiedBy``) are kept, and so is an earlier ``scheduleStartTime``."""
    cur = pg.status
    phase = phase_of(pg.spec.min_member or 0, c, cur.phase)
    if cur.phase in FINAL_PHASES:
        return cur
    start = cur.schedule_start_time
    if start is None and phase != PHASE_PENDING:
        start = now
    return msgspec.structs.replace(
        cur, phase=phase, running=c.running, succeeded=c.succeeded, failed=c.failed, schedule_start_time=start
    )


def annotation_changes(pg: PodGroup, state: PodGroupState, key: GangKey, c: GangCounts) -> dict[str, str | None]:
    """The ``ome.io/placement*`` and ``ome.io/waiting-reason`` changes ``pg`` needs (None deletes).

    Bound (``minMember`` members bound): ``Bound`` in the domain of the bound members under the
    reported topology key (or the one already written), and no waiting reason. Otherwise the
    reported pin (``Holding``/``Pinned``); no pin since one was reported: no placement; nothing
    reported since this process started (a new leader): what is written stays. The waiting
    reason is the last ``FailedScheduling`` note of a member, when this process has one, and
    none once the gang was pinned after it.
    """
    ann = pg.metadata.annotations
    want: dict[str, str | None] = {}
    mm = pg.spec.min_member or 0
    known, placement = state.placement(key)
    if mm > 0 and c.bound >= mm:
        tk = placement.topology_key if placement is not None else ann.get(ANN_PLACEMENT_TOPOLOGY_KEY, "")
        domains = {domain_value(n.labels, tk) for _, n in state.placed_members(key) if n is not None} if tk else set()
        if len(domains) == 1 and "" not in domains:
            want |= {
                ANN_PLACEMENT: PLACEMENT_BOUND,
                ANN_PLACEMENT_DOMAIN: placement_domain(tk, domains.pop()),
                ANN_PLACEMENT_TOPOLOGY_KEY: tk,
            }
        want[ANN_WAITING_REASON] = None
    else:
        if placement is not None and placement.state != PLACEMENT_BOUND:
            want |= {
                ANN_PLACEMENT: placement.state,
                ANN_PLACEMENT_DOMAIN: placement_domain(placement.topology_key, placement.domain),
                ANN_PLACEMENT_TOPOLOGY_KEY: placement.topology_key,
            }
        elif known:
            want |= dict.fromkeys((ANN_PLACEMENT, ANN_PLACEMENT_DOMAIN, ANN_PLACEMENT_TOPOLOGY_KEY))
        reason = state.reason(key)
        if reason is not None:
            raw = reason.encode()
            want[ANN_WAITING_REASON] = (
                reason if len(raw) <= REASON_LIMIT else raw[: REASON_LIMIT - 4].decode(errors="ignore") + " ..."
            )
        elif placement is not None:
            want[ANN_WAITING_REASON] = None  # pinned since its members last failed: the old reason is stale
    return {k: v for k, v in want.items() if ann.get(k) != v}


class PodGroupStatusKeeper:
    """The leader's background task that writes PodGroup status and annotations (module doc).

    ``clock`` is monotonic seconds; ``writes`` counts the requests sent by kind (``status``,
    ``annotations``, ``list``), also exported as ``ome_scheduler_podgroup_status_writes_total``.
    """

    def __init__(
        self,
        state: PodGroupState,
        writer: PodGroupWriter,
        metrics: Metrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.state = state
        self.busy = busy
        """Whether the scheduler has pods ready to schedule: writes then wait (up to :data:`MAX_DEFER`)."""
        self.writer = writer
        self.metrics = metrics
        self.clock = clock
        self.due: dict[GangKey, float] = {}
        """Changed gangs -> when they may be written."""
        self.last_write: dict[GangKey, float] = {}
        self.in_flight: set[GangKey] = set()
        self.finished: dict[GangKey, tuple[int, int]] = {}
        """Gang -> (succeeded, failed) members its last LIST counted."""
        self.writes: dict[str, int] = {"status": 0, "annotations": 0, "list": 0}
        self._tasks: set[asyncio.Task[None]] = set()
        self._steps = 0
        self.failures: dict[GangKey, int] = {}
        """Gang -> consecutive transient write failures (its retry backs off)."""
        self._told_forbidden = False

    def mark(self, key: GangKey) -> None:
        """Schedule ``key`` for a look: :data:`DELAY` from now, not sooner than
        :data:`MIN_INTERVAL` after its last write (an earlier due time is kept)."""
        if key in self.due:
            return
        now = self.clock()
        self.due[key] = max(now + DELAY, self.last_write.get(key, -MIN_INTERVAL) + MIN_INTERVAL)

    def step(self) -> None:
        """Take the changed gangs and start the writes that are due (at most :data:`MAX_IN_FLIGHT`)."""
        for key in self.state.take_changed():
            self.mark(key)
        now = self.clock()
        self._forget(now)
        if not self.due:
            return
        busy = self.busy is not None and self.busy()
        for key, t in list(self.due.items()):
            if len(self.in_flight) >= MAX_IN_FLIGHT:
                break
            if t > now or key in self.in_flight or (busy and now < t + MAX_DEFER):
                continue
            del self.due[key]
            self.in_flight.add(key)
            task = asyncio.get_running_loop().create_task(self._flush(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _forget(self, now: float) -> None:
        """Drop write times older than :data:`MIN_INTERVAL` (they constrain nothing any more)
        and, now and then, the finished counts of PodGroups that are gone."""
        for key in [k for k, t in self.last_write.items() if now - t > MIN_INTERVAL]:
            del self.last_write[key]
        self._steps += 1
        if self._steps % 600 == 0:
            for key in list(self.finished):
                parts = split_gang_key(key)
                if parts is None or self.state.get(*parts) is None:
                    del self.finished[key]

    async def run(self) -> None:
        """Reconcile every PodGroup once, then follow changes until cancelled (leader only)."""
        for key in self.state.gang_keys():
            self.mark(key)
        try:
            while True:
                self.step()
                await asyncio.sleep(TICK)
        finally:
            for t in list(self._tasks):
                t.cancel()

    def _count(self, key: GangKey) -> GangCounts:
        """The gang's counts from the informer's members, plus the finished ones last LISTed."""
        exist = bound = running = 0
        for p in self.state.members(key):
            if p.pod.status.phase in ("Succeeded", "Failed"):
                continue  # counted by the LIST (the informer drops them on their next event)
            exist += 1
            if p.pod.spec.node_name:
                bound += 1
            if p.pod.status.phase == "Running":
                running += 1
        succeeded, failed = self.finished.get(key, (0, 0))
        return GangCounts(exist + succeeded + failed, bound + succeeded + failed, running, succeeded, failed)

    def _sent(self, kind: str, result: str) -> None:
        self.writes[kind] += 1
        if self.metrics is not None:
            self.metrics.podgroup_status_writes.labels(kind, result).inc()

    async def _flush(self, key: GangKey) -> None:
        """Write what ``key``'s PodGroup should show, if it differs; errors are logged and the
        gang is tried again after :data:`MIN_INTERVAL`."""
        try:
            await self._write(key)
            self.failures.pop(key, None)
        except asyncio.CancelledError:
            raise
        except ApiError as exc:
            if exc.code in (401, 403) and not self._told_forbidden:
                self._told_forbidden = True
                log.error(
                    "cannot write PodGroup status: the scheduler needs podgroups/status update and podgroups patch "
                    "(the chart's RBAC grants both)",
                    podGroup=key,
                    error=str(exc),
                )
            else:
                log.info("unable to update PodGroup status", v=2, podGroup=key, error=str(exc))
            if exc.code == 429 or exc.code >= 500:
                self._retry(key)
            # Any other refusal would be refused again: the gang is written at its next change.
        except TRANSPORT_ERRORS as exc:
            log.info("unable to update PodGroup status", v=2, podGroup=key, error=str(exc))
            self._retry(key)
        except Exception as exc:  # a bug here must not end the keeper
            log.error("PodGroup status update failed", podGroup=key, error=repr(exc), exc_info=exc)
        finally:
            self.in_flight.discard(key)

    def _retry(self, key: GangKey) -> None:
        """Try ``key`` again after a transient failure, backing off (2, 4, ... 60 s)."""
        n = self.failures[key] = self.failures.get(key, 0) + 1
        self.due[key] = self.clock() + min(RETRY_MAX, 2.0**n)

    async def _write(self, key: GangKey) -> None:
        parts = split_gang_key(key)
        pg = self.state.get(*parts) if parts else None
        if pg is None or parts is None:
            self.last_write.pop(key, None)
            self.finished.pop(key, None)
            return
        if pg.status.phase in FINAL_PHASES:
            return
        shrunk = self.state.take_shrunk(key)
        if shrunk or (key not in self.finished and (pg.status.succeeded or pg.status.failed)):
            counts: MemberCounts = await self.writer.count_members(*parts)
            self._sent("list", "ok")
            self.finished[key] = (counts.succeeded, counts.failed)
            pg = self.state.get(*parts)
            if pg is None:
                return
        wrote = False
        now = now_rfc3339()

        def status_of(cur: PodGroup) -> PodGroupStatus | None:
            want = desired_status(cur, self._count(key), now)
            return None if want == cur.status else want

        if status_of(pg) is not None:
            result, pg = await self.writer.update_status(pg, status_of)
            self._sent("status", result)
            wrote = result == WRITTEN
            if result == GONE:
                return
        changes = annotation_changes(pg, self.state, key, self._count(key))
        if changes:
            result = await self.writer.patch_annotations(pg, changes)
            self._sent("annotations", result)
            wrote = wrote or result == WRITTEN
        if wrote:
            self.last_write[key] = self.clock()
