"""The scheduling queue against kube-scheduler 1.35's ``backend/queue`` semantics."""

from __future__ import annotations

import asyncio

import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.backend.queue import ProfileQueueing, SchedulingQueue
from ome_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD, ActionType, ClusterEvent
from ome_scheduler.framework.types import PodInfo, QueuedPodInfo
from ome_scheduler.metrics import Metrics
from tests.support.plugins_env import Env, chart_config, node, pod


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_queue(initial: float = 1.0, maximum: float = 10.0) -> tuple[SchedulingQueue, Clock]:
    env = Env()
    clock = Clock()
    profiles = {
        name: ProfileQueueing(fw.events_to_register(), fw.queue_sort.sort_key, fw.run_pre_enqueue)
        for name, fw in env.s.frameworks.items()
    }
    q = SchedulingQueue(profiles, metrics=Metrics(), initial_backoff=initial, max_backoff=maximum, clock=clock)
    return q, clock


def pop(q: SchedulingQueue) -> QueuedPodInfo | None:
    """``Pop`` without blocking: None when activeQ and the (unschedulable) backoffQ are empty."""
    if not len(q.active) and not len(q.backoff):
        return None
    return asyncio.run(q.pop())


def fail(q: SchedulingQueue, qp: QueuedPodInfo, plugins: set[str]) -> None:
    qp.unschedulable_plugins = set(plugins)
    q.add_unschedulable_if_not_present(qp)


def test_priority_then_fifo_order() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("low", spec={"priority": 1})))
    clock.t += 1
    q.add(PodInfo(pod("high", spec={"priority": 10})))
    clock.t += 1
    q.add(PodInfo(pod("low2", spec={"priority": 1})))
    assert [pop(q).pod.metadata.name for _ in range(3)] == ["high", "low", "low2"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("initial", "maximum", "want"), [(1, 10, [1, 2, 4, 8, 10, 10]), (2, 5, [2, 4, 5, 5])])
def test_backoff_doubles_up_to_the_maximum(initial: float, maximum: float, want: list[int]) -> None:
    q, clock = make_queue(initial, maximum)
    q.add(PodInfo(pod("p")))
    got = []
    for _ in want:
        qp = pop(q)
        assert qp is not None
        fail(q, qp, set())  # an error: straight to the (error) backoff queue
        assert q.pending()["backoff"] == 1
        got.append(int(qp.backoff_expiration - clock.t))
        clock.t = qp.backoff_expiration + 1
        q.flush_backoff_completed()
        assert q.pending()["active"] == 1
    assert got == want


def test_backoff_configurable_in_the_file() -> None:
    cfg = chart_config()
    cfg["podInitialBackoffSeconds"] = 3
    cfg["podMaxBackoffSeconds"] = 7
    env = Env(cfg)
    assert (env.s.queue.initial_backoff, env.s.queue.max_backoff) == (3.0, 7.0)


def test_unschedulable_pods_wait_for_a_matching_event() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("p", requests={"cpu": "100"})))
    qp = pop(q)
    assert qp is not None
    fail(q, qp, {"NodeResourcesFit"})
    assert q.pending()["unschedulable"] == 1
    # A node too small for the pod: the NodeResourcesFit hint says QueueSkip.
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("small", alloc={"cpu": "1"}))
    assert q.pending()["unschedulable"] == 1
    # An event no plugin of the rejectors registered changes nothing either.
    q.move_all_to_active_or_backoff(ClusterEvent("Node", ActionType.UPDATE_NODE_ANNOTATION), node("a"), node("a"))
    assert q.pending()["unschedulable"] == 1
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("big", alloc={"cpu": "200"}))
    assert q.pending()["unschedulable"] == 0
    assert q.pending()["backoff"] + q.pending()["active"] == 1


def test_assigned_pod_delete_requeues_resource_rejected_pods() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("p", requests={"cpu": "1"})))
    qp = pop(q)
    assert qp is not None
    fail(q, qp, {"NodeResourcesFit"})
    gone = pod("x", node_name="n1", requests={"cpu": "1"})
    clock.t += 30
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, gone, None)
    assert q.pending()["active"] == 1  # backoff (1 s) already over


