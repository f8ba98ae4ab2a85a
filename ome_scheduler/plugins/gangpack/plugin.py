"""OMEGangPack, the framework glue: each extension point asks the gang manager and translates.

Implements ``docs/design/gang-scheduling.md`` with its product rules (glossary in the package docstring):

* PreFilter resolves the gang from its PodGroup (§2.4) or its LeaderWorkerSet group (§2.1,
  ``gang.py``), then the planner pins it
  (§3.7, ``planner.py``): follow the pin, adopt the domain of members already placed (rule 7),
  or best-fit a fresh domain by room counted in members (rules 1, 2) and hold it while the
  gang forms; the member is narrowed to nodes that strand no sibling.
* Filter keeps members in their pinned domain and standalone pods off held nodes.
* PostFilter releases a pin whose every candidate failed and marks that domain failed.
* Reserve drains the reservation; Permit waits until the pin is drained (exactly
  ``scheduleTimeoutSeconds``, rule 4), then admits every waiting member of the attempt.
* Unreserve releases the attempt (rule 5); PodGroup changes wake the gang (``podgroup_change``).
* Standalone pods get the domain-packing score (§8).

Status messages, metric label values and V(4) log events are the documented ones (§10, §11).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework import gangsource
from ome_scheduler.framework.events import ClusterEventWithHint
from ome_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    ApiWriter,
    BackgroundTask,
    ClusterTruth,
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
from ome_scheduler.framework.topology import domain_value
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.fit import member_capacity
from ome_scheduler.plugins.gangpack.gang import Gang, resolve_gang
from ome_scheduler.plugins.gangpack.hints import GangHints
from ome_scheduler.plugins.gangpack.manager import GangManager
from ome_scheduler.plugins.gangpack.metrics import GangMetrics
from ome_scheduler.plugins.gangpack.preemptor import GangPreemptor
from ome_scheduler.plugins.gangpack.state import NAME

PIN_KEY = "gangpack.pin"
"""CycleState key of the cycle's :class:`CyclePin` (design §2.8)."""
PACK_KEY = "gangpack.domainpack"
"""CycleState key of the standalone domain-packing state (§8)."""
RESERVED_NODE = "node is reserved for a forming gang"
DOMAIN_GAUGE_INTERVAL = 10.0
"""Seconds between refreshes of the ``ome_scheduler_domain_*`` gauges."""
HOLD_EXPIRY_INTERVAL = 1.0
"""Seconds between checks for holds that outlived their gang's timeout (rule 8)."""

log = get_logger()


