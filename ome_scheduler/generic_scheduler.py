"""Node selection for one pod: PreFilter, Filter, Score and the choice of a host.

Mirrors the part of ``pkg/scheduler/schedule_one.go`` that was ``generic_scheduler.go``
before 1.23 (``schedulePod``, ``findNodesThatFitPod``, ``findNodesThatPassFilters``,
``numFeasibleNodesToFind``, ``prioritizeNodes``, ``selectHost``): Filter runs over
``numFeasibleNodesToFind`` nodes from a rotating start index (the nominated node first);
Score sums the weighted plugin scores; ties are broken at random. Identical pods share
node-local answers through the equivalence cache (``framework/equivalence.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from itertools import chain, compress, islice

from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.framework.batch import SortedScoredNodes
from ome_scheduler.framework.equivalence import FEASIBLE, FEASIBLE_MASK, INFEASIBLE, UNKNOWN, ShapeTable
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.runtime import Diagnosis, FitError, Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


class NoNodesAvailable(Exception):
    """``ErrNoNodesAvailable``: the cluster has no nodes at all."""

    def __str__(self) -> str:
        return "no nodes available to schedule pods"


def num_feasible_nodes_to_find(percentage: int | None, num_all: int) -> int:
    """``numFeasibleNodesToFind``: how many feasible nodes to look for before scoring.

    All nodes below 100; else ``percentage`` percent (0 or None: adaptive ``50 - n/125``,
    at least 5%), and at least 100 nodes.
    """
    if num_all < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all
    pct = percentage or 0
    if pct == 0:
        pct = max(50 - num_all // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    n = num_all * pct // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


def feasible_nodes_wanted(fw: Framework, num_all: int) -> int:
    """How many feasible nodes a cycle of ``fw`` looks for among ``num_all``: one when no Score
    plugin runs (any feasible node will do), else :func:`num_feasible_nodes_to_find`."""
    if not fw.has_score_plugins():
        return 1
    return num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, num_all)


class GenericScheduler:
    """Picks a node for one pod against the cache (the cycle's snapshot)."""

    def __init__(self, cache: SchedulerCache, metrics: Metrics) -> None:
        self.cache = cache
        self.metrics = metrics
        self.next_start_node_index = 0
        """Where the next Filter pass starts, so successive pods spread their search."""

    def schedule_pod(self, fw: Framework, state: CycleState, pi: PodInfo, cycle: int = 0) -> str:
        """``schedulePod``: the chosen node's name.

        ``cycle`` is the scheduling cycle's number (the queue's pops, ``CurrentCycle``):
        OpportunisticBatching (``framework/batch.py``) offers a hint only in the cycle right
        after the one that stored a ranking, so callers that do not count cycles (0) never get
        one. A profile that cannot sign (``fw.batch`` None) skips all of it.

        Raises:
            NoNodesAvailable: the cluster has no nodes.
            FitError: no node passed PreFilter and Filter.
            RuntimeError: a plugin returned Error or raised (its Error status's message).
        """
        all_nodes = self.cache.node_infos()
        if not all_nodes:
            raise NoNodesAvailable()
        diag = Diagnosis()
        result, st, with_nodes = fw.run_pre_filter(state, pi, all_nodes)
        diag.unschedulable_plugins = set(with_nodes)
        if st is not None and not st.is_success():
            if not st.is_rejected():
                raise RuntimeError(st.message())
            diag.node_to_status.absent = st
            diag.pre_filter_msg = st.message()
            diag.add_plugin_status(st)
            raise FitError(pi, len(all_nodes), diag)
        batch = fw.batch
        hint = ""
        signature: bytes | None = None
        if batch is not None:
            hint, signature = batch.get_node_hint(state, pi, cycle)
        nominated = pi.pod.status.nominated_node_name
        if nominated or hint:
            # ``evaluateNominatedNode``: a node the pod was nominated to (a gang member that
            # waited at Permit there), else the batch's hint, is tried alone first.
            first = nominated or hint
            ni = self.cache.get_node_info(first)
            if ni is not None and (result is None or first in result):
                if fw.run_filter_with_nominated_pods(state, pi, ni) is None:
                    if batch is not None:
                        batch.store_schedule_results(signature, hint, first, None, cycle)
                    return first
        nodes: Sequence[NodeInfo] = all_nodes
        if result is not None:
            nodes = [n for n in (self.cache.get_node_info(name) for name in result) if n is not None]
            nodes.sort(key=lambda n: n.name)
            diag.node_to_status.absent = Status.unresolvable(
                f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(with_nodes))}]"
            )
        table: ShapeTable | None = None
        positions: list[int] = []
        with_nominated = fw.handle.has_nominated_pods()
        if result is None and not with_nominated and fw.filters_node_local(state):
            # Only un-narrowed cycles whose Filter plugins are all node-local may share answers
            # with earlier pods of the same shape (framework/equivalence.py).
            version = (self.cache.version, fw.cache_version(state, pi))
            table, fresh = fw.equivalence.table(pi.shape, version, all_nodes, self.cache.change_cursor())
            if not fresh:
                table.cursor, changed = self.cache.node_changes(table.cursor)
                table.forget(changed)
            positions = self.find_feasible_cached(fw, state, pi, diag, table)
            feasible: list[NodeInfo] = list(map(all_nodes.__getitem__, positions))
        else:
            feasible = self.find_nodes_that_pass_filters(fw, state, pi, diag, nodes, len(all_nodes), with_nominated)
        if not feasible:
            raise FitError(pi, len(all_nodes), diag)
        if len(feasible) == 1 or not fw.has_score_plugins():
            if batch is not None:
                batch.store_schedule_results(signature, hint, feasible[0].name, None, cycle)
            return feasible[0].name
        pst = fw.run_pre_score(state, pi, feasible)
        if pst is not None:
            raise RuntimeError(pst.message())
        if table is not None and fw.scores_node_local(state):
            totals = fw.run_score_cached(state, pi, feasible, positions, table)
        else:
            totals = fw.run_score(state, pi, feasible)
        if isinstance(totals, Status):
            raise RuntimeError(totals.message())
        if batch is None:
            return self.select_host(pi, feasible, totals)
        best_i = self.select_host_index(pi, feasible, totals)
        host = feasible[best_i].name
        batch.store_schedule_results(signature, hint, host, SortedScoredNodes(feasible, totals, best_i), cycle)
        return host

    @classmethod
    def select_host(cls, pi: PodInfo, feasible: Sequence[NodeInfo], totals: Sequence[int]) -> str:
        """``selectHost``: a node with the highest total score, ties broken at random."""
        return feasible[cls.select_host_index(pi, feasible, totals)].name

    @staticmethod
    def select_host_index(pi: PodInfo, feasible: Sequence[NodeInfo], totals: Sequence[int]) -> int:
        """:meth:`select_host`'s choice, as an index into ``feasible``."""
        best = max(totals)
        best_i = random.choice(list(compress(range(len(totals)), map(best.__eq__, totals))))
        if enabled(10):
            for n, t in zip(feasible, totals, strict=True):
                log.info("Calculated node's final score for pod", v=10, pod=pi.key, node=n.name, score=t)
        return best_i

    def find_nodes_that_pass_filters(
        self,
        fw: Framework,
        state: CycleState,
        pi: PodInfo,
        diag: Diagnosis,
        nodes: Sequence[NodeInfo],
        num_all: int,
        with_nominated: bool = False,
    ) -> list[NodeInfo]:
        """``findNodesThatPassFilters``: up to ``numFeasibleNodesToFind`` feasible nodes
        (``with_nominated``: Filter counts the pods nominated to each node,
        ``RunFilterPluginsWithNominatedPods``; without any, plain Filter is the same).

        Rejections go into ``diag`` (each node's status; each distinct plugin/code once in
        the plugin sets).

        Raises:
            RuntimeError: a Filter plugin returned Error.
        """
        start = time.perf_counter()
        n = len(nodes)
        if n == 0:
            return []
        to_find = feasible_nodes_wanted(fw, n)
        feasible: list[NodeInfo] = []
        statuses = diag.node_to_status.statuses
        last_plugin: str | None = None
        last_code: Code | None = None
        idx0 = self.next_start_node_index % n
        processed = 0
        run_filter = fw.run_filter_with_nominated_pods if with_nominated else fw.run_filter
        for ni in chain(nodes[idx0:], nodes[:idx0]) if idx0 else nodes:
            processed += 1
            s = run_filter(state, pi, ni)
            if s is None:
                feasible.append(ni)
                if len(feasible) >= to_find:
                    break
            else:
                statuses[ni.name] = s
                # Runs of nodes fail alike; each distinct (plugin, code) is recorded once.
                if s.plugin is not last_plugin or s.code is not last_code:
                    if s.code == Code.ERROR:
                        raise RuntimeError(s.message())
                    diag.add_plugin_status(s)
                    last_plugin, last_code = s.plugin, s.code
        self._advance(processed, num_all)
        self._observe_filter(fw, start, bool(feasible))
        return feasible

    def find_feasible_cached(
        self, fw: Framework, state: CycleState, pi: PodInfo, diag: Diagnosis, table: ShapeTable
    ) -> list[int]:
        """:meth:`find_nodes_that_pass_filters` over every node of ``table``, answered from it:
        the positions (in ``table.nodes``) of up to ``numFeasibleNodesToFind`` feasible nodes,
        in the order visited from the rotating start index.

        Only nodes the table does not know are filtered (and their answers kept); runs of
        known nodes are scanned at C speed. When no node is feasible, ``diag`` gets every
        node's status as the uncached walk would record it.

        Raises:
            RuntimeError: a Filter plugin returned Error (the answer is not kept).
        """
        start = time.perf_counter()
        nodes = table.nodes
        n = len(nodes)
        if n == 0:
            return []
        to_find = feasible_nodes_wanted(fw, n)
        st = table.state
        statuses = table.statuses
        run_filter = fw.run_filter
        idx0 = self.next_start_node_index % n
        found: list[int] = []
        last = -1
        for a, b in ((idx0, n), (0, idx0)):
            i = a
            while i < b:
                # Known answers up to the next unknown node are read in one C-speed scan; the
                # unknown node is filtered and the scan goes on from it.
                u = st.find(UNKNOWN, i, b)
                end = b if u < 0 else u
                if end > i:
                    need = to_find - len(found)
                    got = list(islice(compress(range(i, end), st[i:end].translate(FEASIBLE_MASK)), need))
                    found += got
                    if len(got) == need:
                        last = got[-1]
                        break
                if u < 0:
                    break
                s = run_filter(state, pi, nodes[u])
                if s is None:
                    st[u] = FEASIBLE
                else:
                    if s.code == Code.ERROR:
                        raise RuntimeError(s.message())
                    st[u] = INFEASIBLE
                    statuses[u] = s
                i = u
            if last >= 0:
                break
        # Nodes visited: from the start index through the last feasible node needed, or all.
        processed = n if last < 0 else (last - idx0 if last >= idx0 else n - idx0 + last) + 1
        if not found:
            self._diagnose(diag, table, idx0)
        self._advance(processed, n)
        self._observe_filter(fw, start, bool(found))
        return found

    @staticmethod
    def _diagnose(diag: Diagnosis, table: ShapeTable, idx0: int) -> None:
        """Fill ``diag`` from ``table`` as the uncached walk from ``idx0`` would have (every
        node rejected: each node's status; each run's distinct plugin/code once)."""
        statuses = diag.node_to_status.statuses
        last_plugin: str | None = None
        last_code: Code | None = None
        n = len(table.nodes)
        for i in chain(range(idx0, n), range(idx0)):
            s = table.statuses.get(i)
            if s is None:
                continue
            statuses[table.nodes[i].name] = s
            if s.plugin is not last_plugin or s.code is not last_code:
                diag.add_plugin_status(s)
                last_plugin, last_code = s.plugin, s.code

    def _advance(self, processed: int, num_all: int) -> None:
        """Move the rotating start index past the ``processed`` nodes (``nextStartNodeIndex``)."""
        self.next_start_node_index = (self.next_start_node_index + processed) % max(1, num_all)

    def _observe_filter(self, fw: Framework, start: float, success: bool) -> None:
        """``framework_extension_point_duration_seconds{extension_point="Filter"}``."""
        self.metrics.framework_extension_point_duration.labels(
            "Filter", "Success" if success else "Unschedulable", fw.profile_name
        ).observe(time.perf_counter() - start)
