"""One rule for plugin exceptions (``framework/runtime.py``'s docstring): an exception raised by
a plugin is that plugin's Error status, and the extension point proceeds as upstream does for an
Error status there, with upstream's wrapping message.

One test per extension point runs a profile of two probe plugins, ``Boom`` (raises at the point
under test) and ``Witness`` (never raises), and checks the status and whether ``Witness`` still
ran (upstream stops at the first Error everywhere but Unreserve and PostBind). The last tests
run whole cycles through a real :class:`~ome_scheduler.scheduler.Scheduler` to show the outcome
for the pod: a scheduling cycle that fails with Error is retried after backoff, a failed Bind
is unreserved and requeued, and a PostBind that raises leaves the pod bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ome_scheduler import scheduler as scheduler_mod
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.equivalence import EquivalenceCache
from ome_scheduler.framework.interface import (
    BindPlugin,
    CycleState,
    FilterPlugin,
    FrameworkOptions,
    Handle,
    NodeToStatus,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from ome_scheduler.framework.runtime import Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.registry import default_plugins, in_tree_registry
from ome_scheduler.scheduler import Scheduler
from tests.support.plugins_env import node, pod


class Probe(
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterExtensions,
    FilterPlugin,
    PostFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ReservePlugin,
    PermitPlugin,
    PreBindPlugin,
    BindPlugin,
    PostBindPlugin,
):
    """Records every call in ``calls``; raises ``RuntimeError("boom")`` at the points in ``raise_at``."""

    def __init__(self, calls: list[tuple[str, str]], raise_at: set[str]) -> None:
        self.calls = calls
        self.raise_at = raise_at

    def _run(self, point: str) -> None:
        self.calls.append((self.name, point))
        if point in self.raise_at:
            raise RuntimeError("boom")

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        self._run("PreEnqueue")
        return None

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        self._run("PreFilter")
        return None, None

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> Status | None:
        self._run("AddPod")
        return None

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> Status | None:
        self._run("RemovePod")
        return None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        self._run("Filter")
        return None

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        self._run("PostFilter")
        return Status.unschedulable(f"{self.name} found nothing")

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        self._run("PreScore")
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        self._run("Score")
        return [1] * len(nodes)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        self._run("NormalizeScore")

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        self._run("Reserve")
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self._run("Unreserve")

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status | None, float]:
        self._run("Permit")
        return None, 0.0

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        self._run("PreBind")
        return None

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        self._run("Bind")
        return None

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self._run("PostBind")


class Boom(Probe):
    name = "Boom"


class Witness(Probe):
    name = "Witness"


def probe_config(order: Sequence[str]) -> dict[str, Any]:
    """A profile ``probes`` of the probe plugins only, in ``order`` (QueueSort: PrioritySort)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": "probes",
                "plugins": {
                    "multiPoint": {"enabled": [{"name": n} for n in order], "disabled": [{"name": "*"}]},
                    "queueSort": {"enabled": [{"name": "PrioritySort"}]},
                },
            }
        ],
    }


def probe_registry(calls: list[tuple[str, str]], raise_at: set[str]) -> dict[str, Any]:
    """The in-tree registry plus Boom (raising at ``raise_at``) and Witness."""
    registry = dict(in_tree_registry())
    registry["Boom"] = lambda args, handle, opts: Boom(calls, raise_at)
    registry["Witness"] = lambda args, handle, opts: Witness(calls, set())
    return registry


def probes(point: str, order: Sequence[str] = ("Boom", "Witness")) -> tuple[Framework, list[tuple[str, str]]]:
    """A framework whose Boom raises at ``point``, and the list of calls the probes make."""
    calls: list[tuple[str, str]] = []
    profile = parse_config(probe_config(order), "test").profiles[0]
    opts = FrameworkOptions(scheduler_name="probes", metrics=Metrics())
    handle: Handle = None  # type: ignore[assignment]  # the probes never read it
    return Framework(profile, default_plugins(), probe_registry(calls, {point}), handle, opts), calls


def probe_pod() -> PodInfo:
    return PodInfo(pod("p", scheduler="probes"))


NODES = [NodeInfo("n0"), NodeInfo("n1")]


def test_pre_enqueue_gates_the_pod_with_the_plugin_error() -> None:
    fw, calls = probes("PreEnqueue")
    s = fw.run_pre_enqueue(probe_pod())
    assert s is not None and (s.code, s.plugin, s.message()) == (Code.ERROR, "Boom", "boom")
    assert calls == [("Boom", "PreEnqueue")]


def test_pre_filter_error_is_wrapped_and_ends_the_point() -> None:
    fw, calls = probes("PreFilter")
    result, s, narrowed = fw.run_pre_filter(CycleState(), probe_pod(), NODES)
    assert s is not None and (s.code, s.plugin) == (Code.ERROR, "Boom")
    assert s.message() == 'running PreFilter plugin "Boom": boom' and result is None and narrowed == set()
    assert calls == [("Boom", "PreFilter")]


