"""The leader's PodGroup status keeper: phases, annotations, coalescing and conflicts.

The phase rules are scheduler-plugins' ``pkg/controllers/podgroup_controller.go`` plus
``Scheduled``; writes go to a real HTTP server playing kube-apiserver's PodGroup status
subresource (``tests/support/apiserver.py``), so the client's encodings and the 409 path run for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.scheduling import (
    ANN_PLACEMENT,
    ANN_PLACEMENT_DOMAIN,
    ANN_PLACEMENT_TOPOLOGY_KEY,
    ANN_WAITING_REASON,
    PodGroup,
    PodGroupStatus,
)
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.podgroups import PodGroupState
from ome_scheduler.controllers.podgroupstatus import (
    DELAY,
    MIN_INTERVAL,
    GangCounts,
    PodGroupStatusKeeper,
    annotation_changes,
    desired_status,
    phase_of,
)
from ome_scheduler.framework.types import GangPlacement, PodInfo, gang_key
from ome_scheduler.kube.podgroupwriter import PodGroupWriter
from ome_scheduler.metrics import Metrics
from tests.support.apiserver import FakeApiServer
from tests.support.builders import make_node, make_pod, make_pod_group

PG_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/g"
TK = "nvidia.com/gpu.clique"
KEY = gang_key("ns", "g")


@pytest.mark.parametrize(
    ("counts", "current", "phase"),
    [
        (GangCounts(exist=1, bound=0, running=0, succeeded=0, failed=0), "", "Pending"),
        (GangCounts(3, 0, 0, 0, 0), "", "Scheduling"),
        (GangCounts(3, 2, 0, 0, 0), "Scheduling", "Scheduling"),
        (GangCounts(3, 3, 0, 0, 0), "Scheduling", "Scheduled"),
        (GangCounts(3, 3, 2, 0, 0), "Scheduled", "Scheduled"),
        (GangCounts(3, 3, 2, 1, 0), "Scheduled", "Running"),
        (GangCounts(3, 3, 1, 1, 1), "Running", "Failed"),
        (GangCounts(3, 3, 0, 3, 0), "Running", "Finished"),
        (GangCounts(2, 2, 2, 0, 0), "Running", "Pending"),  # a member was deleted: fewer than minMember exist
        (GangCounts(3, 3, 3, 0, 0), "Finished", "Finished"),  # final
        (GangCounts(0, 0, 0, 0, 0), "Failed", "Failed"),  # final
    ],
)
def test_phase_follows_scheduler_plugins_controller(counts: GangCounts, current: str, phase: str) -> None:
    assert phase_of(3, counts, current) == phase


def test_no_positive_min_member_stays_pending() -> None:
    assert phase_of(0, GangCounts(5, 5, 5, 0, 0), "") == "Pending"


def test_desired_status_keeps_other_writers_fields_and_the_first_start_time() -> None:
    pg = make_pod_group("g", min_member=2)
    pg = msgspec.structs.replace(pg, status=PodGroupStatus(occupied_by="ns/job"))
    st = desired_status(pg, GangCounts(1, 0, 0, 0, 0), "2026-01-01T00:00:00Z")
    assert st == PodGroupStatus(phase="Pending", occupied_by="ns/job")  # no start time while Pending
    st = desired_status(pg, GangCounts(2, 0, 0, 0, 0), "2026-01-01T00:00:01Z")
    assert (st.phase, st.schedule_start_time, st.occupied_by) == ("Scheduling", "2026-01-01T00:00:01Z", "ns/job")
    later = desired_status(msgspec.structs.replace(pg, status=st), GangCounts(2, 2, 2, 0, 0), "2026-01-01T00:09:00Z")
    assert (later.phase, later.running, later.schedule_start_time) == ("Running", 2, "2026-01-01T00:00:01Z")


# ---- annotations --------------------------------------------------------------------------


def gang_state(pg: PodGroup, *bound_on: str, pending: int = 0) -> tuple[PodGroupState, list[PodInfo]]:
    """A pod-group state with ``pg``, members bound on nodes ``bound_on`` (in domain ``a`` unless
    the node name says ``b``) and ``pending`` unbound members."""
    cache = SchedulerCache()
    for n in ("a1", "a2", "b1"):
        cache.add_or_update_node(make_node(n, {TK: n[0]}))
    state = PodGroupState(cache)
    state.add_or_update(pg)
    members = []
    for i, node in enumerate(bound_on):
        pi = PodInfo(make_pod(f"m{i}", gang="g", node_name=node))
        cache.add_pod(pi)
        state.index_pod(pi)
        members.append(pi)
    for i in range(pending):
        pi = PodInfo(make_pod(f"p{i}", gang="g"))
        state.index_pod(pi)
        members.append(pi)
    return state, members


def test_a_pinned_gang_shows_its_domain_and_only_a_reason_newer_than_its_pin() -> None:
    pg = make_pod_group("g", min_member=2, topology_key=TK)
    state, _ = gang_state(pg, pending=2)
    assert annotation_changes(pg, state, KEY, GangCounts(2, 0, 0, 0, 0)) == {}  # nothing known: nothing written
    early = "0/3 nodes are available: waiting for all PodGroup member templates for ns/g."
    state.set_reason(KEY, early)
    assert annotation_changes(pg, state, KEY, GangCounts(2, 0, 0, 0, 0)) == {ANN_WAITING_REASON: early}
    state.set_placement(KEY, GangPlacement(TK, "a", "Holding"))
    shown = msgspec.structs.replace(
        pg,
        metadata=msgspec.structs.replace(
            pg.metadata, annotations={**pg.metadata.annotations, ANN_WAITING_REASON: early}
        ),
    )
    # The pin came after that failure: the reason is stale and is removed.
    assert annotation_changes(shown, state, KEY, GangCounts(2, 0, 0, 0, 0)) == {
        ANN_PLACEMENT: "Holding",
        ANN_PLACEMENT_DOMAIN: "a",
        ANN_PLACEMENT_TOPOLOGY_KEY: TK,
        ANN_WAITING_REASON: None,
    }
    later = "0/3 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
    state.set_reason(KEY, later)  # a member fails while the gang holds: that is shown
    assert annotation_changes(pg, state, KEY, GangCounts(2, 0, 0, 0, 0))[ANN_WAITING_REASON] == later
    state.set_placement(KEY, None)  # released
    written = msgspec.structs.replace(
        pg,
        metadata=msgspec.structs.replace(
            pg.metadata, annotations={**pg.metadata.annotations, ANN_PLACEMENT: "Holding", ANN_PLACEMENT_DOMAIN: "a"}
        ),
    )
    assert annotation_changes(written, state, KEY, GangCounts(2, 0, 0, 0, 0)) == {
        ANN_PLACEMENT: None,
        ANN_PLACEMENT_DOMAIN: None,
        ANN_WAITING_REASON: later,
    }


def test_a_bound_gang_shows_the_domain_of_its_members_and_no_reason() -> None:
    pg = make_pod_group("g", min_member=2, topology_key=TK)
    pg = msgspec.structs.replace(
        pg, metadata=msgspec.structs.replace(pg.metadata, annotations={ANN_WAITING_REASON: "old"})
    )
    state, _ = gang_state(pg, "a1", "a2")
    state.set_reason(KEY, "stale")
    state.set_placement(KEY, GangPlacement(TK, "a", "Bound"))
    assert state.reason(KEY) is None  # bound ends the waiting
    assert annotation_changes(pg, state, KEY, GangCounts(2, 2, 0, 0, 0)) == {
        ANN_PLACEMENT: "Bound",
        ANN_PLACEMENT_DOMAIN: "a",
        ANN_PLACEMENT_TOPOLOGY_KEY: TK,
        ANN_WAITING_REASON: None,
    }


def test_a_new_leader_derives_bound_from_the_written_key() -> None:
    """After a leader change nothing was reported: the key already written is reused."""
    pg = make_pod_group("g", min_member=2, topology_key=TK)
    ann = {ANN_PLACEMENT: "Holding", ANN_PLACEMENT_DOMAIN: "a", ANN_PLACEMENT_TOPOLOGY_KEY: TK}
    pg = msgspec.structs.replace(pg, metadata=msgspec.structs.replace(pg.metadata, annotations=ann))
    state, _ = gang_state(pg, "a1", "a2")
    assert annotation_changes(pg, state, KEY, GangCounts(2, 2, 0, 0, 0)) == {ANN_PLACEMENT: "Bound"}
    state2, _ = gang_state(pg, pending=2)
    assert annotation_changes(pg, state2, KEY, GangCounts(2, 0, 0, 0, 0)) == {}  # kept as written


def test_reports_and_member_changes_mark_the_gang_changed() -> None:
    pg = make_pod_group("g", min_member=2, topology_key=TK)
    state, members = gang_state(pg, pending=1)
    assert state.take_changed() == {KEY}
    assert state.take_changed() == set()
    state.set_placement(KEY, GangPlacement(TK, "a", "Holding"))
    state.set_placement(KEY, GangPlacement(TK, "a", "Holding"))  # the same again: no change
    assert state.take_changed() == {KEY}
    state.unindex_pod("ns", members[0].name)
    assert state.take_changed() == {KEY} and state.take_shrunk(KEY) and not state.take_shrunk(KEY)
    state.delete(pg)
    assert state.placement(KEY) == (False, None) and state.reason(KEY) is None


# ---- the keeper against an API server ------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stored(api: FakeApiServer, pg: PodGroup) -> PodGroup:
    """Put ``pg`` in the server and return it as the informer would see it (same resourceVersion)."""
    raw = api.put_pod_group(
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", **msgspec.to_builtins(pg)}
    )
    return msgspec.convert(raw, PodGroup)


async def settle(keeper: PodGroupStatusKeeper) -> None:
    keeper.step()
    for _ in range(1000):  # the client's own retries of a 5xx sleep up to about 2 s
        if not keeper.in_flight:
            return
        await asyncio.sleep(0.01)


def run(main: Callable[[FakeApiServer], Awaitable[None]]) -> None:
    async def wrapper() -> None:
        async with FakeApiServer() as api:
            await main(api)

    asyncio.run(wrapper())


def writes(api: FakeApiServer) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in api.requests if r.method in ("PUT", "PATCH")]


def test_changes_are_coalesced_into_one_write_per_podgroup_per_second() -> None:
    async def main(api: FakeApiServer) -> None:
        pg = stored(api, make_pod_group("g", min_member=2, topology_key=TK))
        state, _ = gang_state(pg, pending=2)
        clock = Clock()
        metrics = Metrics()
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()), metrics, clock=clock)
        state.set_placement(KEY, GangPlacement(TK, "a", "Holding"))
        await settle(keeper)
        assert writes(api) == []  # the first change waits DELAY for more
        clock.now += DELAY / 2
        state.set_reason(KEY, "0/3 nodes are available: no domain has room for gang ns/g.")  # rides along
        await settle(keeper)
        assert writes(api) == []
        clock.now += DELAY / 2
        await settle(keeper)
        assert writes(api) == [("PUT", f"{PG_PATH}/status"), ("PATCH", PG_PATH)]
        put, patch = [r for r in api.requests if r.method in ("PUT", "PATCH")]
        assert put.body["status"]["phase"] == "Scheduling" and put.body["metadata"]["resourceVersion"]
        assert patch.body["metadata"]["annotations"] == {
            ANN_PLACEMENT: "Holding",
            ANN_PLACEMENT_DOMAIN: "a",
            ANN_PLACEMENT_TOPOLOGY_KEY: TK,
            ANN_WAITING_REASON: "0/3 nodes are available: no domain has room for gang ns/g.",
        }
        assert patch.body["metadata"]["uid"] == pg.metadata.uid
        # The informer delivers the written object: nothing differs any more, nothing is sent.
        state.add_or_update(msgspec.convert(api.pod_groups["ns/g"], PodGroup))
        clock.now += MIN_INTERVAL
        await settle(keeper)
        await settle(keeper)
        assert len(writes(api)) == 2
        # A new change right after a write waits out MIN_INTERVAL from that write.
        state.set_placement(KEY, GangPlacement(TK, "a", "Pinned"))
        t_write = keeper.last_write[KEY]
        await settle(keeper)
        assert keeper.due[KEY] >= t_write + MIN_INTERVAL
        clock.now = keeper.due[KEY]
        await settle(keeper)
        assert writes(api)[-1] == ("PATCH", PG_PATH)
        assert keeper.writes == {"status": 1, "annotations": 2, "list": 0}
        sample = metrics.registry.get_sample_value(
            "ome_scheduler_podgroup_status_writes_total", {"kind": "annotations", "result": "written"}
        )
        assert sample == 2.0

    run(main)


def test_a_conflict_is_re_read_and_keeps_the_other_writers_fields() -> None:
    async def main(api: FakeApiServer) -> None:
        pg = stored(api, make_pod_group("g", min_member=2, topology_key=TK))
        state, _ = gang_state(pg, "a1", "a2")
        # Another writer sets occupiedBy after the informer's copy: our resourceVersion is stale.
        api.put_pod_group({**api.pod_groups["ns/g"], "status": {"occupiedBy": "ns/job"}})
        clock = Clock()
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()), clock=clock)
        keeper.mark(KEY)
        clock.now += DELAY
        await settle(keeper)
        puts = [r for r in api.requests if r.method == "PUT"]
        gets = [r for r in api.requests if r.method == "GET" and r.path == PG_PATH]
        assert len(puts) == 2 and len(gets) == 1  # 409, re-read, written
        assert api.pod_groups["ns/g"]["status"] == {
            "phase": "Scheduled",
            "occupiedBy": "ns/job",
            "scheduleStartTime": puts[1].body["status"]["scheduleStartTime"],
        }

    run(main)


def test_a_deleted_podgroup_is_not_an_error() -> None:
    async def main(api: FakeApiServer) -> None:
        pg = make_pod_group("g", min_member=2, topology_key=TK)  # never stored: 404
        state, _ = gang_state(pg, pending=2)
        clock = Clock()
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()), clock=clock)
        keeper.mark(KEY)
        clock.now += DELAY
        await settle(keeper)
        assert [r.method for r in api.requests] == ["PUT"]
        assert keeper.writes["status"] == 1 and KEY not in keeper.last_write

    run(main)


def test_finished_members_are_counted_with_a_list() -> None:
    """Succeeded pods leave the pod informer (its field selector): a LIST counts them."""

    async def main(api: FakeApiServer) -> None:
        pg = stored(api, make_pod_group("g", min_member=2, topology_key=TK))
        state, members = gang_state(pg, "a1", "a2")
        finished: list[dict[str, Any]] = []
        for m in members:
            raw = msgspec.to_builtins(m.pod)
            raw["status"] = {"phase": "Succeeded"}
            finished.append(raw)
            state.unindex_pod("ns", m.name)
        api.lists["/api/v1/namespaces/ns/pods"] = finished
        clock = Clock()
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()), clock=clock)
        keeper.mark(KEY)
        clock.now += DELAY
        await settle(keeper)
        (lst,) = [r for r in api.requests if r.method == "GET"]
        assert lst.query["labelSelector"] == "scheduling.x-k8s.io/pod-group=g"
        assert api.pod_groups["ns/g"]["status"]["phase"] == "Finished"
        assert api.pod_groups["ns/g"]["status"]["succeeded"] == 2

    run(main)


def test_the_keeper_starts_by_reconciling_every_podgroup() -> None:
    async def main(api: FakeApiServer) -> None:
        pg = stored(api, make_pod_group("g", min_member=1, topology_key=TK))
        state, _ = gang_state(pg, "a1")
        state.take_changed()
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()))
        task = asyncio.ensure_future(keeper.run())
        for _ in range(100):
            if api.pod_groups["ns/g"].get("status"):
                break
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert api.pod_groups["ns/g"]["status"]["phase"] == "Scheduled"

    run(main)


def test_refusals_wait_for_the_next_change_and_server_errors_back_off() -> None:
    async def main(api: FakeApiServer) -> None:
        pg = stored(api, make_pod_group("g", min_member=2, topology_key=TK))
        state, _ = gang_state(pg, pending=2)
        clock = Clock()
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()), clock=clock)
        api.fail("PUT", f"{PG_PATH}/status", 403)
        keeper.mark(KEY)
        clock.now += DELAY
        await settle(keeper)
        assert KEY not in keeper.due and keeper._told_forbidden  # not retried until the gang changes
        api.fail("PUT", f"{PG_PATH}/status", 503, times=3)  # the client's own 2 retries, then the keeper's
        keeper.mark(KEY)
        clock.now += DELAY
        await settle(keeper)
        assert keeper.failures[KEY] == 1 and keeper.due[KEY] == clock.now + 2.0
        clock.now += 2.0
        await settle(keeper)
        assert KEY not in keeper.failures and api.pod_groups["ns/g"]["status"]["phase"] == "Scheduling"

    run(main)


def test_writes_wait_while_the_scheduler_is_busy_but_not_forever() -> None:
    async def main(api: FakeApiServer) -> None:
        from ome_scheduler.controllers.podgroupstatus import MAX_DEFER

        pg = stored(api, make_pod_group("g", min_member=2, topology_key=TK))
        state, _ = gang_state(pg, pending=2)
        clock = Clock()
        busy = [True]
        keeper = PodGroupStatusKeeper(state, PodGroupWriter(api.client()), clock=clock, busy=lambda: busy[0])
        keeper.mark(KEY)
        due = keeper.due[KEY]
        clock.now = due
        await settle(keeper)
        assert writes(api) == []  # pods wait to be scheduled: the write waits
        clock.now = due + MAX_DEFER
        await settle(keeper)
        assert writes(api) == [("PUT", f"{PG_PATH}/status")]  # but not longer than MAX_DEFER
        busy[0] = False
        state.add_or_update(msgspec.convert(api.pod_groups["ns/g"], PodGroup))  # the informer's copy
        state.set_placement(KEY, GangPlacement(TK, "a", "Holding"))
        clock.now += MIN_INTERVAL
        await settle(keeper)  # due DELAY from now
        clock.now += DELAY
        await settle(keeper)
        assert writes(api)[-1] == ("PATCH", PG_PATH)

    run(main)
