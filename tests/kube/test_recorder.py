"""The Recorder against a real HTTP server playing kube-apiserver's events and pod status.

Mirrors client-go's ``tools/events`` (``events.k8s.io/v1`` events; an isomorphic repeat within
6 minutes becomes a series) and ``updatePod`` in ``pkg/scheduler/schedule_one.go`` (the
``PodScheduled`` condition is patched only when it changes, keeping ``lastTransitionTime``
while the status stays the same).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.kube import recorder as recorder_module
from ome_scheduler.kube.client import hostname
from ome_scheduler.kube.recorder import Recorder, truncate_message
from ome_scheduler.util.timestamps import parse_rfc3339
from tests.support.apiserver import FakeApiServer

EVENTS = "/apis/events.k8s.io/v1/namespaces/ns/events"
STATUS = "/api/v1/namespaces/ns/pods/p/status"
SMP = "application/strategic-merge-patch+json"


def make_pod(
    rv: str = "7", *, conditions: list[dict[str, Any]] | None = None, nominated: str = "", generation: int = 0
) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "resourceVersion": rv, "generation": generation},
        "spec": {"schedulerName": "ome-scheduler", "containers": [{"name": "c"}]},
        "status": {"conditions": conditions or [], "nominatedNodeName": nominated},
    }
    return msgspec.convert(raw, Pod)


def failed(
    rec: Recorder, pod: Pod, note: str = "0/4 nodes are available", reason: str = "FailedScheduling", **kw: Any
) -> None:
    kw.setdefault("type_", "Warning")
    rec.event(pod, controller="ome-scheduler", reason=reason, action="Scheduling", note=note, **kw)


def run(main: Callable[[FakeApiServer, Recorder], Awaitable[None]], **kw: Any) -> None:
    async def wrapper() -> None:
        async with FakeApiServer() as api:
            rec = Recorder(api.client(), **kw)
            await main(api, rec)
            await rec.drain()

    asyncio.run(wrapper())


# ---- events ------------------------------------------------------------------------------


def test_event_body_names_the_controller_instance_and_the_pod() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        t0 = time.time()
        failed(rec, make_pod(), note="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
        await rec.drain()
        (post,) = api.requests
        assert (post.method, post.path, post.content_type) == ("POST", EVENTS, "application/json")
        ev = post.body
        assert ev["apiVersion"] == "events.k8s.io/v1" and ev["kind"] == "Event"
        assert ev["metadata"]["namespace"] == "ns"
        assert ev["metadata"]["name"].startswith("p.")
        assert ev["reportingController"] == "ome-scheduler"
        assert ev["reportingInstance"] == f"ome-scheduler-{hostname()}"
        assert (ev["type"], ev["reason"], ev["action"]) == ("Warning", "FailedScheduling", "Scheduling")
        assert ev["note"] == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
        assert ev["regarding"] == {
            "kind": "Pod",
            "namespace": "ns",
            "name": "p",
            "uid": "uid-p",
            "apiVersion": "v1",
            "resourceVersion": "7",
        }
        assert "series" not in ev
        assert ev["eventTime"].endswith("Z") and len(ev["eventTime"].split(".")[1]) == 7  # MicroTime
        assert t0 - 1 <= parse_rfc3339(ev["eventTime"]) <= time.time() + 1
        assert list(api.events) == [f"ns/{ev['metadata']['name']}"]

    run(main)


def test_note_is_truncated_to_1024_bytes_with_an_ellipsis() -> None:
    exact = "x" * 1024
    assert truncate_message(exact) == exact
    long = "y" * 1000 + "z" * 1000
    cut = truncate_message(long)
    assert len(cut.encode()) == 1024
    assert cut == "y" * 1000 + "z" * 20 + " ..."

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        failed(rec, make_pod(), note=long)
        await rec.drain()
        assert api.requests[0].body["note"] == cut

    run(main)


def test_multibyte_note_is_cut_by_bytes_on_a_character_boundary() -> None:
    """kube-apiserver rejects a note over 1024 *bytes*; the cut must not split a character."""
    note = "é" * 600  # 1200 bytes, 600 characters
    cut = truncate_message(note)
    assert len(cut.encode()) <= 1024
    assert cut.endswith(" ...")
    assert cut == "é" * 510 + " ..."
    assert truncate_message("é" * 512) == "é" * 512  # exactly 1024 bytes stays


def test_a_repeat_becomes_one_series_patch_and_later_repeats_send_nothing() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod()
        failed(rec, pod)
        await rec.drain()
        name = api.requests[0].body["metadata"]["name"]
        failed(rec, pod)
        await rec.drain()
        assert len(api.requests) == 2
        patch = api.requests[1]
        assert (patch.method, patch.path) == ("PATCH", f"{EVENTS}/{name}")
        assert patch.content_type == "application/merge-patch+json"
        assert set(patch.body) == {"series"}
        assert patch.body["series"]["count"] == 2
        assert abs(parse_rfc3339(patch.body["series"]["lastObservedTime"]) - time.time()) < 5
        for _ in range(5):
            failed(rec, pod)
        await rec.drain()
        assert len(api.requests) == 2
        stored = api.events[f"ns/{name}"]
        assert stored["series"]["count"] == 2 and stored["note"] == "0/4 nodes are available"
        failed(rec, pod, note="0/4 nodes are available: a new reason")  # a new substance: a new event
        await rec.drain()
        assert len(api.requests) == 3 and api.requests[2].method == "POST"

    run(main)


def test_failures_that_differ_only_in_their_counts_are_one_series() -> None:
    """The key holds the note's substance (digits folded), not the pod's resourceVersion: an
    attempt after our own status patch (a new resourceVersion) failing for the same reasons on
    another number of nodes is a repeat, as the storm of issue 30 needs."""

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        failed(rec, make_pod("7"), note="0/4000 nodes are available: 12 Insufficient nvidia.com/gpu.")
        failed(rec, make_pod("8"), note="0/3990 nodes are available: 10 Insufficient nvidia.com/gpu.")
        failed(rec, make_pod("9"), note="0/3980 nodes are available: 9 Insufficient nvidia.com/gpu.")
        await rec.drain()
        # Repeats before the create went out ride on it: one POST carrying the series.
        (post,) = api.requests
        assert post.body["series"]["count"] == 3
        assert post.body["note"].startswith("0/4000")  # the series keeps its first note
        assert recorder_module.substance("0/3980 nodes: 9 x.") == "#/# nodes: # x."

    run(main)


def test_events_that_differ_in_key_fields_are_separate_events() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        other = msgspec.structs.replace(
            make_pod("7"), metadata=msgspec.structs.replace(make_pod("7").metadata, name="q", uid="uid-q")
        )
        failed(rec, make_pod("7"))
        failed(rec, other)  # another pod
        failed(rec, make_pod("7"), reason="Preempted")
        failed(rec, make_pod("7"), type_="Normal")
        rec.event(make_pod("7"), controller="other-scheduler", type_="Warning", reason="FailedScheduling",
                  action="Scheduling", note="x")  # fmt: skip
        await rec.drain()
        assert [r.method for r in api.requests] == ["POST"] * 5
        assert len({r.body["metadata"]["name"] for r in api.requests}) == 5
        assert api.requests[4].body["reportingInstance"] == f"other-scheduler-{hostname()}"

    run(main)


class _Clock:
    """Stands in for the ``time`` module inside the recorder: wall time plus an offset."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def time_ns(self) -> int:
        return time.time_ns() + int(self.offset * 1e9)


