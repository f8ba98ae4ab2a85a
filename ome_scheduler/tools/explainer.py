"""The analysis behind ``ome-scheduler explain``: a gang's members, every domain's room, and the decision.

:class:`Explainer` builds the scheduler's engine offline from a snapshot and a configuration
(as ``simulate`` does), derives the live scheduler's holds from what the API shows, and answers
in dry run; :class:`Explanation` is the answer (``-o json``), :func:`render_text` its text.
The command line and what it promises are in :mod:`ome_scheduler.tools.explain`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.scheduling import (
    ANN_PLACEMENT,
    ANN_PLACEMENT_DOMAIN,
    ANN_PLACEMENT_TOPOLOGY_KEY,
    ANN_WAITING_REASON,
    PLACEMENT_BOUND,
    PLACEMENT_HOLDING,
    PodGroup,
)
from ome_scheduler.api.snapshot import ClusterSnapshot
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.framework.gangsource import LWS_NAME_LABEL, gang_name, lws_size, lws_topology_key, source_of
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.topology import describe, domain_value, level_key, parse_described
from ome_scheduler.framework.types import POD_GROUP_LABEL, GangKey, NodeInfo, PodInfo, QueuedPodInfo, gang_key
from ome_scheduler.plugins.gangpack.deviceroom import DeviceRoom, has_claims, manager_of
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.gang import capped_timeout, is_live, topology_key_of
from ome_scheduler.plugins.gangpack.levels import (
    PREFERRED_KEYS_ANNOTATION,
    SUBGROUP_KEY_ANNOTATION,
    SUBGROUP_SIZE_ANNOTATION,
    parse_preferred_keys,
    parse_subgroups,
)
from ome_scheduler.plugins.gangpack.placement import CapacityFn, GangPlanner, group_by_domain
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from ome_scheduler.plugins.gangpack.volumes import AttachRoom
from ome_scheduler.tools.simulation import Simulation
from ome_scheduler.util.validation import is_qualified_name

DERIVED_HOLDS = (
    "Holds of forming gangs live in the scheduler's memory; they are derived here from what the API shows: "
    "members waiting at Permit (status.nominatedNodeName) and PodGroups' ome.io/placement annotation."
)


_DEVICE_NODES_SHOWN = 8
"""Nodes whose device count a device shortfall lists."""

_VICTIMS_SHOWN = 10
"""Preemption victims the text names before ``and N more`` (JSON lists all)."""

_PLAN_TURNS = 20
"""Event-loop turns the dry run gives a preemption's writes (in memory) to reach the victims."""


def camel_fields(record: Any) -> dict[str, Any]:
    """A dataclass record's fields as a JSON object with camelCase keys (``if_ungated`` ->
    ``ifUngated``), values as they are (shallow: nested records stay objects)."""
    out: dict[str, Any] = {}
    for f in fields(record):
        head, *rest = f.name.split("_")
        out[head + "".join(w.title() for w in rest)] = getattr(record, f.name)
    return out


@dataclass
class Member:
    """One member pod: ``state`` is bound, waiting (at Permit), pending, gated or not-ours."""

    name: str
    state: str
    node: str = ""
    domain: str = ""
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON."""
        return camel_fields(self)


@dataclass
class Domain:
    """One domain under the gang's topology key: nodes, room in members, whether the whole gang
    fits (room for all it needs, every member on a node it fits), gangs holding it, and why its
    nodes reject a member (reason -> node count)."""

    name: str
    nodes: int
    room: int
    fits: bool
    held_by: list[str] = field(default_factory=list)
    nodes_fitting: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    note: str = ""
    """Why the gang cannot join though the room suffices (a member is missing, or one fits no node here)."""
    device_room: int | None = None
    """Members like the shape the domain's free DRA devices take (None: the members claim no
    devices, or the devices are not counted, ``plugins/gangpack/deviceroom.py``)."""
    device_shortfall: str = ""
    """Why the devices take fewer members than the gang needs (empty: they do)."""
    attach_limit: str = ""
    """How CSI attach limits cut the room (design §3.1): ``"CSI attach limits cut room 8 -> 2
    (ebs.csi.aws.com: 2 free on a-0, 1 per member)"``; empty when they do not."""

    def why_not(self) -> str:
        """``note`` when set, else the device shortfall and the reasons as FitError words them:
        ``"2 Insufficient nvidia.com/gpu, 1 ..."``, sorted; then ``attach_limit`` when attach
        limits cut the room."""
        if self.note:
            return "; ".join(w for w in (self.note, self.attach_limit) if w)
        reasons = ", ".join(sorted(f"{v} {k}" for k, v in self.reasons.items()))
        return "; ".join(x for x in (self.device_shortfall, reasons, self.attach_limit) if x)

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON."""
        doc = {"domain": self.name, **camel_fields(self)}
        del doc["name"]
        doc["reasons"] = dict(sorted(self.reasons.items()))
        doc["whyNot"] = self.why_not()
        return doc


@dataclass
class Decision:
    """What the scheduler would do now. ``result``: ``pinned`` (a member would take ``node`` in
    ``domain``), ``unschedulable`` (``message`` is its FailedScheduling text), ``bound``,
    ``waiting`` (every unbound member waits at Permit), ``gated`` (nothing to try), ``not-ours``."""

    result: str
    domain: str = ""
    node: str = ""
    pod: str = ""
    message: str = ""
    if_ungated: bool = False

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON."""
        return camel_fields(self)