def test_unschedulable_pods_flushed_after_five_minutes() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("p")))
    qp = pop(q)
    assert qp is not None
    fail(q, qp, {"NodeAffinity"})
    clock.t += 299
    q.flush_unschedulable_leftover()
    assert q.pending()["unschedulable"] == 1
    clock.t += 2
    q.flush_unschedulable_leftover()
    assert q.pending()["unschedulable"] == 0


def test_event_while_in_flight_requeues_after_backoff() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("p", requests={"cpu": "100"})))
    q.add(PodInfo(pod("other")))
    qp = pop(q)
    assert qp is not None and qp.pod.metadata.name == "p"
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("big", alloc={"cpu": "200"}))
    fail(q, qp, {"NodeResourcesFit"})
    assert q.pending()["unschedulable"] == 0 and q.pending()["backoff"] == 1


def test_pop_takes_from_backoff_when_active_is_empty() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("p")))
    qp = pop(q)
    assert qp is not None
    fail(q, qp, set())
    assert q.pending()["backoff"] == 1
    # An error backoff is not popped early; an unschedulable one is.
    assert pop(q) is None
    q2, _ = make_queue()
    q2.add(PodInfo(pod("p")))
    qp2 = pop(q2)
    assert qp2 is not None
    q2.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))
    fail(q2, qp2, {"NodeAffinity"})
    assert q2.pending()["backoff"] == 1
    again = pop(q2)
    assert again is not None and again.attempts == 2


def gated() -> Pod:
    return pod("g", spec={"schedulingGates": [{"name": "example.com/hold"}]})


def test_gated_pod_is_never_popped_until_its_gates_are_removed() -> None:
    q, clock = make_queue()
    g = gated()
    q.add(PodInfo(g))
    assert q.pending() == {"active": 0, "backoff": 0, "unschedulable": 1}
    assert pop(q) is None
    # Cluster events and the 5-minute flush leave it alone.
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))
    clock.t += 600
    q.flush_unschedulable_leftover()
    assert pop(q) is None
    # An update that keeps a gate does not free it either.
    relabelled = pod("g", spec={"schedulingGates": [{"name": "example.com/hold"}]}, labels={"x": "y"})
    relabelled.metadata.uid = g.metadata.uid
    q.update(g, PodInfo(relabelled))
    assert pop(q) is None
    ungated = pod("g")
    ungated.metadata.uid = g.metadata.uid
    q.update(relabelled, PodInfo(ungated))
    qp = pop(q)
    assert qp is not None and qp.pod.metadata.name == "g" and qp.attempts == 1


def test_gated_pod_gets_no_failed_scheduling_event() -> None:
    env = Env()
    env.add_node(node("n"))
    env.s.handlers.on_pod_add(gated())
    assert env.s.queue.pending()["unschedulable"] == 1
    assert env.recorder.events == []


def test_unreadable_pod_group_wakes_only_its_own_members() -> None:
    env = Env()
    q = env.s.queue
    for name, gang in (("m0", "g"), ("o0", "other")):
        env.s.handlers.on_pod_add(pod(name, labels={"scheduling.x-k8s.io/pod-group": gang}))
    for _ in range(2):
        qp = pop(q)
        assert qp is not None
        fail(q, qp, {"OMEGangPack"})
    assert q.pending()["unschedulable"] == 2
    raw = b'{"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": "three"}}'
    env.s.handlers.on_pod_group_invalid(raw, "Expected `int`, got `str` - at `$.spec.minMember`")
    assert env.s.pod_groups().error("default", "g") == "Expected `int`, got `str` - at `$.spec.minMember`"
    assert q.pending()["unschedulable"] == 1  # m0 is retried to report it; o0 waits on
    assert q.pending()["active"] + q.pending()["backoff"] == 1
