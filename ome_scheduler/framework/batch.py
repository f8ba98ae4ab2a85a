"""OpportunisticBatching: the next pod of the same signature offered the previous pod's next node.

Mirrors ``pkg/scheduler/framework/runtime/batch.go`` (v1.35.4, feature gate
OpportunisticBatching, Beta and on by default). After a pod was scheduled, its score ranking
of the other feasible nodes is kept with its signature (``Framework.sign_pod``). The next pod
gets the ranking's head as a *hint* (``GetNodeHint``) when all of these hold:

* a ranking is kept, and not empty;
* this is the very next scheduling cycle (``cycle == last cycle + 1``): a pod popped in
  between, of any profile, or a failed cycle (which stores nothing) ends it;
* the pod's signature is not None and equals the kept one;
* the ranking is at most 500 ms old (``maxBatchAge``);
* the previous pod's node still exists and Filter now *rejects* this pod there: the previous
  pod filled it, so the rest of the ranking is still in order (had it still fit, its new
  score would be unknown).

The hint is then tried alone through Filter (``generic_scheduler.py``, like a nominated node);
when it passes, the pod takes it without PreScore and Score, and the ranking, one shorter, is
kept for the pod after. Otherwise the cycle runs in full and stores its own ranking
(``StoreScheduleResults``). A profile with a PreFilter, Filter, PreScore or Score plugin that
cannot sign has no batch at all (``FrameworkProfile.sign_plugins`` is None), and none of this
runs for its pods.

Metrics as upstream: ``scheduler_batch_attempts_total{profile,result}`` (``no_hint``,
``hint_used``, ``hint_not_used``), ``scheduler_batch_cache_flushed_total{profile,reason}``,
``scheduler_get_node_hint_duration_seconds{hinted,profile}`` and
``scheduler_store_schedule_results_duration_seconds{profile}``.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()

MAX_BATCH_AGE_S = 0.5
"""``maxBatchAge``: a kept ranking older than this is not used (seconds)."""

HINT_NONE = "no_hint"
HINT_USED = "hint_used"
HINT_NOT_USED = "hint_not_used"
FLUSH_POD_FAILED = "pod_failed"
FLUSH_POD_SKIPPED = "pod_skipped"
FLUSH_NODE_MISSING = "node_missing"
FLUSH_NODE_NOT_FULL = "node_not_full"
FLUSH_EMPTY_LIST = "empty_list"
FLUSH_EXPIRED = "expired"
FLUSH_POD_INCOMPATIBLE = "pod_incompatible"
FLUSH_POD_NOT_BATCHABLE = "pod_not_batchable"


class SortedScoredNodes:
    """``framework.SortedScoredNodes`` (``sortedNodeScores``): the feasible nodes other than the
    chosen one, best total score first; :meth:`pop` takes the head.

    Built in O(1) from the cycle's lists; ordered (a heap, as upstream's) only on the first
    :meth:`pop`, so a cycle whose ranking is never used pays nothing for it. Ties come out in
    the order the nodes were filtered.
    """

    __slots__ = ("_nodes", "_totals", "_skip", "_heap")

    def __init__(self, nodes: Sequence[NodeInfo], totals: Sequence[int] | None, chosen: int) -> None:
        """``nodes`` the feasible nodes, ``totals`` their total scores (None: all equal),
        ``chosen`` the index of the node the pod took (left out)."""
        self._nodes = nodes
        self._totals = totals
        self._skip = chosen
        self._heap: list[tuple[int, int, str]] | None = None

    def __len__(self) -> int:
        return len(self._heap) if self._heap is not None else max(0, len(self._nodes) - 1)

    def pop(self) -> str:
        """The best remaining node's name (removed). Raises IndexError when empty."""
        h = self._heap
        if h is None:
            t = self._totals
            h = self._heap = [
                (-(t[i] if t is not None else 0), i, n.name) for i, n in enumerate(self._nodes) if i != self._skip
            ]
            heapq.heapify(h)
        return heapq.heappop(h)[2]


@dataclass(slots=True)
class _BatchState:
    """``batchState``: the kept ranking, whose signature it is, and when it was made."""

    signature: bytes
    sorted_nodes: SortedScoredNodes
    creation_time: float


@dataclass(slots=True)
class _Cycle:
    """``schedulingCycle``: the last cycle that stored results, and the node it chose."""

    cycle: int = -1
    chosen_node: str = ""
    succeeded: bool = False