@dataclass
class Explanation:
    """Everything ``explain`` found about one gang (or one standalone pod)."""

    namespace: str
    name: str
    kind: str
    """``PodGroup``, or ``Pod`` for a pod that belongs to no gang."""
    min_member: int | None = None
    schedule_timeout_seconds: int | None = None
    topology_key: str = ""
    pod_group_exists: bool = True
    status: dict[str, Any] = field(default_factory=dict)
    members: list[Member] = field(default_factory=list)
    need: int = 0
    shape_of: str = ""
    domains: list[Domain] = field(default_factory=list)
    nodes_without_domain: int = 0
    """Nodes without a value (or with an empty one) for the topology key: in no domain."""
    decision: Decision = field(default_factory=lambda: Decision("unschedulable"))
    holds: list[str] = field(default_factory=list)
    """``gang holds key=domain (how it was derived)`` for every hold reconstructed."""
    notes: list[str] = field(default_factory=list)
    victims: list[str] = field(default_factory=list)
    """``ns/name on node`` of each pod the preemption of the attempt would evict (empty when
    preemption is off or would evict nothing)."""
    preempting: str = ""
    """The note of the ``Preempting`` event the gang would get (``""``: none)."""

    def to_json(self) -> dict[str, Any]:
        """The ``-o json`` document."""
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "podGroupExists": self.pod_group_exists,
            "minMember": self.min_member,
            "scheduleTimeoutSeconds": self.schedule_timeout_seconds,
            "topologyKey": self.topology_key,
            "status": self.status,
            "members": [m.to_json() for m in self.members],
            "need": self.need,
            "roomCountedLike": self.shape_of,
            "domains": [d.to_json() for d in self.domains],
            "nodesWithoutDomain": self.nodes_without_domain,
            "decision": self.decision.to_json(),
            "holds": self.holds,
            "notes": self.notes,
            "preemption": {"victims": self.victims, "preempting": self.preempting},
        }


# ---- the analysis --------------------------------------------------------------------------


