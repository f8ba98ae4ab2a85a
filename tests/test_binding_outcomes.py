"""What the binding cycle makes of a Binding's outcome (issue 12, item 4), on a real Scheduler.

* A Binding whose answer was lost but which landed (the pod informer shows the pod bound) ends
  with no ``FailedScheduling`` event and no ``PodScheduled=False`` on the bound pod.
* A gang member whose Binding the API server refuses tells its PodGroup why, in a Warning
  ``FailedBinding`` event; the member itself fails as usual and is retried.

The 409 "already assigned" retry is covered in ``tests/kube/test_client.py``, the re-read
after a transport failure in ``tests/kube/test_binding.py``; ``e2e/faults/test_binding_outcomes.py``
runs both against the real API server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.config.load import parse_config
from ome_scheduler.kube.client import ApiError
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.plugins_env import chart_config


class Writes:
    """Every event and PodScheduled=False condition the scheduler writes."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []
        self.conditions: list[tuple[str, str, str]] = []

    def event(self, obj: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        md = obj.metadata
        self.events.append((f"{md.namespace}/{md.name}", type_, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        self.conditions.append((f"{pod.metadata.namespace}/{pod.metadata.name}", reason, message))

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        pass

    def reasons(self, obj: str) -> list[str]:
        return [e[2] for e in self.events if e[0] == obj]


def bound(pod: Pod, node: str) -> Pod:
    """``pod`` as the informer shows it once bound to ``node``."""
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))


class Binder:
    """Binds through the scheduler's own handlers (as the pod informer would report it); for the
    pods in ``refuse`` it raises the API server's refusal, for those in ``lose`` it binds and
    then raises a transport error (the answer lost after the Binding landed)."""

    def __init__(self) -> None:
        self.s: Scheduler | None = None
        self.refuse: dict[str, ApiError] = {}
        self.lose: set[str] = set()
        self.sent: list[tuple[str, str]] = []

    async def bind(self, namespace: str, name: str, uid: str, node: str, *, guard: Any = None) -> None:
        assert self.s is not None
        self.sent.append((name, node))
        if name in self.refuse:
            raise self.refuse[name]
        old = self.s.pods[f"{namespace}/{name}"].pod
        self.s.handlers.on_pod_update(old, bound(old, node))
        if name in self.lose:
            raise aiohttp.ServerDisconnectedError()


def scheduler() -> tuple[Scheduler, Writes, Binder]:
    w, b = Writes(), Binder()
    s = Scheduler(parse_config(chart_config(), "test"), metrics=Metrics(), binder=b, recorder=w)
    b.s = s
    return s, w, b


async def run_pods(s: Scheduler, count: int) -> None:
    """Run ``count`` scheduling cycles, then wait for every binding cycle they started."""
    for _ in range(count):
        q = await asyncio.wait_for(s.queue.pop(), 1)
        assert q is not None
        s.schedule_one(q)
        await asyncio.sleep(0)
    for _ in range(100):
        if not s.cycles.binding_tasks:
            break
        await asyncio.wait(list(s.cycles.binding_tasks), timeout=1)
        await asyncio.sleep(0)


def test_a_binding_that_landed_although_its_answer_was_lost_fails_nothing_on_the_bound_pod() -> None:
    async def main() -> None:
        s, w, b = scheduler()
        s.handlers.on_node_add(make_node("n1"))
        s.handlers.on_pod_add(make_pod("p"))
        b.lose.add("p")
        await run_pods(s, 1)
        assert b.sent == [("p", "n1")]
        assert s.pods["ns/p"].pod.spec.node_name == "n1"
        assert "FailedScheduling" not in w.reasons("ns/p")
        assert w.conditions == []  # no PodScheduled=False on a pod that is bound
        assert not s.queue.contains(s.pods["ns/p"].pod_key)  # not requeued either

    asyncio.run(main())


def test_a_refused_binding_of_a_gang_member_tells_its_pod_group_why() -> None:
    async def main() -> None:
        s, w, b = scheduler()
        for n in ("n1", "n2"):
            s.handlers.on_node_add(make_node(n, {"rack": "r1"}, alloc={"nvidia.com/gpu": "1"}))
        s.handlers.on_pod_group_add(make_pod_group("g", min_member=2, topology_key="rack"))
        gpu = {"nvidia.com/gpu": "1"}
        for i in range(2):
            s.handlers.on_pod_add(make_pod(f"g-{i}", gang="g", requests=gpu))
        why = "pods \"g-1\" is forbidden: ValidatingAdmissionPolicy 'no-bind' denied request: not this one"
        b.refuse["g-1"] = ApiError(403, "Forbidden", why)
        await run_pods(s, 2)
        assert s.pods["ns/g-0"].pod.spec.node_name
        assert not s.pods["ns/g-1"].pod.spec.node_name
        failed = [e for e in w.events if e[0] == "ns/g" and e[2] == "FailedBinding"]
        assert len(failed) == 1 and failed[0][1] == "Warning", w.events
        assert failed[0][3].startswith("member ns/g-1 could not be bound to node n") and why in failed[0][3]
        assert "FailedScheduling" in w.reasons("ns/g-1") and "FailedScheduling" not in w.reasons("ns/g-0")
        assert [c[0] for c in w.conditions] == ["ns/g-1"]
        assert s.queue.contains(s.pods["ns/g-1"].pod_key)  # retried after backoff

    asyncio.run(main())