class OpportunisticBatch:
    """``OpportunisticBatch``: one profile's kept ranking (one per framework).

    ``sign`` is the framework's ``sign_pod``; ``run_filter`` its ``run_filter`` (upstream's
    ``RunFilterPlugins``, without nominated pods); ``node_info`` looks a node up in the cycle's
    snapshot; ``clock`` gives seconds (monotonic).
    """

    def __init__(
        self,
        profile_name: str,
        metrics: Metrics,
        sign: Callable[[CycleState, PodInfo], bytes | None],
        run_filter: Callable[[CycleState, PodInfo, NodeInfo], Status | None],
        node_info: Callable[[str], NodeInfo | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile_name = profile_name
        self.metrics = metrics
        self._sign = sign
        self._run_filter = run_filter
        self._node_info = node_info
        self._clock = clock
        self._state: _BatchState | None = None
        self._last = _Cycle()
        self.batched_pods = 0
        """Pods that took their hint (``batchedPods``, for tests)."""

    def get_node_hint(self, state: CycleState, pod: PodInfo, cycle: int) -> tuple[str, bytes | None]:
        """``GetNodeHint``: (the hinted node or ``""``, the pod's signature or None).

        Runs after PreFilter (Filter on the previous pod's node reads its state). Popping the
        hint shortens the kept ranking whether or not the pod then takes it.
        """
        start = time.perf_counter()
        hint = ""
        signature = self._sign(state, pod)
        if self._compatible(state, pod, signature, cycle):
            assert self._state is not None
            hint = self._state.sorted_nodes.pop()
            log.info(
                "OpportunisticBatch provided node hint",
                v=3,
                profile=self.profile_name,
                pod=pod.key,
                cycleCount=cycle,
                hint=hint,
                remainingNodes=len(self._state.sorted_nodes),
            )
        else:
            self.metrics.batch_attempts.labels(self.profile_name, HINT_NONE).inc()
            log.info(
                "OpportunisticBatch no node hint available for pod",
                v=4,
                profile=self.profile_name,
                pod=pod.key,
                cycleCount=cycle,
            )
        self.metrics.get_node_hint_duration.labels("hint" if hint else HINT_NONE, self.profile_name).observe(
            time.perf_counter() - start
        )
        return hint, signature

    def store_schedule_results(
        self, signature: bytes | None, hinted: str, chosen: str, others: SortedScoredNodes | None, cycle: int
    ) -> None:
        """``StoreScheduleResults``: after a cycle that chose ``chosen``; ``others`` its ranking
        of the other feasible nodes (None when only one node was feasible)."""
        start = time.perf_counter()
        self._last = _Cycle(cycle, chosen, True)
        try:
            if hinted and hinted == chosen:
                self.metrics.batch_attempts.labels(self.profile_name, HINT_USED).inc()
                self.batched_pods += 1
                return
            if hinted:
                self.metrics.batch_attempts.labels(self.profile_name, HINT_NOT_USED).inc()
                log.info("OpportunisticBatch hint not used", v=4, profile=self.profile_name, hint=hinted, chosen=chosen)
            if signature is not None and others is not None and len(others) > 0:
                self._state = _BatchState(signature, others, self._clock())
                log.info("OpportunisticBatch set batch information", v=4, profile=self.profile_name, nodes=len(others))
            else:
                empty = others is None or len(others) == 0
                self._flushed(cycle, FLUSH_EMPTY_LIST if empty else FLUSH_POD_NOT_BATCHABLE)
                self._state = None
        finally:
            self.metrics.store_schedule_results_duration.labels(self.profile_name).observe(time.perf_counter() - start)

    def _flushed(self, cycle: int, reason: str) -> None:
        """``logUnusableState``: count why the kept ranking cannot serve this cycle."""
        self.metrics.batch_cache_flushed.labels(self.profile_name, reason).inc()
        log.info(
            "OpportunisticBatch found unusable state", v=4, profile=self.profile_name, cycleCount=cycle, reason=reason
        )

    def _compatible(self, state: CycleState, pod: PodInfo, signature: bytes | None, cycle: int) -> bool:
        """``batchStateCompatible``: whether the kept ranking may serve ``pod`` (the conditions in
        the module docstring, checked in upstream's order, each failure counted once)."""
        b = self._state
        if b is None or len(b.sorted_nodes) == 0:
            return False
        if cycle != self._last.cycle + 1:
            self._flushed(cycle, FLUSH_POD_SKIPPED)
            return False
        if not self._last.succeeded:
            self._flushed(cycle, FLUSH_POD_FAILED)
            return False
        if signature is None or signature != b.signature:
            self._flushed(cycle, FLUSH_POD_INCOMPATIBLE)
            return False
        if self._clock() > b.creation_time + MAX_BATCH_AGE_S:
            self._flushed(cycle, FLUSH_EXPIRED)
            return False
        last = self._node_info(self._last.chosen_node)
        if last is None:
            self._flushed(cycle, FLUSH_NODE_MISSING)
            return False
        st = self._run_filter(state, pod, last)
        if st is None or not st.is_rejected():
            self._flushed(cycle, FLUSH_NODE_NOT_FULL)
            return False
        return True