class Explainer:
    """Builds the offline engine over ``snapshot`` and explains one gang or pod (dry run)."""

    def __init__(self, cfg: KubeSchedulerConfiguration, snapshot: ClusterSnapshot) -> None:
        self.sim = Simulation(cfg, snapshot, seed=0)
        self.sch = self.sim.scheduler
        self.snapshot = snapshot
        self.plugin: OMEGangPack | None = None
        for fw in self.sch.frameworks.values():
            pl = fw.plugins.get(OMEGangPack.name)
            if isinstance(pl, OMEGangPack):
                self.plugin = pl
                break

    def lws_groups(self, namespace: str, name: str) -> list[str]:
        """The gang names of LeaderWorkerSet ``namespace/name``'s groups (by group index), from
        its pods (``framework/gangsource.py``); empty when LWS gangs are off or it has none."""
        seen = {
            g
            for p in self.snapshot.pods
            if p.metadata.namespace == namespace
            and p.metadata.labels.get(LWS_NAME_LABEL) == name
            and source_of(g := gang_name(p.metadata)) == "LeaderWorkerSet"
            and g
        }
        return sorted(seen, key=lambda g: (len(g), g))

    def run(self, kind: str, namespace: str, name: str) -> Explanation | str:
        """Explain ``pod`` or ``podgroup`` ``namespace/name``; a string says why it cannot be."""
        with asyncio.Runner(loop_factory=lambda: self.sim.loop) as runner:
            return runner.run(with_preemption_plan(self._run(kind, namespace, name), self.sim))

    async def _run(self, kind: str, namespace: str, name: str) -> Explanation | str:
        self.sim.replay()
        assumed = self._assume_nominated()
        focus: str | None = None
        if kind == "pod":
            pod = next(
                (p for p in self.snapshot.pods if p.metadata.namespace == namespace and p.metadata.name == name), None
            )
            if pod is None:
                return f"pod {namespace}/{name} not found (or it has finished)"
            gang = gang_name(pod.metadata)
            if not gang:
                return self._standalone(pod)
            focus, name = name, gang
        if source_of(name) == "LeaderWorkerSet":
            return self._gang(namespace, name, None, focus, assumed)
        pg = self.sch.pod_group_state.get(namespace, name)
        members = self.sch.pod_group_state.members(gang_key(namespace, name))
        if pg is None and not members:
            return f"podgroup {namespace}/{name} not found, and no pod names it"
        return self._gang(namespace, name, pg, focus, assumed)

    # ---- what the API shows -----------------------------------------------------------------

    def _assume_nominated(self) -> set[str]:
        """Assume every unbound pod of ours with ``nominatedNodeName`` on that node, as the live
        scheduler has it assumed while it waits at Permit; returns their ``ns/name`` keys."""
        out = set()
        for pi in list(self.sch.pods.values()):
            node = pi.pod.status.nominated_node_name
            if pi.pod.spec.node_name or not node or pi.pod.spec.scheduler_name not in self.sch.frameworks:
                continue
            if self.sch.cache.get_node_info(node) is None:
                continue
            self.sch.queue.delete(pi.pod_key)
            self.sch.cache.assume_pod(pi.with_node(node), node)
            out.add(pi.key)
        return out

    def _hold_of(self, pg: PodGroup, members: list[PodInfo], assumed: set[str]) -> tuple[str, str, bool, str] | None:
        """The (topology key, domain, holding, how derived) a gang's live pin most likely is, or None."""
        ann = pg.metadata.annotations
        placement = ann.get(ANN_PLACEMENT, "")
        if placement and placement != PLACEMENT_BOUND:
            tk, d = ann.get(ANN_PLACEMENT_TOPOLOGY_KEY, ""), ann.get(ANN_PLACEMENT_DOMAIN, "")
            d = parse_described(tk, d) if tk else ""
            if tk and d:
                return tk, d, placement == PLACEMENT_HOLDING, f"ome.io/placement: {placement}"
        if self.plugin is None:
            return None
        tk = topology_key_of(pg, self.plugin.args)
        waiting = [p for p in members if p.key in assumed]
        domains = set()
        for p in waiting:
            ni = self.sch.cache.get_node_info(self.sch.cache.assumed_node(p.pod_key) or "")
            domains.add(domain_value(ni.labels, tk) if ni is not None else "")
        if tk and len(domains) == 1 and "" not in domains:
            return tk, domains.pop(), True, f"{len(waiting)} member(s) waiting at Permit"
        return None

    def _reconstruct_holds(self, assumed: set[str], only: GangKey | None, skip: GangKey | None) -> list[str]:
        """Pin every forming gang (or ``only`` that one, never ``skip``) where the API shows it."""
        if self.plugin is None:
            return []
        out = []
        state = self.sch.pod_group_state
        manager = self.plugin.gangs
        for key in sorted(state.gang_keys()):
            if (only is not None and key != only) or key == skip:
                continue
            ns, name = key.split("/", 1)
            pg = state.get(ns, name)
            if pg is None:
                continue
            mm = pg.spec.min_member or 0
            placed = sum(1 for _, n in state.placed_members(key) if n is not None)
            if mm <= 0 or placed >= mm:
                continue
            hold = self._hold_of(pg, state.members(key), assumed)
            if hold is None:
                continue
            tk, d, holding, how = hold
            nodes = [n.name for n in self.sch.cache.node_infos() if domain_value(n.labels, tk) == d]
            pin = manager.pins.choose(key, pg.metadata.uid, tk, d, nodes, mm - placed, holding=holding)
            pin.hold_until = time.monotonic() + 3600.0
            manager.forming_since[key] = time.monotonic()
            verb = "holds" if holding else "is pinned to (hold expired)"
            out.append(f"{key} {verb} {tk}={d} for {mm - placed} more member(s) ({how})")
        return out

    def _member(self, pi: PodInfo, tk: str, assumed: set[str]) -> Member:
        pod = pi.pod
        node = pod.spec.node_name or (pod.status.nominated_node_name if pi.key in assumed else "")
        ni = self.sch.cache.get_node_info(node) if node else None
        domain = ni.labels.get(tk, "") if ni is not None and tk else ""
        cond = next((c for c in pod.status.conditions if c.type == "PodScheduled"), None)
        if pod.spec.node_name:
            return Member(pi.name, "bound", node, domain)
        if pi.key in assumed:
            return Member(pi.name, "waiting", node, domain, "waiting at Permit for the rest of the gang")
        if pod.spec.scheduler_name not in self.sch.frameworks:
            return Member(pi.name, "not-ours", reason=f"schedulerName {pod.spec.scheduler_name!r} is not served")
        if pod.spec.scheduling_gates:
            return Member(
                pi.name, "gated", reason="scheduling gates: " + ", ".join(g.name for g in pod.spec.scheduling_gates)
            )
        reason = cond.message if cond is not None and cond.status == "False" else "not attempted yet"
        return Member(pi.name, "pending", reason=reason)

    # ---- a gang ---------------------------------------------------------------------------------

    def _gang(self, ns: str, name: str, pg: PodGroup | None, focus: str | None, assumed: set[str]) -> Explanation:
        key = gang_key(ns, name)
        state = self.sch.pod_group_state
        lws = source_of(name) == "LeaderWorkerSet"
        ex = Explanation(
            ns, name, "LeaderWorkerSet group" if lws else "PodGroup", pod_group_exists=pg is not None or lws
        )
        args = self.plugin.args if self.plugin is not None else None
        if lws:  # §2.1: the group's size, domain label and timeout come from its pods and the arguments
            first = next(iter(sorted(state.members(key), key=lambda p: p.name)), None)
            md = first.pod.metadata if first is not None else None
            ex.min_member = lws_size(md) if md is not None else None
            ex.topology_key = (lws_topology_key(md) if md is not None else "") or (args.topology_key if args else "")
            ex.schedule_timeout_seconds = capped_timeout(None, args) if args is not None else None
        if pg is not None:
            ex.min_member, ex.schedule_timeout_seconds = pg.spec.min_member, pg.spec.schedule_timeout_seconds
            ex.topology_key = topology_key_of(pg, args) if args is not None else ""
            st, ann = pg.status, pg.metadata.annotations
            ex.status = {
                "phase": st.phase,
                "running": st.running,
                "succeeded": st.succeeded,
                "failed": st.failed,
                "scheduleStartTime": st.schedule_start_time,
                "placement": ann.get(ANN_PLACEMENT, ""),
                "placementDomain": ann.get(ANN_PLACEMENT_DOMAIN, ""),
                "placementTopologyKey": ann.get(ANN_PLACEMENT_TOPOLOGY_KEY, ""),
                "waitingReason": ann.get(ANN_WAITING_REASON, ""),
            }
        tk = ex.topology_key
        members = sorted(state.members(key), key=lambda p: p.name)
        ex.members = [self._member(p, tk, assumed) for p in members]
        ex.holds = self._reconstruct_holds(assumed, None, key)
        if ex.holds or any(m.state == "waiting" for m in ex.members):
            ex.notes.append(DERIVED_HOLDS)
        mm = ex.min_member or 0
        placed = sum(1 for m in ex.members if m.state in ("bound", "waiting"))
        bound = sum(1 for m in ex.members if m.state == "bound")
        pending = [p for p, m in zip(members, ex.members, strict=True) if m.state == "pending"]
        gated = [p for p, m in zip(members, ex.members, strict=True) if m.state == "gated"]
        if focus is not None:
            pending.sort(key=lambda p: p.name != focus)
        stuck = self._unresolvable_members(pending)
        if stuck:
            # Rule 12: a member no node can take keeps the gang from holding anything; the
            # decision is a sibling's, which names it (the live scheduler's message).
            for m in ex.members:
                if m.name in stuck:
                    m.reason = stuck[m.name]
            for member, why in sorted(stuck.items()):
                ex.notes.append(
                    f"{member} can never be scheduled as the cluster stands ({why}): the gang holds no domain "
                    "until it can."
                )
            pending = [p for p in pending if p.name not in stuck] + [p for p in pending if p.name in stuck]
        if self.plugin is None:
            ex.notes.append("OMEGangPack is not enabled in this configuration: gangs are scheduled pod by pod")
        if gated and not pending:
            # Nothing is tried while gated: explain what happens once the gates are lifted.
            for p in gated:
                spec = msgspec.structs.replace(p.pod.spec, scheduling_gates=[])
                self.sch.handlers.on_pod_update(p.pod, msgspec.structs.replace(p.pod, spec=spec))
            pending = [state_pi for g in gated if (state_pi := self.sch.pods.get(g.key)) is not None]
            ex.notes.append(
                "every unplaced member is scheduling-gated: the decision above is for once they are ungated"
            )
        shape = pending[0] if pending else (members[0] if members else None)
        if shape is not None and tk and (pg is not None or lws) and 0 < mm and bound < mm:
            self._domains(ex, key, shape, mm, placed, assumed)
            if pg is not None and self.plugin is not None:
                preferred_level_notes(ex, pg, shape, mm - placed, self.sch.cache.node_infos())
                subgroup_notes(ex, pg, shape, mm, self.sch.cache.node_infos())
        # The gang's own live pin (if the API shows one) is followed, as the scheduler would.
        ex.holds += [h for h in self._reconstruct_holds(assumed, key, None) if h.startswith(f"{key} ")]
        if mm > 0 and bound >= mm:
            bound_in = sorted({m.domain for m in ex.members if m.state == "bound"})
            if len(bound_in) == 1 and bound_in[0]:
                ex.decision = Decision("bound", domain=bound_in[0])
            else:
                # Members bound outside one domain were not placed by a gang scheduler (a pod
                # created with spec.nodeName, say): say so rather than name no domain.
                named = ", ".join(f"{tk}={d}" if d else f"nodes without {tk or 'a topology key'}" for d in bound_in)
                ex.decision = Decision("bound", message=f"bound, but split: {named}")
        elif not pending:
            if gated:
                ex.decision = Decision("gated", message="members are scheduling-gated")
            elif any(m.state == "waiting" for m in ex.members):
                doms = {m.domain for m in ex.members if m.state == "waiting"}
                msg = f"{placed} of {mm} members wait at Permit for the rest of the gang"
                others = [m for m in ex.members if m.state == "not-ours"]
                if others:
                    msg += (
                        "; " + ", ".join(f"{m.name}: {m.reason}" for m in others) + " (this scheduler never places it)"
                    )
                elif len(ex.members) < mm:
                    msg += f"; only {len(ex.members)} of minMember {mm} members exist"
                ex.decision = Decision("waiting", domain=doms.pop() if len(doms) == 1 else "", message=msg)
            else:
                ex.decision = Decision("not-ours", message="no member is scheduled by this configuration's profiles")
        else:
            ex.decision = self._attempt(pending[0], tk)
            ex.decision.if_ungated = bool(gated) and not any(m.state == "pending" for m in ex.members)
        return ex

    def _domains(self, ex: Explanation, key: GangKey, shape: PodInfo, mm: int, placed: int, assumed: set[str]) -> None:
        """Room, holds and per-node reasons of every domain under the gang's topology key."""
        tk = ex.topology_key
        state = self.sch.pod_group_state
        unbound = PodInfo(
            msgspec.structs.replace(shape.pod, spec=msgspec.structs.replace(shape.pod.spec, node_name=""))
        )
        templates = [unbound] + [
            p
            for p in state.members(key)
            if p.key != shape.key and not p.pod.spec.node_name and p.key not in assumed and is_live(p.pod)
        ]
        need = max(1, mm - placed)
        ex.need, ex.shape_of = need, shape.name
        attach = AttachRoom(self.sch, templates)
        capacity: CapacityFn[PodInfo, NodeInfo] = attach.capacity if attach.active else member_capacity
        signature: Callable[[PodInfo], Hashable] = template_signature
        devices = DeviceRoom(lambda: manager_of(self.sch)) if has_claims(templates) else None
        if devices is not None:  # members with ResourceClaims: the room counts devices (as the plugin's)
            capacity, signature = devices.capacity(capacity, templates), devices.signature(signature)
        planner: GangPlanner[PodInfo, NodeInfo] = GangPlanner(
            templates, need, capacity, one_per_node=one_per_node(templates), signature=signature
        )
        # The room by resources alone, to tell how much CSI attach limits cut (§3.1).
        by_resources: GangPlanner[PodInfo, NodeInfo] | None = (
            GangPlanner(
                templates, need, member_capacity, one_per_node=one_per_node(templates), signature=template_signature
            )
            if attach.active
            else None
        )
        nodes = self.sch.cache.node_infos()
        by = group_by_domain(nodes, lambda n: n.labels.get(tk, ""))
        ex.nodes_without_domain = sum(1 for n in nodes if not n.labels.get(tk, ""))
        if by and ex.nodes_without_domain:
            ex.notes.append(
                f"{ex.nodes_without_domain} of {len(nodes)} node(s) have no {tk} label or an empty value: they belong "
                "to no domain and never take a member of this gang."
            )
        if not by:
            bad = is_qualified_name(tk)
            ex.notes.append(
                f"No node has the label {tk}, so the gang has no domain: "
                + (f"the key is not a valid label key ({'; '.join(bad)})" if bad else "label the nodes of each domain")
                + " or name another key (the PodGroup's annotation, or the plugin's topologyKey)."
            )
        reasons = self._node_reasons(unbound, nodes)
        # Members shaped unlike ``shape`` are filtered too, once per shape, to name one that fits
        # no node of a domain (room is counted in members like ``shape``).
        others: dict[Hashable, tuple[PodInfo, dict[str, list[str]]]] = {}
        for t in templates[1:]:
            sig = template_signature(t)
            if sig != template_signature(unbound) and sig not in others:
                others[sig] = (t, self._node_reasons(t, nodes))
        if others:
            ex.notes.append(
                f"Members differ in what they need: ROOM counts members like {shape.name}, each node sized by the "
                "largest member that fits it; WHY NOT names a member that fits no node of a domain."
            )
        pins = self.plugin.gangs.pins if self.plugin is not None else None
        for d, dnodes in sorted(by.items()):
            plan = planner.plan_domain(d, dnodes)
            room = plan.room
            held = []
            if pins is not None:
                names = {n.name for n in dnodes}
                for g, pin in sorted(pins.by_group.items()):
                    if g == key or not pin.holding or pin.remaining <= 0:
                        continue
                    if pin.domain.topology_key == tk and pin.domain.value == d:
                        held.append(f"{g} ({pin.remaining} more)")
                    elif pin.nodes & names:
                        # A hold under another topology key on some of these nodes holds this
                        # domain too (the scheduler's best fit skips it).
                        held.append(f"{g} under {pin.domain.topology_key}={pin.domain.value} ({pin.remaining} more)")
            dom = Domain(d, len(dnodes), room, plan.joinable and room >= need, held)
            if devices is not None and unbound.pod.spec.resource_claims:
                self._device_room(dom, devices, unbound, dnodes, need)
            if by_resources is not None:
                dom.attach_limit = _attach_cut(attach, unbound, dnodes, by_resources.plan_domain(d, dnodes).room, room)
            if not dom.fits and room >= need:
                dom.note = self._blocker(templates, need, others, dnodes)
            for n in dnodes:
                r = reasons.get(n.name)
                if r is None:
                    dom.nodes_fitting += 1
                else:
                    for why in r:
                        dom.reasons[why] = dom.reasons.get(why, 0) + 1
            ex.domains.append(dom)

    @staticmethod
    def _device_room(dom: Domain, devices: DeviceRoom, shape: PodInfo, dnodes: Sequence[NodeInfo], need: int) -> None:
        """The domain's device room for members like ``shape`` (each node's free devices, the
        copies of its claims allocated one after the other, up to the node's pod slots) and, when
        it is short of ``need``, the count per node (the first :data:`_DEVICE_NODES_SHOWN`); the
        DRA reason of a node that takes none is among the domain's Filter reasons."""
        counts = [(n.name, devices.count(shape, n, max(0, n.allocatable.allowed_pod_number))) for n in dnodes]
        if not all(c.counted for _, c in counts):
            return  # devices not counted on some node (network-attached, or not judged): no figure
        dom.device_room = sum(c.copies for _, c in counts)
        if dom.device_room >= need:
            return
        per_node = ", ".join(f"{name} {c.copies}" for name, c in counts[:_DEVICE_NODES_SHOWN])
        if len(counts) > _DEVICE_NODES_SHOWN:
            per_node += f", {len(counts) - _DEVICE_NODES_SHOWN} more"
        # The nodes that take no member show DynamicResources' Filter reason among the reasons.
        dom.device_shortfall = (
            f"device shortfall: free devices take {dom.device_room} of the {need} members ({per_node})"
        )

    @staticmethod
    def _blocker(
        templates: Sequence[PodInfo],
        need: int,
        others: Mapping[Hashable, tuple[PodInfo, dict[str, list[str]]]],
        dnodes: Sequence[NodeInfo],
    ) -> str:
        """Why a domain with room enough still cannot take the gang: fewer unplaced members exist
        than it needs, or a member unlike the first fits none of the domain's nodes (its reasons
        counted as FitError counts them)."""
        if len(templates) < need:
            return f"only {len(templates)} of the {need} unplaced members it needs exist"
        for member, reasons in others.values():
            if all(n.name in reasons for n in dnodes):
                counts: dict[str, int] = {}
                for n in dnodes:
                    for why in reasons[n.name]:
                        counts[why] = counts.get(why, 0) + 1
                return f"{member.name} fits no node here: " + ", ".join(sorted(f"{v} {k}" for k, v in counts.items()))
        return "no assignment of the members to its nodes fits them all"

    def _node_reasons(self, member: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, list[str]]:
        """Node -> why Filter rejects a member like ``member`` there (absent: it passes). The
        member is filtered as a standalone pod, so the gang's own pin does not narrow it and
        other gangs' holds show as ``node is reserved for a forming gang``."""
        fw = self.sch.frameworks.get(member.pod.spec.scheduler_name) or next(iter(self.sch.frameworks.values()))
        labels = {k: v for k, v in member.pod.metadata.labels.items() if k != POD_GROUP_LABEL}
        solo = PodInfo(
            msgspec.structs.replace(member.pod, metadata=msgspec.structs.replace(member.pod.metadata, labels=labels))
        )
        solo.gang, solo.gang_key = "", GangKey("")  # an LWS group's pod keeps its labels (its affinities use them)
        state = CycleState()
        allowed, st, _ = fw.run_pre_filter(state, solo, nodes)
        out: dict[str, list[str]] = {}
        for n in nodes:
            if st is not None and not st.is_success():
                out[n.name] = list(st.reasons) or [st.message()]
                continue
            if allowed is not None and n.name not in allowed:
                out[n.name] = ["node(s) didn't satisfy the pod's PreFilter"]
                continue
            s = fw.run_filter(state, solo, n)
            if s is not None:
                out[n.name] = list(s.reasons) or [s.message()]
        return out

    def _unresolvable_members(self, members: Sequence[PodInfo]) -> dict[str, str]:
        """Member name -> why another plugin's PreFilter says no node can take it as the cluster
        stands (UnschedulableAndUnresolvable), recorded in the offline OMEGangPack as the live one
        records it after that member's attempt (rule 12)."""
        out: dict[str, str] = {}
        for pi in members:
            found = self.sch.unresolvable_at_prefilter(pi, skip=OMEGangPack.name)
            if found is not None:
                out[pi.name] = found[1]
                if self.plugin is not None:
                    self.plugin.gangs.member_unresolvable(pi, found[1])
        return out

    def _attempt(self, pi: PodInfo, tk: str) -> Decision:
        """One real scheduling cycle for ``pi`` in the offline engine: where it would go, or the
        FailedScheduling message it would get."""
        fw = self.sch.frameworks[pi.pod.spec.scheduler_name]
        live = self.sch.pods.get(pi.key, pi)
        placed = self.sch.cycles.scheduling_cycle(fw, CycleState(), QueuedPodInfo(live), time.perf_counter())
        if placed is None:
            notes = self.sim.recorder.notes.get(pi.key)
            return Decision("unschedulable", pod=pi.name, message=notes.last_failure if notes is not None else "")
        _, host = placed
        ni = self.sch.cache.get_node_info(host)
        domain = ni.labels.get(tk, "") if ni is not None and tk else ""
        return Decision("pinned" if pi.gang else "schedulable", domain=domain, node=host, pod=pi.name)

    def _standalone(self, pod: Pod) -> Explanation:
        ex = Explanation(pod.metadata.namespace, pod.metadata.name, "Pod")
        pi = self.sch.pods.get(f"{pod.metadata.namespace}/{pod.metadata.name}")
        if pi is None:
            ex.decision = Decision("not-ours", message="the pod has finished")
            return ex
        m = self._member(pi, "", set())
        ex.members = [m]
        if m.state == "bound":
            ex.decision = Decision("bound", node=m.node, pod=m.name)
        elif m.state in ("pending", "gated") and pod.spec.scheduler_name in self.sch.frameworks:
            ex.decision = self._attempt(pi, "")
        else:
            ex.decision = Decision(m.state, message=m.reason)
        return ex