@dataclass(frozen=True, slots=True)
class CyclePin:
    """``gangpack.pin``: what PreFilter decided for this cycle (the pin's domain and token)."""

    domain: str
    topology_key: str
    gang: Gang
    token: int


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
    """The plugin; its state lives in :attr:`gangs` (the :class:`GangManager`)."""

    name = NAME
    node_local_filter = True
    """Standalone pods' Filter reads only the node and the holds (``cache_token``); a gang
    member's Filter reads its cycle pin, and a pinned member never uses the equivalence cache
    because its PreFilter narrows the nodes."""

    def __init__(
        self,
        args: OMEGangPackArgs,
        handle: Handle,
        metrics: Metrics,
        scheduler_name: str = "ome-scheduler",
        api_writer: ApiWriter | None = None,
    ) -> None:
        self.args = args
        self.handle = handle
        # §2.1: which pods are members at all
        gangsource.configure(lws_gangs=args.lws_gangs, fallback_topology_key=bool(args.topology_key))
        self.gangs = GangManager(args, handle, GangMetrics(metrics), scheduler_name)
        self.preemptor = GangPreemptor(self.gangs, api_writer, metrics) if args.preemption else None
        """Gang preemption (rule 13, §16), only with ``preemption: true``."""
        self.hints = GangHints(args, handle.pod_groups(), self.gangs.pins)
        handle.pod_groups().subscribe(self.gangs.on_pod_group_change)
        handle.pod_groups().subscribe_unresolvable(self._member_unresolvable)
        handle.pod_groups().subscribe_member_left(self.gangs.on_member_left)
        handle.subscribe_node_changes(self.gangs.on_node_change)

    @classmethod
    def new(cls, args: OMEGangPackArgs, handle: Handle, options: FrameworkOptions) -> OMEGangPack:
        """Build the plugin (``args`` validated by ``decode_plugin_args``), with the API port gang
        preemption writes through."""
        return cls(args, handle, options.metrics, options.scheduler_name, options.api_writer)

    def _member_unresolvable(self, member: PodInfo, plugin: str, message: str) -> None:
        """Rule 12: another plugin's PreFilter found the member UnschedulableAndUnresolvable: its
        gang holds nothing until it can be placed, and its siblings are told why."""
        if plugin != NAME and member.gang:
            self.gangs.member_unresolvable(member, message)

    def check_state(self, truth: ClusterTruth) -> list[tuple[str, str, str]]:
        """Pins that disagree with the API server (see :meth:`GangManager.check_state`)."""
        return self.gangs.check_state(truth)

    def background_tasks(self) -> Sequence[BackgroundTask]:
        """The gang GC every ``gcIntervalSeconds`` (§7), the domain gauges every 10 s, the
        hold expiry every second (rule 8), and the repair sweep at the start of leading and
        every ``gcIntervalSeconds`` (rule 11)."""
        return (
            BackgroundTask("gangpack.gc", float(self.args.gc_interval_seconds), self.gangs.gc),
            BackgroundTask(
                "gangpack.domain_gauges", DOMAIN_GAUGE_INTERVAL, self.gangs.refresh_domain_gauges, run_at_start=True
            ),
            BackgroundTask("gangpack.hold_expiry", HOLD_EXPIRY_INTERVAL, self.gangs.expire_holds),
            BackgroundTask(
                "gangpack.repair", float(self.args.gc_interval_seconds), self.gangs.repair_all, run_at_start=True
            ),
        )

    def informer_sync_waits(self) -> Mapping[str, float]:
        """Wait up to ``podGroupSyncTimeoutSeconds`` for PodGroups before the first cycle."""
        t = self.args.pod_group_sync_timeout_seconds
        return {"podgroups": float(t)} if t else {}

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """§6.2, see ``hints.py``."""
        return self.hints.events()

    # ---- PreFilter ------------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Standalone pods: Success. Members: resolve the gang, pin it, narrow the nodes."""
        if not pod.gang:
            return None, None
        gang = resolve_gang(pod, self.handle.pod_groups(), self.args, self.handle.leader_worker_set)
        if isinstance(gang, Status):
            lws = gangsource.source_of(pod.gang) == "LeaderWorkerSet"
            if not lws and self.handle.pod_groups().get(pod.namespace, pod.gang) is None:
                self.gangs.forget_missing_gang(pod.gang_key)
            return None, gang
        pinned = self.gangs.planner.pin_gang(pod, gang, nodes)
        if isinstance(pinned, Status):
            return None, pinned
        pin, candidates = pinned
        state.write(PIN_KEY, CyclePin(pin.domain.value, pin.domain.topology_key, gang, pin.token))
        return candidates, None

    # ---- Filter / PostFilter --------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """Members: only nodes of the pinned domain. Standalone pods: no held node."""
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is not None:
            nd = domain_value(node.labels, pin.topology_key)
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
        pins = self.gangs.pins
        if (pins.reserved_nodes or pins.by_group) and pins.blocks_node(node.name, node.labels):
            return Status.unresolvable(RESERVED_NODE)
        return None

    def cache_token(self, state: CycleState, pod: PodInfo) -> Hashable:
        """The holds' version: a standalone pod's Filter answers change only with it."""
        return self.gangs.pins.version

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        """Every candidate failed: release the member's pin (domain marked failed); park a
        standalone pod that a hold kept out until a hold ends."""
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            if not pod.gang and any(RESERVED_NODE in st.reasons for st in statuses.statuses.values()):
                self.gangs.park_by_hold(pod)
            if self.preemptor is not None and pod.gang:
                # Rule 13: the member's PreFilter found no domain with room; free one if that can
                # help. Only then (§16.1): not for a gang that waits for members or siblings, nor
                # for one whose members failed in every fitting domain (rule 10).
                gang = resolve_gang(pod, self.handle.pod_groups(), self.args, self.handle.leader_worker_set)
                if (
                    not isinstance(gang, Status)
                    and statuses.absent.message() == f"no domain has room for gang {gang.key}"
                    and self.gangs.pins.get(gang.key) is None
                ):
                    st = self.preemptor.post_filter(state, pod, gang)
                    if st is not None:
                        return st
            return Status.unschedulable()
        why = f"member {pod.key} fit no node of the domain"
        stored = self.gangs.pins.get(pin.gang.key)
        untried = stored is not None and stored.token == pin.token and stored.alternative
        if self.gangs.release(pin.gang.key, pin.gang.uid, pin.token, pod=pod, mark_failed=True, why=why):
            if untried:
                # Rule 10: another fitting domain is untried: this member tries it within its
                # backoff rather than waiting for an unrelated cluster event.
                self.handle.retry_after_backoff(pod.pod)
            return Status.unschedulable("gang reservation released after all candidate nodes were filtered")
        return Status.unschedulable()

    # ---- standalone packing (§8) ----------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Standalone pods with ``topologyKey`` set: count the nodes per domain this pod fits."""
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
        """Fuller domains score higher (max free minus this domain's free nodes)."""
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
        """Scale to ``0..MAX_NODE_SCORE`` by the highest raw score."""
        mx = max(scores, default=0)
        if mx == 0:
            return
        for i, s in enumerate(scores):
            scores[i] = s * MAX_NODE_SCORE // mx

    # ---- Reserve / Permit / PostBind ------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """Drain one slot of the pin's reservation."""
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is not None:
            self.gangs.reserve(pin.gang, pin.token, pod)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Release this attempt's pin (a no-op when a newer pin replaced it)."""
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is not None:
            self.gangs.unreserve(pod, pin.gang, pin.token)

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status | None, float]:
        """All or nothing (§4.1): Wait up to the gang's timeout until the pin is drained."""
        pin: CyclePin | None = state.get(PIN_KEY)
        if pin is None:
            if pod.gang:
                return Status.unschedulable("labeled gang pod reached Permit without validated PreFilter state"), 0.0
            return None, 0.0
        if pin.gang.timeout <= 0:
            return Status.unresolvable("gang permit timeout is not configured"), 0.0
        verdict = self.gangs.permit(pod, pin.gang, pin.token)
        return verdict, float(pin.gang.timeout) if verdict is not None and verdict.is_wait() else 0.0

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Forget the member's attempt; observe the bind skew when the gang is complete."""
        pin: CyclePin | None = state.get(PIN_KEY)
        self.gangs.post_bind(pod, pin.gang if pin is not None else None)
