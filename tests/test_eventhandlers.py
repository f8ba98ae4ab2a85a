"""Hostile objects through the real informer decode path into a real Scheduler's handlers.

Issue 13's crash: the API server accepts ``requests: {cpu: "1e1000000"}`` (it stores
``10e999999``); a pod with that request, whichever scheduler it names, reached the pod
informer's handler, raised ``decimal.Overflow`` and took the process down, and the relist after
a restart met the same pod again. Every test here feeds raw API JSON through
:func:`ome_scheduler.app.informers.build_informer` (the production wiring) and checks the scheduler goes
on serving everyone else.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import msgspec

from ome_scheduler.app.informers import INFORMERS, build_informer
from ome_scheduler.config.load import parse_config
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Informer
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.plugins_env import chart_config


class ListClient:
    """Answers the informer's LIST with one page of ``items`` (the relist after a restart)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def get(self, path: str, params: dict[str, str]) -> bytes:
        return json.dumps({"metadata": {"resourceVersion": "100"}, "items": self.items}).encode()


class Events:
    """Records every event and condition the scheduler writes."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, pod: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        md = pod.metadata
        self.events.append((f"{md.namespace}/{md.name}", type_, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        pass

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        pass


def scheduler() -> tuple[Scheduler, Events]:
    ev = Events()
    return Scheduler(parse_config(chart_config(), "test"), metrics=Metrics(), binder=None, recorder=ev), ev


def informer(s: Scheduler, name: str, client: Any = None) -> Informer[Any]:
    spec = next(i for i in INFORMERS if i.name == name)
    return build_informer(cast(KubeClient, client), spec, s)


def raw_pod(
    name: str, cpu: str, scheduler_name: str = "ome-scheduler", rv: str = "1", node: str = ""
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "c", "image": "img", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "tenant", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": spec,
    }


def raw_node(name: str, cpu: str = "8") -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": name},
        },
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_huge_cpu_pod_of_another_scheduler_does_not_end_the_watch() -> None:
    s, _ = scheduler()
    pods = informer(s, "pods")
    pods._handle_line(line("ADDED", raw_pod("hostile", "10e999999", scheduler_name="nobody")))
    pods._handle_line(line("ADDED", raw_pod("fine", "1")))
    assert "tenant/hostile" in pods.store
    assert s.queue.contains(s.pods["tenant/fine"].pod_key)


def test_relist_with_a_huge_cpu_pod_does_not_crash_loop() -> None:
    s, _ = scheduler()
    items = [raw_pod("hostile", "10e999999", scheduler_name="nobody"), raw_pod("fine", "1")]
    pods = informer(s, "pods", ListClient(items))
    asyncio.run(pods._list())
    assert set(pods.store) == {"tenant/hostile", "tenant/fine"}
    assert s.queue.contains(s.pods["tenant/fine"].pod_key)


class Conditions(Events):
    """Also records PodScheduled=False patches."""

    def __init__(self) -> None:
        super().__init__()
        self.conditions: list[tuple[str, str, str]] = []

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        self.conditions.append((f"{pod.metadata.namespace}/{pod.metadata.name}", reason, message))


def scheduler_with_conditions() -> tuple[Scheduler, Conditions]:
    ev = Conditions()
    return Scheduler(parse_config(chart_config(), "test"), metrics=Metrics(), binder=None, recorder=ev), ev


async def one_cycle(s: Scheduler) -> None:
    q = await asyncio.wait_for(s.queue.pop(), 1)
    assert q is not None
    s.schedule_one(q)


def test_huge_cpu_pod_of_ours_is_simply_unschedulable() -> None:
    s, ev = scheduler()
    nodes, pods = informer(s, "nodes"), informer(s, "pods")
    nodes._handle_line(line("ADDED", raw_node("n1")))
    pods._handle_line(line("ADDED", raw_pod("hostile", "10e999999")))
    asyncio.run(one_cycle(s))
    assert ev.events == [
        (
            "tenant/hostile",
            "Warning",
            "FailedScheduling",
            "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate",
        )
    ]


def test_pod_of_ours_that_cannot_be_handled_says_why_and_the_others_are_served() -> None:
    s, ev = scheduler_with_conditions()
    pods = informer(s, "pods")
    # "1K" is no quantity: the API server would refuse it, so it stands for any object a handler
    # cannot take in (a bug, an unguarded field).
    pods._handle_line(line("ADDED", raw_pod("bad", "1K")))
    pods._handle_line(line("ADDED", raw_pod("fine", "1")))
    note = "pod tenant/bad cannot be scheduled: QuantityError: unable to parse quantity's suffix: '1K'"
    assert ev.events == [("tenant/bad", "Warning", "FailedScheduling", note)]
    assert ev.conditions == [("tenant/bad", "SchedulerError", note)]
    assert "tenant/bad" not in s.pods and s.queue.contains(s.pods["tenant/fine"].pod_key)
    # the same failure on the next update is not reported again
    pods._handle_line(line("MODIFIED", raw_pod("bad", "1K", rv="2")))
    assert len(ev.events) == 1
    # fixed: queued like a new pod
    pods._handle_line(line("MODIFIED", raw_pod("bad", "2", rv="3")))
    assert s.queue.contains(s.pods["tenant/bad"].pod_key)


def test_bad_pod_of_another_scheduler_is_only_logged() -> None:
    s, ev = scheduler()
    pods = informer(s, "pods")
    pods._handle_line(line("ADDED", raw_pod("bad", "1K", scheduler_name="nobody")))
    assert ev.events == [] and pods.failed


def test_node_that_cannot_be_handled_gets_a_warning_and_stays_out_of_the_cache() -> None:
    s, ev = scheduler()
    nodes = informer(s, "nodes")
    nodes._handle_line(line("ADDED", raw_node("bad", cpu="1K")))
    nodes._handle_line(line("ADDED", raw_node("good")))
    assert ev.events == [
        (
            "/bad",
            "Warning",
            "FailedProcessing",
            "node bad cannot be used for scheduling: QuantityError: unable to parse quantity's suffix: '1K'",
        )
    ]
    assert [n.name for n in s.cache.node_infos()] == ["good"]
    # an update of a node the cache knows keeps its last good version when the new one fails
    nodes._handle_line(line("MODIFIED", {**raw_node("good", cpu="1K"), "metadata": raw_node("good")["metadata"]}))
    ni = s.cache.get_node_info("good")
    assert ni is not None and ni.allocatable.milli_cpu == 8000


def test_unreadable_node_and_pod_group_get_a_warning() -> None:
    s, ev = scheduler()
    nodes, groups = informer(s, "nodes"), informer(s, "podgroups")
    nodes._handle_line(line("ADDED", {"metadata": {"name": "n", "resourceVersion": "1"}, "spec": {"taints": "x"}}))
    groups._handle_line(
        line(
            "ADDED",
            {"metadata": {"name": "g", "namespace": "tenant", "resourceVersion": "1"}, "spec": {"minMember": "x"}},
        )
    )
    assert [(who, reason) for who, _, reason, _ in ev.events] == [
        ("/n", "FailedProcessing"),
        ("tenant/g", "FailedProcessing"),
    ]
    assert ev.events[1][3].startswith("PodGroup tenant/g cannot be read: Expected `int | null`, got `str`")


def test_an_exception_inside_a_cycle_costs_only_that_attempt() -> None:
    """A bug after the pod was assumed (here: Permit raising outside the plugins' guard)
    releases the node, fails the pod with an Error status and retries it after backoff."""
    s, ev = scheduler_with_conditions()
    nodes, pods = informer(s, "nodes"), informer(s, "pods")
    nodes._handle_line(line("ADDED", raw_node("n1")))
    pods._handle_line(line("ADDED", raw_pod("p", "1")))
    fw = s.frameworks["ome-scheduler"]

    def broken_permit(*_: Any) -> None:
        raise RuntimeError("permit exploded")

    setattr(fw, "run_permit", broken_permit)  # noqa: B010 - a bug injected into one method
    asyncio.run(one_cycle(s))
    key = s.pods["tenant/p"].pod_key
    assert not s.cache.is_assumed(key)
    ni = s.cache.get_node_info("n1")
    assert ni is not None and ni.requested.milli_cpu == 0
    assert ev.events == [("tenant/p", "Warning", "FailedScheduling", "permit exploded")]
    assert ev.conditions == [("tenant/p", "SchedulerError", "permit exploded")]
    assert s.queue.contains(key)  # in the error backoff, retried


def test_a_pre_enqueue_plugin_that_raises_gates_only_its_pod() -> None:
    s, _ = scheduler()
    pods = informer(s, "pods")
    fw = s.frameworks["ome-scheduler"]
    plugin = fw.pre_enqueue_plugins[0]
    original = plugin.pre_enqueue

    def pre_enqueue(pi: Any) -> Any:
        if pi.name == "bad":
            raise RuntimeError("pre-enqueue exploded")
        return original(pi)

    setattr(plugin, "pre_enqueue", pre_enqueue)  # noqa: B010 - a bug injected into one plugin
    pods._handle_line(line("ADDED", raw_pod("bad", "1")))
    pods._handle_line(line("ADDED", raw_pod("fine", "1")))
    assert s.queue.pending()["active"] == 1 and s.queue.pending()["unschedulable"] == 1
    assert pods.failed == {}


def test_a_failing_update_of_an_assumed_pod_leaves_its_binding_cycle_alone() -> None:
    s, ev = scheduler()
    pods = informer(s, "pods")
    pods._handle_line(line("ADDED", raw_pod("p", "1")))
    pi = s.pods["tenant/p"]
    s.cache.assume_pod(pi.with_node("n1"), "n1")
    pods._handle_line(line("MODIFIED", raw_pod("p", "1K", rv="2")))
    assert pods.failed and ev.events == [] and s.cache.is_assumed(pi.pod_key)


def test_a_gang_member_another_scheduler_serves_wakes_the_members_waiting_for_it() -> None:
    """The member of ours failed with "waiting for all PodGroup member templates"; the sibling
    that completes the gang names another scheduler, so no cycle of ours runs for it: its
    arrival (or its joining the gang by a label change) alone must move the waiting member out
    of the unschedulable pods, not the 5-minute flush. Pods of other gangs stay put."""
    for joins_by_label in (False, True):
        s, ev = scheduler()
        s.handlers.on_node_add(make_node("n1", {"rack": "r1"}))
        s.handlers.on_node_add(make_node("n2", {"rack": "r1"}))
        for g in ("g", "other"):
            s.handlers.on_pod_group_add(make_pod_group(g, min_member=2, topology_key="rack"))
            s.handlers.on_pod_add(make_pod(f"{g}-0", gang=g))
            asyncio.run(one_cycle(s))
        assert ev.events[-1][3].startswith(
            "0/2 nodes are available: waiting for all PodGroup member templates for ns/other."
        )
        assert s.queue.pending()["unschedulable"] == 2
        sibling = make_pod("g-1", gang=None if joins_by_label else "g", spec={"schedulerName": "someone-else"})
        s.handlers.on_pod_add(sibling)
        if joins_by_label:
            assert s.queue.pending()["unschedulable"] == 2  # not a member yet
            labels = {**sibling.metadata.labels, "scheduling.x-k8s.io/pod-group": "g"}
            joined = msgspec.structs.replace(sibling, metadata=msgspec.structs.replace(sibling.metadata, labels=labels))
            s.handlers.on_pod_update(sibling, joined)
        pending = s.queue.pending()
        assert pending["unschedulable"] == 1 and pending["active"] + pending["backoff"] == 1, pending
        assert s.queue.contains(s.pods["ns/g-0"].pod_key)
