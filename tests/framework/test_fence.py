"""The fence: no Binding, PreBind patch or Permit release once the last lease renewal is
``renewDeadline`` old (``framework/fence.py``).

The write ports run over a real :class:`~ome_scheduler.kube.client.KubeClient` against the
test API server (``tests/support/apiserver.py``), so "nothing was sent" is what the server saw; the
Permit release runs through a whole :class:`~ome_scheduler.scheduler.Scheduler` with the
chart's profile and a gang of two.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.fence import Fence, Fenced, FencedApiWriter, FencedBinder
from ome_scheduler.kube.client import ApiError
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from tests.support.apiserver import FakeApiServer
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.plugins_env import chart_config

BINDING = "/api/v1/namespaces/ns/pods/p/binding"


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lease:
    """What the elector tells the fence: the last renewal, or None when not leading."""

    def __init__(self, at: float | None) -> None:
        self.at = at

    def renewed_at(self) -> float | None:
        return self.at


def test_writes_are_allowed_only_while_the_last_renewal_is_younger_than_the_renew_deadline() -> None:
    clock = Clock()
    lease = Lease(clock.now)
    fence = Fence(lease.renewed_at, 10.0, clock)
    assert fence.reason() is None
    fence.check()
    clock.now += 9.999
    assert fence.reason() is None
    clock.now += 0.001  # exactly renewDeadline old: a standby may be a lease duration away
    assert fence.reason() == "last lease renewal 10.0s ago, not within renewDeadline 10s"
    with pytest.raises(Fenced, match="fenced: last lease renewal 10.0s ago"):
        fence.check()
    lease.at = clock.now  # renewed again
    fence.check()
    lease.at = None  # released or lost
    assert fence.reason() == "this process does not hold the leader lease"
    with pytest.raises(Fenced):
        fence.check()


def run(main: Any) -> None:
    async def wrapper() -> None:
        async with FakeApiServer() as api:
            await main(api)

    asyncio.run(wrapper())


def test_a_binding_passes_an_open_fence_and_a_closed_one_sends_nothing() -> None:
    async def main(api: FakeApiServer) -> None:
        clock = Clock()
        lease = Lease(clock.now)
        binder = FencedBinder(api.client(), Fence(lease.renewed_at, 10.0, clock))
        await binder.bind("ns", "p", "uid-p", "n1")
        assert [r.path for r in api.sent("POST")] == [BINDING]
        clock.now += 10.0
        with pytest.raises(Fenced):
            await binder.bind("ns", "q", "uid-q", "n1")
        assert len(api.sent("POST")) == 1, "a fenced Binding never reaches the API server"

    run(main)


def test_a_retry_is_checked_again_before_it_is_sent() -> None:
    """The fence guards each attempt, not the call: a Binding whose first attempt failed is not
    retried once the last renewal has become too old while the first attempt was out."""

    async def main(api: FakeApiServer) -> None:
        clock = Clock()
        lease = Lease(clock.now)
        binder = FencedBinder(api.client(), Fence(lease.renewed_at, 10.0, clock))
        api.fail("POST", BINDING, 503)
        first = api.hold("POST", BINDING)
        caller_guard: list[int] = []

        async def lease_ages_while_the_first_attempt_is_on_the_wire() -> None:
            await first.arrived.wait()
            clock.now += 10.0
            first.release.set()  # answered 503: the client backs off, then retries

        aging = asyncio.create_task(lease_ages_while_the_first_attempt_is_on_the_wire())
        with pytest.raises(Fenced):
            await binder.bind("ns", "p", "uid-p", "n1", guard=lambda: caller_guard.append(len(api.sent("POST"))))
        await aging
        assert len(api.sent("POST")) == 1, "the retry was not sent"
        # The caller's own guard runs after the fence's: before the call and the first attempt.
        assert caller_guard == [0, 0]

    run(main)


def test_volume_patches_pass_the_fence_too() -> None:
    async def main(api: FakeApiServer) -> None:
        clock = Clock()
        lease = Lease(None)
        writer = FencedApiWriter(api.client(), Fence(lease.renewed_at, 10.0, clock))
        path = "/api/v1/namespaces/ns/persistentvolumeclaims/c"
        with pytest.raises(Fenced):
            await writer.patch(path, {"metadata": {"annotations": {"a": "b"}}})
        assert api.sent("PATCH") == []
        lease.at = clock.now
        with pytest.raises(ApiError):  # the test server serves no claims: sent, answered 404
            await writer.patch(path, {"metadata": {"annotations": {"a": "b"}}})
        assert [r.path for r in api.sent("PATCH")] == [path]

    run(main)


class Binder:
    """Records Bindings; ``guard`` is called as the real client calls it."""

    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []

    async def bind(self, namespace: str, name: str, uid: str, node: str, *, guard: Any = None) -> None:
        if guard is not None:
            guard()
        self.bound.append((name, node))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, regarding: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding.metadata.name, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        pass

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        await asyncio.sleep(0)


async def schedule(s: Scheduler, cycles: int = 100) -> None:
    """Pop and schedule up to ``cycles`` active pods, letting their binding cycles run."""
    for _ in range(cycles):
        if not len(s.queue.active):
            break
        q = await asyncio.wait_for(s.queue.pop(), 1.0)
        assert q is not None
        s.schedule_one(q)
        for _ in range(5):
            await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_gang_whose_gate_opens_on_a_fenced_leader_is_unwound_without_a_binding() -> None:
    """The first member waits at Permit; the fence closes; the second member opens the gate.
    Neither binds: the waiter is not released from Permit, the admitted member's Binding is
    refused, both are unreserved (nothing stays assumed) and requeued. Once the fence opens
    again, the gang binds whole."""

    async def main() -> None:
        clock = Clock()
        lease = Lease(clock.now)
        binder = Binder()
        cfg = parse_config(chart_config(), "test")
        rec = Recorder()
        s = Scheduler(cfg, metrics=Metrics(), binder=binder, recorder=rec, fence=Fence(lease.renewed_at, 10.0, clock))
        dk = "topology.ome.io/domain"
        for i in range(2):
            s.handlers.on_node_add(make_node(f"a{i}", {dk: "a"}, alloc={"nvidia.com/gpu": "1"}))
        s.handlers.on_pod_group_add(make_pod_group("g", min_member=2, topology_key=dk, timeout=60))
        for i in range(2):
            s.handlers.on_pod_add(make_pod(f"g-{i}", gang="g", requests={"nvidia.com/gpu": "1"}))
        await schedule(s, cycles=1)
        waiting = list(s.waiting_pods())
        assert [wp.pod_info.name for wp in waiting] == ["g-0"]

        clock.now += 10.0  # the leader stopped renewing (stalled, partitioned)
        await schedule(s, cycles=1)
        await s.drain_bindings(timeout=1.0)
        assert binder.bound == []
        assert list(s.waiting_pods()) == []
        assert not any(s.cache.is_assumed(pi.pod_key) for pi in s.pods.values())
        assert all(s.queue.contains(pi.pod_key) for pi in s.pods.values()), "both members are requeued"
        failed = {name: note for name, reason, note in rec.events if reason == "FailedScheduling"}
        # The waiter was stopped by the runtime before its binding cycle went on; the member
        # admitted at Permit by the gate reached Bind, whose Binding the fence refused unsent.
        assert failed["g-0"].startswith("not released from Permit: fenced: last lease renewal 10.0s ago")
        # a Bind plugin's error, wrapped as RunBindPlugins wraps it
        assert failed["g-1"] == (
            'running Bind plugin "DefaultBinder": fenced: last lease renewal 10.0s ago, not within renewDeadline 10s'
        )

        lease.at = clock.now  # renewed: the same gang binds whole
        s.activate([pi.pod for pi in s.pods.values()])
        await schedule(s)
        await s.drain_bindings(timeout=1.0)
        assert sorted(binder.bound) == [("g-0", "a0"), ("g-1", "a1")] or sorted(binder.bound) == [
            ("g-0", "a1"),
            ("g-1", "a0"),
        ]

    asyncio.run(main())
