"""GatedBinder: no Binding from a stale view, none to a node that is gone, lost answers checked
against a re-read view rather than re-sent blindly (Bindings go to a real HTTP server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import aiohttp
import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.kube.binding import BindingRefused, GatedBinder, StaleView
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Informer
from tests.support.apiserver import FakeApiServer


def _pod(node: str = "") -> Pod:
    raw = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"nodeName": node}}
    return msgspec.convert(raw, Pod)


class FakeInformer:
    """What GatedBinder reads of an informer. A relist (asked for, or :meth:`listed`) completes
    after 50 ms and first runs ``on_relist`` (the test's idea of what the LIST brings)."""

    def __init__(self, name: str, store: dict[str, Any] | None = None) -> None:
        self.name = name
        self.store: dict[str, Any] = store if store is not None else {}
        self.stale = False
        self.listed_at = 1.0
        self.relists = 0
        self.on_relist: Any = None

    def current_since(self, t: float) -> bool:
        return not self.stale and self.listed_at >= t

    def request_relist(self) -> None:
        self.relists += 1
        asyncio.get_running_loop().call_later(0.05, self.listed)

    def listed(self) -> None:
        if self.on_relist is not None:
            self.on_relist(self)
        self.listed_at = time.monotonic()
        self.stale = False


class DropsAnswers(KubeClient):
    """A client whose next ``before`` Bindings fail in transport unsent, then ``after`` more fail
    in transport after the API server applied them (the answer is lost)."""

    before = 0
    after = 0

    async def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        transport_retries: int = 3,
        guard: Callable[[], None] | None = None,
    ) -> None:
        if self.before > 0:
            self.before -= 1
            raise aiohttp.ServerDisconnectedError()
        await super().bind(namespace, name, uid, node, transport_retries=transport_retries, guard=guard)
        if self.after > 0:
            self.after -= 1
            raise aiohttp.ServerDisconnectedError()


class Env:
    def __init__(self, api: FakeApiServer, **binder: Any) -> None:
        self.api = api
        self.client = DropsAnswers(api.url, False, "t", qps=0, burst=1)
        api._clients.append(self.client)
        api.pods["ns/p"] = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {}}
        self.nodes = FakeInformer("nodes", {"n1": object(), "n2": object()})
        self.pods = FakeInformer("pods", {"ns/p": _pod()})
        self.pods.on_relist = lambda inf: inf.store.update(
            {"ns/p": _pod(str(api.pods["ns/p"]["spec"].get("nodeName") or ""))}
        )
        self.other = FakeInformer("podgroups")
        self.binder = GatedBinder(self.client, poll=0.01, **binder)
        infs = cast(list[Informer[Any]], [self.nodes, self.pods, self.other])
        self.binder.use(infs, nodes=infs[0], pods=infs[1])

    def posts(self) -> int:
        return len(self.api.sent("POST", "/api/v1/namespaces/ns/pods/p/binding"))


def run(test: Any) -> None:
    async def main() -> None:
        async with FakeApiServer() as api:
            await test(api)

    asyncio.run(main())


def test_a_binding_to_a_node_the_informer_no_longer_has_is_refused_unsent() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api)
        del env.nodes.store["n1"]
        with pytest.raises(BindingRefused, match='node "n1" no longer exists'):
            await env.binder.bind("ns", "p", "u1", "n1")
        assert env.posts() == 0

    run(test)


def test_a_stale_informer_holds_bindings_until_it_has_relisted() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api)
        env.other.stale = True  # its watch failed; its LIST has not completed yet
        task = asyncio.create_task(env.binder.bind("ns", "p", "u1", "n1"))
        await asyncio.sleep(0.2)
        assert env.posts() == 0 and not task.done()
        env.other.listed()
        await asyncio.wait_for(task, 2)
        assert env.posts() == 1 and api.pods["ns/p"]["spec"]["nodeName"] == "n1"

    run(test)


def test_a_view_that_stays_stale_fails_the_binding_without_sending_it() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api, fresh_timeout=0.2)
        env.nodes.stale = True
        with pytest.raises(StaleView, match="informers: nodes"):
            await env.binder.bind("ns", "p", "u1", "n1")
        assert env.posts() == 0

    run(test)


def test_a_lost_answer_is_settled_by_a_relist_not_by_sending_again() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api)
        env.client.after = 1  # applied by the server, the answer never arrives
        await env.binder.bind("ns", "p", "u1", "n1")
        assert env.posts() == 1, "the relist showed the pod bound to n1: nothing re-sent"
        assert env.nodes.relists == env.pods.relists == env.other.relists == 1

    run(test)


def test_a_binding_lost_on_the_way_is_resent_once_the_view_is_current() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api)
        env.client.before = 1  # never reached the server
        await env.binder.bind("ns", "p", "u1", "n1")
        assert env.posts() == 1 and api.pods["ns/p"]["spec"]["nodeName"] == "n1"
        assert env.pods.relists == 1

    run(test)


def test_a_node_deleted_while_the_server_was_out_of_reach_is_not_bound_to() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api)
        env.client.before = 1
        env.nodes.on_relist = lambda inf: inf.store.pop("n1")  # the relist shows n1 gone
        with pytest.raises(BindingRefused, match='node "n1" no longer exists'):
            await env.binder.bind("ns", "p", "u1", "n1")
        assert env.posts() == 0

    run(test)


def test_a_pod_bound_elsewhere_meanwhile_is_not_bound_again() -> None:
    async def test(api: FakeApiServer) -> None:
        env = Env(api)
        env.pods.store["ns/p"] = _pod("n2")
        with pytest.raises(BindingRefused, match='already bound to node "n2"'):
            await env.binder.bind("ns", "p", "u1", "n1")
        assert env.posts() == 0

    run(test)


def test_the_fence_is_checked_after_the_wait_for_a_fresh_view_right_before_the_binding_is_sent() -> None:
    async def test(api: FakeApiServer) -> None:
        from ome_scheduler.framework.fence import Fence, Fenced

        env = Env(api)
        renewed: list[float | None] = [time.monotonic()]
        fence = Fence(lambda: renewed[0], renew_deadline=10.0)
        env.other.stale = True
        task = asyncio.create_task(env.binder.bind("ns", "p", "u1", "n1", guard=fence.check))
        await asyncio.sleep(0.1)
        renewed[0] = None  # the lease is lost while the Binding waits for the view
        env.other.listed()
        with pytest.raises(Fenced, match="does not hold the leader lease"):
            await asyncio.wait_for(task, 2)
        assert env.posts() == 0 and not api.pods["ns/p"]["spec"].get("nodeName")

    run(test)


def test_a_binding_is_sent_only_after_the_pods_earlier_status_writes() -> None:
    async def test(api: FakeApiServer) -> None:
        settled = asyncio.Event()
        asked: list[tuple[str, str, str]] = []

        async def status_settled(uid: str, namespace: str, name: str) -> None:
            asked.append((uid, namespace, name))
            await settled.wait()

        env = Env(api, status_settled=status_settled)
        task = asyncio.create_task(env.binder.bind("ns", "p", "u1", "n1"))
        await asyncio.sleep(0.1)
        assert asked == [("u1", "ns", "p")] and env.posts() == 0  # a PodScheduled=False still on its way
        settled.set()
        await asyncio.wait_for(task, 2)
        assert env.posts() == 1

    run(test)
