"""Gang preemption in OMEGangPack's PostFilter (design §16.5–§16.7): a whole Scheduler with the
chart's profile and ``preemption: true``, its writes recorded at the API port.

Two cliques of four one-GPU nodes; the writes are upstream's (``DisruptionTarget`` condition,
delete, ``Preempted`` event on each victim) plus the ``Preempting`` event on the PodGroup.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.interface import POST_FILTER_NOMINATION_KEY, CycleState
from ome_scheduler.framework.runtime import FitError
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from ome_scheduler.scheduler import Scheduler
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.manifests import chart_config
from tests.support.plugins_env import Binder, Recorder

CLIQUE = "nvidia.com/gpu.clique"


class Writer:
    """The API port: records PATCHes and DELETEs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> bytes:
        self.calls.append(("PATCH", path))
        return b"{}"

    async def get(self, path: str, params: dict[str, str] | None = None, **kw: Any) -> bytes:
        return b"{}"

    async def delete(self, path: str, **kw: Any) -> bytes:
        self.calls.append(("DELETE", path))
        return b"{}"


class World:
    """Two cliques of four one-GPU nodes under the chart's profile."""

    def __init__(self, preemption: bool = True) -> None:
        args = {"preemption": True} if preemption else {}
        cfg = parse_config(chart_config(topology_key=CLIQUE, gang_args=args), "test")
        self.writer = Writer()
        self.recorder = Recorder()
        self.s = Scheduler(cfg, metrics=Metrics(), binder=Binder(), recorder=self.recorder, api_writer=self.writer)
        self.fw = self.s.frameworks["ome-scheduler"]
        gp = self.fw.plugins["OMEGangPack"]
        assert isinstance(gp, OMEGangPack)
        self.plugin = gp
        for c in ("a", "b"):
            for i in range(4):
                self.s.handlers.on_node_add(make_node(f"{c}-{i}", {CLIQUE: c}, alloc={"nvidia.com/gpu": "1"}))

    def running(self, name: str, node: str, prio: int, gang: str | None = None, **spec: Any) -> Pod:
        p = make_pod(name, gang=gang, requests={"nvidia.com/gpu": "1"}, node_name=node, priority=prio, spec=spec)
        self.s.handlers.on_pod_add(p)
        return p

    def gang(self, name: str, size: int, prio: int, **spec: Any) -> list[Pod]:
        self.s.handlers.on_pod_group_add(make_pod_group(name, min_member=size, topology_key=CLIQUE))
        pods = [
            make_pod(f"{name}-{i}", gang=name, requests={"nvidia.com/gpu": "1"}, priority=prio, spec=spec)
            for i in range(size)
        ]
        for p in pods:
            self.s.handlers.on_pod_add(p)
        return pods

    def attempt(self, p: Pod) -> tuple[str, str | None]:
        """(the chosen node, or the FailedScheduling message; the nominated node), with the
        victims' writes run to completion."""

        async def run() -> tuple[str, str | None]:
            pi = self.s.pods[f"{p.metadata.namespace}/{p.metadata.name}"]
            state = CycleState()
            try:
                return self.s.cycles.algorithm.schedule_pod(self.fw, state, pi), None
            except FitError as fe:
                fe.diagnosis.post_filter_msg = self.fw.run_post_filter(state, pi, fe.diagnosis.node_to_status).message()
                pre = self.plugin.preemptor
                if pre is not None and pre.tasks:
                    await asyncio.gather(*pre.tasks)
                return str(fe), state.get(POST_FILTER_NOMINATION_KEY)

        return asyncio.run(run())

    def deleted(self) -> list[str]:
        return sorted(path.rsplit("/", 1)[1] for verb, path in self.writer.calls if verb == "DELETE")

    def terminate(self, p: Pod) -> None:
        """The victim's deletion as the informer sees it: first terminating, then gone."""
        raw: dict[str, Any] = msgspec.to_builtins(p)
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        raw.setdefault("status", {})["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
        self.s.handlers.on_pod_update(p, msgspec.convert(raw, Pod))


def events(w: World, reason: str) -> list[tuple[str, str]]:
    return [(name, note) for name, r, note in w.recorder.events if r == reason]


def test_the_cheaper_clique_is_freed_held_and_then_taken() -> None:
    w = World()
    batch = [w.running(f"batch-{i}", f"a-{i}", 10) for i in range(4)]
    for i in range(4):
        w.running(f"eval-{i}", f"b-{i}", 50)
    members = w.gang("hi", 4, 100)
    msg, nominated = w.attempt(members[0])
    assert "preemption: freeing nvidia.com/gpu.clique=a for gang ns/hi" in msg
    assert nominated == "a-0"
    assert w.deleted() == ["batch-0", "batch-1", "batch-2", "batch-3"]
    assert sum(1 for verb, path in w.writer.calls if verb == "PATCH" and path.endswith("/status")) == 4
    assert sorted(n for n, _ in events(w, "Preempted")) == ["batch-0", "batch-1", "batch-2", "batch-3"]
    ((pg, note),) = events(w, "Preempting")
    assert pg == "hi"
    assert note == (
        "preempting 4 pod(s) in nvidia.com/gpu.clique=a for gang ns/hi: ns/batch-0, ns/batch-1, ns/batch-2, "
        "ns/batch-3; lowest highest victim priority (10 vs 50 in b)"
    )
    pin = w.plugin.gangs.pins.get(w.s.pods["ns/hi-0"].gang_key)
    assert pin is not None and pin.domain.value == "a" and pin.holding and pin.remaining == 4

    # While the victims terminate: no second preemption, and the clique stays held.
    for p in batch:
        w.terminate(p)
    calls = len(w.writer.calls)
    msg, _ = w.attempt(members[1])
    assert "waiting for preemption victims to leave nvidia.com/gpu.clique=a for gang ns/hi" in msg
    assert len(w.writer.calls) == calls
    low = make_pod("low", requests={"nvidia.com/gpu": "1"}, priority=5)
    w.s.handlers.on_pod_add(low)
    for p in batch:
        w.s.handlers.on_pod_delete(p)
    msg, _ = w.attempt(low)
    assert "node is reserved for a forming gang" in msg  # the held clique, and b is full
    node, _ = w.attempt(members[1])
    assert node.startswith("a-")
    assert len(w.writer.calls) == calls


def test_a_lower_priority_gang_is_evicted_whole() -> None:
    w = World()
    for i in range(4):
        w.running(f"lo-{i}", f"a-{i}", 10, gang="lo")
        w.running(f"serve-{i}", f"b-{i}", 500)
    members = w.gang("hi", 2, 100)
    w.attempt(members[0])
    assert w.deleted() == ["lo-0", "lo-1", "lo-2", "lo-3"]  # two would do, the whole gang goes


def test_no_eviction_when_no_domain_could_fit() -> None:
    w = World()
    for i in range(4):
        w.running(f"batch-{i}", f"a-{i}", 10)
    members = w.gang("hi", 5, 100)
    msg, nominated = w.attempt(members[0])
    assert "preemption: preemption cannot make gang ns/hi fit any domain" in msg
    assert w.deleted() == [] and nominated is None
    assert w.plugin.gangs.pins.get(w.s.pods["ns/hi-0"].gang_key) is None


def test_none_against_equal_priority_or_with_never() -> None:
    w = World()
    for i in range(4):
        w.running(f"peer-{i}", f"a-{i}", 100)
        w.running(f"batch-{i}", f"b-{i}", 10)
    w.gang("eq", 4, 10)
    msg, _ = w.attempt(w.s.pods["ns/eq-0"].pod)
    assert "preemption: preemption cannot make gang ns/eq fit any domain" in msg
    never = w.gang("nv", 4, 200, preemptionPolicy="Never")
    msg, _ = w.attempt(never[0])
    assert "preemption: not eligible due to preemptionPolicy=Never of member ns/nv-0" in msg
    assert w.deleted() == []


def test_off_by_default() -> None:
    w = World(preemption=False)
    for i in range(4):
        w.running(f"batch-{i}", f"a-{i}", 10)
        w.running(f"more-{i}", f"b-{i}", 10)
    members = w.gang("hi", 4, 100)
    msg, _ = w.attempt(members[0])
    assert "preemption" not in msg and w.deleted() == []
    assert w.plugin.preemptor is None


def test_a_new_leader_waits_for_the_victims_instead_of_preempting_again() -> None:
    # The state a new leader finds right after the old one's deletions: the victims in a are
    # terminating, the member whose cycle preempted is nominated there; b is cheaper now.
    w = World()
    batch = [w.running(f"batch-{i}", f"a-{i}", 40) for i in range(4)]
    for i in range(4):
        w.running(f"cheap-{i}", f"b-{i}", 10)
    for p in batch:
        w.terminate(p)
    members = w.gang("hi", 4, 100)
    raw: dict[str, Any] = msgspec.to_builtins(members[0])
    raw.setdefault("status", {})["nominatedNodeName"] = "a-0"
    w.s.handlers.on_pod_update(members[0], msgspec.convert(raw, Pod))
    msg, _ = w.attempt(members[0])
    assert "preemption: waiting for pods leaving nvidia.com/gpu.clique=a for gang ns/hi" in msg
    assert w.deleted() == [] and not events(w, "Preempting")
    pin = w.plugin.gangs.pins.get(w.s.pods["ns/hi-0"].gang_key)
    assert pin is not None and pin.domain.value == "a" and pin.holding


def test_victims_stuck_past_the_deadline_end_the_wait_and_back_off() -> None:
    w = World()
    batch = [w.running(f"batch-{i}", f"a-{i}", 10) for i in range(4)]
    for i in range(4):
        w.running(f"eval-{i}", f"b-{i}", 50)
    members = w.gang("hi", 4, 100)
    w.attempt(members[0])
    for p in batch:
        w.terminate(p)  # and they never go
    pre = w.plugin.preemptor
    assert pre is not None
    key = w.s.pods["ns/hi-0"].gang_key
    pin = w.plugin.gangs.pins.get(key)
    assert pin is not None
    pin.preempting_until = 0.0  # the deadline passed
    pre.deadline[key] = (pre.deadline[key][0], 0.0)
    msg, _ = w.attempt(members[1])
    assert "preemption: gang ns/hi is backing off after a failed preemption" in msg
    ((_, note),) = events(w, "PreemptionFailed")
    assert note.startswith("the gang did not bind in nvidia.com/gpu.clique=a within 30s of its preemption")
    assert w.deleted() == ["batch-0", "batch-1", "batch-2", "batch-3"]  # nothing more
