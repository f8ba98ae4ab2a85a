"""Preemption: choose a node and the victims to evict there so a pod that fits nowhere fits.

Mirrors ``pkg/scheduler/framework/preemption/preemption.go`` and the default policy of
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`` (v1.35.4):

* eligibility (``PodEligibleToPreemptOthers``): ``preemptionPolicy: Never`` never preempts; a pod
  already nominated to a node where a lower-priority pod is terminating because the scheduler
  preempted it waits for that pod to go (unless the nominated node is now unresolvable);
* candidates (``findCandidates``/``DryRunPreemption``): only the nodes whose Filter status is
  Unschedulable, visited from a random offset until ``numCandidates`` nodes were found and one
  of them violates no PodDisruptionBudget; on each, every lower-priority pod is removed (the
  PreFilter extensions told), the pod must then pass Filter (nominated pods counted), and the
  victims are reprieved one by one, most important first, PDB-violating ones before the others;
* the node pick (``pickOneNodeForPreemption``): fewest PDB violations, lowest highest-victim
  priority, lowest sum of priorities, fewest victims, latest start of the highest-priority
  victims, then the first;
* the writes (``prepareCandidateAsync``, async preemption being 1.35's default): off the
  scheduling loop, lower-priority pods nominated to the node lose their nomination, each victim
  gets the ``DisruptionTarget`` condition, is deleted and gets a ``Preempted`` event; a waiting
  victim is rejected instead. While they run the preemptor is in flight and DefaultPreemption's
  PreEnqueue keeps it out of activeQ.

The policy deviates on two points (``docs/plugins.md``): a member of a gang (``PodInfo.gang``:
a PodGroup or LeaderWorkerSet group member) is never a victim, so no gang is evicted partly;
and a gang member never preempts pod by pod (its PostFilter here is Unschedulable without a
message).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ome_scheduler.framework.interface import ApiWriter, CycleState, Handle, NodeToStatus
from ome_scheduler.framework.runtime import Diagnosis, FitError
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import get_logger
from ome_scheduler.util.labels import Selector
from ome_scheduler.util.timestamps import now_rfc3339, parse_rfc3339

if TYPE_CHECKING:
    from ome_scheduler.api.core import Pod
    from ome_scheduler.api.workloads import PodDisruptionBudget
    from ome_scheduler.metrics import Metrics

log = get_logger()

NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
IN_FLIGHT = "waiting for the preemption for this pod to be finished"
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class Candidate:
    """``preemption.Candidate``: a node and its victims (most important first) with the number of
    them whose eviction a PodDisruptionBudget does not allow."""

    name: str
    victims: tuple[PodInfo, ...]
    num_pdb_violations: int


def start_time(pi: PodInfo, now: float) -> float:
    """``GetPodStartTime`` in epoch seconds: ``status.startTime``, or ``now`` for a pod not started."""
    st = pi.pod.status.start_time
    if st:
        try:
            return parse_rfc3339(st)
        except ValueError:
            return now
    return now


def more_important(a: PodInfo, b: PodInfo, now: float) -> bool:
    """``util.MoreImportantPod``: higher priority, or equal priority and started earlier."""
    if a.priority != b.priority:
        return a.priority > b.priority
    return start_time(a, now) < start_time(b, now)


def sort_by_importance(pods: list[PodInfo], now: float) -> None:
    """Most important first (priority descending, then start time ascending); stable."""
    pods.sort(key=lambda p: (-p.priority, start_time(p, now)))


def filter_pods_with_pdb_violation(
    pods: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """``filterPodsWithPDBViolation``: (violating, non-violating), each in the given order.

    Each budget's ``disruptionsAllowed`` is spent pod by pod in order; a pod whose eviction
    takes a matching budget below zero violates it. Budgets of another namespace, with an
    empty or invalid selector, and pods already in ``disruptedPods`` do not count.
    """
    allowed = [pdb.status.disruptions_allowed for pdb in pdbs]
    selectors: list[Selector | None] = []
    for pdb in pdbs:
        try:
            selectors.append(Selector.from_label_selector(pdb.spec.selector))
        except ValueError:
            selectors.append(None)
    violating: list[PodInfo] = []
    ok: list[PodInfo] = []
    for pi in pods:
        labels = pi.pod.metadata.labels
        violated = False
        if labels:
            for i, pdb in enumerate(pdbs):
                sel = selectors[i]
                if pdb.metadata.namespace != pi.namespace or sel is None:
                    continue
                if sel.is_empty() or not sel.matches(labels):
                    continue
                if pi.name in pdb.status.disrupted_pods:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else ok).append(pi)
    return violating, ok


def earliest_start_of_top_victims(c: Candidate, now: float) -> float:
    """``GetEarliestPodStartTime``: the earliest start among the highest-priority victims."""
    top = max(p.priority for p in c.victims)
    return min(start_time(p, now) for p in c.victims if p.priority == top)


def pick_one_node_for_preemption(candidates: Sequence[Candidate], now: float | None = None) -> Candidate | None:
    """``pickOneNodeForPreemption``: the candidate the upstream criteria prefer, in their order
    (each keeps the best-scoring nodes; a single survivor wins; after all, the first in order).

    Victims are most important first, so ``victims[0]`` is the highest-priority one.
    """
    if not candidates:
        return None
    t = time.time() if now is None else now
    funcs: list[Callable[[Candidate], float]] = [
        lambda c: -c.num_pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(p.priority + MAX_INT32 + 1 for p in c.victims),
        lambda c: -len(c.victims),
        lambda c: earliest_start_of_top_victims(c, t),
    ]
    left = list(candidates)
    for f in funcs:
        scores = [f(c) for c in left]
        best = max(scores)
        left = [c for c, s in zip(left, scores, strict=True) if s == best]
        if len(left) == 1:
            return left[0]
    return left[0]


def terminating_by_preemption(pod: Pod) -> bool:
    """``podTerminatingByPreemption``: being deleted, and its first ``DisruptionTarget``
    condition is True with reason ``PreemptionByScheduler``."""
    if pod.metadata.deletion_timestamp is None:
        return False
    for c in pod.status.conditions:
        if c.type == "DisruptionTarget":
            return c.status == "True" and c.reason == "PreemptionByScheduler"
    return False


def num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    """``calculateNumCandidates``: ``percentage`` percent of the nodes, at least ``absolute``,
    at most all of them."""
    n = num_nodes * percentage // 100
    n = max(n, absolute)
    return min(n, num_nodes)


class Evaluator:
    """``preemption.Evaluator`` with DefaultPreemption's policy (``Interface``).

    ``writer`` is the fenced API port (None when plugins are built only to check a
    configuration: nothing is written then). ``offset`` draws the random start
    (``rand.Int31n``), replaceable in tests.
    """

    def __init__(
        self,
        plugin_name: str,
        handle: Handle,
        writer: ApiWriter | None,
        metrics: Metrics,
        *,
        min_candidate_nodes_percentage: int = 10,
        min_candidate_nodes_absolute: int = 100,
        offset: Callable[[int], int] = random.randrange,
    ) -> None:
        self.plugin_name = plugin_name
        self.handle = handle
        self.writer = writer
        self.metrics = metrics
        self.percentage = min_candidate_nodes_percentage
        self.absolute = min_candidate_nodes_absolute
        self.offset = offset
        self.preempting: set[str] = set()
        """UIDs of preemptors whose victims are still being written."""
        self.last_victim: dict[str, tuple[str, str]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    # ---- eligibility ----------------------------------------------------------------

    @staticmethod
    def is_preemption_allowed(victim: PodInfo, preemptor: PodInfo) -> bool:
        """``isPreemptionAllowed``: lower priority, and not a gang member (this scheduler's
        ``IsEligiblePod``: no gang is ever evicted partly)."""
        return victim.priority < preemptor.priority and not victim.gang

    def is_pod_running_preemption(self, uid: str) -> bool:
        """``IsPodRunningPreemption``: the preemptor's victims are being written, and the last
        one, once its turn came, is not yet being deleted."""
        if uid not in self.preempting:
            return False
        last = self.last_victim.get(uid)
        if last is None:
            return True
        victim = self.handle.get_pod(*last)
        if victim is None or victim.pod.metadata.deletion_timestamp is not None:
            return False
        return True

    def eligible(self, pod: PodInfo, nominated_status: Status) -> tuple[bool, str]:
        """``PodEligibleToPreemptOthers``: (eligible, why not)."""
        if pod.pod.spec.preemption_policy == "Never":
            return False, "not eligible due to preemptionPolicy=Never."
        nnn = pod.pod.status.nominated_node_name
        if nnn:
            if nominated_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            ni = self.handle.get_node_info(nnn)
            if ni is not None:
                for p in ni.pods.values():
                    if self.is_preemption_allowed(p, pod) and terminating_by_preemption(p.pod):
                        return False, "not eligible due to a terminating pod on the nominated node."
        return True, ""

    # ---- the decision ---------------------------------------------------------------

    def preempt(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> tuple[str | None, Status]:
        """``Evaluator.Preempt``: (nominated node: a name, ``""`` to clear, None for no change;
        status). Success starts the writes (:meth:`prepare_candidate_async`); Unschedulable
        carries upstream's message without the ``preemption:`` prefix."""
        if pod.gang:
            return None, Status.unschedulable()  # gangs preempt whole or not at all (issue 26 part 2)
        live = self.handle.get_pod(pod.namespace, pod.name)
        if live is None:
            return None, Status(Code.ERROR, f'pod "{pod.name}" not found')
        pod = live
        ok, msg = self.eligible(pod, statuses.get(pod.pod.status.nominated_node_name))
        if not ok:
            return None, Status.unschedulable(msg)
        all_nodes = self.handle.node_infos()
        if not all_nodes:
            return None, Status(Code.ERROR, "no nodes available")
        candidates, node_statuses = self.find_candidates(state, all_nodes, pod, statuses)
        errors = [st.message() for st in node_statuses.statuses.values() if st.code == Code.ERROR]
        if errors and not candidates:
            return None, Status(Code.ERROR, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        if not candidates:
            node_statuses.absent = Status.unresolvable(NOT_HELPFUL)
            fe = FitError(pod, len(all_nodes), Diagnosis(node_to_status=node_statuses))
            return "", Status.unschedulable(str(fe))
        best = pick_one_node_for_preemption(candidates)
        if best is None:
            return None, Status.unschedulable("no candidate node for preemption")
        log.info("the target node for the preemption is determined", v=2, node=best.name, pod=pod.key)
        self.prepare_candidate_async(best, pod)
        return best.name, Status(Code.SUCCESS)

    def find_candidates(
        self, state: CycleState, all_nodes: Sequence[NodeInfo], pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[list[Candidate], NodeToStatus]:
        """``findCandidates``: the Unschedulable nodes (``NodesForStatusCode``), dry-run from a
        random offset."""
        if statuses.absent.code == Code.UNSCHEDULABLE:
            potential = [n for n in all_nodes if statuses.get(n.name).code == Code.UNSCHEDULABLE]
        else:
            potential = [
                n for n in all_nodes if n.name in statuses.statuses and statuses.get(n.name).code == Code.UNSCHEDULABLE
            ]
        if not potential:
            log.info("Preemption will not help schedule pod on any node", v=3, pod=pod.key)
            return [], NodeToStatus()
        pdbs = self.handle.pod_disruption_budgets()
        n = len(potential)
        return self.dry_run_preemption(
            state, pod, potential, pdbs, self.offset(n), num_candidates(n, self.percentage, self.absolute)
        )

    def dry_run_preemption(
        self,
        state: CycleState,
        pod: PodInfo,
        potential: Sequence[NodeInfo],
        pdbs: Sequence[PodDisruptionBudget],
        offset: int,
        wanted: int,
    ) -> tuple[list[Candidate], NodeToStatus]:
        """``DryRunPreemption``: candidates without PDB violations first, then the others (at most
        ``wanted`` of each), and why every other visited node is none. Visits the nodes one by
        one from ``offset`` (upstream runs them in parallel and stops when enough were found;
        with every node visited, as below 100 nodes by default, the result is the same)."""
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        node_statuses = NodeToStatus()
        n = len(potential)
        for i in range(n):
            ni = potential[(offset + i) % n].snapshot()
            victims, num_violations, st = self.select_victims_on_node(state.clone(), pod, ni, pdbs)
            if st is None and victims:
                c = Candidate(ni.name, tuple(victims), num_violations)
                target = non_violating if num_violations == 0 else violating
                if len(target) < wanted:
                    target.append(c)
                if non_violating and len(non_violating) + len(violating) >= wanted:
                    break
                continue
            if st is None:
                st = Status(Code.ERROR, f'expected at least one victim pod on node "{ni.name}"')
            node_statuses.set(ni.name, st)
        return non_violating + violating, node_statuses

    def select_victims_on_node(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, pdbs: Sequence[PodDisruptionBudget]
    ) -> tuple[list[PodInfo], int, Status | None]:
        """``SelectVictimsOnNode`` on ``node`` (a snapshot it changes) with ``state`` (a clone):
        (victims, most important first; how many violate a PDB; None or why the node is no
        candidate)."""
        handle = self.handle

        def remove(p: PodInfo) -> Status | None:
            node.remove_pod(p.pod_key)
            return handle.run_pre_filter_extension_remove_pod(state, pod, p, node)

        def add(p: PodInfo) -> Status | None:
            node.add_pod(p)
            return handle.run_pre_filter_extension_add_pod(state, pod, p, node)

        potential = [p for p in node.pods.values() if self.is_preemption_allowed(p, pod)]
        for p in potential:
            if (err := remove(p)) is not None:
                return [], 0, err
        if not potential:
            return [], 0, Status.unresolvable(NO_VICTIMS)
        st = handle.run_filter_with_nominated_pods(state, pod, node)
        if st is not None:
            return [], 0, st
        now = time.time()
        sort_by_importance(potential, now)
        violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs)
        victims: list[PodInfo] = []
        num_violating = 0
        for group in (violating, non_violating):
            for p in group:
                if (err := add(p)) is not None:
                    return [], 0, err
                if handle.run_filter_with_nominated_pods(state, pod, node) is None:
                    continue  # reprieved
                if (err := remove(p)) is not None:
                    return [], 0, err
                victims.append(p)
                if group is violating:
                    num_violating += 1
        if violating and non_violating:
            sort_by_importance(victims, now)
        return victims, num_violating, None

    # ---- the writes -----------------------------------------------------------------

    def prepare_candidate_async(self, c: Candidate, pod: PodInfo) -> None:
        """``prepareCandidateAsync``: observe the victims, then (when any is not yet being
        deleted) mark the preemptor in flight and write in a task off the scheduling loop."""
        self.metrics.preemption_victims.observe(len(c.victims))
        to_delete = [v for v in c.victims if v.pod.metadata.deletion_timestamp is None]
        if not to_delete:
            return
        self.preempting.add(pod.uid)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.preempting.discard(pod.uid)
            return
        task = loop.create_task(self._write(c, pod, to_delete))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write(self, c: Candidate, pod: PodInfo, victims: list[PodInfo]) -> None:
        start = time.perf_counter()
        result = "success"
        try:
            lower = [p for p in self.handle.nominated_pods_for_node(c.name) if p.priority < pod.priority]
            for p in lower:
                self.handle.nominate(p, "")
                if not await self._clear_nomination(p):
                    result = "error"
            if len(victims) > 1:
                outcomes = await asyncio.gather(*(self.preempt_pod(c, pod, v) for v in victims[:-1]))
                if not all(outcomes):
                    result = "error"
            last = victims[-1]
            self.last_victim[pod.uid] = (last.namespace, last.name)
            if not await self.preempt_pod(c, pod, last):
                result = "error"
        finally:
            self.preempting.discard(pod.uid)
            self.last_victim.pop(pod.uid, None)
            if result == "error":
                self.handle.activate([pod.pod])
            self.metrics.preemption_goroutines_execution.labels(result).inc()
            self.metrics.preemption_goroutines_duration.labels(result).observe(time.perf_counter() - start)
            log.info("Async Preemption finished completely", v=2, preemptor=pod.key, node=c.name, result=result)

    async def _clear_nomination(self, p: PodInfo) -> bool:
        """``clearNominatedNodeName`` of one pod through the status subresource; True when done."""
        if self.writer is None or not p.pod.status.nominated_node_name:
            return True
        try:
            await self.writer.patch(
                f"/api/v1/namespaces/{p.namespace}/pods/{p.name}/status",
                {"status": {"nominatedNodeName": None}},
                "application/strategic-merge-patch+json",
            )
        except Exception as exc:
            log.error("Cannot clear 'NominatedNodeName' field", pod=p.key, err=str(exc))
            return False
        return True

    async def preempt_pod(self, c: Candidate, preemptor: PodInfo, victim: PodInfo) -> bool:
        """``PreemptPod``: reject a waiting victim, else patch ``DisruptionTarget`` and delete it;
        then the ``Preempted`` event on the victim. A victim already gone counts as done.
        Returns False on an API error (logged)."""
        wp = self.handle.get_waiting_pod(victim.pod_key)
        if wp is not None:
            wp.reject(self.plugin_name, "preempted")
        elif self.writer is not None:
            base = f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}"
            cond: dict[str, Any] = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": f"{preemptor.pod.spec.scheduler_name}: preempting to accommodate a higher priority pod",
                "lastTransitionTime": now_rfc3339(),
            }
            if victim.pod.metadata.generation:
                cond["observedGeneration"] = victim.pod.metadata.generation
            try:
                await self.writer.patch(
                    base + "/status", {"status": {"conditions": [cond]}}, "application/strategic-merge-patch+json"
                )
                await self.writer.delete(base)
            except Exception as exc:
                if getattr(exc, "code", None) == 404:
                    log.info("Victim Pod is already deleted", v=2, preemptor=preemptor.key, victim=victim.key)
                    return True
                log.error("Tried to preempted pod", pod=victim.key, preemptor=preemptor.key, err=str(exc))
                return False
            log.info("Preemptor Pod preempted victim Pod", v=2, preemptor=preemptor.key, victim=victim.key, node=c.name)
        self.handle.event_recorder().event(
            victim.pod,
            controller=preemptor.pod.spec.scheduler_name,
            type_="Normal",
            reason="Preempted",
            action="Preempting",
            note=f"Preempted by pod {preemptor.uid} on node {c.name}",
        )
        return True
