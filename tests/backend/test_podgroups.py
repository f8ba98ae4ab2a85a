"""The pod-group state (``backend/podgroups.py``): PodGroups, the gang index and placed members."""

from __future__ import annotations

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.podgroups import PodGroupState
from ome_scheduler.framework.types import GangKey, PodInfo
from tests.support.builders import make_node, make_pod, make_pod_group

G = GangKey("ns/g")


def state() -> tuple[SchedulerCache, PodGroupState]:
    cache = SchedulerCache()
    return cache, PodGroupState(cache)


def test_members_follow_the_label_across_updates_and_deletes() -> None:
    _, s = state()
    a, b = make_pod("a", gang="g"), make_pod("b", gang="g")
    s.index_pod(PodInfo(a))
    s.index_pod(PodInfo(b))
    assert sorted(p.name for p in s.members(G)) == ["a", "b"]
    moved = msgspec.structs.replace(a, metadata=msgspec.structs.replace(a.metadata, labels={"x": "y"}))
    s.index_pod(PodInfo(moved))  # label removed: a leaves the gang
    assert [p.name for p in s.members(G)] == ["b"]
    s.unindex_pod("ns", "b")
    assert s.members(G) == [] and s.live_gang_keys() == set()


def test_live_gang_keys_skip_deleting_members() -> None:
    _, s = state()
    p = make_pod("a", gang="g")
    deleting = msgspec.structs.replace(
        p, metadata=msgspec.structs.replace(p.metadata, deletion_timestamp="2026-01-01T00:00:00Z")
    )
    s.index_pod(PodInfo(deleting))
    assert s.live_gang_keys() == set()
    s.index_pod(PodInfo(make_pod("b", gang="g")))
    assert s.live_gang_keys() == {G}


def test_placed_members_come_from_the_cache_with_their_node() -> None:
    cache, s = state()
    cache.add_or_update_node(make_node("n1"))
    bound = PodInfo(make_pod("a", gang="g", node_name="n1"))
    cache.add_pod(bound)
    assumed = PodInfo(make_pod("b", gang="g")).with_node("n2")  # n2 has no Node object
    cache.assume_pod(assumed, "n2")
    placed = {pi.name: (ni.name if ni is not None else None) for pi, ni in s.placed_members(G)}
    assert placed == {"a": "n1", "b": None}
    cache.forget_pod(assumed.pod_key)
    assert [pi.name for pi, _ in s.placed_members(G)] == ["a"]


def test_pod_groups_errors_and_listeners() -> None:
    _, s = state()
    seen: list[tuple[str | None, str | None]] = []
    s.subscribe(lambda old, new: seen.append((old and old.metadata.name, new and new.metadata.name)))
    pg = make_pod_group("g", min_member=2)
    s.set_invalid("ns", "g", "bad minMember")
    assert s.error("ns", "g") == "bad minMember" and s.get("ns", "g") is None
    s.add_or_update(pg)
    s.notify(None, pg)
    assert s.get("ns", "g") is pg and s.error("ns", "g") is None and len(s) == 1
    s.delete(pg)
    s.notify(pg, None)
    assert s.get("ns", "g") is None and seen == [(None, "g"), ("g", None)]
    assert isinstance(pg, PodGroup) and not isinstance(pg, Pod)
