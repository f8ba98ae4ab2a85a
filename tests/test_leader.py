"""LeaderElector against a real HTTP server playing kube-apiserver's Lease registry.

What client-go's ``tools/leaderelection`` promises: a missing Lease is created, a free one is
taken, a held one only after it went unrenewed for its ``leaseDurationSeconds``; every write is
a PUT guarded by ``resourceVersion`` (a 409 means somebody else won); renewals keep
``acquireTime`` and ``leaseTransitions``; a change of holder counts one transition; releasing
clears the holder; a leader that cannot renew for ``renewDeadline`` gives up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ome_scheduler.app.leader import LeaderElector
from ome_scheduler.metrics import Metrics
from ome_scheduler.util.timestamps import now_micro, parse_rfc3339
from tests.support.apiserver import FakeApiServer

NS, NAME = "kube-system", "ome-scheduler"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
LEASE = f"{LEASES}/{NAME}"


def run(main: Callable[[FakeApiServer], Awaitable[None]]) -> None:
    async def wrapper() -> None:
        async with FakeApiServer() as api:
            await main(api)

    asyncio.run(wrapper())


def elector(api: FakeApiServer, identity: str, **kw: Any) -> LeaderElector:
    kw.setdefault("retry_period", 0.05)
    return LeaderElector(api.client(), namespace=NS, name=NAME, identity=identity, **kw)


def held_by(holder: str, *, duration: int = 15, transitions: int = 0) -> dict[str, Any]:
    now = now_micro()
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": now,
        "renewTime": now,
        "leaseTransitions": transitions,
    }


def master_status(m: Metrics) -> float | None:
    return m.registry.get_sample_value("leader_election_master_status", {"name": NAME})


def test_missing_lease_is_created_with_this_holder() -> None:
    async def main(api: FakeApiServer) -> None:
        m = Metrics()
        a = elector(api, "a", metrics=m)
        assert master_status(m) == 0
        await asyncio.wait_for(a.acquire(), 5)
        assert a.is_leader and master_status(m) == 1
        assert [(r.method, r.path) for r in api.requests] == [("GET", LEASE), ("POST", LEASES)]
        posted = api.requests[1].body
        assert posted["metadata"] == {"name": NAME, "namespace": NS}
        spec = api.lease(NS, NAME)["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 15
        assert spec["leaseTransitions"] == 0
        assert spec["acquireTime"] == spec["renewTime"]
        assert abs(parse_rfc3339(spec["renewTime"]) - time.time()) < 5

    run(main)


def test_free_lease_is_taken_with_one_more_transition_and_the_observed_resource_version() -> None:
    async def main(api: FakeApiServer) -> None:
        released = {k: v for k, v in held_by("", duration=1, transitions=3).items() if k != "holderIdentity"}
        free = api.put_lease(NS, NAME, released)
        a = elector(api, "a")
        assert await a.try_acquire_or_renew()
        put = api.sent("PUT")
        assert len(put) == 1
        assert put[0].body["metadata"]["resourceVersion"] == free["metadata"]["resourceVersion"]
        spec = api.lease(NS, NAME)["spec"]
        assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 4

    run(main)


def test_held_lease_is_taken_only_after_it_went_unrenewed_for_its_lease_duration() -> None:
    async def main(api: FakeApiServer) -> None:
        api.put_lease(NS, NAME, held_by("b", duration=1, transitions=2))
        a = elector(api, "a")
        t0 = time.monotonic()
        await asyncio.wait_for(a.acquire(), 5)
        waited = time.monotonic() - t0
        assert 0.95 <= waited < 3.0, waited
        assert len(api.sent("PUT")) == 1  # no write while b's lease was valid
        assert len(api.sent("GET")) > 5  # it kept looking every retry period
        spec = api.lease(NS, NAME)["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseTransitions"] == 3
        assert spec["leaseDurationSeconds"] == 15  # the new holder's own duration
        assert spec["acquireTime"] == spec["renewTime"]

    run(main)


def test_a_lease_that_keeps_being_renewed_is_never_taken() -> None:
    async def main(api: FakeApiServer) -> None:
        api.put_lease(NS, NAME, held_by("b", duration=1))
        a = elector(api, "a")
        task = asyncio.create_task(a.acquire())
        for _ in range(5):  # b renews every 0.3 s for 1.5 s: longer than its lease duration
            await asyncio.sleep(0.3)
            api.put_lease(NS, NAME, held_by("b", duration=1))
        assert not task.done() and not a.is_leader
        assert api.sent("PUT") == []
        renewed_last = time.monotonic()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - renewed_last >= 0.9
        assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "a"

    run(main)


def test_renewals_keep_acquire_time_and_transitions_and_advance_renew_time() -> None:
    async def main(api: FakeApiServer) -> None:
        api.put_lease(NS, NAME, held_by("", transitions=5))
        a = elector(api, "a")
        await a.acquire()
        first = api.lease(NS, NAME)["spec"]
        assert first["leaseTransitions"] == 6
        lost: list[bool] = []
        renewing = asyncio.create_task(a.renew_forever(lambda: lost.append(True)))
        await asyncio.sleep(0.4)
        renewing.cancel()
        puts = api.sent("PUT")
        assert len(puts) >= 4  # the take-over and at least three renewals
        renewals = [p.body["spec"] for p in puts[1:]]
        assert all(s["holderIdentity"] == "a" for s in renewals)
        assert all(s["acquireTime"] == first["acquireTime"] for s in renewals)
        assert all(s["leaseTransitions"] == 6 for s in renewals)
        times = [first["renewTime"]] + [s["renewTime"] for s in renewals]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert not lost and a.is_leader and a.healthy()

    run(main)


def test_release_clears_the_holder_and_the_next_candidate_takes_over_at_once() -> None:
    async def main(api: FakeApiServer) -> None:
        ma, mb = Metrics(), Metrics()
        a = elector(api, "a", metrics=ma)
        b = elector(api, "b", metrics=mb)
        await a.acquire()
        assert not await b.try_acquire_or_renew()
        await a.release()
        assert not a.is_leader and master_status(ma) == 0
        released = api.lease(NS, NAME)["spec"]
        assert "holderIdentity" not in released or not released["holderIdentity"]
        assert released["leaseDurationSeconds"] == 1
        assert released["leaseTransitions"] == 0
        t0 = time.monotonic()
        await asyncio.wait_for(b.acquire(), 5)
        assert time.monotonic() - t0 < 0.5  # no waiting for a lease duration
        assert master_status(mb) == 1
        assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "b"
        assert api.lease(NS, NAME)["spec"]["leaseTransitions"] == 1
        await b.release()
        await asyncio.wait_for(a.acquire(), 5)
        assert api.lease(NS, NAME)["spec"]["leaseTransitions"] == 2

    run(main)


def test_release_leaves_a_lease_someone_else_holds_alone() -> None:
    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a")
        await a.release()  # not leading: nothing is sent
        assert api.requests == []
        await a.acquire()
        taken = api.put_lease(NS, NAME, held_by("b", transitions=1))
        await a.release()
        assert not a.is_leader
        assert api.lease(NS, NAME) == taken
        assert len(api.sent("PUT")) == 0

    run(main)


def test_conflict_on_update_means_another_candidate_won() -> None:
    async def main(api: FakeApiServer) -> None:
        api.put_lease(NS, NAME, held_by(""))
        a = elector(api, "a")

        # b writes between a's GET and a's PUT: a's resourceVersion is stale.
        def b_takes_it() -> None:
            api.put_lease(NS, NAME, held_by("b", transitions=1))

        api.after_get = b_takes_it
        assert not await a.try_acquire_or_renew()
        assert [r.method for r in api.requests] == ["GET", "PUT"]  # no retry of a 409
        assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "b"
        assert not a.is_leader
        # and b's fresh record is respected on the next attempt
        assert not await a.try_acquire_or_renew()
        assert len(api.sent("PUT")) == 1

    run(main)


def test_conflict_on_create_means_another_candidate_won() -> None:
    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a")

        def b_creates_it() -> None:
            api.put_lease(NS, NAME, held_by("b"))

        api.after_get = b_creates_it
        assert not await a.try_acquire_or_renew()
        assert [r.method for r in api.requests] == ["GET", "POST"]
        assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "b"

    run(main)


def test_an_unreadable_lock_is_not_created_over() -> None:
    async def main(api: FakeApiServer) -> None:
        api.fail("GET", LEASE, 403)
        a = elector(api, "a")
        assert not await a.try_acquire_or_renew()
        assert [r.method for r in api.requests] == ["GET"]

    run(main)


def test_healthy_fails_only_for_a_leader_that_stopped_renewing() -> None:
    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a", lease_duration=1.0)
        assert a.healthy(tolerance=0.0)  # a standby is always healthy
        await a.acquire()
        assert a.healthy(tolerance=0.0)
        await asyncio.sleep(1.1)
        assert not a.healthy(tolerance=0.0)  # leading, last renewal older than lease duration
        assert a.healthy()  # within the default 20 s tolerance
        assert await a.try_acquire_or_renew()
        assert a.healthy(tolerance=0.0)

    run(main)


def test_leader_gives_up_when_renewals_fail_for_the_renew_deadline() -> None:
    async def main(api: FakeApiServer) -> None:
        m = Metrics()
        a = elector(api, "a", renew_deadline=0.4, metrics=m)
        await a.acquire()
        api.fail("GET", LEASE, 503, times=1000)
        lost: list[float] = []
        t0 = time.monotonic()
        await asyncio.wait_for(a.renew_forever(lambda: lost.append(time.monotonic() - t0)), 5)
        assert len(lost) == 1
        assert 0.4 <= lost[0] < 1.5, lost
        assert not a.is_leader and master_status(m) == 0

    run(main)


def test_leader_gives_up_when_another_holder_took_the_lease() -> None:
    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a", renew_deadline=0.3)
        await a.acquire()
        api.put_lease(NS, NAME, held_by("b", transitions=1))
        called = asyncio.Event()

        async def on_lost() -> None:
            called.set()

        await asyncio.wait_for(a.renew_forever(on_lost), 5)
        assert called.is_set() and not a.is_leader
        assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "b"

    run(main)


def test_writes_keep_the_lease_labels_and_annotations() -> None:
    """A PUT replaces the object: what the elector does not send is deleted (client-go's
    LeaseLock writes back the whole object it read)."""

    async def main(api: FakeApiServer) -> None:
        api.put_lease(
            NS,
            NAME,
            held_by(""),
            labels={"app.kubernetes.io/name": "ome-scheduler"},
            annotations={"example.com/owner": "team-a"},
        )
        a = elector(api, "a")
        assert await a.try_acquire_or_renew()
        assert await a.try_acquire_or_renew()
        md = api.lease(NS, NAME)["metadata"]
        assert md["labels"] == {"app.kubernetes.io/name": "ome-scheduler"}
        assert md["annotations"] == {"example.com/owner": "team-a"}
        await a.release()
        assert api.lease(NS, NAME)["metadata"]["labels"] == {"app.kubernetes.io/name": "ome-scheduler"}

    run(main)


def test_a_renewal_that_finds_another_holder_gives_up_at_once() -> None:
    """No waiting out renewDeadline once the Lease names someone else: that holder may be
    scheduling already."""

    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a", renew_deadline=5.0)
        await a.acquire()
        assert a.renewed_at() == a.last_renew
        api.put_lease(NS, NAME, held_by("b", transitions=1))
        lost: list[float] = []
        t0 = time.monotonic()
        await asyncio.wait_for(a.renew_forever(lambda: lost.append(time.monotonic() - t0)), 5)
        assert len(lost) == 1 and lost[0] < 1.0, lost  # one retry period, not the 5 s deadline
        assert not a.is_leader and a.renewed_at() is None
        assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "b"
        assert len(api.sent("PUT")) == 0

    run(main)


def test_nothing_takes_the_lease_back_after_release() -> None:
    """client-go releases only after its renew loop returned; here release() stops the loop and
    waits for it, so no renewal follows the release, even one that was in flight."""

    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a", retry_period=0.05)
        await a.acquire()
        lost: list[bool] = []
        renewing = asyncio.create_task(a.renew_forever(lambda: lost.append(True)))
        await asyncio.sleep(0.2)
        assert len(api.sent("PUT")) >= 2
        held = api.hold("GET", LEASE)  # the next renewal's read is on the wire when release() starts
        await asyncio.wait_for(held.arrived.wait(), 5)
        puts_before = len(api.sent("PUT"))
        releasing = asyncio.create_task(a.release())
        await asyncio.sleep(0.05)
        assert a.renewed_at() is None, "leadership (and so the fence) ends before anything is sent"
        held.release.set()
        await asyncio.wait_for(releasing, 5)
        await asyncio.wait_for(renewing, 5)
        assert not lost, "a release is not a lost lease"
        released = api.lease(NS, NAME)["spec"]
        assert not released.get("holderIdentity") and released["leaseDurationSeconds"] == 1
        await asyncio.sleep(0.3)  # six retry periods
        assert len(api.sent("PUT")) == puts_before + 1, "the release was the last write"
        assert api.lease(NS, NAME)["spec"] == released

    run(main)


def test_a_release_that_meets_a_concurrent_write_reads_the_lease_again() -> None:
    async def main(api: FakeApiServer) -> None:
        a = elector(api, "a")
        await a.acquire()

        def touched_by_an_earlier_renewal() -> None:  # our own record, written once more
            api.put_lease(NS, NAME, dict(api.lease(NS, NAME)["spec"]))

        api.after_get = touched_by_an_earlier_renewal
        await a.release()
        assert [r.method for r in api.requests[-4:]] == ["GET", "PUT", "GET", "PUT"]
        assert not api.lease(NS, NAME)["spec"].get("holderIdentity")

    run(main)
