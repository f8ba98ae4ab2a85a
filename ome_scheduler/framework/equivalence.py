"""The equivalence cache: Filter answers and Score values per pod shape and node, in arrays.

Identical pods, such as a Deployment's replicas, then cost a few C-speed scans over the node
list instead of a Filter and Score pass: the same answers kube-scheduler computes
(``pkg/scheduler/schedule_one.go`` findNodesThatPassFilters and prioritizeNodes), reached
with less work. kube-scheduler dropped its own equivalence cache in 1.13; this one is kept
safe by two rules:

* **Only node-local plugins are served from it.** A plugin declares ``node_local_filter`` /
  ``node_local_score`` when its answer depends only on the pod's shape, that one NodeInfo and
  its ``cache_token``; a cycle in which any other plugin takes part neither reads nor writes
  the cache.
* **An answer goes stale with its node or the cluster.** The scheduler cache's change feed
  names every node whose NodeInfo changed (a pod added or removed, the node updated); a table
  forgets those nodes' answers before it is read. A table belongs to one shape, one cycle
  version (the cache's cluster-wide version plus the plugins' tokens: a new node, new images
  or a hold starting or ending starts a new table) and one node list (positions are indexes
  into ``SchedulerCache.node_infos()``).

Answers are positional: ``state[i]`` is node ``i``'s Filter answer, ``plain[i]`` its weighted
Score sum, so a cycle finds its feasible window and its scores with ``bytearray.find``,
``translate`` and ``itertools.compress`` rather than a Python step per node.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo

UNKNOWN = 0
"""``ShapeTable.state``: not asked yet, or the node changed since."""
FEASIBLE = 1
"""``ShapeTable.state``: the node passed every Filter plugin."""
INFEASIBLE = 2
"""``ShapeTable.state``: a Filter plugin rejected the node (its status is in ``statuses``)."""
FEASIBLE_MASK = bytes(1 if b == FEASIBLE else 0 for b in range(256))
"""``bytes.translate`` table: 1 where a state byte is FEASIBLE, else 0."""
MAX_SLOTS = 2_000_000
"""Node answers kept over all tables (tables x nodes); the oldest tables go first."""


@dataclass(slots=True, eq=False)
class ShapeTable:
    """What every node answered for one pod shape at one cycle version.

    ``state`` holds one byte per node position (UNKNOWN, FEASIBLE, INFEASIBLE); ``statuses``
    the Filter status of each INFEASIBLE position. ``plain`` is the weighted sum of the Score
    plugins that keep the default NormalizeScore (``plain_key`` names them), valid where
    ``plain_stale`` is 0; ``raw`` holds, per plugin with its own NormalizeScore, the raw scores
    and their stale flags (normalised per cycle, so kept raw).
    """

    nodes: Sequence[NodeInfo]
    index: dict[str, int]
    cursor: int
    state: bytearray
    statuses: dict[int, Status] = field(default_factory=dict)
    plain_key: tuple[str, ...] | None = None
    plain: list[int] = field(default_factory=list)
    plain_stale: bytearray = field(default_factory=bytearray)
    raw: dict[str, tuple[list[int], bytearray]] = field(default_factory=dict)

    def forget(self, names: Iterable[str] | None) -> None:
        """Drop the answers of the nodes ``names`` (None: of every node)."""
        if names is None:
            n = len(self.nodes)
            self.state = bytearray(n)
            self.statuses.clear()
            self.plain_stale = bytearray(b"\x01") * n if self.plain else bytearray()
            for name in list(self.raw):
                self.raw[name] = ([0] * n, bytearray(b"\x01") * n)
            return
        index = self.index
        raws = [stale for _, stale in self.raw.values()]
        has_plain = bool(self.plain)
        for name in names:
            i = index.get(name)
            if i is None:
                continue
            self.state[i] = UNKNOWN
            self.statuses.pop(i, None)
            if has_plain:
                self.plain_stale[i] = 1
            for stale in raws:
                stale[i] = 1

    def set_plain_key(self, key: tuple[str, ...]) -> None:
        """Start ``plain`` over when a different set of plugins takes part."""
        if key != self.plain_key or not self.plain:
            n = len(self.nodes)
            self.plain_key = key
            self.plain = [0] * n
            self.plain_stale = bytearray(b"\x01") * n

    def raw_of(self, plugin: str) -> tuple[list[int], bytearray]:
        """The raw scores of ``plugin`` and their stale flags (created all stale)."""
        got = self.raw.get(plugin)
        if got is None:
            n = len(self.nodes)
            got = self.raw[plugin] = ([0] * n, bytearray(b"\x01") * n)
        return got


class EquivalenceCache:
    """Shape tables by (pod shape, cycle version), the most recent kept within ``MAX_SLOTS``
    node answers (and at most ``max_shapes`` tables)."""

    def __init__(self, max_shapes: int = 256, max_slots: int = MAX_SLOTS) -> None:
        self._tables: dict[tuple[bytes, Hashable], ShapeTable] = {}
        self.max_shapes = max_shapes
        self.max_slots = max_slots
        self._index_of: tuple[Sequence[NodeInfo], dict[str, int]] | None = None

    def _index(self, nodes: Sequence[NodeInfo]) -> dict[str, int]:
        """Node name -> position in ``nodes``, shared by the tables of one node list."""
        if self._index_of is None or self._index_of[0] is not nodes:
            self._index_of = (nodes, {ni.name: i for i, ni in enumerate(nodes)})
        return self._index_of[1]

    def table(self, shape: bytes, version: Hashable, nodes: Sequence[NodeInfo], cursor: int) -> tuple[ShapeTable, bool]:
        """The table of one shape and version over ``nodes`` (marked most recent), and whether
        it is new. A new table (or one built over another node list) knows nothing and is up
        to date with change-feed position ``cursor``; a kept one must be brought up to date by
        the caller (:meth:`ShapeTable.forget`)."""
        key = (shape, version)
        table = self._tables.pop(key, None)
        fresh = table is None or table.nodes is not nodes
        if fresh:
            table = ShapeTable(nodes, self._index(nodes), cursor, bytearray(len(nodes)))
        assert table is not None
        self._tables[key] = table
        limit = max(1, min(self.max_shapes, self.max_slots // max(1, len(nodes))))
        while len(self._tables) > limit:
            self._tables.pop(next(iter(self._tables)))
        return table, fresh