def test_a_series_finishes_six_minutes_after_its_last_repeat_with_its_last_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """client-go's ``finishSeries``: a series whose last repeat is older than ``finishTime`` gets
    its final count written and is forgotten; the next repeat is a new event with its own series.
    Counts in between are not written (``refreshTime`` is 30 minutes)."""
    clock = _Clock()
    monkeypatch.setattr(recorder_module, "time", clock)

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod()
        failed(rec, pod)
        await rec.drain()
        clock.offset = 60.0
        failed(rec, pod)  # the series of 2
        await rec.drain()
        clock.offset = 120.0
        failed(rec, pod)  # counted
        await rec.drain()
        assert [r.method for r in api.requests] == ["POST", "PATCH"]
        clock.offset = 120.0 + 6 * 60.0 - 10
        rec.maintain()
        assert len(api.requests) == 2  # not finished yet
        clock.offset = 120.0 + 6 * 60.0 + 70
        rec.maintain()
        await rec.drain()
        assert [r.method for r in api.requests] == ["POST", "PATCH", "PATCH"]
        assert api.requests[2].body["series"]["count"] == 3
        first = api.requests[0].body["metadata"]["name"]
        failed(rec, pod)  # the finished series is forgotten: a new event
        await rec.drain()
        assert api.requests[3].method == "POST" and api.requests[3].body["metadata"]["name"] != first

    run(main)


