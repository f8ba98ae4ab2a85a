"""OMEGangPack: place each gang in one topology domain and bind it all or nothing.

The framework glue around the pure parts (``placement.py`` plans, ``pins.py`` holds state).
It implements ``spec/gangpack.md`` with its product rules:

* PreFilter validates the PodGroup (§2.4), then ``pin_gang`` (§3.7): follows or replaces the
  gang's pin, adopts the domain of already placed members after a restart (rule 7), or
  best-fits a fresh domain by room counted in members (rules 1, 2), holding it exclusively
  while the gang forms, and narrows the member to nodes that strand no sibling.
* Filter keeps members in their domain and standalone pods off held nodes.
* PostFilter releases a pin whose every candidate failed and marks that domain failed.
* Reserve drains the hold; Permit waits until the gang is complete (exact
  ``scheduleTimeoutSeconds``, rule 4) and then admits every waiting member of the attempt.
* Every release rejects the attempt's waiters, counts an unwind and wakes the pods the hold
  parked (rule 5); PodGroup changes wake the gang (``podgroup_change``).
* Standalone pods get the domain-packing score (§8).

Status messages, metric label values and V(4) log events are the documented ones (§10, §11).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.framework.events import (
    POD_GROUP,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
)
from ome_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    BackgroundTask,
    CycleState,
    FilterPlugin,
    FrameworkOptions,
    Handle,
    NodeToStatus,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import POD_GROUP_LABEL, NodeInfo, PodInfo, gang_key, split_gang_key
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.args import ArgsError, GangPackArgs, parse_args
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.pins import Commitment, PinStore
from ome_scheduler.plugins.gangpack.placement import DomainPlan, GangPlanner, RoomIndex, best_fit, group_by_domain
from ome_scheduler.util.timestamps import parse_rfc3339

NAME = "OMEGangPack"
PIN_KEY = "gangpack.pin"
RESERVED_NODE = "node is reserved for a forming gang"
MAX_INDEXES = 16
"""Room indexes kept (one per topology key and member shape), least recently used dropped."""
PACK_KEY = "gangpack.domainpack"
DOMAIN_GAUGE_INTERVAL = 10.0
"""Seconds between refreshes of the ``ome_scheduler_domain_*`` gauges."""

log = get_logger()


@dataclass(frozen=True, slots=True)
class GangInfo:
    """A validated gang: key ``ns/name``, PodGroup UID, size, domain label and timeout (s)."""

    key: str
    namespace: str
    name: str
    uid: str
    min_member: int
    topology_key: str
    timeout: int


@dataclass(frozen=True, slots=True)
class CyclePin:
    """``gangpack.pin``: what PreFilter decided for this cycle."""

    domain: str
    topology_key: str
    gang: GangInfo
    token: int


def is_live(pod: Pod) -> bool:
    """Not being deleted and not Succeeded or Failed."""
    return pod.metadata.deletion_timestamp is None and pod.status.phase not in ("Succeeded", "Failed")


def same_pod(a: Pod, b: Pod) -> bool:
    """Spec §2.1: equal UIDs, or (one lacks a UID) equal namespace and non-empty name."""
    if a.metadata.uid and b.metadata.uid:
        return a.metadata.uid == b.metadata.uid
    return a.metadata.namespace == b.metadata.namespace and bool(a.metadata.name) and a.metadata.name == b.metadata.name


class OMEGangPack(
    PreFilterPlugin,
    ScorePlugin,
    PreScorePlugin,
    FilterPlugin,
    PostFilterPlugin,
    ReservePlugin,
    PermitPlugin,
    PostBindPlugin,
):
    name = NAME
    node_local_filter = True
    """Standalone pods' Filter reads only the node and the holds (``cache_token``); a gang
    member's Filter reads its cycle pin, and a pinned member never uses the equivalence cache
    because its PreFilter narrows the nodes."""

    def __init__(self, args: GangPackArgs, handle: Handle, metrics: Metrics) -> None:
        self.args = args
        self.handle = handle
        self.metrics = metrics
        self.store = PinStore()
        self.attempt_by_pod: dict[str, int] = {}
        self.blocked: dict[str, Pod] = {}
        self.templates_incomplete: set[str] = set()
        self.failed: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self.binds: dict[str, list[float]] = {}
        self.indexes: dict[tuple[str, Any, bool], RoomIndex[PodInfo, NodeInfo]] = {}
        self.shapes: dict[str, PodInfo] = {}
        """The last gang member planned per topology key: the shape the domain gauges count in."""
        self._pin_metric = {
            r: metrics.gang_pin.labels(r)
            for r in ("pinned", "no_fit", "reserved", "adopted", "stale_replan", "topology_replan")
        }
        handle.pod_groups().subscribe(self.on_pod_group_event)

    def background_tasks(self) -> Sequence[BackgroundTask]:
        """The gang GC every ``gcIntervalSeconds`` (spec §7) and the domain gauges every 10 s."""
        return (
            BackgroundTask("gangpack.gc", float(self.args.gc_interval_seconds), self.gc),
            BackgroundTask("gangpack.domain_gauges", DOMAIN_GAUGE_INTERVAL, self.refresh_domain_gauges, True),
        )

    def informer_sync_waits(self) -> Mapping[str, float]:
        """Wait up to ``podGroupSyncTimeoutSeconds`` for PodGroups before the first cycle."""
        t = self.args.pod_group_sync_timeout_seconds
        return {"podgroups": float(t)} if t else {}

    @classmethod
    def new(cls, args: dict[str, Any] | None, handle: Handle, options: FrameworkOptions) -> OMEGangPack:
        try:
            parsed = parse_args(args)
        except ArgsError as exc:
            raise ConfigError(str(exc)) from exc
        return cls(parsed, handle, options.metrics)

    # ---- helpers ----------------------------------------------------------------------

    def _set_gauge(self) -> None:
        self.metrics.pinned_groups.set(len(self.store))

    def _activate(self, pods: Iterable[Pod], trigger: str) -> bool:
        pods = list(pods)
        if not pods:
            return False
        self.handle.activate(pods)
        self.metrics.gang_activation.labels(trigger).inc()
        return True

    def _activate_blocked(self) -> None:
        pods = list(self.blocked.values())
        self.blocked.clear()
        self._activate(pods, "reservation_released")

    def _waiters(self, key: str, token: int) -> list[Any]:
        out = []
        for wp in self.handle.waiting_pods():
            pi = wp.pod_info
            if f"{pi.namespace}/{pi.gang}" == key and pi.gang and self.attempt_by_pod.get(pi.pod_key) == token:
                out.append(wp)
        return out

    def _release(
        self, key: str, uid: str, token: int, pod: PodInfo | None, mark_failed: bool, *, unwind: bool = True
    ) -> bool:
        """The shared release routine (spec §4.3): reject the attempt's waiters, wake parked pods.

        ``unwind=False`` is the stale-pin replan: product rule 5 makes it reject waiters and wake
        parked pods like every other release, but it is a pin decision, not an unwind.
        """

        def on_release(c: Commitment) -> None:
            if mark_failed:
                self.failed.setdefault((key, uid), set()).add(c.domain)
            for wp in self._waiters(key, c.token):
                wp.reject(NAME, f"gang {key} unwound after a member failed to schedule")

        released = self.store.release_if(key, token, on_release)
        if released:
            if unwind:
                self.metrics.gang_unwind.inc()
            self._set_gauge()
            self._activate_blocked()
        if pod is not None and token and self.attempt_by_pod.get(pod.pod_key) == token:
            del self.attempt_by_pod[pod.pod_key]
        return released

    def resolve_topology_key(self, pg: PodGroup) -> str:
        ann = self.args.pod_group_topology_key_annotation
        v = pg.metadata.annotations.get(ann, "") if ann else ""
        return v or self.args.topology_key

    def _live_members(self, namespace: str, gang: str) -> list[PodInfo]:
        return [p for p in self.handle.pod_groups().members(gang_key(namespace, gang)) if is_live(p.pod)]

    # ---- PreFilter --------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        if not pod.gang:
            return None, None
        ns, name = pod.namespace, pod.gang
        key = f"{ns}/{name}"
        pg = self.handle.pod_groups().get(ns, name)
        if pg is None:
            c = self.store.get(key)
            if c is not None:
                self._release(key, c.owner, 0, None, mark_failed=False)
            for k in [k for k in self.failed if k[0] == key]:
                del self.failed[k]
            err = self.handle.pod_groups().error(ns, name)
            if err is not None:  # exists but unreadable (the CRD schema would normally prevent it)
                return None, Status.unschedulable(f"PodGroup {key} is invalid: {err}")
            return None, Status.unschedulable(f"PodGroup {key} not resolvable yet")
        mm = pg.spec.min_member or 0
        if mm <= 0:
            return None, Status.unschedulable(f"PodGroup {key} must declare a positive minMember")
        tk = self.resolve_topology_key(pg)
        if not tk:
            ann = self.args.pod_group_topology_key_annotation
            if not ann:
                return None, Status.unschedulable(
                    "scheduler must configure topologyKey or podGroupTopologyKeyAnnotation for gang pods"
                )
            return None, Status.unschedulable(
                f"PodGroup {key} must declare {ann} or the scheduler must configure topologyKey"
            )
        pgl = self.args.unsupported_placement_group_label
        if pgl and (pgl in pod.pod.metadata.labels or pgl in pg.metadata.labels):
            return None, Status.unschedulable("partner placement groups are not supported")
        sts = pg.spec.schedule_timeout_seconds
        timeout = sts if sts is not None and sts > 0 else (self.args.default_permit_timeout_seconds or 0)
        if timeout <= 0:
            return None, Status.unresolvable(
                f"PodGroup {key} must set scheduleTimeoutSeconds or the scheduler must configure "
                "defaultPermitTimeoutSeconds"
            )
        info = GangInfo(key, ns, name, pg.metadata.uid, mm, tk, timeout)
        return self.pin_gang(state, pod, info, nodes)

    def _has_waiters(self, key: str, token: int) -> bool:
        return bool(self._waiters(key, token))

    def pin_gang(
        self, state: CycleState, pod: PodInfo, info: GangInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Spec §3.7, with room counted in members (rule 1).

        Work is proportional to the gang and to the nodes that changed since the last plan:
        placed members come from the cache's per-gang index, and a homogeneous gang's fresh
        choice bisects a per-shape :class:`RoomIndex` instead of scanning every node.
        """
        key, tk = info.key, info.topology_key
        c = self.store.get(key)
        if c is not None and c.owner != info.uid:
            had = self._has_waiters(key, c.token)
            old_owner = c.owner
            self._release(key, old_owner, c.token, None, mark_failed=False)
            self.failed.pop((key, old_owner), None)
            if had:
                return None, Status.unschedulable(f"released commitment owned by a previous PodGroup instance {key}")
            c = None
        if c is not None and c.domain[0] and c.domain[0] != tk:
            had = self._has_waiters(key, c.token)
            self._release(key, c.owner, c.token, None, mark_failed=False)
            self._pin_metric["topology_replan"].inc()
            if had:
                return None, Status.unschedulable(f"released commitment after topology key changed for {key}")
            c = None

        # §3.2 placement scan: bound and assumed pods of this gang.
        # Members on a node that left the snapshot are not placed (the snapshot has no such node).
        placed_pods = [
            (p, n)
            for p, n in self.handle.pod_groups().placed_members(gang_key(info.namespace, info.name))
            if n is not None
        ]
        count = len(placed_pods)
        placed = {p.name for p, _ in placed_pods}
        placed_domain = ""
        split = False
        seen_domains: set[str] = set()
        for _, n in placed_pods:
            d = n.labels.get(tk, "")
            if not d:
                split = True
            else:
                placed_domain = d
                seen_domains.add(d)
        if split or len(seen_domains) > 1:
            return None, Status.unresolvable(f"gang {key} already has members in multiple topology domains")

        # §3.3 templates.
        need = max(1, info.min_member - count)
        live = sorted(self._live_members(info.namespace, info.name), key=lambda p: p.name)
        templates = [pod] + [
            p for p in live if p.name != pod.name and not p.pod.spec.node_name and p.name not in placed
        ]
        if len(templates) < need:
            self.templates_incomplete.add(key)
            return None, Status.unschedulable(f"waiting for all PodGroup member templates for {key}")
        if key in self.templates_incomplete:
            self.templates_incomplete.discard(key)
            if self._activate([p.pod for p in live if not same_pod(p.pod, pod.pod)], "templates_complete"):
                log.info("gangpack.templates.complete", v=4, gang=key, members=len(templates), need=need)

        # §9 sibling-affinity yield.
        sib = self._sibling_to_wait_for(pod, templates[1:], [p.pod for p, _ in placed_pods])
        if sib is not None:
            log.info("gangpack.pinGang.sibling_wait", v=4, gang=key, sibling=sib.key)
            return None, Status.unschedulable(f"waiting for gang sibling {sib.key} to be placed")

        opn = one_per_node(templates)
        self.shapes[tk] = pod
        planner: GangPlanner[PodInfo, NodeInfo] = GangPlanner(
            templates, need, member_capacity, one_per_node=opn, signature=template_signature
        )
        index = self._room_index(tk, pod, opn) if planner.homogeneous else None
        pinned_domain = c.domain[1] if c is not None else ""
        plans: dict[str, DomainPlan[NodeInfo]] = {}

        def plan(d: str) -> DomainPlan[NodeInfo] | None:
            if d not in plans:
                ns_ = self._domain_nodes(tk, d, nodes, index)
                if not ns_:
                    return None
                plans[d] = planner.plan_domain(d, ns_)
            return plans[d]

        def room_of(d: str) -> int:
            p = plan(d) if d else None
            return p.room if p is not None and p.joinable else 0

        def all_rooms() -> dict[str, int]:
            if index is not None:
                return {d: (r if r >= need else 0) for d, r in sorted(index.room.items())}
            by = group_by_domain(nodes, lambda n: n.labels.get(tk, ""))
            for d, ns_ in by.items():
                plans.setdefault(d, planner.plan_domain(d, ns_))
            return {d: room_of(d) for d in sorted(by)}

        if enabled(4):
            focus = pinned_domain or placed_domain
            log.info(
                "gangpack.pinGang.enter",
                v=4,
                gang=key,
                minMember=info.min_member,
                topologyKey=tk,
                pinned=c is not None,
                pinnedDomain=pinned_domain,
                nodesInPinnedDomain=len(self._domain_nodes(tk, pinned_domain, nodes, index)) if c is not None else 0,
                boundDomain=placed_domain,
                boundCount=count,
                freePinnedDomain=room_of(pinned_domain) if c is not None else 0,
                freeByDomain={focus: room_of(focus)} if focus else all_rooms(),
            )

        if c is not None and (plan(pinned_domain) is None or (count == 0 and room_of(pinned_domain) < need)):
            self._release(key, info.uid, c.token, None, mark_failed=False, unwind=False)
            self._pin_metric["stale_replan"].inc()
            log.info("gangpack.pinGang.stale_replan", v=4, gang=key, releasedDomain=pinned_domain)
            c = None

        if c is not None and count > 0 and room_of(pinned_domain) < need:
            msg = f"pinned domain {pinned_domain} cannot fit all remaining gang members {key}"
            log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=msg)
            return None, Status.unschedulable(msg)

        if c is None:
            if count > 0:
                c = self.store.set_reservation(
                    key,
                    info.uid,
                    tk,
                    placed_domain,
                    max(0, info.min_member - count),
                    [n.name for n in self._domain_nodes(tk, placed_domain, nodes, index)],
                )
                self._pin_metric["adopted"].inc()
                self._set_gauge()
                if room_of(placed_domain) < need:
                    msg = f"adopted domain {placed_domain} cannot fit remaining gang members {key}"
                    log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=msg)
                    return None, Status.unschedulable(msg)
            else:
                chosen, status = self._choose(info, need, pod, nodes, index, all_rooms, plan)
                if status is not None:
                    log.info("gangpack.pinGang.no_fit", v=4, gang=key, status=status.message())
                    return None, status
                assert chosen is not None
                c = chosen
        domain = c.domain[1]
        p = plan(domain)
        cands = planner.candidates(p) if p is not None else []
        if not cands:
            return None, Status.unschedulable(f"pinned domain {domain} has no node feasible for gang member {key}")
        state.write(PIN_KEY, CyclePin(domain, tk, info, c.token))
        log.info("gangpack.pinGang.result", v=4, gang=key, domain=domain, narrowedNodes=len(cands))
        return {n.name for n in cands}, None

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

    def _domain_nodes(
        self, tk: str, d: str, nodes: Sequence[NodeInfo], index: RoomIndex[PodInfo, NodeInfo] | None
    ) -> list[NodeInfo]:
        """The snapshot nodes of one domain (by the index when there is one, else a scan)."""
        if not d:
            return []
        if index is not None:
            out = [self.handle.get_node_info(n) for n in sorted(index.members.get(d, ()))]
            return [n for n in out if n is not None]
        return [n for n in nodes if n.labels.get(tk, "") == d]

    def _choose(
        self,
        info: GangInfo,
        need: int,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        index: RoomIndex[PodInfo, NodeInfo] | None,
        all_rooms: Callable[[], dict[str, int]],
        plan: Callable[[str], DomainPlan[NodeInfo] | None],
    ) -> tuple[Commitment | None, Status | None]:
        """A fresh pin: best fit (rule 2) skipping held domains, failed domains tried last."""
        key, tk = info.key, info.topology_key
        store = self.store
        failed = self.failed.get((key, info.uid), set())

        def held(d: str) -> bool:
            if store.reserved.get((tk, d), 0) > 0:
                return True
            if store.reserved_nodes:
                members = (
                    index.members.get(d, ())
                    if index is not None
                    else [n.name for n in self._domain_nodes(tk, d, nodes, None)]
                )
                return any(store.reserved_nodes.get(n, 0) > 0 for n in members)
            return False

        if index is not None:
            d = index.best_fit(need, lambda x: held(x) or (tk, x) in failed)
            if d is None and failed:
                self.failed.pop((key, info.uid), None)
                d = index.best_fit(need, held)
            fits_unheld = index.best_fit(need, lambda x: False) is not None if d is None else True
            if d is not None and (p := plan(d)) is not None and not p.joinable:
                d = None
        else:
            room = all_rooms()
            eff = {x: (0 if held(x) else r) for x, r in room.items()}
            first = {x: r for x, r in eff.items() if (tk, x) not in failed}
            d = best_fit(first, need)
            if d is None and len(first) != len(eff):
                self.failed.pop((key, info.uid), None)
                d = best_fit(eff, need)
            fits_unheld = best_fit(room, need) is not None
        if d is None:
            if fits_unheld:
                self._pin_metric["reserved"].inc()
                self.blocked[pod.pod_key] = pod.pod  # woken when a hold drains or is released
                return None, Status.unschedulable(
                    f"no domain has room for gang {key}: every fitting domain is reserved for a forming gang"
                )
            self._pin_metric["no_fit"].inc()
            return None, Status.unschedulable(f"no domain has room for gang {key}")
        members = [n.name for n in self._domain_nodes(tk, d, nodes, index)]
        c = store.choose(key, info.uid, tk, d, members, need)
        self._pin_metric["pinned"].inc()
        self._set_gauge()
        return c, None

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

    # ---- Filter / PostFilter ----------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is not None:
            nd = node.labels.get(pin.topology_key, "")
            if nd != pin.domain:
                log.info(
                    "gangpack.Filter.reject",
                    v=4,
                    node=node.name,
                    nodeDomain=nd,
                    pinDomain=pin.domain,
                    pinTopologyKey=pin.topology_key,
                )
                return Status.unresolvable(f"node not in gang's pinned domain {pin.domain}")
            return None
        if pod.gang:
            return None
        if self.store.reserved_nodes or self.store.by_group:
            if self.store.blocks_node(node.name, node.labels):
                return Status.unresolvable(RESERVED_NODE)
        return None

    def cache_token(self, state: CycleState, pod: PodInfo) -> int:
        """The holds' version: a standalone pod's Filter answers change only with it."""
        return self.store.version

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            if not pod.gang and any(RESERVED_NODE in st.reasons for st in statuses.statuses.values()):
                self.blocked[pod.pod_key] = pod.pod  # parked by a hold: woken when it drains or is released
            return Status.unschedulable()
        if self._release(pin.gang.key, pin.gang.uid, pin.token, pod, mark_failed=True):
            return Status.unschedulable("gang reservation released after all candidate nodes were filtered")
        return Status.unschedulable()

    # ---- standalone packing (§8) ------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        tk = self.args.topology_key
        if not self.args.standalone_domain_packing or state.get(PIN_KEY) is not None or not tk:
            return Status(Code.SKIP)
        free: dict[str, int] = {}
        for n in nodes:
            d = n.labels.get(tk, "")
            if not d:
                continue
            free[d] = free.get(d, 0) + (1 if member_capacity(pod, n) > 0 else 0)
        if not free:
            return Status(Code.SKIP)
        state.write(PACK_KEY, (tk, free, max(free.values())))
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        st = state.get(PACK_KEY)
        if st is None:
            return [0] * len(nodes)
        tk, free, max_free = st
        out = []
        for n in nodes:
            d = n.labels.get(tk, "")
            out.append(max(0, max_free - free[d]) if d in free else 0)
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        mx = max(scores, default=0)
        if mx == 0:
            return
        for i, s in enumerate(scores):
            scores[i] = s * MAX_NODE_SCORE // mx

    # ---- Reserve / Permit / PostBind --------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            return None
        _, drained = self.store.place_if(pin.gang.key, pin.token)
        if drained:
            self.failed.pop((pin.gang.key, pin.gang.uid), None)
            self._activate_blocked()
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            return
        self._release(pin.gang.key, pin.gang.uid, pin.token, pod, mark_failed=False)

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status | None, float]:
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            if pod.gang:
                return Status.unschedulable("labeled gang pod reached Permit without validated PreFilter state"), 0.0
            return None, 0.0
        if pin.gang.timeout <= 0:
            return Status.unresolvable("gang permit timeout is not configured"), 0.0
        self.attempt_by_pod[pod.pod_key] = pin.token
        self._activate([p.pod for p in self._live_members(pin.gang.namespace, pin.gang.name)], "permit")
        if not self.store.committed_if(pin.gang.key, pin.token):
            self.metrics.gang_gate.labels("wait").inc()
            return Status(Code.WAIT), float(pin.gang.timeout)
        for wp in self._waiters(pin.gang.key, pin.token):
            wp.allow(NAME)
        self.metrics.gang_gate.labels("admit").inc()
        return None, 0.0

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        k = pod.pod_key
        self.attempt_by_pod.pop(k, None)
        self.blocked.pop(k, None)
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            return
        times = self.binds.setdefault(pin.gang.key, [])
        times.append(time.monotonic())
        if len(times) == pin.gang.min_member:
            self.metrics.gang_bind_skew.observe(times[-1] - times[0])
            created = [p.pod.metadata.creation_timestamp for p in self._live_members(pin.gang.namespace, pin.gang.name)]
            last = max((c for c in created if c), default=None)
            if last is not None:
                self.metrics.gang_scheduling_duration.observe(max(0.0, time.time() - parse_rfc3339(last)))

    # ---- events -----------------------------------------------------------------------

    def on_pod_group_event(self, old: PodGroup | None, new: PodGroup | None) -> None:
        """A PodGroup was added, changed or deleted: wake its parked members (``podgroup_change``).

        Updates that change nothing the plugin reads (status only) wake nobody.
        """
        pg = new or old
        if pg is None:
            return
        if (
            old is not None
            and new is not None
            and (
                old.spec == new.spec
                and old.metadata.uid == new.metadata.uid
                and old.metadata.annotations == new.metadata.annotations
                and old.metadata.labels == new.metadata.labels
            )
        ):
            return
        members = self._live_members(pg.metadata.namespace, pg.metadata.name)
        self._activate([p.pod for p in members if not p.pod.spec.node_name], "podgroup_change")

    def gc(self) -> None:
        """Spec §7: release pins of gangs with no live pod, or whose PodGroup is gone or re-created."""
        live = self.handle.pod_groups().live_gang_keys()
        for key in list(self.templates_incomplete):
            if key not in live or split_gang_key(key) is None:
                self.templates_incomplete.discard(key)
        for key in list(self.binds):
            if key not in live:
                del self.binds[key]
        for key, owner in self.store.owners().items():
            stale = key not in live
            if not stale and owner:
                parts = split_gang_key(key)
                pg = self.handle.pod_groups().get(*parts) if parts else None
                stale = pg is None or pg.metadata.uid != owner
            if stale and self._release(key, owner, 0, None, mark_failed=False):
                self.failed.pop((key, owner), None)

    def refresh_domain_gauges(self) -> None:
        """Per domain of every topology key in use: free whole nodes, and the largest gang of the
        last planned member shape that still fits (``ome_scheduler_domain_*``), so operators see
        fragmentation. A node is a free whole node when it is schedulable and nothing requests
        its extended resources (or, without any, no cpu or memory)."""
        nodes = self.handle.node_infos()
        keys = set(self.shapes) | ({self.args.topology_key} if self.args.topology_key else set())
        self.metrics.domain_free_nodes.clear()
        self.metrics.domain_max_gang_size.clear()
        for tk in sorted(keys):
            by = group_by_domain(nodes, lambda n, k=tk: n.labels.get(k, ""))  # type: ignore[misc]
            shape = self.shapes.get(tk)
            planner = (
                GangPlanner(
                    [shape], 1, member_capacity, one_per_node=one_per_node([shape]), signature=template_signature
                )
                if shape is not None
                else None
            )
            for d, ns_ in by.items():
                free = 0
                for n in ns_:
                    if n.unschedulable:
                        continue
                    ext = [k for k in n.allocatable.scalar if "/" in k]
                    used = n.requested
                    if ext:
                        if all(used.scalar.get(k, 0) == 0 for k in ext):
                            free += 1
                    elif used.milli_cpu == 0 and used.memory == 0:
                        free += 1
                self.metrics.domain_free_nodes.labels(tk, d).set(free)
                if planner is not None:
                    self.metrics.domain_max_gang_size.labels(tk, d).set(planner.plan_domain(d, ns_).room)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.ADD), self._hint_pod_add),
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.UPDATE_POD_LABEL), self._hint_pod_label),
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.UPDATE_POD_TOLERATION), self._hint_pod_toleration),
            ClusterEventWithHint(
                ClusterEvent("Pod", ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN), self._hint_pod_delete
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    "Node",
                    ActionType.ADD
                    | ActionType.UPDATE_NODE_ALLOCATABLE
                    | ActionType.UPDATE_NODE_TAINT
                    | ActionType.UPDATE_NODE_CONDITION
                    | ActionType.UPDATE_NODE_LABEL,
                ),
                self._hint_node,
            ),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.DELETE), self._hint_node_delete),
            ClusterEventWithHint(
                ClusterEvent(POD_GROUP, ActionType.ADD | ActionType.UPDATE | ActionType.DELETE), self._hint_pod_group
            ),
        ]

    @staticmethod
    def _gang_of(p: Pod) -> str:
        return p.metadata.labels.get(POD_GROUP_LABEL, "")

    def _same_gang(self, target: Pod, other: Any) -> bool:
        g = self._gang_of(target)
        return (
            bool(g)
            and isinstance(other, Pod)
            and other.metadata.namespace == target.metadata.namespace
            and (self._gang_of(other) == g)
        )

    def _hint_pod_add(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE if self._same_gang(pod, new) else QueueingHint.QUEUE_SKIP

    def _hint_pod_label(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and same_pod(new, pod):
            return QueueingHint.QUEUE
        if self._gang_of(pod) and (self._same_gang(pod, old) or self._same_gang(pod, new)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def _hint_pod_toleration(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and (same_pod(new, pod) or self._same_gang(pod, new)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def _hint_pod_delete(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and same_pod(new, pod):
            return QueueingHint.QUEUE
        if self._same_gang(pod, old) or self._same_gang(pod, new):
            return QueueingHint.QUEUE
        if isinstance(old, Pod) and not old.spec.node_name and not old.status.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def _hint_topology_key(self, pod: Pod) -> str:
        g = self._gang_of(pod)
        if g:
            pg = self.handle.pod_groups().get(pod.metadata.namespace, g)
            ann = self.args.pod_group_topology_key_annotation
            if pg is not None and (pg.spec.min_member or 0) > 0 and ann and pg.metadata.annotations.get(ann):
                return pg.metadata.annotations[ann]
        return self.args.topology_key

    def _hint_node(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        tk = self._hint_topology_key(pod)
        if not tk:
            return QueueingHint.QUEUE
        if isinstance(old, Node):
            has = bool(old.metadata.labels.get(tk)) or (isinstance(new, Node) and bool(new.metadata.labels.get(tk)))
        else:
            has = isinstance(new, Node) and bool(new.metadata.labels.get(tk))
        return QueueingHint.QUEUE if has else QueueingHint.QUEUE_SKIP

    def _hint_node_delete(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        tk = self._hint_topology_key(pod)
        if not tk or (isinstance(old, Node) and old.metadata.labels.get(tk)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def _hint_pod_group(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        g = self._gang_of(pod)
        if not g:
            return QueueingHint.QUEUE_SKIP
        obj = new if new is not None else old
        if isinstance(obj, PodGroup) and obj.metadata.namespace == pod.metadata.namespace and obj.metadata.name == g:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
