"""PreFilter's pin decision for one gang member: ``pin_gang`` step by step.

Lives here: :class:`PinPlanner`, whose :meth:`~PinPlanner.pin_gang` follows, adopts or
chooses the gang's pin and narrows the member to the nodes of its domain that strand no
sibling (``docs/design/gang-scheduling.md`` §3.7). Each step is one method, in the order
``pin_gang`` takes them; a step that decides the cycle returns its Status:

1. follow the PodGroup: a re-created PodGroup voids the old instance's pin
   (:meth:`~PinPlanner._follow_owner`), a new topology key releases it
   (:meth:`~PinPlanner._follow_topology_key`);
2. the placement scan (§3.2): the members bound or assumed, with the rule 9 check (one left
   the pinned domain) and the split check (:meth:`~PinPlanner._scan_placement`);
3. the member templates (§3.3): incomplete or scheduling-gated members park the gang
   (rule 8; :meth:`~PinPlanner._member_templates`);
4. the sibling-affinity yield (§9; :meth:`~PinPlanner._sibling_yield`);
5. the domain survey of the gang's topology key (:meth:`~PinPlanner._survey`);
6. the stale-pin replan, or the no-fit check of the pin kept
   (:meth:`~PinPlanner._replan_if_stale`);
7. without a pin, adoption of the placed members' domain (rule 7; :meth:`~PinPlanner._adopt`)
   or a fresh choice (rule 2; :meth:`~PinPlanner._choose`);
8. the candidates: the nodes the member may use (:meth:`~PinPlanner._candidates`).

Upstream has no counterpart (kube-scheduler has no gangs); it is the gang half of what
scheduler-plugins' Coscheduling PreFilter (``pkg/coscheduling/core/core.go``) decides, with
topology domains. The state it reads and changes is the :class:`GangState` (``state.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from functools import partial

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.framework.gangsource import is_lws_leader
from ome_scheduler.framework.interface import Handle
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.topology import describe, domain_value, is_composite
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.plugins.gangpack.deviceroom import DeviceRoom, has_claims, manager_of
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.gang import Gang, Placement, same_pod
from ome_scheduler.plugins.gangpack.levelchoice import LevelChoice, fewest_subdomains, subgroup_candidates
from ome_scheduler.plugins.gangpack.lwsguard import lws_deadlock
from ome_scheduler.plugins.gangpack.pins import Domain, Pin
from ome_scheduler.plugins.gangpack.placement import CapacityFn, GangPlanner, RoomIndex
from ome_scheduler.plugins.gangpack.state import MAX_INDEXES, MAX_TOPOLOGY_KEYS, NAME, GangState
from ome_scheduler.plugins.gangpack.survey import DomainSurvey
from ome_scheduler.plugins.gangpack.volumes import AttachRoom

log = get_logger()


class PinPlanner:
    """``pin_gang`` and its steps, over one OMEGangPack instance's :class:`GangState`."""

    def __init__(self, state: GangState) -> None:
        self.state = state
        self.handle = state.handle
        self.metrics = state.metrics
        self.pins = state.pins
        self.levels = LevelChoice(state)
        self.devices = DeviceRoom(lambda: manager_of(self.handle))
        """Device room of members with ResourceClaims (``deviceroom.py``)."""

    def pin_gang(self, pod: PodInfo, gang: Gang, nodes: Sequence[NodeInfo]) -> tuple[Pin, set[str]] | Status:
        """Follow, adopt or choose the gang's pin (§3.7); returns the pin and the nodes ``pod``
        may use in its domain, or why the member cannot be placed now.

        Work is proportional to the gang and to the nodes that changed since the last plan:
        placed members come from the cache's per-gang index, and a homogeneous gang's fresh
        choice bisects a per-shape :class:`RoomIndex` instead of scanning every node.
        """
        pin = self._follow_owner(gang, self.pins.get(gang.key))
        if isinstance(pin, Status):
            return pin
        pin = self._follow_topology_key(gang, pin)
        if isinstance(pin, Status):
            return pin
        blocked = self._unresolvable_sibling(pod, gang, pin)
        if blocked is not None:
            return blocked
        placed = self._scan_placement(gang, pin)
        if isinstance(placed, Status):
            return placed
        pin = self._follow_lws_group(gang, pin, placed)
        need = max(1, gang.min_member - placed.count)
        templates = self._member_templates(pod, gang, pin, placed, need)
        if isinstance(templates, Status):
            return templates
        waiting = self._sibling_yield(pod, gang, templates, placed)
        if waiting is not None:
            return waiting
        level = pin.domain.topology_key if pin is not None else gang.topology_key
        planner, survey = self._survey(pod, gang, templates, need, nodes, level)
        log_enter(gang, pin, placed, survey)
        kept = self._replan_if_stale(gang, pin, placed, survey, need)
        if kept is None:
            if placed.count > 0:
                if level != gang.topology_key:
                    planner, survey = self._survey(pod, gang, templates, need, nodes, gang.topology_key)
                kept = self._adopt(gang, placed, survey, need)
            else:
                survey_at = partial(self._survey, pod, gang, templates, need, nodes)
                choose = partial(self._choose, gang, pod)
                kept, planner, survey = self.levels.choose_level(gang, (planner, survey), survey_at, choose)
        if isinstance(kept, Status):
            return kept
        return self._candidates(gang, kept, planner, survey, placed)

    # ---- following the PodGroup -----------------------------------------------------------

    def _follow_owner(self, gang: Gang, pin: Pin | None) -> Pin | None | Status:
        """The PodGroup was deleted and re-created: the old instance's pin is void, so it is
        released and its failed domains forgotten. Returns the pin to go on with (None: no
        pin), or Unschedulable when the released pin had members waiting at Permit."""
        if pin is None or pin.owner == gang.uid:
            return pin
        key = gang.key
        had = bool(self.state.waiters(key, pin.token))
        old_owner = pin.owner
        self.state.release(key, old_owner, pin.token, why="its PodGroup was re-created")
        self.state.failed.pop((key, old_owner), None)
        if had:
            return Status.unschedulable(f"released commitment owned by a previous PodGroup instance {key}")
        return None

    def _follow_topology_key(self, gang: Gang, pin: Pin | None) -> Pin | None | Status:
        """The gang names another topology key than its pin's: the pin is released. Returns the
        pin to go on with (None: no pin), or Unschedulable when it had members waiting at Permit."""
        key, tk = gang.key, gang.topology_key
        if pin is None or not pin.domain.topology_key or pin.domain.topology_key in gang.levels:
            return pin
        had = bool(self.state.waiters(key, pin.token))
        self.state.release(key, pin.owner, pin.token, why=f"its topology key is now {tk}")
        self.metrics.pin("topology_replan")
        if had:
            return Status.unschedulable(f"released commitment after topology key changed for {key}")
        return None

    # ---- the gang's members ---------------------------------------------------------------

    def _unresolvable_sibling(self, pod: PodInfo, gang: Gang, pin: Pin | None) -> Status | None:
        """Rule 12: a live sibling that no node can take as the cluster stands keeps the gang
        from pinning or holding anything; the member is told which one and why."""
        members = self.state.unresolvable.get(gang.key)
        if not members:
            return None
        live = {p.pod_key for p in self.state.live_members(gang.key)}
        for k in [k for k in members if k not in live]:
            del members[k]  # a member deleted or finished no longer blocks the gang
        others = sorted(v for k, v in members.items() if k != pod.pod_key)
        if not members:
            del self.state.unresolvable[gang.key]
        if not others:
            return None
        name, why = others[0]
        if pin is not None:
            self.state.release(gang.key, pin.owner, pin.token, why=f"member {name} cannot be scheduled: {why}")
        return Status.unschedulable(f"gang {gang.key} cannot be placed: member {name} cannot be scheduled: {why}")

    def _scan_placement(self, gang: Gang, pin: Pin | None) -> Placement | Status:
        """§3.2 placement scan: bound and assumed members. A member whose node left the
        snapshot is not placed (its capacity is gone with the node). Fails the cycle when a
        placed member is outside the pinned domain (rule 9: the pin is released) or the placed
        members span several domains."""
        key, tk = gang.key, gang.topology_key
        members = [(p, n) for p, n in self.handle.pod_groups().placed_members(key) if n is not None]
        if gang.source == "LeaderWorkerSet":
            members = self._current_incarnation(gang, members)
        domains = {n.labels.get(tk, "") for _, n in members}
        at_pin = {domain_value(n.labels, pin.domain.topology_key) for _, n in members} if pin is not None else set()
        if pin is not None and pin.domain.topology_key in gang.levels and at_pin - {pin.domain.value}:
            # Rule 9: a placed member's node left the pinned domain (relabelled or unlabelled):
            # the pin no longer describes the gang and must not proceed. Release it (its waiters
            # are rejected and forgotten); the next attempt adopts the domain of the members
            # still bound, if any.
            outside = sorted(at_pin - {pin.domain.value})
            why = f"members are placed in {outside[0] or '(no domain)'}, outside it"
            self.state.release(key, pin.owner, pin.token, unwind=False, why=why)
            self.metrics.pin("stale_replan")
            log.info("gangpack.pinGang.stale_replan", v=4, gang=key, releasedDomain=pin.domain.value)
            return Status.unschedulable(
                f"gang {key} has members in topology domain {outside[0] or '(none)'} outside its pinned domain "
                f"{pin.domain.value}: released the pin"
            )
        if "" in domains or len(domains) > 1:
            return Status.unresolvable(f"gang {key} already has members in multiple topology domains")
        return Placement(members, {p.name for p, _ in members}, next(iter(domains), ""))

    def _current_incarnation(
        self, gang: Gang, members: list[tuple[PodInfo, NodeInfo]]
    ) -> list[tuple[PodInfo, NodeInfo]]:
        """§2.1: a re-created LWS group reuses its pods' names, so the placed members of the old
        one (terminating, or workers of a leader that is gone) are not the new one's."""
        live = [p for p in members if p[0].pod.metadata.deletion_timestamp is None]
        leaders = [p.uid for p in self.state.live_members(gang.key) if is_lws_leader(p.pod.metadata)]
        if len(leaders) != 1:
            return live
        uid = leaders[0]
        return [(p, n) for p, n in live if self.handle.lws_leader_uid(p.pod) in ("", uid)]

    def _follow_lws_group(self, gang: Gang, pin: Pin | None, placed: Placement) -> Pin | None:
        """§2.1: an LWS group has no PodGroup UID to tell its incarnations apart. A drained pin
        with no member placed (the group was deleted and re-created) is released, so the new
        group is planned afresh; one with members missing (a pod came back alone) reserves them
        again, so the gate counts them."""
        if gang.source != "LeaderWorkerSet" or pin is None or pin.remaining > 0:
            return pin
        if self.state.waiters(gang.key, pin.token):
            return pin
        if placed.count == 0:
            self.state.release(gang.key, pin.owner, pin.token, unwind=False, why="its group was re-created")
            return None
        if gang.min_member > placed.count:
            self.pins.set_remaining_if(gang.key, pin.token, gang.min_member - placed.count)
        return pin

    def _member_templates(
        self, pod: PodInfo, gang: Gang, pin: Pin | None, placed: Placement, need: int
    ) -> list[PodInfo] | Status:
        """§3.3 templates: this member plus every live, unplaced sibling. Fewer than the gang
        needs, or too many of them scheduling-gated (rule 8), parks the gang; once complete,
        the siblings parked on the incomplete set are woken."""
        key = gang.key
        incomplete = self.state.templates_incomplete
        live = sorted(self.state.live_members(key), key=lambda p: p.name)
        templates = [pod] + [
            p for p in live if p.name != pod.name and not p.pod.spec.node_name and p.name not in placed.names
        ]
        if len(templates) < need and gang.leader_first:
            # §2.1: a LeaderReady group's workers do not exist until its leader runs; the
            # leader's shape stands in for each of them, so the domain chosen has their room.
            templates += [pod] * (need - len(templates))
        if len(templates) < need:
            incomplete.add(key)
            if gang.source == "PodGroup" and lws_deadlock(self.state, pod, gang, live):
                return Status.unschedulable(
                    f"waiting for all PodGroup member templates for {key}: its LeaderWorkerSet creates the workers "
                    "only after the leader runs (see the PodGroup's events)"
                )
            return Status.unschedulable(f"waiting for all PodGroup member templates for {key}")
        gated = [t.name for t in templates[1:] if t.pod.spec.scheduling_gates]
        if len(templates) - len(gated) < need:
            # Rule 8: the gang cannot complete while members it needs are scheduling-gated, so it
            # holds nothing; lifting the last gate lets that member's PreFilter wake the others.
            if pin is not None:
                why = f"members it needs are scheduling-gated ({', '.join(gated)})"
                self.state.release(key, pin.owner, pin.token, why=why)
            incomplete.add(key)
            return Status.unschedulable(f"waiting for scheduling-gated members of gang {key}: {', '.join(gated)}")
        if key in incomplete:
            # Siblings parked on the incomplete set are woken once, now that it is complete.
            incomplete.discard(key)
            if self.state.activate([p.pod for p in live if not same_pod(p.pod, pod.pod)], "templates_complete"):
                log.info("gangpack.templates.complete", v=4, gang=key, members=len(templates), need=need)
        return templates

    def _sibling_yield(
        self, pod: PodInfo, gang: Gang, templates: Sequence[PodInfo], placed: Placement
    ) -> Status | None:
        """§9 sibling-affinity yield: a member whose required affinity needs a sibling waits for it."""
        sib = sibling_to_wait_for(self.handle, pod, templates[1:], [p.pod for p, _ in placed.members])
        if sib is None:
            return None
        log.info("gangpack.pinGang.sibling_wait", v=4, gang=gang.key, sibling=sib.key)
        return Status.unschedulable(f"waiting for gang sibling {sib.key} to be placed")

    # ---- the domains ------------------------------------------------------------------------

    def _survey(
        self, pod: PodInfo, gang: Gang, templates: list[PodInfo], need: int, nodes: Sequence[NodeInfo], level: str
    ) -> tuple[GangPlanner[PodInfo, NodeInfo], DomainSurvey]:
        """The gang's planner and its survey of the domains of ``level`` (its topology key, or
        one of its preferred levels, §3.9); under the topology key, ``pod`` becomes the shape
        that key's domain gauges count in."""
        tk = level
        opn = one_per_node(templates)
        if not is_composite(tk):
            shapes = self.state.shapes
            shapes.pop(tk, None)
            shapes[tk] = pod  # most recently planned key last
            while len(shapes) > MAX_TOPOLOGY_KEYS:
                # Each gang may name its own key: keep the gauges (one series per domain of every
                # key) bounded to the keys planned most recently.
                shapes.pop(next(iter(shapes)))
        attach = AttachRoom(self.handle, templates)
        capacity: CapacityFn[PodInfo, NodeInfo] = attach.capacity if attach.active else member_capacity
        signature: Callable[[PodInfo], Hashable] = template_signature
        dra = has_claims(templates)
        if dra:  # members with ResourceClaims: their room counts devices (§3.1)
            capacity, signature = self.devices.capacity(capacity, templates), self.devices.signature(signature)
        planner: GangPlanner[PodInfo, NodeInfo] = GangPlanner(
            templates, need, capacity, one_per_node=opn, signature=signature
        )
        # A gang whose members attach CSI volumes plans its domains one by one from this
        # cycle's snapshot and storage objects (§3.1): the room then follows CSINode and
        # VolumeAttachment changes, which the per-shape index does not see.
        homogeneous = planner.homogeneous and not attach.active
        index = self._room_index(tk, pod, opn, capacity, signature, dra) if homogeneous else None
        return planner, DomainSurvey(planner, need, tk, nodes, index, self.handle.get_node_info)

    def _room_index(
        self,
        tk: str,
        shape: PodInfo,
        opn: bool,
        capacity: CapacityFn[PodInfo, NodeInfo],
        signature: Callable[[PodInfo], Hashable],
        dra: bool,
    ) -> RoomIndex[PodInfo, NodeInfo]:
        """The per-(key, member shape) room index, brought up to date with the cache's changes
        (and, for members with claims, with the DRA device changes)."""
        indexes = self.state.indexes
        k = (tk, signature(shape), opn)
        idx = indexes.pop(k, None)
        if idx is None:
            idx = RoomIndex(shape, capacity, lambda n: domain_value(n.labels, tk), lambda n: n.name, one_per_node=opn)
            idx.device_cursor = self.devices.device_cursor() if dra else 0
        indexes[k] = idx  # most recently used last
        while len(indexes) > MAX_INDEXES:
            indexes.pop(next(iter(indexes)))
        cursor, changed = self.handle.node_changes(idx.cursor)
        if dra and not self.devices.sync_index(idx, self.handle.get_node_info):
            changed = None  # a device change that may reach any node: recount them all
        if changed is None:
            idx.rebuild(self.handle.node_infos())
        elif changed:
            idx.refresh({name: self.handle.get_node_info(name) for name in changed})
        idx.cursor = cursor
        return idx

    # ---- the pin ----------------------------------------------------------------------------

    def _replan_if_stale(
        self, gang: Gang, pin: Pin | None, placed: Placement, survey: DomainSurvey, need: int
    ) -> Pin | None | Status:
        """The pin to keep, None when there is none or it was stale and released (re-plan from
        scratch), or Unschedulable when its domain cannot fit the gang's remaining members."""
        if pin is None:
            return None
        key, pinned_domain = gang.key, pin.domain.value
        if (
            placed.count == 0
            and pin.preempting_until > time.monotonic()
            and survey.plan(pinned_domain) is not None
            and survey.room(pinned_domain) < need
        ):
            # §16.6: the gang freed this domain by preemption; its victims are still leaving.
            msg = f"waiting for preemption victims to leave {gang.topology_key}={pinned_domain} for gang {key}"
            log.info("gangpack.pinGang.preempting", v=4, gang=key, domain=pinned_domain)
            return Status.unschedulable(msg)
        if survey.plan(pinned_domain) is None or (placed.count == 0 and survey.room(pinned_domain) < need):
            # Stale pin: its domain vanished, or shrank below the gang before any member
            # was placed. Re-plan from scratch (a pin decision, not an unwind).
            why = "its domain changed and no longer fits the gang"
            self.state.release(key, gang.uid, pin.token, unwind=False, why=why)
            self.metrics.pin("stale_replan")
            log.info("gangpack.pinGang.stale_replan", v=4, gang=key, releasedDomain=pinned_domain)
            return None
        if placed.count > 0 and survey.room(pinned_domain) < need:
            msg = f"pinned domain {pinned_domain} cannot fit all remaining gang members {key}"
            log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=msg)
            return Status.unschedulable(msg)
        return pin

    def _adopt(self, gang: Gang, placed: Placement, survey: DomainSurvey, need: int) -> Pin | Status:
        """Rule 7: members already bound or assumed decide the domain (adoption). The pin is
        made even when the domain cannot fit the remaining members (then Unschedulable)."""
        key, tk, count, domain = gang.key, gang.topology_key, placed.count, placed.domain
        pin = self.pins.set_reservation(
            key,
            gang.uid,
            tk,
            domain,
            max(0, gang.min_member - count),
            survey.node_names_of(domain),
            holding=self.state.may_hold(gang),
        )
        pin.hold_until = self.state.forming_since[key] + gang.timeout
        self.metrics.pin("adopted")
        hold = "holding it" if pin.holding and pin.remaining > 0 else "without a hold"
        if not pin.holding and pin.remaining > 0:
            hold += " (its holds expired)"
        self.state.pod_group_event(
            key, "Normal", "Adopted", f"adopted {tk}={domain}, where {count} members are already placed, {hold}"
        )
        self.metrics.pinned_groups(len(self.pins))
        self.state.report(key)
        if survey.room(domain) < need:
            msg = f"adopted domain {domain} cannot fit remaining gang members {key}"
            log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=msg)
            return Status.unschedulable(msg)
        return pin

    def _choose(
        self,
        gang: Gang,
        pod: PodInfo,
        survey: DomainSurvey,
        relaxed: Sequence[str] = (),
        allowed: Callable[[str], bool] | None = None,
    ) -> Pin | Status:
        """A fresh pin: best fit (rule 2) skipping held domains and the domains a member failed in
        since the gang last succeeded; when it failed in every fitting one, nothing is pinned and
        the gang waits for an event that can help (rule 10). The pin remembers whether another
        fitting domain is left to try (:attr:`Pin.alternative`)."""
        key, tk = gang.key, survey.topology_key
        blocked = self._unplaceable_sibling(pod, gang, survey)
        if blocked is not None:
            return blocked
        pins = self.pins
        failed = self.state.failed.get((key, gang.uid), set())
        base = self.levels.held(survey)

        def held(x: str) -> bool:
            return base(x) or (allowed is not None and not allowed(x))

        d = survey.best_fit(lambda x: held(x) or Domain(tk, x) in failed)
        if d is None and failed and survey.best_fit(held) is not None:
            # Rule 10: a member failed in every fitting domain since the gang's last success.
            # Forget those failures, so the next event that can help starts the round again,
            # but do not pin now: retrying at once would feed itself.
            self.state.failed.pop((key, gang.uid), None)
            self.metrics.pin("no_fit")
            why = Status.unschedulable(f"no domain has room for gang {key}: a member failed in every fitting domain")
            log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=why.message())
            return why
        if d is None:
            if survey.best_fit(lambda _: False) is not None:
                self.metrics.pin("reserved")
                self.state.park_by_hold(pod)  # woken when a hold drains or is released
                why = Status.unschedulable(
                    f"no domain has room for gang {key}: every fitting domain is reserved for a forming gang"
                )
            else:
                self.metrics.pin("no_fit")
                why = Status.unschedulable(f"no domain has room for gang {key}")
            log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=why.message())
            return why
        pin = pins.choose(key, gang.uid, tk, d, survey.node_names_of(d), survey.need, holding=self.state.may_hold(gang))
        pin.hold_until = self.state.forming_since[key] + gang.timeout
        pin.alternative = survey.best_fit(lambda x: x == d or held(x) or Domain(tk, x) in failed) is not None
        self.metrics.pin("pinned")
        hold = "holding it" if pin.holding else "without a hold (its holds expired)"
        note = f"pinned to {describe(tk, d)} (room for {survey.room(d)} members, the gang needs {survey.need}), {hold}"
        if relaxed:
            note += f"; preferred level {', '.join(relaxed)} relaxed: no domain of it had room for the gang"
        self.state.pod_group_event(key, "Normal", "Pinned", note)
        self.metrics.pinned_groups(len(self.pins))
        self.state.report(key)
        return pin

    def _unplaceable_sibling(self, pod: PodInfo, gang: Gang, survey: DomainSurvey) -> Status | None:
        """Rule 12, before a fresh pin: a sibling another plugin's PreFilter finds unresolvable
        now (a missing claim, say) would make the pin hold a domain for a gang that cannot
        complete, so nothing is pinned and the member is told which sibling and why. Siblings
        whose spec (and generated claims) are equal get one verdict: a gang of 1,024 replicas of
        one template costs one dry PreFilter, not 1,024."""
        verdicts: dict[bytes, tuple[str, str] | None] = {}
        for t in survey.planner.templates[1:]:
            k = _prefilter_identity(t)
            if k not in verdicts:
                verdicts[k] = self.handle.unresolvable_at_prefilter(t, skip=NAME)
            found = verdicts[k]
            if found is not None:
                self.state.member_unresolvable(t, found[1])
                return self._unresolvable_sibling(pod, gang, None)
        return None

    def _candidates(
        self, gang: Gang, pin: Pin, planner: GangPlanner[PodInfo, NodeInfo], survey: DomainSurvey, placed: Placement
    ) -> tuple[Pin, set[str]] | Status:
        """The nodes of the pinned domain the member may use (none: Unschedulable); pinned at
        the required key with preferred levels, only those of the fewest domains of the
        tightest one (§3.9)."""
        domain = pin.domain.value
        p = survey.plan(domain)
        cands = planner.candidates(p) if p is not None else []
        if cands and p is not None and gang.preferred_keys and pin.domain.topology_key == gang.topology_key:
            cands = fewest_subdomains(planner, p, cands, placed, survey.need, gang.levels[0])
        if cands and p is not None and gang.subgroup_size and pin.domain.topology_key == gang.topology_key:
            narrowed = subgroup_candidates(planner.templates[0], gang, pin, planner, p, cands, placed)
            if isinstance(narrowed, Status):
                return narrowed
            cands = narrowed
        if not cands:
            return Status.unschedulable(f"pinned domain {domain} has no node feasible for gang member {gang.key}")
        log.info("gangpack.pinGang.result", v=4, gang=gang.key, domain=domain, narrowedNodes=len(cands))
        return pin, {n.name for n in cands}


