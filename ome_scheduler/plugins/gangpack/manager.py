"""The gang manager: every gang's pin, and the decisions OMEGangPack's extension points ask for.

Like scheduler-plugins' ``pkg/coscheduling/core/core.go`` (``PodGroupManager``) under the
thin ``coscheduling.go`` plugin: the state lives here and the framework glue in
``plugin.py`` only translates. State (``spec/gangpack.md`` §2.6, §2.7):

* the pin store (pins with their reservations, hence the holds);
* each waiting member's attempt token (so a release rejects exactly that attempt's waiters);
* the pods parked by a hold (woken when any hold drains or is released);
* gangs parked because their member templates were incomplete;
* domains each gang failed in (tried last by the next plan);
* bind times per gang (bind skew), per-shape room indexes, and the last planned shape per
  topology key (what the domain gauges count in).

Every method runs on the event loop inside a scheduling cycle or a background task, so no
lock is needed; a release rejects the attempt's waiters before it returns, so no retry can
pin again in between (the spec's "callback under the store lock").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PLACEMENT_BOUND, PLACEMENT_HOLDING, PLACEMENT_PINNED, PodGroup, same_definition
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.interface import ClusterTruth, Handle
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import GangKey, GangPlacement, NodeInfo, PodInfo, PodKey, gang_key, split_gang_key
from ome_scheduler.framework.waiting_pods import WaitingPod
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.gang import Gang, is_live, same_pod, topology_key_of
from ome_scheduler.plugins.gangpack.metrics import GangMetrics, Trigger, refresh_domain_gauges
from ome_scheduler.plugins.gangpack.pins import ANY_PIN, Domain, Pin, PinStore
from ome_scheduler.plugins.gangpack.placement import GangPlanner, RoomIndex
from ome_scheduler.plugins.gangpack.survey import DomainSurvey
from ome_scheduler.util.timestamps import parse_rfc3339

log = get_logger()

NAME = "OMEGangPack"
MAX_TOPOLOGY_KEYS = 16
"""Topology keys whose domains the ``ome_scheduler_domain_*`` gauges cover (most recent first)."""
MAX_INDEXES = 16
"""Room indexes kept (one per topology key and member shape), least recently used dropped."""


class GangManager:
    """Pins, holds and Permit gates of every gang one OMEGangPack instance schedules."""

    def __init__(self, args: OMEGangPackArgs, handle: Handle, metrics: GangMetrics, scheduler_name: str) -> None:
        self.args = args
        self.handle = handle
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self.pins = PinStore()
        self.attempt_by_pod: dict[PodKey, int] = {}
        """Each member at or past Permit -> the token of the pin it was placed under."""
        self.parked_by_hold: dict[PodKey, Pod] = {}
        """Pods rejected because of a hold: woken when any hold drains or is released."""
        self.templates_incomplete: set[GangKey] = set()
        self.failed: dict[tuple[GangKey, str], set[Domain]] = {}
        """(gang, PodGroup UID) -> (topology key, domain) pairs its last attempts failed in."""
        self.bind_times: dict[GangKey, list[float]] = {}
        self.indexes: dict[tuple[str, object, bool], RoomIndex[PodInfo, NodeInfo]] = {}
        self.shapes: dict[str, PodInfo] = {}
        """The last gang member planned per topology key: the shape the domain gauges count in."""
        self.waiting_since: dict[PodKey, float] = {}
        """When each member began waiting at Permit (monotonic): tells a timeout from other failures."""
        self.forming_since: dict[GangKey, float] = {}
        """Monotonic time each incomplete gang first held a domain; its holds end
        ``scheduleTimeoutSeconds`` later until it completes or its PodGroup changes (rule 8)."""

    # ---- members and waiters ------------------------------------------------------------

    def live_members(self, gang: GangKey) -> list[PodInfo]:
        """The gang's pods that are neither deleting nor finished."""
        return [p for p in self.handle.pod_groups().members(gang) if is_live(p.pod)]

    def waiters(self, gang: GangKey, token: int) -> list[WaitingPod]:
        """Members of ``gang`` waiting at Permit under the pin with ``token``."""
        out = []
        for wp in self.handle.waiting_pods():
            pi = wp.pod_info
            if pi.gang and pi.gang_key == gang and self.attempt_by_pod.get(pi.pod_key) == token:
                out.append(wp)
        return out

    def activate(self, pods: Iterable[Pod], trigger: Trigger) -> bool:
        """Move ``pods`` straight to activeQ (§6.1); counted when there is any."""
        pods = list(pods)
        if not pods:
            return False
        self.handle.activate(pods)
        self.metrics.activation(trigger)
        return True

    def wake_parked_by_hold(self) -> None:
        """A hold drained or was released: every pod it parked is tried again."""
        pods = list(self.parked_by_hold.values())
        self.parked_by_hold.clear()
        self.activate(pods, "reservation_released")

    def pod_group_event(self, gang: GangKey, type_: str, reason: str, note: str) -> None:
        """Record an event on the gang's PodGroup (if it still exists)."""
        parts = split_gang_key(gang)
        pg = self.handle.pod_groups().get(*parts) if parts else None
        if pg is not None:
            self.handle.event_recorder().event(
                pg, controller=self.scheduler_name, type_=type_, reason=reason, action="Scheduling", note=note
            )

    def report(self, gang: GangKey) -> None:
        """Tell the Handle where ``gang`` is now: its pin's domain (``Holding`` while the pin holds
        it, else ``Pinned``), or nowhere (no pin)."""
        pin = self.pins.get(gang)
        placement = None
        if pin is not None:
            state = PLACEMENT_HOLDING if pin.holding and pin.remaining > 0 else PLACEMENT_PINNED
            placement = GangPlacement(pin.domain.topology_key, pin.domain.value, state)
        self.handle.report_gang_placement(gang, placement)

    def park_by_hold(self, pod: PodInfo) -> None:
        """Remember a pod a hold kept out, to wake it when a hold ends."""
        self.parked_by_hold[pod.pod_key] = pod.pod

    # ---- releases (§4.3) -----------------------------------------------------------------

    def release(
        self,
        gang: GangKey,
        owner: str,
        token: int | None,
        *,
        pod: PodInfo | None = None,
        mark_failed: bool = False,
        unwind: bool = True,
        why: str = "",
    ) -> bool:
        """The shared release routine: end the pin with ``token`` (:data:`ANY_PIN`: whatever pin
        the gang has), reject that attempt's waiters, wake the pods its hold parked, forget
        ``pod``'s attempt.

        ``mark_failed`` records the domain as failed for the gang's next plan (PostFilter).
        ``unwind=False`` is the stale-pin replan: product rule 5 makes it reject waiters and
        wake parked pods like every other release, but it is a pin decision, not an unwind.
        ``why`` goes into the PodGroup's ``HoldReleased`` event when the pin still held or had
        waiters. Returns whether a pin was released.
        """
        told: list[Pin] = []
        before = self.pins.get(gang)
        held = before is not None and before.holding and before.remaining > 0  # read before it is released

        def on_release(pin: Pin) -> None:
            if mark_failed:
                self.failed.setdefault((gang, owner), set()).add(pin.domain)
            waiters = self.waiters(gang, pin.token)
            for wp in waiters:
                wp.reject(NAME, f"gang {gang} unwound after a member failed to schedule")
            if why and (held or waiters):
                told.append(pin)

        released = self.pins.release_if(gang, token, on_release)
        for pin in told:
            tk, domain = pin.domain.topology_key, pin.domain.value
            self.pod_group_event(gang, "Normal", "HoldReleased", f"released the hold on {tk}={domain}: {why}")
        if released:
            if unwind:
                self.metrics.unwind()
            self.metrics.pinned_groups(len(self.pins))
            self.report(gang)
            self.wake_parked_by_hold()
        if pod is not None and token is not ANY_PIN and self.attempt_by_pod.get(pod.pod_key) == token:
            del self.attempt_by_pod[pod.pod_key]
        return released

    def unreserve(self, pod: PodInfo, gang: Gang, token: int) -> None:
        """A member's attempt failed after Reserve (Permit timeout or rejection, PreBind or Bind
        failure): release its pin, telling the PodGroup whether the gang timed out and how many
        of its members had nodes."""
        since = self.waiting_since.pop(pod.pod_key, None)
        pin = self.pins.get(gang.key)
        if pin is not None and pin.token == token and since is not None:
            waited = time.monotonic() - since
            if waited >= gang.timeout - 0.5:
                placed = sum(1 for _, n in self.handle.pod_groups().placed_members(gang.key) if n is not None)
                tk, domain = pin.domain.topology_key, pin.domain.value
                note = (
                    f"timed out after {gang.timeout}s waiting at Permit with {placed} of {gang.min_member} members "
                    f"on nodes in {tk}={domain}"
                )
                self.pod_group_event(gang.key, "Warning", "TimedOut", note)
                self.release(gang.key, gang.uid, token, pod=pod)
                return
        self.release(gang.key, gang.uid, token, pod=pod, why=f"member {pod.key} failed after Reserve")

    def forget_missing_gang(self, gang: GangKey) -> None:
        """The gang's PodGroup is gone: release its pin and forget its failed domains."""
        pin = self.pins.get(gang)
        if pin is not None:
            self.release(gang, pin.owner, ANY_PIN, why="its PodGroup is gone")
        for k in [k for k in self.failed if k[0] == gang]:
            del self.failed[k]

    # ---- PreFilter: pin_gang (§3.7) --------------------------------------------------------

    def pin_gang(self, pod: PodInfo, gang: Gang, nodes: Sequence[NodeInfo]) -> tuple[Pin, set[str]] | Status:
        """Follow, adopt or choose the gang's pin; returns the pin and the nodes ``pod`` may
        use in its domain, or why the member cannot be placed now.

        Work is proportional to the gang and to the nodes that changed since the last plan:
        placed members come from the cache's per-gang index, and a homogeneous gang's fresh
        choice bisects a per-shape :class:`RoomIndex` instead of scanning every node.
        """
        key, tk = gang.key, gang.topology_key
        pin = self.pins.get(key)
        if pin is not None and pin.owner != gang.uid:
            # The PodGroup was deleted and re-created: the old instance's pin is void.
            had = bool(self.waiters(key, pin.token))
            old_owner = pin.owner
            self.release(key, old_owner, pin.token, why="its PodGroup was re-created")
            self.failed.pop((key, old_owner), None)
            if had:
                return Status.unschedulable(f"released commitment owned by a previous PodGroup instance {key}")
            pin = None
        if pin is not None and pin.domain.topology_key and pin.domain.topology_key != tk:
            had = bool(self.waiters(key, pin.token))
            self.release(key, pin.owner, pin.token, why=f"its topology key is now {tk}")
            self.metrics.pin("topology_replan")
            if had:
                return Status.unschedulable(f"released commitment after topology key changed for {key}")
            pin = None

        # §3.2 placement scan: bound and assumed members. A member whose node left the
        # snapshot is not placed (its capacity is gone with the node).
        placed_pods = [(p, n) for p, n in self.handle.pod_groups().placed_members(key) if n is not None]
        count = len(placed_pods)
        placed = {p.name for p, _ in placed_pods}
        placed_domains = {n.labels.get(tk, "") for _, n in placed_pods}
        if pin is not None and pin.domain.topology_key == tk and placed_domains - {pin.domain.value}:
            # Rule 9: a placed member's node left the pinned domain (relabelled or unlabelled):
            # the pin no longer describes the gang and must not proceed. Release it (its waiters
            # are rejected and forgotten); the next attempt adopts the domain of the members
            # still bound, if any.
            outside = sorted(placed_domains - {pin.domain.value})
            why = f"members are placed in {outside[0] or '(no domain)'}, outside it"
            self.release(key, pin.owner, pin.token, unwind=False, why=why)
            self.metrics.pin("stale_replan")
            log.info("gangpack.pinGang.stale_replan", v=4, gang=key, releasedDomain=pin.domain.value)
            return Status.unschedulable(
                f"gang {key} has members in topology domain {outside[0] or '(none)'} outside its pinned domain "
                f"{pin.domain.value}: released the pin"
            )
        if "" in placed_domains or len(placed_domains) > 1:
            return Status.unresolvable(f"gang {key} already has members in multiple topology domains")
        placed_domain = next(iter(placed_domains), "")

        # §3.3 templates: this member plus every live, unplaced sibling.
        need = max(1, gang.min_member - count)
        live = sorted(self.live_members(key), key=lambda p: p.name)
        templates = [pod] + [
            p for p in live if p.name != pod.name and not p.pod.spec.node_name and p.name not in placed
        ]
        if len(templates) < need:
            self.templates_incomplete.add(key)
            return Status.unschedulable(f"waiting for all PodGroup member templates for {key}")
        gated = [t.name for t in templates[1:] if t.pod.spec.scheduling_gates]
        if len(templates) - len(gated) < need:
            # Rule 8: the gang cannot complete while members it needs are scheduling-gated, so it
            # holds nothing; lifting the last gate lets that member's PreFilter wake the others.
            if pin is not None:
                why = f"members it needs are scheduling-gated ({', '.join(gated)})"
                self.release(key, pin.owner, pin.token, why=why)
            self.templates_incomplete.add(key)
            return Status.unschedulable(f"waiting for scheduling-gated members of gang {key}: {', '.join(gated)}")
        if key in self.templates_incomplete:
            # Siblings parked on the incomplete set are woken once, now that it is complete.
            self.templates_incomplete.discard(key)
            if self.activate([p.pod for p in live if not same_pod(p.pod, pod.pod)], "templates_complete"):
                log.info("gangpack.templates.complete", v=4, gang=key, members=len(templates), need=need)

        # §9 sibling-affinity yield: a member whose required affinity needs a sibling waits for it.
        sib = self._sibling_to_wait_for(pod, templates[1:], [p.pod for p, _ in placed_pods])
        if sib is not None:
            log.info("gangpack.pinGang.sibling_wait", v=4, gang=key, sibling=sib.key)
            return Status.unschedulable(f"waiting for gang sibling {sib.key} to be placed")

        opn = one_per_node(templates)
        self.shapes.pop(tk, None)
        self.shapes[tk] = pod  # most recently planned key last
        while len(self.shapes) > MAX_TOPOLOGY_KEYS:
            # Each gang may name its own key: keep the gauges (one series per domain of every
            # key) bounded to the keys planned most recently.
            self.shapes.pop(next(iter(self.shapes)))
        planner: GangPlanner[PodInfo, NodeInfo] = GangPlanner(
            templates, need, member_capacity, one_per_node=opn, signature=template_signature
        )
        index = self._room_index(tk, pod, opn) if planner.homogeneous else None
        survey = DomainSurvey(planner, need, tk, nodes, index, self.handle.get_node_info)
        pinned_domain = pin.domain.value if pin is not None else ""

        if enabled(4):
            focus = pinned_domain or placed_domain
            log.info(
                "gangpack.pinGang.enter",
                v=4,
                gang=key,
                minMember=gang.min_member,
                topologyKey=tk,
                pinned=pin is not None,
                pinnedDomain=pinned_domain,
                nodesInPinnedDomain=len(survey.nodes_of(pinned_domain)) if pin is not None else 0,
                boundDomain=placed_domain,
                boundCount=count,
                freePinnedDomain=survey.room(pinned_domain) if pin is not None else 0,
                freeByDomain={focus: survey.room(focus)} if focus else survey.rooms(),
            )

        if pin is not None and (
            survey.plan(pinned_domain) is None or (count == 0 and survey.room(pinned_domain) < need)
        ):
            # Stale pin: its domain vanished, or shrank below the gang before any member
            # was placed. Re-plan from scratch (a pin decision, not an unwind).
            why = "its domain changed and no longer fits the gang"
            self.release(key, gang.uid, pin.token, unwind=False, why=why)
            self.metrics.pin("stale_replan")
            log.info("gangpack.pinGang.stale_replan", v=4, gang=key, releasedDomain=pinned_domain)
            pin = None

        if pin is not None and count > 0 and survey.room(pinned_domain) < need:
            msg = f"pinned domain {pinned_domain} cannot fit all remaining gang members {key}"
            log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=msg)
            return Status.unschedulable(msg)

        if pin is None:
            if count > 0:
                # Rule 7: members already bound or assumed decide the domain (adoption).
                pin = self.pins.set_reservation(
                    key,
                    gang.uid,
                    tk,
                    placed_domain,
                    max(0, gang.min_member - count),
                    survey.node_names_of(placed_domain),
                    holding=self._may_hold(gang),
                )
                pin.hold_until = self.forming_since[key] + gang.timeout
                self.metrics.pin("adopted")
                hold = "holding it" if pin.holding and pin.remaining > 0 else "without a hold"
                if not pin.holding and pin.remaining > 0:
                    hold += " (its holds expired)"
                self.pod_group_event(
                    key,
                    "Normal",
                    "Adopted",
                    f"adopted {tk}={placed_domain}, where {count} members are already placed, {hold}",
                )
                self.metrics.pinned_groups(len(self.pins))
                self.report(key)
                if survey.room(placed_domain) < need:
                    msg = f"adopted domain {placed_domain} cannot fit remaining gang members {key}"
                    log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=msg)
                    return Status.unschedulable(msg)
            else:
                chosen = self._choose(gang, pod, survey)
                if isinstance(chosen, Status):
                    log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=chosen.message())
                    return chosen
                pin = chosen
        domain = pin.domain.value
        p = survey.plan(domain)
        cands = planner.candidates(p) if p is not None else []
        if not cands:
            return Status.unschedulable(f"pinned domain {domain} has no node feasible for gang member {key}")
        log.info("gangpack.pinGang.result", v=4, gang=key, domain=domain, narrowedNodes=len(cands))
        return pin, {n.name for n in cands}

    def _choose(self, gang: Gang, pod: PodInfo, survey: DomainSurvey) -> Pin | Status:
        """A fresh pin: best fit (rule 2) skipping held domains, failed domains tried last."""
        key, tk = gang.key, gang.topology_key
        pins = self.pins
        failed = self.failed.get((key, gang.uid), set())

        def held(d: str) -> bool:
            if pins.reserved.get(Domain(tk, d), 0) > 0:
                return True
            # A domain under another key that shares a physical node with a hold is held too.
            return bool(pins.reserved_nodes) and any(pins.reserved_nodes.get(n, 0) > 0 for n in survey.node_names_of(d))

        d = survey.best_fit(lambda x: held(x) or Domain(tk, x) in failed)
        if d is None and failed:
            self.failed.pop((key, gang.uid), None)
            d = survey.best_fit(held)
        if d is None:
            if survey.best_fit(lambda _: False) is not None:
                self.metrics.pin("reserved")
                self.park_by_hold(pod)  # woken when a hold drains or is released
                return Status.unschedulable(
                    f"no domain has room for gang {key}: every fitting domain is reserved for a forming gang"
                )
            self.metrics.pin("no_fit")
            return Status.unschedulable(f"no domain has room for gang {key}")
        pin = pins.choose(key, gang.uid, tk, d, survey.node_names_of(d), survey.need, holding=self._may_hold(gang))
        pin.hold_until = self.forming_since[key] + gang.timeout
        self.metrics.pin("pinned")
        hold = "holding it" if pin.holding else "without a hold (its holds expired)"
        self.pod_group_event(
            key,
            "Normal",
            "Pinned",
            f"pinned to {tk}={d} (room for {survey.room(d)} members, the gang needs {survey.need}), {hold}",
        )
        self.metrics.pinned_groups(len(self.pins))
        self.report(key)
        return pin

    def _sibling_to_wait_for(self, pod: PodInfo, siblings: Sequence[PodInfo], placed: Sequence[Pod]) -> PodInfo | None:
        """§9: the first unplaced sibling a required pod-affinity term of ``pod`` waits for."""
        terms = pod.required_affinity_terms
        if not terms:
            return None
        ns = self.handle.namespace(pod.namespace)
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

    def _room_index(self, tk: str, shape: PodInfo, opn: bool) -> RoomIndex[PodInfo, NodeInfo]:
        """The per-(key, member shape) room index, brought up to date with the cache's changes."""
        k = (tk, template_signature(shape), opn)
        idx = self.indexes.pop(k, None)
        if idx is None:
            idx = RoomIndex(shape, member_capacity, lambda n: n.labels.get(tk, ""), lambda n: n.name, one_per_node=opn)
        self.indexes[k] = idx  # most recently used last
        while len(self.indexes) > MAX_INDEXES:
            self.indexes.pop(next(iter(self.indexes)))
        cursor, changed = self.handle.node_changes(idx.cursor)
        if changed is None:
            idx.rebuild(self.handle.node_infos())
        elif changed:
            idx.refresh({name: self.handle.get_node_info(name) for name in changed})
        idx.cursor = cursor
        return idx

    # ---- Reserve, Permit, PostBind --------------------------------------------------------

    def reserve(self, gang: Gang, token: int) -> None:
        """Drain one reservation slot; a drained pin ends its hold and wakes the pods it parked."""
        _, drained = self.pins.place_if(gang.key, token)
        if drained:
            self.failed.pop((gang.key, gang.uid), None)
            self.wake_parked_by_hold()

    def permit(self, pod: PodInfo, gang: Gang, token: int) -> Status | None:
        """§4.1: record the attempt, wake the gang, and admit every waiter once the pin is
        drained. Returns None to admit this member, Wait to park it, or Unschedulable when the
        gate finds a waiter whose node left the pinned domain (rule 9: the pin is released)."""
        self.attempt_by_pod[pod.pod_key] = token
        # Wake the parked members so the gang forms fast (§6.1), but not the ones in flight (this
        # pod, and those waiting at Permit): activating a pod in flight marks it to be retried at
        # once if its attempt fails, and a release would then feed itself (rule 10).
        parked = [
            p.pod
            for p in self.live_members(gang.key)
            if p.pod_key != pod.pod_key and self.handle.get_waiting_pod(p.pod_key) is None
        ]
        self.activate(parked, "permit")
        if not self.pins.is_drained(gang.key, token):
            self.metrics.gate("wait")
            self.waiting_since[pod.pod_key] = time.monotonic()
            return Status(Code.WAIT)
        if not self._open_gate(gang.key, token):
            return Status.unschedulable(f"gang {gang.key} unwound after a member left its pinned domain")
        self.metrics.gate("admit")
        return None

    def _open_gate(self, gang: GangKey, token: int) -> bool:
        """Allow every waiter of the drained pin, unless one waits on a node that is gone or has
        left the pinned domain: then release the pin instead (rule 9). Returns whether it opened."""
        pin = self.pins.get(gang)
        if pin is None or pin.token != token:
            return False
        tk, domain = pin.domain.topology_key, pin.domain.value
        waiters = self.waiters(gang, token)
        for wp in waiters:
            ni = self.handle.get_node_info(wp.node)
            if ni is None or ni.labels.get(tk, "") != domain:
                why = f"member {wp.pod_info.key} waits on {wp.node}, which left the domain"
                self.release(gang, pin.owner, token, why=why)
                return False
        for wp in waiters:
            wp.allow(NAME)
        return True

    def post_bind(self, pod: PodInfo, gang: Gang | None) -> None:
        """Forget the member's attempt; when the gang's last member binds, observe its skew."""
        self.attempt_by_pod.pop(pod.pod_key, None)
        self.parked_by_hold.pop(pod.pod_key, None)
        if gang is None:
            return
        times = self.bind_times.setdefault(gang.key, [])
        times.append(time.monotonic())
        pg = self.handle.pod_groups().get(gang.namespace, gang.name)
        size = (pg.spec.min_member or 0) if pg is not None else gang.min_member
        placed = sum(1 for _, n in self.handle.pod_groups().placed_members(gang.key) if n is not None)
        if placed >= size:
            self.forming_since.pop(gang.key, None)  # complete: its next holds start afresh
        self.waiting_since.pop(pod.pod_key, None)
        if len(times) == size:
            self.metrics.bind_skew(times[-1] - times[0])
            pin = self.pins.get(gang.key)
            where = f" in {pin.domain.topology_key}={pin.domain.value}" if pin is not None else ""
            note = f"all {size} members bound{where}, {times[-1] - times[0]:.3f}s from first to last"
            self.pod_group_event(gang.key, "Normal", "Bound", note)
            if pin is not None:
                bound = GangPlacement(pin.domain.topology_key, pin.domain.value, PLACEMENT_BOUND)
                self.handle.report_gang_placement(gang.key, bound)
            created = [p.pod.metadata.creation_timestamp for p in self.live_members(gang.key)]
            last = max((c for c in created if c), default=None)
            if last is not None:
                self.metrics.scheduling_duration(max(0.0, time.time() - parse_rfc3339(last)))

    # ---- PodGroup changes, GC, gauges ------------------------------------------------------

    def on_pod_group_change(self, old: PodGroup | None, new: PodGroup | None) -> None:
        """A PodGroup was added, changed or deleted (rule 9: the gang follows its current definition).

        Its pin follows at once, members waiting at Permit included: deleted or re-created, or
        a new topology key, releases the pin; a new ``minMember`` resizes the reservation (the
        gate opens when it is met); a new ``scheduleTimeoutSeconds`` replaces the waiters' limit.
        Then its unbound members are woken (``podgroup_change``). Updates that change nothing
        the plugin reads (status, the scheduler's own status annotations) do nothing.
        """
        pg = new or old
        if pg is None:
            return
        if old is not None and new is not None and same_definition(old, new):
            return
        key = gang_key(pg.metadata.namespace, pg.metadata.name)
        self.forming_since.pop(key, None)  # a new definition gets a fresh chance to hold
        pin = self.pins.get(key)
        if pin is not None:
            if new is None or (pin.owner and new.metadata.uid != pin.owner):
                why = "its PodGroup was deleted" if new is None else "its PodGroup was re-created"
                self.release(key, pin.owner, ANY_PIN, why=why)
            elif pin.domain.topology_key != topology_key_of(new, self.args):
                why = f"its topology key is now {topology_key_of(new, self.args)}"
                self.release(key, pin.owner, ANY_PIN, why=why)
                self.metrics.pin("topology_replan")
            else:
                self._follow_spec(key, pin, new)
        members = self.live_members(key)
        self.activate([p.pod for p in members if not p.pod.spec.node_name], "podgroup_change")

    def _follow_spec(self, key: GangKey, pin: Pin, pg: PodGroup) -> None:
        """Resize the pin's reservation to the new ``minMember`` and retime its waiters."""
        mm = pg.spec.min_member or 0
        if mm > 0:
            placed = sum(1 for _, n in self.handle.pod_groups().placed_members(key) if n is not None)
            if self.pins.set_remaining_if(key, pin.token, mm - placed):
                self.failed.pop((key, pin.owner), None)
                self.wake_parked_by_hold()
                if self._open_gate(key, pin.token):
                    self.metrics.gate("admit")
        sts = pg.spec.schedule_timeout_seconds
        timeout = sts if sts is not None and sts > 0 else (self.args.default_permit_timeout_seconds or 0)
        if timeout > 0:
            for wp in self.waiters(key, pin.token):
                wp.set_timeout(NAME, float(timeout))

    def on_node_change(self, old: Node | None, new: Node | None) -> None:
        """Rule 9: a node relabelled, unlabelled or deleted while a member waits on it at Permit
        releases that member's pin when the node is no longer in the pinned domain."""
        if not self.pins.by_group or (
            old is not None and new is not None and old.metadata.labels == new.metadata.labels
        ):
            return
        name = (new or old).metadata.name  # type: ignore[union-attr]
        for wp in list(self.handle.waiting_pods()):
            pi = wp.pod_info
            if wp.node != name or not pi.gang:
                continue
            pin = self.pins.get(pi.gang_key)
            if pin is None or self.attempt_by_pod.get(pi.pod_key) != pin.token:
                continue
            tk, domain = pin.domain.topology_key, pin.domain.value
            if new is None or new.metadata.labels.get(tk, "") != domain:
                log.info("gangpack.pinGang.stale_replan", v=4, gang=pi.gang_key, releasedDomain=domain, node=name)
                why = f"node {name} left the domain while {pi.key} waited on it"
                self.release(pi.gang_key, pin.owner, pin.token, unwind=False, why=why)
                self.metrics.pin("stale_replan")

    def gc(self) -> None:
        """§7: release pins of gangs with no live pod, or whose PodGroup is gone or re-created."""
        live = self.handle.pod_groups().live_gang_keys()
        for key in list(self.templates_incomplete):
            if key not in live or split_gang_key(key) is None:
                self.templates_incomplete.discard(key)
        for key in list(self.bind_times):
            if key not in live:
                del self.bind_times[key]
        for key in list(self.forming_since):
            if key not in live:
                del self.forming_since[key]
        for key, owner in self.pins.owners().items():
            stale = key not in live
            if not stale and owner:
                parts = split_gang_key(key)
                pg = self.handle.pod_groups().get(*parts) if parts else None
                stale = pg is None or pg.metadata.uid != owner
            why = "the gang has no live pods" if key not in live else "its PodGroup is gone or was re-created"
            if stale and self.release(key, owner, ANY_PIN, why=why):
                self.failed.pop((key, owner), None)

    def _may_hold(self, gang: Gang) -> bool:
        """Whether a new pin of ``gang`` may hold its domain: only within ``scheduleTimeoutSeconds``
        of the gang's first hold since it last completed (rule 8: no hold outlives its chance)."""
        now = time.monotonic()
        start = self.forming_since.setdefault(gang.key, now)
        return now - start < gang.timeout

    def expire_holds(self) -> None:
        """End every hold older than its gang's timeout (rule 8): the capacity becomes usable by
        other gangs and standalone pods, the PodGroup gets a Warning event, and the pods the hold
        parked are woken. The pin stays for the gang's own members (its gate still counts)."""
        now = time.monotonic()
        for key, pin in list(self.pins.by_group.items()):
            if not pin.holding or pin.remaining <= 0 or not pin.hold_until or now < pin.hold_until:
                continue
            self.pins.drop_hold(key)
            self.report(key)
            tk, domain = pin.domain.topology_key, pin.domain.value
            log.info("gangpack.hold_expired", v=2, gang=key, domain=domain, topologyKey=tk)
            parts = split_gang_key(key)
            pg = self.handle.pod_groups().get(*parts) if parts else None
            if pg is not None:
                note = (
                    f"gang {key} did not complete within its scheduleTimeoutSeconds: released the hold on "
                    f"{tk}={domain}, so other pods may use it; its members keep trying there"
                )
                self.handle.event_recorder().event(
                    pg,
                    controller=self.scheduler_name,
                    type_="Warning",
                    reason="HoldReleased",
                    action="Scheduling",
                    note=note,
                )
            self.wake_parked_by_hold()

    def check_state(self, truth: ClusterTruth) -> list[tuple[str, str, str]]:
        """Pins that disagree with the API server, for the cache debugger: a pin whose PodGroup
        is gone or was re-created (pins follow their PodGroup at once), a gang with bound
        members outside its pinned domain (a split), and a hold kept past its expiry (the
        expiry runs every second)."""
        out: list[tuple[str, str, str]] = []
        now = time.monotonic()
        for key, pin in self.pins.by_group.items():
            tk, domain = pin.domain.topology_key, pin.domain.value
            uid = truth.pod_groups.get(key)
            if uid is None:
                out.append((key, "pin-without-podgroup", f"pinned to {tk}={domain} but its PodGroup does not exist"))
                continue
            if pin.owner and uid != pin.owner:
                out.append((key, "pin-of-old-podgroup", f"pinned for PodGroup uid {pin.owner}, the PodGroup is {uid}"))
            outside = {
                pod: node
                for pod, node in truth.bound_members.get(key, {}).items()
                if truth.node_labels.get(node, {}).get(tk) != domain
            }
            if outside:
                out.append((key, "members-outside-pin", f"pinned to {tk}={domain}, bound outside it: {outside}"))
            if pin.holding and pin.remaining > 0 and pin.hold_until and now > pin.hold_until + 5.0:
                late = now - pin.hold_until
                out.append((key, "hold-past-expiry", f"holds {tk}={domain} {late:.0f} s past its expiry"))
        return out

    def refresh_domain_gauges(self) -> None:
        """The ``ome_scheduler_domain_*`` gauges for every topology key in use."""
        keys = set(self.shapes) | ({self.args.topology_key} if self.args.topology_key else set())
        refresh_domain_gauges(self.metrics.m, self.handle.node_infos(), sorted(keys), self.shapes)
