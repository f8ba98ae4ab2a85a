"""The gang manager: the decisions OMEGangPack's extension points ask for, past PreFilter.

Lives here: :class:`GangManager`, the :class:`~ome_scheduler.plugins.gangpack.state.GangState`
(``state.py``: every gang's pin and records, the release routine) with the decisions made on
it: Reserve draining the reservation, the Permit gate (§4.1), Unreserve's release (§4.3),
PostBind's bind skew, and the lifecycle outside the cycles: PodGroup and node changes (rule 9),
the GC (§7), hold expiry (rule 8), the debugger's state check and the domain gauges.
PreFilter's pin decision is the :class:`~ome_scheduler.plugins.gangpack.planner.PinPlanner`
(``planner.py``) in :attr:`GangManager.planner`. Sections cite
``docs/design/gang-scheduling.md``.

Like scheduler-plugins' ``pkg/coscheduling/core/core.go`` (``PodGroupManager``) under the
thin ``coscheduling.go`` plugin: the state and decisions live here and the framework glue in
``plugin.py`` only translates.
"""

from __future__ import annotations

import time

from ome_scheduler.api.core import Node
from ome_scheduler.api.scheduling import PLACEMENT_BOUND, PodGroup, same_definition
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.gangsource import is_lws_leader, source_of
from ome_scheduler.framework.interface import ClusterTruth, Handle
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.topology import describe, domain_value, required_key
from ome_scheduler.framework.types import GangKey, GangPlacement, PodInfo, gang_key, split_gang_key
from ome_scheduler.logs import get_logger
from ome_scheduler.plugins.gangpack.gang import Gang, permit_timeout, topology_key_of
from ome_scheduler.plugins.gangpack.levels import (
    PREFERRED_KEYS_ANNOTATION,
    SUBGROUP_KEY_ANNOTATION,
    SUBGROUP_SIZE_ANNOTATION,
)
from ome_scheduler.plugins.gangpack.metrics import GangMetrics, refresh_domain_gauges
from ome_scheduler.plugins.gangpack.pins import ANY_PIN, Domain, Pin
from ome_scheduler.plugins.gangpack.planner import PinPlanner
from ome_scheduler.plugins.gangpack.state import NAME, GangState
from ome_scheduler.util.timestamps import parse_rfc3339

log = get_logger()


