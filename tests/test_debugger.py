"""The cache debugger: its comparison with a fresh LIST, the confirmation pass, OMEGangPack's
pins, and the settling of assumed pods whose confirmation never came (a real HTTP server
serves the lists and pods; the scheduler is real, filled through its informer handlers)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec
import pytest

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.app import debugger as debugger_mod
from ome_scheduler.app.debugger import CacheDebugger
from ome_scheduler.app.informers import INFORMERS, build_informer
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.types import PodInfo, gang_key
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from tests.support.apiserver import FakeApiServer
from tests.support.plugins_env import Binder, Recorder, chart_config

PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"


def raw_node(name: str, rv: str, clique: str = "a") -> dict[str, Any]:
    alloc = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": rv, "labels": {"clique": clique}},
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def raw_pod(name: str, rv: str, node: str = "", gang: str = "") -> dict[str, Any]:
    labels = {"scheduling.x-k8s.io/pod-group": gang} if gang else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": rv, "labels": labels},
        "spec": {"schedulerName": "ome-scheduler", "nodeName": node, "containers": [{"name": "c"}]},
    }


def raw_group(name: str, rv: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv}, "spec": {"minMember": 2}}


class World:
    """The API server's objects and a scheduler that has seen them all."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        cfg = parse_config(chart_config(), "test")
        self.s = Scheduler(cfg, metrics=Metrics(), binder=Binder(), recorder=Recorder())
        client = api.client()
        self.informers = {spec.name: build_informer(client, spec, self.s) for spec in INFORMERS}
        self.debugger = CacheDebugger(client, self.s, self.informers)
        api.lists[NODES] = [raw_node("n1", "1"), raw_node("n2", "2")]
        api.lists[PODS] = [raw_pod("b1", "3", node="n1", gang="g"), raw_pod("pend", "4", gang="g")]
        api.lists[GROUPS] = [raw_group("g", "5", "pg-1")]
        for n in api.lists[NODES]:
            self.s.handlers.on_node_add(msgspec.convert(n, Node))
        for p in api.lists[PODS]:
            self.s.handlers.on_pod_add(msgspec.convert(p, Pod))
        for g in api.lists[GROUPS]:
            self.s.handlers.on_pod_group_add(msgspec.convert(g, PodGroup))


def run(test: Callable[[World], Awaitable[None]]) -> None:
    async def main() -> None:
        async with FakeApiServer() as api:
            await test(World(api))

    asyncio.run(main())


def keys(diffs: list[debugger_mod.Difference]) -> set[tuple[str, str, str]]:
    return {d.key() for d in diffs}


def test_a_scheduler_in_step_with_the_server_has_no_drift() -> None:
    async def test(w: World) -> None:
        assert await w.debugger.run_once() == []

    run(test)


def test_every_kind_of_drift_is_found_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debugger_mod, "CONFIRM_DELAY", 0.0)

    async def test(w: World) -> None:
        w.s.cache.remove_node("n2")  # a node delete the informer never delivered
        w.s.handlers.on_pod_add(msgspec.convert(raw_pod("ghost", "6", node="n1"), Pod))  # deleted, unseen
        w.api.lists[PODS].append(raw_pod("b2", "7", node="n1"))  # bound, unseen
        w.s.queue.delete(w.s.pods["ns/pend"].pod_key)  # a pending pod of ours lost by the queue
        w.api.lists[GROUPS][0]["metadata"]["resourceVersion"] = "8"  # an update never delivered
        found = keys(await w.debugger.compare())
        assert found == {
            ("node", "n2", "missed"),
            ("pod", "ns/ghost", "redundant"),
            ("pod-lister", "ns/ghost", "redundant"),
            ("pod", "ns/b2", "missed"),
            ("pod-lister", "ns/b2", "missed"),
            ("queue", "ns/pend", "pending-pod-not-queued"),
            ("podgroup", "ns/g", "stale"),
        }

    run(test)


def test_a_difference_gone_by_the_second_look_is_not_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debugger_mod, "CONFIRM_DELAY", 0.2)

    async def test(w: World) -> None:
        n3 = raw_node("n3", "9")
        w.api.lists[NODES].append(n3)
        # The informer delivers the node while the debugger waits for its second look.
        asyncio.get_running_loop().call_later(0.05, w.s.handlers.on_node_add, msgspec.convert(n3, Node))
        assert await w.debugger.compare() == []

    run(test)


def test_pins_are_checked_against_podgroups_and_bound_members(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debugger_mod, "CONFIRM_DELAY", 0.0)

    async def test(w: World) -> None:
        gangs = cast(Any, w.s.frameworks["ome-scheduler"].plugins["OMEGangPack"]).gangs
        # g's member b1 is bound in clique a; pin g to clique b, and pin a gang without a PodGroup.
        gangs.pins.choose(gang_key("ns", "g"), "pg-1", "clique", "b", ["n9"], 2)
        gangs.pins.choose(gang_key("ns", "gone"), "pg-x", "clique", "a", ["n1"], 2)
        found = keys(await w.debugger.compare())
        assert ("plugin:OMEGangPack", "ns/g", "members-outside-pin") in found
        assert ("plugin:OMEGangPack", "ns/gone", "pin-without-podgroup") in found
        w.api.lists[GROUPS][0]["metadata"]["uid"] = "pg-2"
        w.s.handlers.on_pod_group_update(
            w.s.pod_group_state.groups()[gang_key("ns", "g")], msgspec.convert(w.api.lists[GROUPS][0], PodGroup)
        )
        gangs.pins.choose(gang_key("ns", "g"), "pg-1", "clique", "a", ["n1"], 2)  # a pin of the old PodGroup
        assert ("plugin:OMEGangPack", "ns/g", "pin-of-old-podgroup") in keys(await w.debugger.compare())

    run(test)


def test_overdue_assumptions_are_checked_with_a_get_then_kept_or_forgotten() -> None:
    async def test(w: World) -> None:
        cache, api = w.s.cache, w.api
        long_ago = time.monotonic() - 100

        def assume(name: str, server: dict[str, Any] | None) -> PodInfo:
            pi = PodInfo(msgspec.convert(raw_pod(name, "10"), Pod))
            w.s.pods[pi.key] = pi
            cache.assume_pod(pi.with_node("n1"), "n1")
            cache.finish_binding(pi.pod_key, long_ago)
            if server is not None:
                api.pods[pi.key] = server
            return pi

        bound = assume("landed", raw_pod("landed", "11", node="n1"))
        gone = assume("gone", None)
        unbound = assume("unbound", raw_pod("unbound", "12"))
        recent = assume("recent", raw_pod("recent", "13", node="n1"))
        cache.finish_binding(recent.pod_key, time.monotonic())
        assert await w.debugger.settle_assumed() == 2
        assert cache.is_assumed(bound.pod_key), "bound on the server: its capacity stays used"
        assert not cache.is_assumed(gone.pod_key) and not cache.is_assumed(unbound.pod_key)
        assert w.s.queue.contains(unbound.pod_key), "still pending and ours: scheduled again"
        assert cache.is_assumed(recent.pod_key), "not overdue yet"
        assert w.informers["pods"]._relist.is_set(), "the pod informer re-reads what it missed"
        gets = {r.path for r in api.sent("GET", "/api/v1/namespaces/ns/pods/")}
        assert "/api/v1/namespaces/ns/pods/recent" not in gets

    run(test)