def test_filter_error_is_wrapped_and_ends_the_point() -> None:
    fw, calls = probes("Filter")
    s = fw.run_filter(CycleState(), probe_pod(), NODES[0])
    assert s is not None and (s.code, s.plugin, s.message()) == (
        Code.ERROR,
        "Boom",
        'running "Boom" filter plugin: boom',
    )
    assert calls == [("Boom", "Filter")]


@pytest.mark.parametrize("point", ["AddPod", "RemovePod"])
def test_pre_filter_extension_error_is_wrapped_and_ends_the_point(point: str) -> None:
    fw, calls = probes(point)
    run = fw.run_pre_filter_extension_add_pod if point == "AddPod" else fw.run_pre_filter_extension_remove_pod
    s = run(CycleState(), probe_pod(), probe_pod(), NODES[0])
    assert s is not None and (s.code, s.plugin) == (Code.ERROR, "Boom")
    assert s.message() == f'running {point} on PreFilter plugin "Boom": boom'
    assert calls == [("Boom", point)]


def test_post_filter_error_ends_the_point_unwrapped() -> None:
    fw, calls = probes("PostFilter")
    s = fw.run_post_filter(CycleState(), probe_pod(), NodeToStatus())
    assert (s.code, s.plugin, s.message()) == (Code.ERROR, "Boom", "boom")
    assert calls == [("Boom", "PostFilter")]


def test_pre_score_error_is_wrapped_and_ends_the_point() -> None:
    fw, calls = probes("PreScore")
    s = fw.run_pre_score(CycleState(), probe_pod(), NODES)
    assert s is not None and (s.code, s.message()) == (Code.ERROR, 'running PreScore plugin "Boom": boom')
    assert calls == [("Boom", "PreScore")]


def test_score_error_is_wrapped_and_ends_the_point_cached_or_not() -> None:
    fw, calls = probes("Score")
    s = fw.run_score(CycleState(), probe_pod(), NODES)
    assert isinstance(s, Status) and (s.code, s.plugin) == (Code.ERROR, "Boom")
    assert s.message() == 'running Score plugins: plugin "Boom" failed with: boom'
    assert calls == [("Boom", "Score")]
    table, _ = EquivalenceCache().table(b"shape", 0, NODES, 0)
    cached = fw.run_score_cached(CycleState(), probe_pod(), NODES, [0, 1], table)
    assert isinstance(cached, Status) and cached.message() == s.message()


def test_normalize_score_error_is_wrapped_and_ends_the_point_cached_or_not() -> None:
    fw, calls = probes("NormalizeScore")
    s = fw.run_score(CycleState(), probe_pod(), NODES)
    assert isinstance(s, Status) and s.code == Code.ERROR
    assert s.message() == 'running Normalize on Score plugins: plugin "Boom" failed with: boom'
    assert calls == [("Boom", "Score"), ("Boom", "NormalizeScore")]
    table, _ = EquivalenceCache().table(b"shape", 0, NODES, 0)
    cached = fw.run_score_cached(CycleState(), probe_pod(), NODES, [0, 1], table)
    assert isinstance(cached, Status) and cached.message() == s.message()


def test_reserve_error_is_wrapped_and_ends_the_point() -> None:
    fw, calls = probes("Reserve")
    s = fw.run_reserve(CycleState(), probe_pod(), "n0")
    assert s is not None and (s.code, s.message()) == (Code.ERROR, 'running Reserve plugin "Boom": boom')
    assert calls == [("Boom", "Reserve")]


def test_unreserve_error_is_logged_and_the_other_plugins_still_unreserve() -> None:
    fw, calls = probes("Unreserve", order=("Witness", "Boom"))  # reverse order: Boom first
    fw.run_unreserve(CycleState(), probe_pod(), "n0")
    assert calls == [("Boom", "Unreserve"), ("Witness", "Unreserve")]


def test_permit_error_is_wrapped_ends_the_point_and_parks_nothing() -> None:
    fw, calls = probes("Permit")
    pi = probe_pod()
    s = fw.run_permit(CycleState(), pi, "n0")
    assert s is not None and (s.code, s.plugin) == (Code.ERROR, "Boom")
    assert s.message() == 'running Permit plugin "Boom": boom'
    assert calls == [("Boom", "Permit")] and fw.waiting_pods.get(pi.pod_key) is None


def test_pre_bind_error_is_wrapped_and_ends_the_point() -> None:
    fw, calls = probes("PreBind")
    s = asyncio.run(fw.run_pre_bind(CycleState(), probe_pod(), "n0"))
    assert s is not None and (s.code, s.plugin) == (Code.ERROR, "Boom")
    assert s.message() == 'running PreBind plugin "Boom": boom'
    assert calls == [("Boom", "PreBind")]


