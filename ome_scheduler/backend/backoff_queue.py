"""backoffQ: the pods waiting out their backoff, and the heap every part of the queue is made of.

Mirrors ``pkg/scheduler/backend/queue/backoff_queue.go`` (v1.35.4): pods rejected by plugins
wait here until ``initial * 2^(failures-1)`` seconds (capped at ``max``, aligned down to the
1 s ``backoffQOrderingWindowDuration`` grid) have passed since their last failure; pods whose
cycle failed with an error wait in a queue of their own that is never popped early. One
difference, for gangs (``gangpacing.py``): gang members wait in a third heap, also never popped
early, and wait out their gang's backoff as well as their own.

:class:`PodHeap` is a heap of QueuedPodInfo with removal by uid (lazy deletion); activeQ is one
too (``queue.py``). No I/O.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

from ome_scheduler.backend.gangpacing import GangPacing
from ome_scheduler.framework.types import PodKey, QueuedPodInfo

BACKOFF_WINDOW = 1.0
"""``backoffQOrderingWindowDuration``: backoff expirations are aligned to this grid (s)."""


class PodHeap:
    """A heap with removal by uid (lazy deletion); ``on_change(q, +1/-1)`` hears every pod that
    joins or leaves it."""

    def __init__(
        self,
        key: Callable[[QueuedPodInfo], tuple[Any, ...]],
        on_change: Callable[[QueuedPodInfo, int], None] | None = None,
    ) -> None:
        self._key = key
        self._on_change = on_change
        self._heap: list[tuple[tuple[Any, ...], int, QueuedPodInfo]] = []
        self._items: dict[PodKey, QueuedPodInfo] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, uid: object) -> bool:
        return uid in self._items

    def get(self, uid: PodKey) -> QueuedPodInfo | None:
        return self._items.get(uid)

    def push(self, q: QueuedPodInfo) -> None:
        uid = uid_of(q)
        old = self._items.get(uid)
        self._items[uid] = q
        heapq.heappush(self._heap, (self._key(q), next(self._seq), q))
        if self._on_change is not None:
            if old is not None:
                self._on_change(old, -1)
            self._on_change(q, 1)

    def remove(self, uid: PodKey) -> QueuedPodInfo | None:
        q = self._items.pop(uid, None)
        if q is not None and self._on_change is not None:
            self._on_change(q, -1)
        return q

    def _clean(self) -> None:
        h = self._heap
        while h and self._items.get(uid_of(h[0][2])) is not h[0][2]:
            heapq.heappop(h)

    def peek(self) -> QueuedPodInfo | None:
        self._clean()
        return self._heap[0][2] if self._heap else None

    def pop(self) -> QueuedPodInfo | None:
        self._clean()
        if not self._heap:
            return None
        q = heapq.heappop(self._heap)[2]
        del self._items[uid_of(q)]
        if self._on_change is not None:
            self._on_change(q, -1)
        return q

    def values(self) -> list[QueuedPodInfo]:
        return list(self._items.values())


def uid_of(q: QueuedPodInfo) -> PodKey:
    return q.pod_info.pod_key


class BackoffQueue:
    """backoffQ: standalone pods rejected by plugins (``plain``, popped early when activeQ is
    empty), gang members (``gang``) and pods that failed with an error (``errors``); the latter
    two never leave before their backoff ends.

    Args:
        sort_key: the profile's QueueSort key (ties between equal expirations).
        pacing: the gangs' backoff (``gangpacing.py``); also told of every gang member queued.
        initial_backoff, max_backoff: seconds (``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        sort_key: Callable[[QueuedPodInfo], tuple[Any, ...]],
        pacing: GangPacing,
        *,
        initial_backoff: float,
        max_backoff: float,
        clock: Callable[[], float],
    ) -> None:
        def key(q: QueuedPodInfo) -> tuple[Any, ...]:
            return (q.backoff_expiration, *sort_key(q))

        self.pacing = pacing
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff  # 0: no backoff at all
        self.clock = clock
        self.plain = PodHeap(key, pacing.queued_changed)
        self.gang = PodHeap(key, pacing.queued_changed)
        self.errors = PodHeap(key)
        self._heaps = (self.plain, self.gang, self.errors)

    def __len__(self) -> int:
        return len(self.plain) + len(self.gang) + len(self.errors)

    def __contains__(self, uid: object) -> bool:
        return uid in self.plain or uid in self.gang or uid in self.errors

    def get(self, uid: PodKey) -> QueuedPodInfo | None:
        """The pod if it waits here."""
        return self.plain.get(uid) or self.gang.get(uid) or self.errors.get(uid)

    def remove(self, uid: PodKey) -> QueuedPodInfo | None:
        """Take the pod out, wherever it waits here."""
        found = None
        for h in self._heaps:
            q = h.remove(uid)
            found = found or q
        return found

    def values(self) -> list[QueuedPodInfo]:
        """Every pod waiting here."""
        return [*self.plain.values(), *self.gang.values(), *self.errors.values()]

    def expiration(self, q: QueuedPodInfo) -> float:
        """``getBackoffTime``: when the pod's own backoff ends (0 when it never failed)."""
        if self.max_backoff == 0:
            return 0.0
        count = q.consecutive_errors_count or q.unschedulable_count
        if count == 0:
            return 0.0
        if not q.backoff_expiration:
            d = self.initial_backoff
            for _ in range(count - 1):
                d *= 2
                if d > self.max_backoff:
                    break
            d = min(d, self.max_backoff)
            q.backoff_expiration = math.floor((q.timestamp + d) / BACKOFF_WINDOW) * BACKOFF_WINDOW
        return q.backoff_expiration

    def is_backing_off(self, q: QueuedPodInfo) -> bool:
        """``isPodBackingoff``: its backoff (or its gang's) has not ended in this window."""
        bo = max(self.expiration(q), self.pacing.until(q))
        return bo >= math.floor(self.clock() / BACKOFF_WINDOW) * BACKOFF_WINDOW and bo > 0

    def add(self, q: QueuedPodInfo) -> None:
        """Queue the pod in the heap its failure calls for (after removing it from the others)."""
        self.expiration(q)
        self.remove(uid_of(q))
        if not q.unschedulable_plugins and not q.pending_plugins:
            self.errors.push(q)
        elif q.pod_info.gang:
            # A gang member waits out its gang's backoff too, and is never popped early.
            q.backoff_expiration = max(q.backoff_expiration, self.pacing.until(q))
            self.gang.push(q)
        else:
            self.plain.push(q)

    def pop_early(self) -> QueuedPodInfo | None:
        """The standalone pod whose backoff ends first, taken before it ends (activeQ is empty)."""
        return self.plain.pop()

    def pop_completed(self) -> Iterator[QueuedPodInfo]:
        """``popAllBackoffCompleted``: every pod whose backoff has ended, taken out."""
        for heap in self._heaps:
            while True:
                q = heap.peek()
                if q is None or self.is_backing_off(q):
                    break
                heap.pop()
                yield q