# ---- rendering -----------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render_text(ex: Explanation) -> str:
    """The human-readable report."""
    lines: list[str] = []
    if ex.kind == "Pod":
        lines.append(f"Pod {ex.namespace}/{ex.name} (no PodGroup)")
    elif ex.kind == "LeaderWorkerSet group":
        lines.append(
            f"LeaderWorkerSet group {ex.namespace}/{ex.name}: size {ex.min_member}, "
            f"timeout {ex.schedule_timeout_seconds}s, topology key {ex.topology_key or '(none)'}"
        )
    elif not ex.pod_group_exists:
        lines.append(f"PodGroup {ex.namespace}/{ex.name} does not exist; {len(ex.members)} pod(s) name it")
    else:
        sts = ""
        if ex.schedule_timeout_seconds is not None:
            sts = f", scheduleTimeoutSeconds {ex.schedule_timeout_seconds}"
            if ex.schedule_timeout_seconds <= 0:
                sts += " (not positive: the plugin's defaultPermitTimeoutSeconds applies)"
        lines.append(
            f"PodGroup {ex.namespace}/{ex.name}: minMember {ex.min_member}{sts}, "
            f"topology key {ex.topology_key or '(none)'}"
        )
        st = ex.status
        where = ""
        if st.get("placement"):
            where = f", {st['placement']} {st['placementTopologyKey']}={st['placementDomain']}"
        lines.append(
            f"Status: phase {st.get('phase') or '(none)'}, running {st.get('running', 0)}, "
            f"succeeded {st.get('succeeded', 0)}, failed {st.get('failed', 0)}{where}"
        )
        if st.get("waitingReason"):
            lines.append(f"Waiting reason: {st['waitingReason']}")
    lines.append("")
    if ex.kind in ("PodGroup", "LeaderWorkerSet group"):
        counts: dict[str, int] = {}
        for m in ex.members:
            counts[m.state] = counts.get(m.state, 0) + 1
        states = ", ".join(f"{v} {k}" for k, v in counts.items())
        of = f" of minMember {ex.min_member}" if ex.min_member is not None else ""
        lines.append(f"Members: {len(ex.members)}{of} exist" + (f" ({states})" if states else ""))
    if ex.members:
        rows = [["MEMBER", "STATE", "NODE", "DOMAIN", "REASON"]]
        rows += [[m.name, m.state, m.node or "-", m.domain or "-", m.reason] for m in ex.members]
        lines += _table(rows)
        lines.append("")
    if ex.domains:
        lines.append(f"Domains under {ex.topology_key} (room in members like {ex.shape_of}; the gang needs {ex.need}):")
        dev = any(d.device_room is not None for d in ex.domains)
        rows = [["DOMAIN", "NODES", "ROOM", *(["DEVICE ROOM"] if dev else []), "HELD BY", "WHY NOT"]]
        for d in ex.domains:
            why = "" if d.fits and not d.held_by else d.why_not()
            if not d.fits and not (d.note or d.reasons or d.device_shortfall):
                why = "; ".join(w for w in (f"{d.nodes_fitting} node(s) fit, room {d.room} < {ex.need}", why) if w)
            device = ["-" if d.device_room is None else str(d.device_room)] if dev else []
            rows.append([d.name, str(d.nodes), str(d.room), *device, ", ".join(d.held_by) or "-", why])
        lines += _table(rows)
        lines.append("")
    dec = ex.decision
    if dec.result == "pinned":
        cond = " once ungated" if dec.if_ungated else ""
        lines.append(f"Now{cond}: would pin {ex.topology_key}={dec.domain} and place {dec.pod} on {dec.node}.")
    elif dec.result == "schedulable":
        lines.append(f"Now: would place {dec.pod} on {dec.node}.")
    elif dec.result == "unschedulable":
        cond = " once ungated" if dec.if_ungated else ""
        lines.append(f"Now{cond}: {dec.pod} would not be scheduled: {dec.message}")
    elif dec.result == "bound":
        lines.append(
            f"Bound in {ex.topology_key}={dec.domain}."
            if dec.domain
            else f"Bound, {dec.message.removeprefix('bound, ')}."
        )
    else:
        where = f" in {ex.topology_key}={dec.domain}" if dec.domain else ""
        lines.append(f"Now: {dec.result}{where}: {dec.message}")
    if ex.victims:
        lines.append(
            f"Preemption would evict {len(ex.victims)} pod(s) for it (dry run: nothing is evicted): "
            + ", ".join(ex.victims[:_VICTIMS_SHOWN])
            + (f" and {len(ex.victims) - _VICTIMS_SHOWN} more" if len(ex.victims) > _VICTIMS_SHOWN else "")
            + "."
        )
    if ex.preempting:
        lines.append(f"Preempting event: {ex.preempting}")
    if ex.holds:
        lines.append("")
        lines.append("Holds:")
        lines += [f"  {h}" for h in ex.holds]
    for n in ex.notes:
        lines.append("")
        lines.append(n)
    return "\n".join(lines) + "\n"


