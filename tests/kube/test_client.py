"""The API client's PriorityGate: Bindings overtake status patches and events when the server is busy."""

from __future__ import annotations

import asyncio

from ome_scheduler.kube.client import PRIORITY_CRITICAL, PRIORITY_EVENTS, PRIORITY_STATUS, KubeClient, PriorityGate


def test_gate_admits_up_to_capacity_then_by_priority_fifo_within() -> None:
    async def main() -> list[str]:
        gate = PriorityGate(2)
        order: list[str] = []
        release = asyncio.Event()

        async def holder(name: str) -> None:
            await gate.acquire(PRIORITY_EVENTS)
            order.append(name)
            await release.wait()
            gate.release()

        async def user(name: str, prio: int) -> None:
            await gate.acquire(prio)
            order.append(name)
            gate.release()

        holders = [asyncio.create_task(holder(f"h{i}")) for i in range(2)]
        await asyncio.sleep(0)
        assert gate.in_use == 2
        waiters = [
            asyncio.create_task(user("event", PRIORITY_EVENTS)),
            asyncio.create_task(user("status-1", PRIORITY_STATUS)),
            asyncio.create_task(user("bind-1", PRIORITY_CRITICAL)),
            asyncio.create_task(user("status-2", PRIORITY_STATUS)),
            asyncio.create_task(user("bind-2", PRIORITY_CRITICAL)),
        ]
        await asyncio.sleep(0)
        assert len(gate) == 5
        release.set()
        await asyncio.gather(*holders, *waiters)
        assert gate.in_use == 0 and len(gate) == 0
        return order

    order = asyncio.run(main())
    assert order == ["h0", "h1", "bind-1", "bind-2", "status-1", "status-2", "event"]


def test_cancelled_waiter_does_not_leak_a_slot() -> None:
    async def main() -> None:
        gate = PriorityGate(1)
        await gate.acquire(PRIORITY_CRITICAL)
        waiter = asyncio.create_task(gate.acquire(PRIORITY_STATUS))
        await asyncio.sleep(0)
        waiter.cancel()
        gate.release()
        await asyncio.sleep(0)
        assert gate.in_use == 0
        await asyncio.wait_for(gate.acquire(PRIORITY_EVENTS), 1.0)
        assert gate.in_use == 1

    asyncio.run(main())


def test_request_waiting_for_a_slot_is_dropped_when_abandoned() -> None:
    async def main() -> None:
        # Port 9 on loopback refuses connections: a request that is sent raises.
        client = KubeClient("http://127.0.0.1:9", False, None, qps=0, burst=1, max_in_flight=1)
        await client.gate.acquire(PRIORITY_CRITICAL)  # the only slot is busy
        abandon: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        req = asyncio.create_task(client.patch("/x", {}, priority=PRIORITY_STATUS, abandon=abandon, retries=0))
        await asyncio.sleep(0.01)
        assert len(client.gate) == 1 and not req.done()
        abandon.set_result(None)
        assert await asyncio.wait_for(req, 1.0) == b""
        assert len(client.gate) == 0 and client.gate.in_use == 1  # the holder's slot only
        client.gate.release()
        sent = asyncio.create_task(client.patch("/x", {}, priority=PRIORITY_STATUS, abandon=abandon, retries=0))
        assert await asyncio.wait_for(sent, 1.0) == b""  # already abandoned: never sent
        await client.close()

    asyncio.run(main())


def test_binding_retried_after_a_lost_response_is_a_success() -> None:
    """The first Binding is applied but its answer is lost (500); the retry gets 409 "already
    assigned" to the node we chose: that is our own Binding, not a failure."""
    from ome_scheduler.kube.client import ApiError
    from tests.support.apiserver import FakeApiServer

    async def main() -> None:
        async with FakeApiServer() as srv:
            srv.pods["ns/p"] = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {}}
            srv.pods["ns/q"] = {"metadata": {"name": "q", "namespace": "ns", "uid": "u2"}, "spec": {}}
            srv.lose_binding_responses = 1
            c = srv.client()
            await c.bind("ns", "p", "u1", "n1")
            assert srv.pods["ns/p"]["spec"]["nodeName"] == "n1"
            assert len(srv.sent("POST", "/api/v1/namespaces/ns/pods/p/binding")) == 2
            srv.pods["ns/q"]["spec"]["nodeName"] = "other"  # bound elsewhere by someone else
            try:
                await c.bind("ns", "q", "u2", "n1")
            except ApiError as exc:
                assert exc.code == 409
            else:
                raise AssertionError("a pod bound to another node must stay a failure")

    asyncio.run(main())


def test_a_guard_that_raises_sends_nothing_and_frees_the_slot() -> None:
    """``guard`` runs after the slot and the rate limiter, right before the attempt is sent: what
    it raises ends the request unsent, and the in-flight slot goes back to the gate."""
    from tests.support.apiserver import FakeApiServer

    class Refused(Exception):
        pass

    def refuse() -> None:
        raise Refused

    async def main() -> None:
        async with FakeApiServer() as srv:
            c = srv.client(max_in_flight=1)
            try:
                await c.post("/api/v1/namespaces/ns/pods/p/binding", {}, guard=refuse)
            except Refused:
                pass
            else:
                raise AssertionError("the guard's exception propagates")
            assert srv.requests == [] and c.gate.in_use == 0
            calls: list[int] = []
            srv.lists["/api/v1/namespaces/ns/pods"] = []
            await asyncio.wait_for(c.get("/api/v1/namespaces/ns/pods", guard=lambda: calls.append(1)), 5)
            assert calls == [1] and len(srv.requests) == 1

    asyncio.run(main())


def test_a_derived_client_names_itself_in_the_user_agent() -> None:
    """client-go's ``rest.AddUserAgent``: the leader elector's requests read
    ``ome-scheduler/0.1.0/leader-election`` in the API server's audit log."""
    c = KubeClient("https://127.0.0.1:1", False, "t", qps=5, burst=10)
    d = c.derive(qps=5, burst=10, max_in_flight=2, max_connections=2, user_agent="leader-election")
    assert d._headers["User-Agent"] == "ome-scheduler/0.1.0/leader-election"
    assert c._headers["User-Agent"] == "ome-scheduler/0.1.0"
    assert d.limiter is not c.limiter and d.gate is not c.gate