def test_a_long_series_is_refreshed_every_thirty_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(recorder_module, "time", clock)

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod()
        for minute in range(0, 32):  # a failure every minute for 32 minutes
            clock.offset = minute * 60.0
            failed(rec, pod)
            rec.maintain()
            await rec.drain()
        methods = [r.method for r in api.requests]
        assert methods == ["POST", "PATCH", "PATCH"], methods
        assert api.requests[2].body["series"]["count"] >= 30

    run(main)


def test_a_series_patch_that_finds_no_event_creates_it() -> None:
    """client-go's recordEvent: a series PATCH answered 404 (the event was deleted) falls back
    to a create carrying the series."""

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod()
        failed(rec, pod)
        await rec.drain()
        api.events.clear()
        failed(rec, pod)
        await rec.drain()
        (stored,) = api.events.values()
        assert stored["series"]["count"] == 2
        assert [r.method for r in api.requests] == ["POST", "PATCH", "POST"]

    run(main)


def test_a_repeat_while_the_create_is_on_the_wire_is_written_after_it() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod()
        held = api.hold("POST", EVENTS)
        failed(rec, pod)
        await asyncio.wait_for(held.arrived.wait(), 5)
        failed(rec, pod)
        await asyncio.sleep(0.05)
        assert len(api.requests) == 1  # nothing more sent before the create is answered
        held.release.set()
        await rec.drain()
        assert [r.method for r in api.requests] == ["POST", "PATCH"]
        assert api.requests[1].body["series"]["count"] == 2

    run(main)


def test_a_flooding_pod_stays_within_its_write_budget_and_others_are_not_delayed() -> None:
    """Issue 30: a pod failing for ever-new reasons writes ``WRITE_BURST`` events at once, then
    waits for budget; a newer event of the same reason replaces one still waiting. Another pod's
    events go out at once."""

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod()
        for i in range(50):
            failed(rec, pod, note=f"0/4 nodes are available: reason {'x' * i}")
        await rec.drain(timeout=0.5)
        assert len(api.sent("POST", EVENTS)) <= recorder_module.WRITE_BURST + 1  # the burst, then the newest
        other = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, name="q", uid="uid-q"))
        before = len(api.requests)
        failed(rec, other)
        await asyncio.sleep(0.2)
        assert len(api.requests) == before + 1
        assert rec.superseded >= 50 - recorder_module.WRITE_BURST - 1

    run(main)


def test_rejected_events_are_not_retried() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        api.fail("POST", EVENTS, 403)
        failed(rec, make_pod("1"))
        await rec.drain()
        assert len(api.requests) == 1
        assert api.events == {}

    run(main)


def test_pending_writes_are_bounded() -> None:
    def named(name: str) -> Pod:
        p = make_pod("1")
        return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, name=name, uid=f"uid-{name}"))

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        held = api.hold("POST", EVENTS)
        failed(rec, named("a"))
        failed(rec, named("b"))  # dropped: one write is already pending
        await asyncio.wait_for(held.arrived.wait(), 5)
        held.release.set()
        await rec.drain()
        assert len(api.requests) == 1
        assert api.requests[0].body["regarding"]["name"] == "a"
        failed(rec, named("c"))  # room again
        await rec.drain()
        assert len(api.requests) == 2
        assert rec.dropped == 1

    run(main, max_pending=1)


def test_events_have_their_own_client_and_a_backlog_of_them_never_delays_a_status_patch() -> None:
    """kube-scheduler's eventClient: events are written EVENT_IN_FLIGHT at a time through their
    own connections, so a burst of them queues in the recorder, not in front of status patches."""

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        assert rec.events_client is not rec.client
        n = recorder_module.EVENT_IN_FLIGHT
        held = api.hold("POST", EVENTS, times=n)
        for i in range(n + 5):
            p = make_pod(str(i))
            failed(rec, msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid=f"uid-{i}")))
        await asyncio.wait_for(held.arrived.wait(), 5)
        rec.pod_scheduled_false(make_pod("99"), "Unschedulable", "0/4 nodes are available")
        for _ in range(100):
            if api.sent("PATCH", STATUS):
                break
            await asyncio.sleep(0.01)
        assert len(api.sent("PATCH", STATUS)) == 1  # not queued behind the held events
        assert len(api.sent("POST", EVENTS)) == n  # the other events wait in the recorder
        assert rec.pending() == n + 5
        held.release.set()
        await rec.drain()
        assert len(api.sent("POST", EVENTS)) == n + 5 and rec.pending() == 0
        await rec.close()

    run(main)


