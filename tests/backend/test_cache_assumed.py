"""Assumed pods in the cache: FinishBinding and the list of overdue confirmations."""

from __future__ import annotations

from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.framework.types import PodInfo
from tests.support.builders import make_node, make_pod


def test_finish_binding_marks_only_assumed_pods_and_unconfirmed_lists_the_overdue_ones() -> None:
    cache = SchedulerCache()
    cache.add_or_update_node(make_node("n1"))
    a = PodInfo(make_pod("a")).with_node("n1")
    b = PodInfo(make_pod("b")).with_node("n1")
    cache.assume_pod(a, "n1")
    cache.assume_pod(b, "n1")
    assert cache.unconfirmed(1e9) == [], "no Binding finished yet: both still in flight"
    cache.finish_binding(a.pod_key, 10.0)
    cache.finish_binding(b.pod_key, 50.0)
    assert [(pi.name, node, at) for pi, node, at in cache.unconfirmed(20.0)] == [("a", "n1", 10.0)]
    confirmed = PodInfo(a.pod)  # a.pod has spec.nodeName n1: what the informer shows once bound
    cache.add_pod(confirmed)
    assert [pi.name for pi, _, _ in cache.unconfirmed(100.0)] == ["b"]
    assert [pi.name for pi, _ in cache.bound_pods().values()] == ["a"]
    cache.finish_binding(confirmed.pod_key, 99.0)  # not assumed any more: no-op
    assert not cache.is_assumed(confirmed.pod_key)
    assert [pi.name for pi, _, at in cache.assumed_pods()] == ["b"]
