"""Pure gang placement: domains, room counted in members, best fit, candidate narrowing.

No Kubernetes I/O and no plugin state: given nodes (with their domain) and a capacity
function ``capacity(template, node) -> members``, this module answers which domain a gang
should take and which nodes the current member may use there. It implements the product
rules of ``docs/design/gang-scheduling.md`` (they win over the reference's whole-node model):

* Rule 1, room in members: a node takes as many members as its free resources and pod
  slots fit, sized by the largest member that fits it (the smallest per-template count);
  one member per node when the members' required anti-affinity matches their siblings.
  A domain has room when its summed member capacity covers the members still to place and
  the current member plus ``need - 1`` siblings can be assigned to its nodes without
  exceeding any node's capacity (a flow/b-matching), so no member is stranded.
* Rule 2, best fit: the domain with the least room that still fits, ties to the smallest
  name; domains where this gang just failed are tried last (the caller passes them).

Units: room and capacities are member counts.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, TypeVar

N = TypeVar("N")
T = TypeVar("T")

CapacityFn = Callable[[T, N], int]
"""How many copies of a template fit a node now (0: it does not fit)."""


@dataclass(slots=True)
class DomainPlan(Generic[N]):
    """The planning result for one domain: room in members and whether the gang can join."""

    name: str
    nodes: list[N]
    room: int = 0
    joinable: bool = False
    node_caps: list[int] = field(default_factory=list)


def node_cap(counts: Mapping[Hashable, int]) -> int:
    """Rule 1: a node's capacity for a gang from its per-shape counts: the smallest non-zero
    count (sized by the largest member that fits it), 0 when no member fits."""
    return min((v for v in counts.values() if v > 0), default=0)


def best_fit(room: Mapping[str, int], gang_size: int) -> str | None:
    """Rule 2 (and design §3.6): the domain with the smallest room ``>= gang_size``; ties by name."""
    if gang_size <= 0:
        return None
    best: str | None = None
    best_room = 0
    for d in sorted(room):
        r = room[d]
        if r < gang_size:
            continue
        if best is None or r < best_room:
            best, best_room = d, r
    return best


def max_flow(
    supply: Sequence[int], fits: Sequence[Sequence[int]], caps: Sequence[int], limit: int, first: int = -1
) -> int:
    """Members assignable to nodes, stopping at ``limit`` (a transportation problem).

    ``supply[g]`` members of shape group ``g`` may go to any node class in ``fits[g]``; node
    class ``c`` takes ``caps[c]`` members in all. With ``first`` >= 0, one member of that group
    is placed before the rest (its slot may move later, but the group keeps at least one
    member placed: an augmenting path never lowers a source edge). Edmonds-Karp over
    groups x classes, pushing the bottleneck along each shortest path, iteratively: its cost
    grows with the number of shapes and node classes, never with the number of members, and no
    recursion depth is reachable by input.
    """
    if limit <= 0:
        return 0
    groups, classes = len(supply), len(caps)
    flow = [[0] * classes for _ in range(groups)]
    sent = [0] * groups  # per group, from the source
    load = [0] * classes  # per class, into the sink
    total = 0
    if first >= 0:
        c = next((c for c in fits[first] if caps[c] > 0), None)
        if c is None or supply[first] <= 0:
            return 0
        flow[first][c] = sent[first] = load[c] = total = 1
    while total < limit:
        # BFS over the residual graph: source -> group (supply left) -> class (always) ->
        # group (undo flow already on that edge) ... -> class with room left -> sink.
        group_from: list[int | None] = [None] * groups  # class we reached the group from (-1: source)
        class_from: list[int] = [-1] * classes  # group we reached the class from
        frontier = [g for g in range(groups) if sent[g] < supply[g]]
        for g in frontier:
            group_from[g] = -1
        end = -1
        while frontier and end < 0:
            nxt: list[int] = []
            for g in frontier:
                for c in fits[g]:
                    if class_from[c] >= 0 or caps[c] <= 0:
                        continue
                    class_from[c] = g
                    if load[c] < caps[c]:
                        end = c
                        break
                    for g2 in range(groups):
                        if flow[g2][c] > 0 and group_from[g2] is None:
                            group_from[g2] = c
                            nxt.append(g2)
                if end >= 0:
                    break
            frontier = nxt
        if end < 0:
            break
        # Walk back to the source for the bottleneck, then push it.
        push = min(caps[end] - load[end], limit - total)
        c = end
        while True:
            g = class_from[c]
            back = group_from[g]
            assert back is not None
            if back < 0:
                push = min(push, supply[g] - sent[g])
                break
            push = min(push, flow[g][back])
            c = back
        c = end
        load[c] += push
        while True:
            g = class_from[c]
            flow[g][c] += push
            back = group_from[g]
            assert back is not None
            if back < 0:
                sent[g] += push
                break
            flow[g][back] -= push
            c = back
        total += push
    return total


class GangPlanner(Generic[T, N]):
    """Plans one gang over a set of nodes.

    Members with equal signatures are interchangeable (one *shape group*), and so are nodes
    that fit the same groups with the same capacity (one *node class*): assignments are
    solved over groups x classes, so the cost does not grow with the number of members.

    Args:
        templates: the current member first, then the other unplaced live members.
        need: members still to place (``max(1, minMember - placed)``).
        capacity: members of one template a node takes now (0 if it does not fit).
        one_per_node: members keep apart (required anti-affinity among siblings).
        signature: a key that is equal for templates with identical node needs, so their
            capacities are computed once per node.
    """

    def __init__(
        self,
        templates: Sequence[T],
        need: int,
        capacity: CapacityFn[T, N],
        *,
        one_per_node: bool = False,
        signature: Callable[[T], Hashable] | None = None,
    ) -> None:
        self.templates = list(templates)
        self.need = need
        self._capacity = capacity
        self.one_per_node = one_per_node
        sig = signature or (lambda t: id(t))
        self._groups: dict[Hashable, list[int]] = {}
        self._sig_of: list[Hashable] = []
        for i, t in enumerate(self.templates):
            k = sig(t)
            self._sig_of.append(k)
            self._groups.setdefault(k, []).append(i)
        self.homogeneous = len(self._groups) == 1
        self._keys = list(self._groups)  # group order; the current member's group is first
        self._supply = [len(self._groups[k]) for k in self._keys]

    def _counts(self, node: N) -> dict[Hashable, int]:
        """Members of each template signature that ``node`` takes now (capped at 1 if apart)."""
        out: dict[Hashable, int] = {}
        for k, idx in self._groups.items():
            c = self._capacity(self.templates[idx[0]], node)
            if self.one_per_node and c > 1:
                c = 1
            out[k] = c
        return out

    def node_counts(self, node: N) -> dict[Hashable, int]:
        """Members of each shape group ``node`` takes now (capped at 1 when they keep apart), for
        a caller that keeps one count per node and changes a few nodes at a time (the gang
        preemption dry run, ``preemption.py``); :func:`node_cap` gives the node's capacity."""
        return self._counts(node)

    def joinable_with(self, counts: list[dict[Hashable, int]], caps: list[int]) -> bool:
        """Whether the gang can join a domain whose nodes take ``counts`` (one :meth:`node_counts`
        per node) with capacities ``caps`` (one :func:`node_cap` per node): as
        :meth:`plan_domain`'s ``joinable``."""
        return self._joinable(counts, caps)

    def plan_domain(self, name: str, nodes: Sequence[N]) -> DomainPlan[N]:
        """Room (rule 1) and joinability of one domain."""
        plan = DomainPlan(name=name, nodes=list(nodes))
        counts = [self._counts(n) for n in nodes]
        # Rule 1: a node's capacity is sized by the largest member that fits it, i.e. the
        # smallest non-zero per-template count; templates that do not fit at all are ignored
        # here and handled by the assignment check in _joinable.
        caps = []
        for c in counts:
            fitting = [v for v in c.values() if v > 0]
            caps.append(min(fitting) if fitting else 0)
        plan.node_caps = caps
        plan.room = sum(caps)
        plan.joinable = self._joinable(counts, caps)
        return plan

    def _classes(self, counts: list[dict[Hashable, int]], caps: list[int]) -> tuple[list[tuple[bool, ...]], list[int]]:
        """Node classes: (which groups fit, per class) and the summed capacity of each class;
        also records each node's class in ``self._class_of``."""
        index: dict[tuple[tuple[bool, ...], int], int] = {}
        pattern: list[tuple[bool, ...]] = []
        total: list[int] = []
        self._class_of: list[int] = []
        for c, cap in zip(counts, caps, strict=True):
            fit = tuple(c[k] > 0 for k in self._keys)
            key = (fit, cap)
            i = index.get(key)
            if i is None:
                i = index[key] = len(pattern)
                pattern.append(fit)
                total.append(0)
            total[i] += cap
            self._class_of.append(i)
        return pattern, total

    def _fits(self, pattern: list[tuple[bool, ...]]) -> list[list[int]]:
        return [[c for c, fit in enumerate(pattern) if fit[g]] for g in range(len(self._keys))]

    def _joinable(self, counts: list[dict[Hashable, int]], caps: list[int]) -> bool:
        """Whether the current member can take a node here and ``need - 1`` siblings still fit."""
        need = self.need
        if need > len(self.templates) or sum(caps) < need:
            return False
        k0 = self._sig_of[0]
        # Identical members fit the same nodes, so enough summed room (checked above) plus one
        # node for the current member is sufficient; no assignment search is needed.
        if self.homogeneous:
            return any(c[k0] > 0 for c in counts)
        pattern, total = self._classes(counts, caps)
        return max_flow(self._supply, self._fits(pattern), total, need, first=0) >= need

    def candidates(self, plan: DomainPlan[N]) -> list[N]:
        """Spec §3.5 under rule 1: nodes the current member may take without stranding a sibling."""
        counts = [self._counts(n) for n in plan.nodes]
        # Reuse plan_domain's capacities unless the plan was built elsewhere without them.
        caps = (
            plan.node_caps
            if len(plan.node_caps) == len(plan.nodes)
            else [min([v for v in c.values() if v > 0], default=0) for c in counts]
        )
        k0 = self._sig_of[0]
        if self.homogeneous:
            return [n for x, n in enumerate(plan.nodes) if counts[x][k0] > 0] if sum(caps) >= self.need else []
        pattern, total = self._classes(counts, caps)
        fits = self._fits(pattern)
        supply = list(self._supply)
        supply[0] -= 1  # the current member, placed on the class being tried
        ok: dict[int, bool] = {}
        out: list[N] = []
        for x, n in enumerate(plan.nodes):
            if counts[x][k0] <= 0:
                continue
            c = self._class_of[x]
            if c not in ok:
                # Nodes of one class are interchangeable: one check answers for all of them.
                left = list(total)
                left[c] -= 1
                rest = self.need - 1
                ok[c] = rest <= 0 or max_flow(supply, fits, left, rest) >= rest
            if ok[c]:
                out.append(n)
        return out