# ---- PodScheduled condition and nominatedNodeName ------------------------------------------


def scheduled_false(reason: str, message: str, transition: str = "2026-01-02T03:04:05Z") -> dict[str, Any]:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }


def test_pod_scheduled_false_is_patched_onto_a_pod_without_the_condition() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        t0 = int(time.time())
        rec.pod_scheduled_false(make_pod(), "Unschedulable", "0/4 nodes are available")
        await rec.drain()
        (patch,) = api.requests
        assert (patch.method, patch.path, patch.content_type) == ("PATCH", STATUS, SMP)
        (cond,) = patch.body["status"]["conditions"]
        assert set(patch.body["status"]) == {"conditions"}  # nothing nominated: nothing to clear
        assert cond["type"] == "PodScheduled" and cond["status"] == "False"
        assert cond["reason"] == "Unschedulable" and cond["message"] == "0/4 nodes are available"
        assert cond["lastProbeTime"] is None
        assert t0 - 1 <= parse_rfc3339(cond["lastTransitionTime"]) <= time.time() + 1
        assert "observedGeneration" not in cond

    run(main)


def test_pod_scheduled_false_is_not_patched_when_nothing_changed() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod(conditions=[scheduled_false("Unschedulable", "same")])
        rec.pod_scheduled_false(pod, "Unschedulable", "same")
        rec.pod_scheduled_false(make_pod(conditions=[scheduled_false("Unschedulable", "same")], nominated="n1"),
                                "Unschedulable", "same", clear_nominated=False)  # fmt: skip
        await rec.drain()
        assert api.requests == []

    run(main)


def test_a_new_message_keeps_the_last_transition_time_while_the_status_stays_false() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod(conditions=[scheduled_false("Unschedulable", "old", "2026-01-02T03:04:05Z")], generation=4)
        rec.pod_scheduled_false(pod, "Unschedulable", "new")
        await rec.drain()
        (cond,) = api.requests[0].body["status"]["conditions"]
        assert cond["message"] == "new"
        assert cond["lastTransitionTime"] == "2026-01-02T03:04:05Z"
        assert cond["observedGeneration"] == 4

    run(main)


def test_a_status_change_gets_a_new_last_transition_time() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        was_true = {**scheduled_false("", ""), "status": "True"}
        rec.pod_scheduled_false(make_pod(conditions=[was_true]), "Unschedulable", "gone")
        await rec.drain()
        (cond,) = api.requests[0].body["status"]["conditions"]
        assert cond["lastTransitionTime"] != "2026-01-02T03:04:05Z"
        assert abs(parse_rfc3339(cond["lastTransitionTime"]) - time.time()) < 5

    run(main)


def test_an_unchanged_condition_still_clears_the_nominated_node() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        pod = make_pod(conditions=[scheduled_false("Unschedulable", "same")], nominated="n1")
        rec.pod_scheduled_false(pod, "Unschedulable", "same")
        await rec.drain()
        (patch,) = api.requests
        assert patch.body == {"status": {"nominatedNodeName": None}}

    run(main)


def test_status_patch_is_retried_on_server_errors_and_gives_up_on_a_deleted_pod() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        api.fail("PATCH", STATUS, 503)
        rec.pod_scheduled_false(make_pod(), "Unschedulable", "m")
        await rec.drain()
        assert len(api.requests) == 2
        api.fail("PATCH", STATUS, 404)
        rec.pod_scheduled_false(make_pod(), "Unschedulable", "m")
        await rec.drain()
        assert len(api.requests) == 3

    run(main)


def test_nominate_patches_the_node_unless_already_nominated_there() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        await rec.nominate(make_pod(nominated="n1"), "n1")
        assert api.requests == []
        await rec.nominate(make_pod(nominated="n1"), "n2")
        (patch,) = api.requests
        assert (patch.method, patch.path, patch.content_type) == ("PATCH", STATUS, SMP)
        assert patch.body == {"status": {"nominatedNodeName": "n2"}}

    run(main)


def test_nominate_is_dropped_when_the_permit_wait_already_ended() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        settled.set_result(None)
        await rec.nominate(make_pod(), "n1", abandon=settled)
        assert api.requests == []

    run(main)


