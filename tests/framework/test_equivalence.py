"""The equivalence cache (``framework/equivalence.py``): tables per shape and version, LRU-bounded."""

from __future__ import annotations

from ome_scheduler.framework.equivalence import EquivalenceCache, EquivalenceEntry
from ome_scheduler.framework.status import Status


def test_tables_are_per_shape_and_version() -> None:
    c = EquivalenceCache()
    t = c.entries(b"shape-a", (1, ()))
    t["n1"] = EquivalenceEntry(7, Status.unschedulable("Insufficient cpu"))
    assert c.entries(b"shape-a", (1, ()))["n1"].generation == 7
    assert c.entries(b"shape-a", (2, ())) == {}  # a new cluster version starts a new table
    assert c.entries(b"shape-b", (1, ())) == {}


def test_least_recently_used_tables_are_dropped() -> None:
    c = EquivalenceCache(max_shapes=2)
    c.entries(b"a", 0)["n"] = EquivalenceEntry(1)
    c.entries(b"b", 0)["n"] = EquivalenceEntry(1)
    c.entries(b"a", 0)  # touch a: b is now the oldest
    c.entries(b"c", 0)
    assert "n" in c.entries(b"a", 0)
    assert c.entries(b"b", 0) == {}
