"""The gangs' shared state, and the one routine that ends a pin.

Lives here: :class:`GangState`, what the PreFilter planner (``planner.py``) and the gate and
lifecycle (``manager.py``) both read and change (``docs/design/gang-scheduling.md`` §2.6,
§2.7):

* the pin store (pins with their reservations, hence the holds);
* each waiting member's attempt token (so a release rejects exactly that attempt's waiters);
* the pods parked by a hold (woken when any hold drains or is released);
* gangs parked because their member templates were incomplete;
* domains each gang failed in (tried last by the next plan);
* bind times per gang (bind skew), per-shape room indexes, and the last planned shape per
  topology key (what the domain gauges count in);
* when each member began waiting at Permit and when each forming gang first held a domain.

Beside the state, the helpers every part uses (the gang's live members and waiters,
activation, PodGroup events, the placement report) and :meth:`GangState.release`, the shared
release routine (§4.3). Like the state half of scheduler-plugins'
``pkg/coscheduling/core/core.go`` (``PodGroupManager``); upstream kube-scheduler has no gangs.

Every method runs on the event loop inside a scheduling cycle or a background task, so no
lock is needed; a release rejects the attempt's waiters before it returns, so no retry can
pin again in between (the design's "callback under the store lock").
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ome_scheduler.api.core import Pod
from ome_scheduler.api.scheduling import PLACEMENT_HOLDING, PLACEMENT_PINNED, PodGroup
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.gangsource import is_lws_leader, source_of
from ome_scheduler.framework.interface import Handle
from ome_scheduler.framework.topology import describe
from ome_scheduler.framework.types import GangKey, GangPlacement, NodeInfo, PodInfo, PodKey, split_gang_key
from ome_scheduler.framework.waiting_pods import WaitingPod
from ome_scheduler.plugins.gangpack.gang import Gang, is_live, same_pod
from ome_scheduler.plugins.gangpack.metrics import GangMetrics, Trigger
from ome_scheduler.plugins.gangpack.pins import ANY_PIN, Domain, Pin, PinStore
from ome_scheduler.plugins.gangpack.placement import RoomIndex

NAME = "OMEGangPack"
MAX_TOPOLOGY_KEYS = 16
"""Topology keys whose domains the ``ome_scheduler_domain_*`` gauges cover (most recent first)."""
MAX_INDEXES = 16
"""Room indexes kept (one per topology key and member shape), least recently used dropped."""
MAX_WARNED = 4096
"""Once-per-gang warnings remembered (older ones may be given again)."""


class GangState:
    """Pins, attempts, parked pods and the per-gang records of one OMEGangPack instance."""

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
        """(topology key, member shape, one per node) -> room index, at most :data:`MAX_INDEXES`."""
        self.shapes: dict[str, PodInfo] = {}
        """The last gang member planned per topology key: the shape the domain gauges count in."""
        self.warned: dict[tuple[GangKey, str, str], None] = {}
        """(gang, PodGroup UID, what) of the warnings given once per gang (``TopologyNotNested``
        per level, §3.9; ``LeaderWorkerSetDeadlock``, §2.1), oldest first, at most :data:`MAX_WARNED`."""
        self.waiting_since: dict[PodKey, float] = {}
        """When each member began waiting at Permit (monotonic): tells a timeout from other failures."""
        self.unresolvable: dict[GangKey, dict[PodKey, tuple[str, str]]] = {}
        """Rule 12: members whose last attempt failed UnschedulableAndUnresolvable in another
        plugin's PreFilter (no node can take them as the cluster stands) -> (``ns/name``, why).
        Set by PostFilter, cleared by that member's Reserve, pruned of members that are gone, and
        dropped when the PodGroup changes; while it is set the gang pins and holds nothing."""
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
        """Record an event on the gang's PodGroup (if it still exists); an LWS group has none
        (§2.1), so its event goes to its leader pod, else to its first live member."""
        parts = split_gang_key(gang)
        regarding: Pod | PodGroup | None = None
        if parts is not None and source_of(parts[1]) == "LeaderWorkerSet":
            members = sorted(self.live_members(gang), key=lambda p: (not is_lws_leader(p.pod.metadata), p.name))
            regarding = members[0].pod if members else None
        elif parts is not None:
            regarding = self.handle.pod_groups().get(*parts)
        if regarding is not None:
            self.handle.event_recorder().event(
                regarding, controller=self.scheduler_name, type_=type_, reason=reason, action="Scheduling", note=note
            )

    def warn_once(self, gang: GangKey, uid: str, what: str, reason: str, note: str) -> None:
        """A Warning event on the gang's PodGroup, unless ``(gang, uid, what)`` was warned already."""
        k = (gang, uid, what)
        if k in self.warned:
            return
        self.warned[k] = None
        while len(self.warned) > MAX_WARNED:
            self.warned.pop(next(iter(self.warned)))
        self.pod_group_event(gang, "Warning", reason, note)

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

    def may_hold(self, gang: Gang) -> bool:
        """Whether a new pin of ``gang`` may hold its domain: only within ``scheduleTimeoutSeconds``
        of the gang's first hold since it last completed (rule 8: no hold outlives its chance)."""
        now = time.monotonic()
        start = self.forming_since.setdefault(gang.key, now)
        return now - start < gang.timeout

    def member_unresolvable(self, pod: PodInfo, why: str) -> None:
        """Rule 12: ``pod`` failed UnschedulableAndUnresolvable in another plugin's PreFilter. Its
        gang's pin is released (no hold for a gang that cannot complete) and the member is
        remembered, so every sibling's PreFilter names it until it can be scheduled. Siblings
        parked because the member did not exist yet are woken once (``templates_complete``): the
        member exists now, but its own PreFilter never reached OMEGangPack to wake them."""
        key = pod.gang_key
        self.unresolvable.setdefault(key, {})[pod.pod_key] = (pod.key, why)
        pin = self.pins.get(key)
        if pin is not None:
            self.release(key, pin.owner, ANY_PIN, why=f"member {pod.key} cannot be scheduled: {why}")
        if key in self.templates_incomplete:
            self.templates_incomplete.discard(key)
            self.activate([p.pod for p in self.live_members(key) if not same_pod(p.pod, pod.pod)], "templates_complete")

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
        waiters. The waiters are told ``gang {key} unwound after a member failed to schedule``
        (§10.1) when a member's attempt failed (``pod`` given: PostFilter, Unreserve), else
        ``gang {key} unwound: {why}`` (a PodGroup deleted or re-created, a new topology key, a
        node that left the domain: no member failed). Returns whether a pin was released.
        """
        member_failed = pod is not None or mark_failed or not why
        reject = (
            f"gang {gang} unwound after a member failed to schedule" if member_failed else f"gang {gang} unwound: {why}"
        )
        told: list[Pin] = []
        before = self.pins.get(gang)
        held = before is not None and before.holding and before.remaining > 0  # read before it is released

        def on_release(pin: Pin) -> None:
            if mark_failed:
                self.failed.setdefault((gang, owner), set()).add(pin.domain)
            waiters = self.waiters(gang, pin.token)
            for wp in waiters:
                wp.reject(NAME, reject)
            if why and (held or waiters):
                told.append(pin)

        released = self.pins.release_if(gang, token, on_release)
        for pin in told:
            tk, domain = pin.domain.topology_key, pin.domain.value
            self.pod_group_event(gang, "Normal", "HoldReleased", f"released the hold on {describe(tk, domain)}: {why}")
        if released:
            if unwind:
                self.metrics.unwind()
            self.metrics.pinned_groups(len(self.pins))
            self.report(gang)
            self.wake_parked_by_hold()
        if pod is not None and token is not ANY_PIN and self.attempt_by_pod.get(pod.pod_key) == token:
            del self.attempt_by_pod[pod.pod_key]
        return released
