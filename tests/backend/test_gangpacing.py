"""Gang members in the scheduling queue (``backend/gangpacing.py``, product rule 10).

One member's attempt stands for its gang: a cluster event moves at most one member that only
OMEGangPack rejected, the gang backs off as one pod would, gang members never leave backoffQ
before their backoff ends (standalone pods still do when activeQ is empty, as 1.35 does), and
OMEGangPack can ask for a retry within the backoff.
"""

from __future__ import annotations

from ome_scheduler.backend.queue import SchedulingQueue
from ome_scheduler.framework.events import EVENT_NODE_ADD
from ome_scheduler.framework.types import POD_GROUP_LABEL, PodInfo, QueuedPodInfo
from tests.backend.test_queue import Clock, fail, make_queue, pop
from tests.support.plugins_env import node, pod

GANG = "OMEGangPack"


def members(q: SchedulingQueue, n: int, gang: str = "g") -> list[QueuedPodInfo]:
    """``n`` members added, popped and failed by OMEGangPack: all among the unschedulable pods."""
    for i in range(n):
        q.add(PodInfo(pod(f"{gang}-{i}", labels={POD_GROUP_LABEL: gang})))
    out = []
    for _ in range(n):
        qp = pop(q)
        assert qp is not None
        out.append(qp)
    for qp in out:
        fail(q, qp, {GANG})
    assert q.pending()["unschedulable"] == n
    return out


def node_added(q: SchedulingQueue, clock: Clock) -> None:
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n1", labels={"topology.ome.io/domain": "a"}))


def test_an_event_moves_one_member_of_a_gang_and_none_while_one_is_queued() -> None:
    q, clock = make_queue()
    members(q, 4)
    node_added(q, clock)
    assert q.pending() == {"active": 0, "backoff": 1, "unschedulable": 3}
    node_added(q, clock)  # one already stands for the gang
    assert q.pending()["unschedulable"] == 3


def test_members_another_plugin_rejected_are_moved_on_their_own() -> None:
    q, clock = make_queue()
    ms = members(q, 1)
    q.add(PodInfo(pod("g-9", labels={POD_GROUP_LABEL: "g"})))
    other = pop(q)
    assert other is not None
    fail(q, other, {GANG, "NodeResourcesFit"})
    node_added(q, clock)
    assert q.pending()["unschedulable"] == 0, ms


def test_a_gang_backs_off_as_one_pod_and_is_never_popped_before_its_backoff() -> None:
    q, clock = make_queue(initial=1.0, maximum=10.0)
    members(q, 8)  # eight failures in one round count as one
    node_added(q, clock)
    assert pop(q) is None  # activeQ empty: a standalone pod would be popped early, a member is not
    assert q.pending()["backoff"] == 1
    clock.t += 2
    q.flush_backoff_completed()
    rep = pop(q)
    assert rep is not None and rep.pod.metadata.labels[POD_GROUP_LABEL] == "g"
    fail(q, rep, {GANG})  # the second round: the gang's backoff is 2 s now
    node_added(q, clock)
    clock.t += 1.5
    q.flush_backoff_completed()
    assert q.pending()["active"] == 0
    clock.t += 1.5  # past the 2 s and its 1 s window
    q.flush_backoff_completed()
    assert q.pending()["active"] == 1


def test_a_standalone_pod_still_leaves_backoffQ_early_when_activeQ_is_empty() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("solo")))
    qp = pop(q)
    assert qp is not None
    fail(q, qp, {"NodeResourcesFit"})
    node_added(q, clock)
    assert q.pending()["backoff"] == 1
    again = pop(q)
    assert again is not None and again.pod.metadata.name == "solo"


def test_a_bound_member_resets_the_gangs_backoff() -> None:
    q, clock = make_queue()
    ms = members(q, 2)
    assert q.pacing.until(ms[0]) > clock.t
    q.add(PodInfo(pod("g-7", labels={POD_GROUP_LABEL: "g"})))
    winner = pop(q)
    assert winner is not None
    q.done(winner.pod_info.pod_key)  # bound
    assert q.pacing.until(ms[0]) == 0.0


def test_a_retry_asked_for_sends_the_pod_to_backoffQ_without_an_event() -> None:
    q, clock = make_queue()
    q.add(PodInfo(pod("g-0", labels={POD_GROUP_LABEL: "g"})))
    qp = pop(q)
    assert qp is not None
    q.retry_after_backoff(qp.pod_info.pod_key)
    fail(q, qp, {GANG})
    assert q.pending() == {"active": 0, "backoff": 1, "unschedulable": 0}
    clock.t += 2
    q.flush_backoff_completed()
    assert q.pending()["active"] == 1
    again = pop(q)
    assert again is not None
    fail(q, again, {GANG})  # the mark was used up: without an event it waits
    assert q.pending()["unschedulable"] == 1
