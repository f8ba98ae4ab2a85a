"""The equivalence cache: Filter statuses and raw Score values per pod shape and node.

Identical pods, such as a Deployment's replicas, then cost a dictionary lookup per node
instead of a Filter and Score pass: the same answers kube-scheduler computes
(``pkg/scheduler/schedule_one.go`` findNodesThatPassFilters and prioritizeNodes), reached
with less work. kube-scheduler dropped its own equivalence cache in 1.13; this one is kept
safe by two rules:

* **Only node-local plugins are served from it.** A plugin declares ``node_local_filter`` /
  ``node_local_score`` when its answer depends only on the pod's shape, that one NodeInfo and
  its ``cache_token``; a cycle in which any other plugin takes part neither reads nor writes
  the cache.
* **An entry goes stale with its node or the cluster.** Each entry records the NodeInfo
  ``generation`` it was computed at (bumped by every pod or node change on that node); the
  shape's entry table is keyed by the cycle's version (the cache's cluster-wide version plus
  the plugins' tokens), so a new node, new images or a hold starting or ending starts a new
  table.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from ome_scheduler.framework.status import Status


@dataclass(slots=True)
class EquivalenceEntry:
    """What one node answered for one pod shape at one NodeInfo generation.

    ``status`` is the Filter result (None: the node passed); ``raw_scores`` holds the raw
    Score of each plugin with its own NormalizeScore (normalised per cycle, so cached raw);
    ``weighted`` is ``(plugin names, weighted sum)`` of the plugins that keep the default
    NormalizeScore, valid while the same plugins take part.
    """

    generation: int
    status: Status | None = None
    raw_scores: dict[str, int] = field(default_factory=dict)
    weighted: tuple[tuple[str, ...], int] | None = None


EntryTable = dict[str, EquivalenceEntry]
"""Node name -> entry, for one pod shape and one cycle version."""


class EquivalenceCache:
    """Entry tables by (pod shape, cycle version), the ``max_shapes`` most recent kept."""

    def __init__(self, max_shapes: int = 256) -> None:
        self._tables: dict[tuple[bytes, Hashable], EntryTable] = {}
        self.max_shapes = max_shapes

    def entries(self, shape: bytes, version: Hashable) -> EntryTable:
        """The node -> entry table of one shape and version (created empty, marked most recent)."""
        key = (shape, version)
        table = self._tables.pop(key, None)
        if table is None:
            table = {}
        self._tables[key] = table
        while len(self._tables) > self.max_shapes:
            self._tables.pop(next(iter(self._tables)))
        return table
