"""The result of ``ome-scheduler simulate``: records, JSON and the text report.

:class:`SimulationResult` is what :class:`ome_scheduler.tools.simulation.Simulation` returns;
:meth:`SimulationResult.to_json` is ``--output json`` (camelCase keys) and
:func:`render_text` the default report. :mod:`ome_scheduler.tools.domainmap` draws the same result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# ---- records ---------------------------------------------------------------------------------


@dataclass
class PodResult:
    """One pod this simulation tried to schedule.

    ``status``: ``bound`` (would bind to ``node``), ``waiting`` (holds ``node`` at Permit for
    the rest of its gang), ``pending`` (no node; ``message`` is its last FailedScheduling
    note) or ``gated`` (scheduling gates; never attempted). ``last_failure`` is the last
    FailedScheduling note whatever the status (``""``: none); ``attempts`` counts scheduling
    cycles.
    """

    namespace: str
    name: str
    gang: str
    status: str
    node: str = ""
    domain: str = ""
    message: str = ""
    attempts: int = 0
    last_failure: str = ""


@dataclass
class GangResult:
    """One gang with members to schedule: ``status`` ``bound`` (all members bound, at least
    ``minMember``), ``waiting`` (some hold nodes at Permit), or ``pending``; ``reason`` is the
    most recent FailedScheduling note of its members (or the Permit wait); ``events`` are the
    ``Reason: note`` of the events OMEGangPack recorded on the PodGroup (Pinned, Adopted, Bound,
    TimedOut, HoldReleased...), in order."""

    gang: str
    min_member: int | None
    topology_key: str
    status: str
    members: int
    bound: int
    already_bound: int
    waiting: int
    domains: list[str]
    reason: str = ""
    events: list[str] = field(default_factory=list)


@dataclass
class DomainRow:
    """One domain under one topology key, before and after (counts; ``room`` in members shaped
    like the gang named in :attr:`DomainTable.shape_of`, None when no gang uses the key)."""

    domain: str
    nodes: int
    free_nodes_before: int
    free_nodes_after: int
    free_before: int
    free_after: int
    capacity: int
    room_before: int | None
    room_after: int | None


@dataclass
class DomainTable:
    """Every domain of one topology key; ``resource`` is what ``free_*`` and ``capacity``
    count (an extended resource such as ``nvidia.com/gpu``, else ``cpu`` in cores)."""

    topology_key: str
    resource: str
    shape_of: str
    rows: list[DomainRow]


@dataclass
class NodeCell:
    """One node for the domain map: free and total ``resource``, and the gang members on it."""

    name: str
    capacity: int
    free_before: int
    free_after: int
    gangs_before: list[str]
    gangs_after: list[str]


@dataclass
class Eviction:
    """One pod a preemption deleted (DefaultPreemption's or OMEGangPack's): ``pod`` is
    ``namespace/name``, ``deleted_at`` and ``gone_at`` simulated seconds from the start (it
    terminates on ``node`` in between, for its grace period)."""

    pod: str
    node: str
    deleted_at: float
    gone_at: float


@dataclass
class SimulationResult:
    """Everything a simulation answers; :meth:`to_json` is ``--output json``."""

    snapshot: dict[str, Any]
    simulated_seconds: float
    wall_seconds: float
    settled: bool
    pods: list[PodResult]
    gangs: list[GangResult]
    domains: list[DomainTable]
    node_map: dict[str, dict[str, list[NodeCell]]] = field(default_factory=dict)
    """Topology key -> domain -> its nodes (for the PNG; left out of JSON)."""
    warnings: list[str] = field(default_factory=list)
    preempted: list[Eviction] = field(default_factory=list)
    """Every victim of a preemption, in order (empty unless the configuration enables it)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (camelCase keys, like the API)."""
        d = asdict(self)
        d.pop("node_map", None)
        out: dict[str, Any] = _camel(d)
        return out


def _camel(v: Any) -> Any:
    if isinstance(v, dict):
        return {_camel_key(k): _camel(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_camel(x) for x in v]
    return v


def _camel_key(k: str) -> str:
    head, *rest = k.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# ---- output ------------------------------------------------------------------------------------

TEXT_ROWS = 40
"""Rows per table in the text output; ``--output json`` has them all."""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def _nodes(names: list[str], most: int = 8) -> str:
    return ",".join(names) if len(names) <= most else ",".join(names[:most]) + f",... ({len(names)})"


def _arrow(a: int | None, b: int | None) -> str:
    if a is None or b is None:
        return "-"
    return str(a) if a == b else f"{a} -> {b}"


def render_text(r: SimulationResult) -> str:
    """The human-readable report: gangs, pods, then each topology key's domains (changed ones
    first when there are more than :data:`TEXT_ROWS`)."""
    s = r.snapshot
    out = [
        f"Simulated {s['added']} added object(s) on a snapshot of {s['nodes']} nodes, {s['pods']} pods and "
        f"{s['podGroups']} PodGroups (taken {s['takenAt'] or 'at an unknown time'}): "
        + (
            f"settled after {r.simulated_seconds:g} simulated seconds"
            if r.settled
            else f"NOT settled after {r.simulated_seconds:g} simulated seconds (raise --max-seconds)"
        )
        + f", {r.wall_seconds:g} s wall."
    ]
    out += [f"warning: {w}" for w in r.warnings]
    if r.gangs:
        counts = {st: sum(1 for g in r.gangs if g.status == st) for st in ("bound", "waiting", "pending")}
        out += ["", "Gangs: " + ", ".join(f"{n} {st}" for st, n in counts.items() if n)]
        nodes: dict[str, list[str]] = {}
        for p in r.pods:
            if p.gang and p.node:
                nodes.setdefault(p.gang, []).append(p.node)
        rows = [
            [
                g.gang,
                "-" if g.min_member is None else str(g.min_member),
                f"{g.bound + g.already_bound}/{g.members + g.already_bound}",
                g.status,
                ",".join(g.domains) or "-",
                _nodes(sorted(nodes.get(g.gang, []))) if g.status != "pending" else g.reason,
            ]
            for g in sorted(r.gangs, key=lambda g: (g.status == "bound", g.gang))
        ]
        out += _table(["GANG", "MIN", "BOUND", "STATUS", "DOMAIN", "NODES / REASON"], rows[:TEXT_ROWS])
        if len(rows) > TEXT_ROWS:
            out.append(f"... {len(rows) - TEXT_ROWS} more gangs (--output json lists all)")
    # Gang members appear in their gang's row; here only standalone pods, and members whose
    # state or message differs from what their gang's row says.
    reasons = {g.gang: (g.status, g.reason) for g in r.gangs}
    listed = [
        p
        for p in r.pods
        if not p.gang or (p.status not in ("bound", "waiting") and reasons.get(p.gang) != ("pending", p.message))
    ]
    if r.pods:
        counts = {st: sum(1 for p in r.pods if p.status == st) for st in ("bound", "waiting", "pending", "gated")}
        note = ""
        if not listed:
            note = " (each in its gang's row)"
        elif len(listed) < len(r.pods):
            note = f" ({len(listed)} listed: standalone pods, and gang members unlike their gang's row)"
        out += ["", "Pods: " + ", ".join(f"{n} {st}" for st, n in counts.items() if n) + note]
    if listed:
        ordered = sorted(listed, key=lambda p: (p.status == "bound", p.gang, p.namespace, p.name))
        rows = [
            [
                f"{p.namespace}/{p.name}",
                p.status,
                p.node or "-",
                p.domain or "-",
                "" if p.status == "bound" else p.message,
            ]
            for p in ordered
        ]
        out += _table(["POD", "STATUS", "NODE", "DOMAIN", "MESSAGE"], rows[:TEXT_ROWS])
        if len(rows) > TEXT_ROWS:
            out.append(f"... {len(rows) - TEXT_ROWS} more pods (--output json lists all)")
    if r.preempted:
        out += ["", f"Preempted: {len(r.preempted)} pod(s)"]
        rows = [[e.pod, e.node or "-", f"{e.deleted_at:g}", f"{e.gone_at:g}"] for e in r.preempted]
        out += _table(["POD", "NODE", "DELETED AT (s)", "GONE AT (s)"], rows[:TEXT_ROWS])
        if len(rows) > TEXT_ROWS:
            out.append(f"... {len(rows) - TEXT_ROWS} more pods (--output json lists all)")
    for t in r.domains:
        shape = f"; room counted in members like {t.shape_of}'s" if t.shape_of else ""
        changed = [d for d in t.rows if (d.free_before, d.room_before) != (d.free_after, d.room_after)]
        out += ["", f"Domains under {t.topology_key}: {len(t.rows)} ({len(changed)} changed; {t.resource} free{shape})"]
        shown = changed + [d for d in t.rows if d not in changed]
        rows = [
            [
                d.domain,
                str(d.nodes),
                _arrow(d.free_nodes_before, d.free_nodes_after),
                f"{_arrow(d.free_before, d.free_after)} of {d.capacity}",
                _arrow(d.room_before, d.room_after),
            ]
            for d in shown
        ]
        out += _table(["DOMAIN", "NODES", "FREE NODES", f"{t.resource.upper()} FREE", "ROOM"], rows[:TEXT_ROWS])
        if len(rows) > TEXT_ROWS:
            rest = shown[TEXT_ROWS:]
            out.append(
                f"... {len(rest)} more domains: {sum(d.free_nodes_after for d in rest)} free nodes, "
                f"{sum(d.free_after for d in rest)} {t.resource} free"
            )
    return "\n".join(out) + "\n"