async def with_preemption_plan(run: Awaitable[Explanation | str], sim: Simulation) -> Explanation | str:
    """``run``'s explanation with the preemption its dry-run attempt started, when the
    configuration enables preemption (DefaultPreemption, OMEGangPack's ``preemption: true``).

    The attempt ran the real PostFilter: its victims' writes go, as tasks, to the simulation's
    in-memory API port (:class:`~ome_scheduler.tools.standins.MemoryWriter`), which records
    each delete; a few loop turns let them get there. No simulated time passes, so no victim
    leaves and nothing is re-tried. The ``Preempting`` note is the gang's event of the attempt.
    """
    ex = await run
    if not isinstance(ex, Explanation) or ex.decision.result != "unschedulable":
        return ex
    for _ in range(_PLAN_TURNS):
        await asyncio.sleep(0)
    ex.victims = [f"{e.pod} on {e.node}" for e in sim.writer.evictions]
    if ex.kind != "Pod":
        events = sim.recorder.gang_events.get(f"{ex.namespace}/{ex.name}", [])
        notes = [e.removeprefix("Preempting: ") for e in events if e.startswith("Preempting: ")]
        ex.preempting = notes[-1] if notes else ""
    return ex


def explain(
    cfg: KubeSchedulerConfiguration, snapshot: ClusterSnapshot, kind: str, namespace: str, name: str
) -> Explanation | str:
    """Explain ``kind`` (``pod`` or ``podgroup``) ``namespace/name`` in ``snapshot`` under ``cfg``;
    a string says why it cannot be explained (not found)."""
    return Explainer(cfg, snapshot).run("pod" if kind == "pod" else "podgroup", namespace, name)