def group_by_domain(nodes: Sequence[N], domain_of: Callable[[N], str]) -> dict[str, list[N]]:
    """Nodes by domain; nodes without the label (empty value) belong to no domain."""
    out: dict[str, list[N]] = {}
    for n in nodes:
        d = domain_of(n)
        if d:
            out.setdefault(d, []).append(n)
    return out


@dataclass
class RoomIndex(Generic[T, N]):
    """Room per domain for one member shape, kept current from node changes (rule 1).

    Holds, for one topology key and one template (a homogeneous gang's member), every node's
    member capacity and every domain's room, plus the domains sorted by room, so best fit is a
    bisection instead of a scan of the cluster. ``refresh`` takes the names of the nodes that
    changed since the last call (or None to rebuild), so the work per plan is proportional to
    what changed, not to the cluster size.
    """

    template: T
    capacity: CapacityFn[T, N]
    domain_of: Callable[[N], str]
    name_of: Callable[[N], str]
    _: KW_ONLY
    one_per_node: bool
    node_cap: dict[str, int] = field(default_factory=dict, init=False)
    """Node name -> members of the template it takes now."""
    node_domain: dict[str, str] = field(default_factory=dict, init=False)
    members: dict[str, set[str]] = field(default_factory=dict, init=False)
    """Domain -> its node names."""
    room: dict[str, int] = field(default_factory=dict, init=False)
    _sorted: list[tuple[int, str]] = field(default_factory=list, init=False, repr=False)
    cursor: int = field(default=0, init=False)
    """The cache change-log position this index is current with."""
    device_cursor: int = field(default=0, init=False)
    """The DRA device change feed position it is current with (members with claims, ``deviceroom.py``)."""

    def _cap(self, n: N) -> int:
        """The node's member capacity for the template (at most 1 when members keep apart)."""
        c = self.capacity(self.template, n)
        return 1 if self.one_per_node and c > 1 else c

    def _set_node(self, name: str, n: N | None) -> set[str]:
        """Update one node; return the domains whose room changed."""
        touched: set[str] = set()
        old_d = self.node_domain.pop(name, None)
        old_c = self.node_cap.pop(name, 0)
        if old_d is not None:
            self.members[old_d].discard(name)
            self.room[old_d] -= old_c
            touched.add(old_d)
            if not self.members[old_d]:
                del self.members[old_d]
        if n is not None:
            d = self.domain_of(n)
            if d:
                c = self._cap(n)
                self.node_domain[name] = d
                self.node_cap[name] = c
                self.members.setdefault(d, set()).add(name)
                self.room[d] = self.room.get(d, 0) + c
                touched.add(d)
        return touched

    def rebuild(self, nodes: Sequence[N]) -> None:
        """Recompute every node and domain from ``nodes`` (all nodes); O(nodes + D log D)."""
        self.node_cap.clear()
        self.node_domain.clear()
        self.members.clear()
        self.room = {}
        for n in nodes:
            self._set_node(self.name_of(n), n)
        self._resort()

    def refresh(self, changed: dict[str, N | None]) -> None:
        """Apply changed nodes (name -> node, or None when the node is gone); O(changes x log D)."""
        # Remember each touched domain's room before the change: that (room, domain) entry is
        # what must be found and removed from the sorted list (None: the domain was absent).
        before: dict[str, int | None] = {}
        for name, n in changed.items():
            for d in (self.node_domain.get(name), self.domain_of(n) if n is not None else None):
                if d and d not in before:
                    before[d] = self.room.get(d) if d in self.members else None
            self._set_node(name, n)
        srt = self._sorted
        for d, old in before.items():
            if old is not None:
                i = bisect.bisect_left(srt, (old, d))
                if i < len(srt) and srt[i] == (old, d):
                    del srt[i]
            if d in self.members:
                bisect.insort(srt, (self.room[d], d))
            else:
                self.room.pop(d, None)

    def _resort(self) -> None:
        """Rebuild the (room, domain) list that best_fit bisects."""
        self._sorted = sorted((r, d) for d, r in self.room.items())

    def best_fit(self, need: int, excluded: Callable[[str], bool]) -> str | None:
        """The domain with the least room ``>= need`` that is not ``excluded``; ties by name."""
        if need <= 0:
            return None
        # (need, "") sorts before every (need, domain): start at the first domain with room >= need;
        # the list is ordered by room then name, so the first one not excluded is the best fit.
        for r, d in self._sorted[bisect.bisect_left(self._sorted, (need, "")) :]:
            if r >= need and not excluded(d):
                return d
        return None
