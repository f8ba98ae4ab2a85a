"""Gang preemption in OMEGangPack's PostFilter: the decision of ``preemption.py`` made and carried out.

Implements design §16.1, §16.5–§16.7 (product rule 13) around the pure decision:

* a member whose PreFilter found no domain (no pin in the cycle) asks :meth:`GangPreemptor.post_filter`;
* the gang's templates are its live unplaced members, ``need`` its members still to place, as
  PreFilter plans them (§3.3), without PreFilter's side effects;
* the chosen domain is pinned with a hold (§2.6) at once, in the scheduling cycle, so no other
  gang and no standalone pod of this scheduler takes it while the victims terminate; the pin
  carries the preemption's deadline (``preempting_until``), until which PreFilter waits for the
  victims instead of calling the pin stale (§3.7 step 10);
* the victims are written off the scheduling loop with the evaluator's helper
  (``Evaluator.preempt_pod``: ``DisruptionTarget``, delete, ``Preempted`` event, upstream's
  ``PreemptPod``), the ``Preempting`` event goes on the PodGroup, the current member is nominated
  to the node of its first victim (the framework's nomination, as upstream's PostFilter result);
* no second preemption: a member nominated into a domain where lower-priority pods terminate
  by preemption waits there (``preemption_in_progress``), and pods being deleted count as free
  room in the decision, so while the victims terminate (on this leader or the next) the same
  domain costs nothing and is pinned again without an eviction;
* a deadline passed with the gang still unplaced, or a write that failed, puts the gang in a
  backoff of :data:`BACKOFF_SECONDS` before it may preempt again (§16.6).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ome_scheduler.framework.interface import POST_FILTER_NOMINATION_KEY, ApiWriter, CycleState
from ome_scheduler.framework.preemption import Candidate, Evaluator
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import GangKey, PodInfo
from ome_scheduler.logs import get_logger
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.gang import Gang
from ome_scheduler.plugins.gangpack.pins import Domain
from ome_scheduler.plugins.gangpack.placement import GangPlanner
from ome_scheduler.plugins.gangpack.preemption import (
    DomainCost,
    Snapshot,
    decide,
    gang_may_preempt,
    gang_priority,
    preempting_note,
    preemption_in_progress,
)
from ome_scheduler.plugins.gangpack.state import NAME, GangState

if TYPE_CHECKING:
    from ome_scheduler.metrics import Metrics

log = get_logger()

BACKOFF_SECONDS = 10.0
"""Seconds a gang waits before it may preempt again after a failed attempt (§16.6)."""


class GangPreemptor:
    """OMEGangPack's gang preemption (one per plugin instance, only with ``preemption: true``).

    ``writer`` is the fenced API port (None when plugins are built only to check a
    configuration: nothing is written then).
    """

    def __init__(self, state: GangState, writer: ApiWriter | None, metrics: Metrics) -> None:
        self.state = state
        self.handle = state.handle
        self.evaluator = Evaluator(NAME, state.handle, writer, metrics)
        self.backoff_until: dict[GangKey, float] = {}
        """Gang -> monotonic time before which it does not preempt."""
        self.deadline: dict[GangKey, tuple[str, float]] = {}
        """Gang -> (domain, monotonic deadline) of its last preemption with victims."""
        self.tasks: set[asyncio.Task[None]] = set()

    def post_filter(self, state: CycleState, pod: PodInfo, gang: Gang) -> Status | None:
        """§16.1: preempt for ``pod``'s gang, which PreFilter placed in no domain. Returns the
        PostFilter status (Unschedulable with the reason; the gang retries when its victims
        leave), or None when gang preemption does not apply (the caller's answer stands)."""
        key, tk = gang.key, gang.topology_key
        now = time.monotonic()
        dl = self.deadline.get(key)
        if dl is not None and now >= dl[1]:
            del self.deadline[key]
            self.backoff_until[key] = now + BACKOFF_SECONDS
            self.state.pod_group_event(
                key,
                "Warning",
                "PreemptionFailed",
                f"the gang did not bind in {tk}={dl[0]} within {gang.timeout}s of its preemption; "
                f"not preempting again for {BACKOFF_SECONDS:.0f}s",
            )
        if self.backoff_until.get(key, 0.0) > now:
            return Status.unschedulable(f"preemption: gang {key} is backing off after a failed preemption")
        placed = [(p, n) for p, n in self.handle.pod_groups().placed_members(key) if n is not None]
        domains = {n.labels.get(tk, "") for _, n in placed}
        if "" in domains or len(domains) > 1:
            return None
        need = max(1, gang.min_member - len(placed))
        placed_names = {p.name for p, _ in placed}
        live = sorted(self.state.live_members(key), key=lambda p: p.name)
        templates = [pod] + [
            p for p in live if p.name != pod.name and not p.pod.spec.node_name and p.name not in placed_names
        ]
        if len(templates) < need or any(t.pod.spec.scheduling_gates for t in templates[1:]):
            return None
        ok, why = gang_may_preempt(templates)
        if not ok:
            return Status.unschedulable("preemption: " + why)
        priority = gang_priority(templates)
        planner = GangPlanner(
            templates, need, member_capacity, one_per_node=one_per_node(templates), signature=template_signature
        )
        snap = Snapshot.of(self.handle.node_infos(), tk)
        under_way = preemption_in_progress(snap, templates, priority)
        if under_way:
            # §16.7: this gang's victims are still leaving that domain (a preemption of this
            # leader whose pin was lost, or of the previous leader): wait there, evict nothing.
            self._pin(gang, under_way, snap, need, now)
            return Status.unschedulable(f"preemption: waiting for pods leaving {tk}={under_way} for gang {key}")
        pins = self.state.pins

        def held(d: str) -> bool:
            # §16.3: a domain another forming gang holds is not evaluated.
            return pins.reserved.get(Domain(tk, d), 0) > 0

        decision = decide(
            planner,
            snap,
            key,
            priority,
            self.handle.pod_disruption_budgets(),
            schedulers=frozenset({self.state.scheduler_name}),
            held=held,
            only=next(iter(domains), ""),
            now=time.time(),
        )
        chosen = decision.chosen
        if chosen is None:
            log.info("gangpack.preemption.none", v=2, gang=key, why=decision.why)
            return Status.unschedulable("preemption: " + decision.why)
        self._pin(gang, chosen.domain, snap, need, now)
        if not chosen.victims:
            log.info("gangpack.preemption.wait", v=4, gang=key, domain=chosen.domain)
            return Status.unschedulable(f"preemption: waiting for pods leaving {tk}={chosen.domain} for gang {key}")
        note = preempting_note(decision, tk, key)
        self.state.pod_group_event(key, "Normal", "Preempting", note)
        log.info("gangpack.preemption.start", v=2, gang=key, domain=chosen.domain, victims=len(chosen.victims))
        self.deadline[key] = (chosen.domain, now + gang.timeout)
        node = snap.node_of.get(chosen.victims[0].pod_key, "")
        if node:
            state.write(POST_FILTER_NOMINATION_KEY, node)
        self._write(pod, key, chosen, snap)
        return Status.unschedulable(f"preemption: freeing {tk}={chosen.domain} for gang {key}")

    def _pin(self, gang: Gang, domain: str, snap: Snapshot, need: int, now: float) -> None:
        """§16.5 step 4: pin the gang to ``domain`` with a hold, deadline ``scheduleTimeoutSeconds``."""
        pins = self.state.pins
        names = [n.name for n in snap.domains.get(domain, [])]
        pin = pins.choose(gang.key, gang.uid, gang.topology_key, domain, names, need, holding=True)
        pin.hold_until = now + gang.timeout
        pin.preempting_until = now + gang.timeout
        self.state.forming_since.setdefault(gang.key, now)
        self.state.report(gang.key)

    def _write(self, pod: PodInfo, key: GangKey, chosen: DomainCost, snap: Snapshot) -> None:
        """§16.5 step 2, off the scheduling loop: each victim's upstream writes."""
        self.evaluator.metrics.preemption_victims.observe(len(chosen.victims))
        to_delete = [v for v in chosen.victims if v.pod.metadata.deletion_timestamp is None]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._write_all(pod, key, to_delete, snap))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write_all(self, pod: PodInfo, key: GangKey, victims: list[PodInfo], snap: Snapshot) -> None:
        outcomes = await asyncio.gather(
            *(self.evaluator.preempt_pod(Candidate(snap.node_of.get(v.pod_key, ""), (v,), 0), pod, v) for v in victims)
        )
        if not all(outcomes):
            self.backoff_until[key] = time.monotonic() + BACKOFF_SECONDS
            log.error("gang preemption failed to evict every victim", gang=key)