def test_bind_error_is_wrapped_and_no_later_binder_is_tried() -> None:
    fw, calls = probes("Bind")
    s = asyncio.run(fw.run_bind(CycleState(), probe_pod(), "n0"))
    assert s is not None and (s.code, s.plugin) == (Code.ERROR, "Boom")
    assert s.message() == 'running Bind plugin "Boom": boom'
    assert calls == [("Boom", "Bind")]


def test_post_bind_error_is_logged_and_the_other_plugins_still_run() -> None:
    fw, calls = probes("PostBind")
    fw.run_post_bind(CycleState(), probe_pod(), "n0")
    assert calls == [("Boom", "PostBind"), ("Witness", "PostBind")]


# ---- the pod's outcome, through whole cycles ------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.conditions: list[tuple[str, str]] = []

    def event(self, pod: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((pod.metadata.name, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, **_: Any) -> None:
        self.conditions.append((reason, message))

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        pass


def one_pod_through(monkeypatch: pytest.MonkeyPatch, point: str) -> tuple[Scheduler, Recorder, list[tuple[str, str]]]:
    """A scheduler of the probe profile (Boom raising at ``point``) with two nodes schedules
    one pod: its scheduling cycle and, when it gets that far, its binding cycle."""
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(scheduler_mod, "in_tree_registry", lambda: probe_registry(calls, {point}))
    rec = Recorder()
    s = Scheduler(parse_config(probe_config(("Boom", "Witness")), "test"), metrics=Metrics(), binder=None, recorder=rec)
    for n in ("n0", "n1"):
        s.handlers.on_node_add(node(n))
    s.handlers.on_pod_add(pod("p", scheduler="probes"))

    async def run() -> None:
        q = await asyncio.wait_for(s.queue.pop(), 1)
        assert q is not None
        s.schedule_one(q)
        if s.cycles.binding_tasks:
            await asyncio.wait(list(s.cycles.binding_tasks))

    asyncio.run(run())
    return s, rec, calls


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ("PreScore", 'running PreScore plugin "Boom": boom'),
        ("Score", 'running Score plugins: plugin "Boom" failed with: boom'),
    ],
)
def test_a_scoring_error_fails_the_cycle_with_error_and_backoff(
    monkeypatch: pytest.MonkeyPatch, point: str, message: str
) -> None:
    s, rec, calls = one_pod_through(monkeypatch, point)
    key = s.pods["default/p"].pod_key
    assert rec.events == [("p", "FailedScheduling", message)]
    assert rec.conditions == [("SchedulerError", message)]
    assert not s.cache.is_assumed(key) and ("Boom", "Reserve") not in calls
    assert s.queue.error_backoff.get(key) is not None  # retried after backoff


def test_a_bind_error_unreserves_and_requeues_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    s, rec, calls = one_pod_through(monkeypatch, "Bind")
    key = s.pods["default/p"].pod_key
    message = 'running Bind plugin "Boom": boom'
    assert rec.events == [("p", "FailedScheduling", message)]
    assert ("Witness", "Unreserve") in calls and ("Boom", "Unreserve") in calls
    assert not s.cache.is_assumed(key) and s.queue.error_backoff.get(key) is not None


def test_a_post_bind_error_leaves_the_pod_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    s, rec, calls = one_pod_through(monkeypatch, "PostBind")
    key = s.pods["default/p"].pod_key
    assert [reason for _, reason, _ in rec.events] == ["Scheduled"]
    assert ("Witness", "PostBind") in calls and ("Boom", "Unreserve") not in calls
    assert not s.queue.contains(key)


@pytest.mark.parametrize("point", ["PreBind", "Bind"])
def test_an_error_status_a_plugin_returns_is_wrapped_as_upstream_and_a_rejection_is_not(
    point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RunPreBindPlugins``/``RunBindPlugins``: a returned Error becomes ``running <point>
    plugin "X": <message>`` (what the pod's FailedScheduling event says upstream); a rejection
    keeps its own message."""
    fw, _ = probes("none")
    plugins, method = (fw.pre_bind_plugins, "pre_bind") if point == "PreBind" else (fw.bind_plugins, "bind")
    boom = next(p for p in plugins if p.name == "Boom")
    run = fw.run_pre_bind if point == "PreBind" else fw.run_bind
    cases = [
        (
            Status(Code.ERROR, "claim ns/c got allocated elsewhere in the meantime"),
            Code.ERROR,
            f'running {point} plugin "Boom": claim ns/c got allocated elsewhere in the meantime',
        ),
        (Status.unschedulable("volume node affinity conflict"), Code.UNSCHEDULABLE, "volume node affinity conflict"),
    ]
    for returned, code, message in cases:

        async def fake(state: CycleState, pod: PodInfo, node: str, r: Status = returned) -> Status:
            return r

        monkeypatch.setattr(boom, method, fake)
        s = asyncio.run(run(CycleState(), probe_pod(), "n0"))
        assert s is not None and (s.code, s.plugin, s.message()) == (code, "Boom", message)