def test_status_writes_of_one_pod_land_in_the_order_they_were_made() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        held = api.hold("PATCH", STATUS)
        rec.pod_scheduled_false(make_pod(), "Unschedulable", "first decision")
        await held.arrived.wait()
        rec.pod_scheduled_false(make_pod(), "Unschedulable", "second decision")
        await asyncio.sleep(0.2)
        # The second write waits for the first: sent together, they could land in either order
        # and leave the older message on the pod.
        assert len(api.sent("PATCH", STATUS)) == 1
        held.release.set()
        await rec.drain()
        msgs = [r.body["status"]["conditions"][0]["message"] for r in api.sent("PATCH", STATUS)]
        assert msgs == ["first decision", "second decision"]

    run(main)


def test_a_nomination_behind_a_slow_status_write_is_dropped_when_the_permit_wait_ends() -> None:
    async def main(api: FakeApiServer, rec: Recorder) -> None:
        held = api.hold("PATCH", STATUS)
        rec.pod_scheduled_false(make_pod(), "Unschedulable", "earlier failure")
        await held.arrived.wait()
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        nominating = asyncio.create_task(rec.nominate(make_pod(), "n1", abandon=settled))
        await asyncio.sleep(0.1)
        assert not nominating.done()
        settled.set_result(None)  # the gang was allowed: bind now, never mind the nomination
        await asyncio.wait_for(nominating, 1.0)
        held.release.set()
        await rec.drain()
        assert len(api.sent("PATCH", STATUS)) == 1

    run(main)


def test_events_about_nodes_and_pod_groups_name_their_kind() -> None:
    """A node the scheduler cannot use gets its Warning in ``default`` (a cluster-scoped object,
    as client-go files it); a PodGroup in its own namespace."""
    from ome_scheduler.api.core import Node
    from ome_scheduler.api.scheduling import PodGroup

    node = msgspec.convert({"metadata": {"name": "n1", "uid": "uid-n1", "resourceVersion": "3"}}, Node)
    pg = msgspec.convert(
        {"metadata": {"name": "g", "namespace": "ns", "uid": "uid-g", "resourceVersion": "4"}}, PodGroup
    )

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        for obj in (node, pg):
            rec.event(
                obj,
                controller="ome-scheduler",
                type_="Warning",
                reason="FailedProcessing",
                action="Processing",
                note="x",
            )
        await rec.drain()
        by_path = {r.path: r.body for r in api.requests}
        ev = by_path["/apis/events.k8s.io/v1/namespaces/default/events"]
        assert ev["regarding"] == {
            "kind": "Node",
            "name": "n1",
            "uid": "uid-n1",
            "apiVersion": "v1",
            "resourceVersion": "3",
        }
        ev = by_path[EVENTS]
        assert ev["regarding"] == {
            "kind": "PodGroup",
            "namespace": "ns",
            "name": "g",
            "uid": "uid-g",
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "resourceVersion": "4",
        }
        assert ev["metadata"]["name"].startswith("g.")

    run(main)


def test_a_binding_waits_for_the_status_write_on_the_wire_and_drops_the_queued_ones() -> None:
    """``status_settled`` (before a Binding): the pod's PodScheduled=False patch already sent is
    waited for, so it cannot land after the Binding; one still queued is dropped unsent (the
    Binding supersedes it); other pods do not wait."""

    async def main(api: FakeApiServer, rec: Recorder) -> None:
        held = api.hold("PATCH", STATUS)
        pod = make_pod("1")
        rec.pod_scheduled_false(pod, "Unschedulable", "0/4 nodes are available")
        await asyncio.wait_for(held.arrived.wait(), 5)
        rec.pod_scheduled_false(pod, "Unschedulable", "0/5 nodes are available")  # queued behind it
        settled = asyncio.ensure_future(rec.status_settled(pod.metadata.uid, pod.metadata.namespace, pod.metadata.name))
        await asyncio.sleep(0.05)
        assert not settled.done()  # the first patch is still on the wire
        await asyncio.wait_for(rec.status_settled("other-uid", "ns", "other"), 1)  # nothing queued for it
        held.release.set()
        await asyncio.wait_for(settled, 5)
        await rec.drain()
        sent = api.sent("PATCH", STATUS)
        assert len(sent) == 1 and "0/4" in json.dumps(sent[0].body)  # the queued one was dropped
        rec.pod_scheduled_false(pod, "Unschedulable", "0/6 nodes are available")  # a later failure is written
        await rec.drain()
        assert len(api.sent("PATCH", STATUS)) == 2

    run(main)