def sibling_to_wait_for(
    handle: Handle, pod: PodInfo, siblings: Sequence[PodInfo], placed: Sequence[Pod]
) -> PodInfo | None:
    """§9: the first unplaced sibling a required pod-affinity term of ``pod`` waits for."""
    terms = pod.required_affinity_terms
    if not terms:
        return None
    ns = handle.namespace(pod.namespace)
    ns_labels = dict(ns.metadata.labels) if ns is not None else {}
    for t in terms:
        if t.matches(pod.pod, ns_labels):
            continue
        if any(t.matches(p, ns_labels) for p in placed):
            continue
        for s in siblings:
            if not same_pod(s.pod, pod.pod) and t.matches(s.pod, ns_labels):
                return s
    return None


def log_enter(gang: Gang, pin: Pin | None, placed: Placement, survey: DomainSurvey) -> None:
    """The V(4) ``gangpack.pinGang.enter`` line: the pin, the placed members and the rooms."""
    if not enabled(4):
        return
    pinned_domain = pin.domain.value if pin is not None else ""
    focus = pinned_domain or placed.domain
    log.info(
        "gangpack.pinGang.enter",
        v=4,
        gang=gang.key,
        minMember=gang.min_member,
        topologyKey=gang.topology_key,
        pinned=pin is not None,
        pinnedDomain=pinned_domain,
        nodesInPinnedDomain=len(survey.nodes_of(pinned_domain)) if pin is not None else 0,
        boundDomain=placed.domain,
        boundCount=placed.count,
        freePinnedDomain=survey.room(pinned_domain) if pin is not None else 0,
        freeByDomain={focus: survey.room(focus)} if focus else survey.rooms(),
    )


def _prefilter_identity(p: PodInfo) -> bytes:
    """What a PreFilter verdict about ``p`` depends on beyond the cluster: its spec, the claims
    generated for it, and its name when it has ephemeral volumes (their claims are named after it)."""
    spec = p.pod.spec
    parts = [msgspec.json.encode(spec), msgspec.json.encode(p.pod.status.resource_claim_statuses)]
    if any(v.ephemeral is not None for v in spec.volumes):
        parts.append(p.pod.metadata.name.encode())
    return b"\0".join(parts)