def explain_lws(
    cfg: KubeSchedulerConfiguration, snapshot: ClusterSnapshot, namespace: str, name: str
) -> list[Explanation] | str:
    """``explain lws``: one :class:`Explanation` per group of LeaderWorkerSet ``namespace/name``
    (its gang, design §2.1); a string when it has no pods, or its groups are no gangs."""
    ex = Explainer(cfg, snapshot)
    groups = ex.lws_groups(namespace, name)
    if not groups:
        return f"leaderworkerset {namespace}/{name}: no pod of it is a gang member (none exists, or lwsGangs is off)"
    out = []
    for g in groups:
        one = Explainer(cfg, snapshot).run("podgroup", namespace, g)
        if isinstance(one, Explanation):
            out.append(one)
    return out


def preferred_level_notes(ex: Explanation, pg: PodGroup, shape: PodInfo, need: int, nodes: Sequence[NodeInfo]) -> None:
    """§3.9: a note per preferred level of the gang: its best-fitting domain, or that none
    has room and the gang falls back to the next level (room counted like ``shape``)."""
    preferred = parse_preferred_keys(pg.metadata.annotations.get(PREFERRED_KEYS_ANNOTATION, ""), ex.topology_key)
    if isinstance(preferred, str):
        ex.notes.append(f"{PREFERRED_KEYS_ANNOTATION} is invalid: {preferred}")
        return
    if not preferred:
        return
    # Room is summed node capacity: one template and need 1 count it (the gang's size may be
    # anything the API accepts, up to 2**31 - 1).
    planner: GangPlanner[PodInfo, NodeInfo] = GangPlanner([shape], 1, member_capacity)
    for p in preferred:
        level = level_key(ex.topology_key, p)
        by = group_by_domain(nodes, partial(_level_domain, level))
        rooms = {d: planner.plan_domain(d, ns).room for d, ns in by.items()}
        fitting = sorted((r, d) for d, r in rooms.items() if r >= need)
        if fitting:
            r, d = fitting[0]
            ex.notes.append(
                f"Preferred level {p}: {len(rooms)} domain(s); the tightest with room for the {need} member(s) "
                f"left is {describe(level, d)} (room {r}), before holds and failed domains."
            )
            return
        top = max(rooms.items(), key=lambda x: (x[1], x[0]), default=None)
        largest = f" (largest: {describe(level, top[0])} with room {top[1]})" if top is not None else ""
        ex.notes.append(
            f"Preferred level {p}: no domain has room for the {need} member(s) left{largest}: relaxed to the "
            "next level."
        )