class GangManager(GangState):
    """Pins, holds and Permit gates of every gang one OMEGangPack instance schedules."""

    def __init__(self, args: OMEGangPackArgs, handle: Handle, metrics: GangMetrics, scheduler_name: str) -> None:
        super().__init__(args, handle, metrics, scheduler_name)
        self.planner = PinPlanner(self)
        """PreFilter's pin decision (``pin_gang``), over this state."""

    # ---- Unreserve (§4.3) -------------------------------------------------------------------

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
                    f"on nodes in {describe(tk, domain)}"
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

    # ---- Reserve, Permit, PostBind --------------------------------------------------------

    def reserve(self, gang: Gang, token: int, pod: PodInfo | None = None) -> None:
        """Drain one reservation slot; a drained pin ends its hold and wakes the pods it parked.
        A member that reaches Reserve is no longer unresolvable (rule 12)."""
        if pod is not None:
            members = self.unresolvable.get(gang.key)
            if members is not None and members.pop(pod.pod_key, None) is not None and not members:
                del self.unresolvable[gang.key]
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
        if gang.leader_first and is_lws_leader(pod.pod.metadata) and not self.pins.is_drained(gang.key, token):
            # §2.1: a LeaderReady group's workers are created once its leader runs, so the leader
            # cannot wait for them: it binds now, and the pin keeps holding the domain's room for
            # the workers until they bind, the group goes, or the hold expires (rule 8).
            self.metrics.gate("admit")
            return None
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
            if ni is None or domain_value(ni.labels, tk) != domain:
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
            where = f" in {describe(pin.domain.topology_key, pin.domain.value)}" if pin is not None else ""
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
        self.unresolvable.pop(key, None)  # its members are judged again under the new definition
        pin = self.pins.get(key)
        if pin is not None:
            if new is None or (pin.owner and new.metadata.uid != pin.owner):
                why = "its PodGroup was deleted" if new is None else "its PodGroup was re-created"
                self.release(key, pin.owner, ANY_PIN, why=why)
            elif (changed := self._levels_changed(pin, old, new)) is not None:
                self.release(key, pin.owner, ANY_PIN, why=changed)
                self.metrics.pin("topology_replan")
            else:
                self._follow_spec(key, pin, new)
        members = self.live_members(key)
        self.activate([p.pod for p in members if not p.pod.spec.node_name], "podgroup_change")

    def _levels_changed(self, pin: Pin, old: PodGroup | None, new: PodGroup) -> str | None:
        """Why the pin no longer fits the PodGroup's topology (its key, §3.9's preferred levels or
        §3.10's sub-gangs changed), or None: a pin at a preferred level (``R>P``) still fits while
        ``R`` is the topology key and ``P`` a preferred key."""
        tk = topology_key_of(new, self.args)
        if required_key(pin.domain.topology_key) != tk:
            return f"its topology key is now {tk}"
        ann_new = new.metadata.annotations
        ann_old = old.metadata.annotations if old is not None else ann_new
        for a in (PREFERRED_KEYS_ANNOTATION, SUBGROUP_SIZE_ANNOTATION, SUBGROUP_KEY_ANNOTATION):
            if ann_old.get(a, "") != ann_new.get(a, ""):
                return f"its {a} annotation changed"
        return None

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
        timeout = permit_timeout(pg, self.args)
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
            if new is None or domain_value(new.metadata.labels, tk) != domain:
                log.info("gangpack.pinGang.stale_replan", v=4, gang=pi.gang_key, releasedDomain=domain, node=name)
                why = f"node {name} left the domain while {pi.key} waited on it"
                self.release(pi.gang_key, pin.owner, pin.token, unwind=False, why=why)
                self.metrics.pin("stale_replan")
        if new is None:
            for key in [k for k, p in self.pins.by_group.items() if p.remaining == 0]:
                self.repair(key, f"node {name} was deleted")

    # ---- rule 11: a bound gang keeps its place -----------------------------------------------

    def on_member_left(self, member: PodInfo) -> None:
        """Rule 11: a bound member was deleted (the cache no longer counts it)."""
        self.repair(member.gang_key, f"member {member.key} was deleted")

    def repair(self, key: GangKey, why: str) -> bool:
        """Rule 11: when gang ``key`` has fewer than ``minMember`` placed members, all in one
        domain, and either had completed (its pin is drained) or has no pin (as after a
        restart), hold that domain for the missing ones. A drained pin's reservation re-opens
        with a hold of the gang's ``scheduleTimeoutSeconds`` from now and a Normal
        ``Repairing`` event; without a pin the domain is adopted (rule 7, an ``Adopted`` event)
        with a hold only within the gang's hold window (rule 8).
        Returns whether a hold started. A gang still forming, without a PodGroup, without a
        timeout (no hold may start, rule 8), with placed members in several domains, or none
        placed by this profile's scheduler name is left alone (PreFilter still adopts)."""
        parts = split_gang_key(key)
        pg = self.handle.pod_groups().get(*parts) if parts else None
        if pg is None:
            return False
        timeout = permit_timeout(pg, self.args)
        pin = self.pins.get(key)
        if timeout <= 0 or (pin is not None and (pin.remaining > 0 or (pin.owner and pin.owner != pg.metadata.uid))):
            return False
        placed_members = self.handle.pod_groups().placed_members(key)
        if not any(p.pod.spec.scheduler_name == self.scheduler_name for p, _ in placed_members):
            return False  # another scheduler's (or profile's) gang
        tk = topology_key_of(pg, self.args)
        placed = [n for _, n in placed_members if n is not None]
        domains = {n.labels.get(tk, "") for n in placed}
        missing = (pg.spec.min_member or 0) - len(placed)
        if missing <= 0 or len(domains) != 1 or "" in domains:
            return False
        domain = next(iter(domains))
        if pin is not None and pin.domain != Domain(tk, domain):
            return False
        now = time.monotonic()
        if pin is None:
            # Adoption (rule 7) ahead of the members' PreFilter, within the hold window (rule 8:
            # on a scheduler that just started it starts now; one that expired stays expired).
            start = self.forming_since.setdefault(key, now)
            if now - start >= timeout:
                return False
            pin = self.pins.set_reservation(key, pg.metadata.uid, tk, domain, missing, (), holding=True)
            pin.hold_until = start + timeout
            self.metrics.pin("adopted")
            note = f"adopted {tk}={domain}, where {len(placed)} members are already placed, holding it"
            self.pod_group_event(key, "Normal", "Adopted", note)
        else:
            self.pins.reopen(key, missing)
            self.forming_since[key] = now  # completed: a fresh hold window
            pin.hold_until = now + timeout
            note = f"{why}: holding {tk}={domain} for {missing} missing member(s), at most {timeout}s"
            self.pod_group_event(key, "Normal", "Repairing", note)
        self.failed.pop((key, pg.metadata.uid), None)
        log.info("gangpack.repair", v=2, gang=key, domain=domain, topologyKey=tk, missing=missing)
        self.metrics.pinned_groups(len(self.pins))
        self.report(key)
        return True

    def repair_all(self) -> None:
        """Rule 11 for every PodGroup (the first GC after a start or a leader change: a
        restarted scheduler holds for a gang that lost members before it started leading)."""
        for key in self.handle.pod_groups().live_gang_keys():
            self.repair(key, "found with members missing")

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
        for key in list(self.unresolvable):
            if key not in live:
                del self.unresolvable[key]
        for key, owner in self.pins.owners().items():
            stale = key not in live
            if not stale and owner:
                parts = split_gang_key(key)
                pg = self.handle.pod_groups().get(*parts) if parts else None
                stale = pg is None or pg.metadata.uid != owner
            why = "the gang has no live pods" if key not in live else "its PodGroup is gone or was re-created"
            if stale and self.release(key, owner, ANY_PIN, why=why):
                self.failed.pop((key, owner), None)

    def expire_holds(self) -> None:
        """End every hold older than its gang's timeout (rule 8): the capacity becomes usable by
        other gangs and standalone pods, the PodGroup gets a Warning event, and the pods the hold
        parked are woken. The pin stays for the gang's own members (its gate still counts). Then
        ``ome_scheduler_gang_longest_hold_seconds`` is set from the holds that remain."""
        now = time.monotonic()
        self._expire(now)
        oldest = min(
            (self.forming_since.get(k, now) for k, p in self.pins.by_group.items() if p.holding and p.remaining > 0),
            default=now,
        )
        self.metrics.longest_hold(now - oldest)

    def _expire(self, now: float) -> None:
        for key, pin in list(self.pins.by_group.items()):
            if not pin.holding or pin.remaining <= 0 or not pin.hold_until or now < pin.hold_until:
                continue
            self.pins.drop_hold(key)
            self.report(key)
            tk, domain = pin.domain.topology_key, pin.domain.value
            log.info("gangpack.hold_expired", v=2, gang=key, domain=domain, topologyKey=tk)
            note = (
                f"gang {key} did not complete within its scheduleTimeoutSeconds: released the hold on "
                f"{describe(tk, domain)}, so other pods may use it; its members keep trying there"
            )
            self.pod_group_event(key, "Warning", "HoldReleased", note)
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
            parts = split_gang_key(key)
            if parts is not None and source_of(parts[1]) == "LeaderWorkerSet":
                uid = ""  # §2.1: an LWS group has no PodGroup to check against
            if uid is None:
                out.append((key, "pin-without-podgroup", f"pinned to {tk}={domain} but its PodGroup does not exist"))
                continue
            if pin.owner and uid != pin.owner:
                out.append((key, "pin-of-old-podgroup", f"pinned for PodGroup uid {pin.owner}, the PodGroup is {uid}"))
            outside = {
                pod: node
                for pod, node in truth.bound_members.get(key, {}).items()
                if domain_value(truth.node_labels.get(node, {}), tk) != domain
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