def subgroup_notes(ex: Explanation, pg: PodGroup, shape: PodInfo, mm: int, nodes: Sequence[NodeInfo]) -> None:
    """§3.10: a note with how many whole sub-gangs each domain of the topology key takes (room
    counted like ``shape``, before holds), e.g. ``b1 takes 1 of 2``."""
    notes = pg.metadata.annotations
    sub = parse_subgroups(
        notes.get(SUBGROUP_SIZE_ANNOTATION, ""), notes.get(SUBGROUP_KEY_ANNOTATION, ""), ex.topology_key, mm
    )
    if isinstance(sub, str):
        ex.notes.append(f"The sub-gang annotations are invalid: {sub}")
        return
    size, key = sub
    if not size:
        return
    level = level_key(ex.topology_key, key)
    planner: GangPlanner[PodInfo, NodeInfo] = GangPlanner([shape], 1, member_capacity)
    by = group_by_domain(nodes, partial(_level_domain, level))
    whole: dict[str, int] = {}
    for d, ns in by.items():
        top = d.partition(",")[0]
        whole[top] = whole.get(top, 0) + planner.plan_domain(d, ns).room // size
    k = mm // size
    parts = ", ".join(f"{r} takes {min(w, k)} of {k}" for r, w in sorted(whole.items(), key=lambda x: (-x[1], x[0])))
    ex.notes.append(
        f"Sub-gangs of {size} members, each inside one {key} domain: {parts or 'no domain has both labels'} "
        "(whole sub-gangs by room now, before holds)."
    )


def _level_domain(level: str, n: NodeInfo) -> str:
    """The node's domain at a level (for :func:`group_by_domain`)."""
    return domain_value(n.labels, level)


def _attach_cut(attach: AttachRoom, member: PodInfo, nodes: Sequence[NodeInfo], before: int, after: int) -> str:
    """How CSI attach limits cut a domain's room from ``before`` (resources alone) to ``after``
    members, naming the tightest node for ``member`` (``""`` when they do not cut it)."""
    if after >= before:
        return ""
    caps = [(c, n.name) for n in nodes if (c := attach.limit(member, n)) is not None]
    if not caps:
        return f"CSI attach limits cut room {before} -> {after}"
    c, name = min(caps, key=lambda x: (x[0].members, x[1]))
    per = f", {c.per_member} per member" if c.per_member else ""
    return f"CSI attach limits cut room {before} -> {after} ({c.driver}: {max(c.free, 0)} free on {name}{per})"
