"""DefaultPreemption on in-memory snapshots: victims, reprieve order, PDBs, the node pick, the
messages, the writes, nominated pods in Filter, and the PreFilter extensions.

Expected texts and choices are upstream's (``pkg/scheduler/framework/preemption`` and
``plugins/defaultpreemption``, v1.35.4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.api.workloads import PodDisruptionBudget
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.interface import POST_FILTER_NOMINATION_KEY, CycleState
from ome_scheduler.framework.preemption import (
    Candidate,
    filter_pods_with_pdb_violation,
    num_candidates,
    pick_one_node_for_preemption,
)
from ome_scheduler.framework.runtime import FitError
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.defaultpreemption import DefaultPreemption
from ome_scheduler.scheduler import Scheduler
from tests.support.plugins_env import Binder, Recorder, chart_config, node, pod


class Writer:
    """The API port: records PATCHes and DELETEs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> bytes:
        self.calls.append(("PATCH", path, body))
        return b"{}"

    async def get(self, path: str, params: dict[str, str] | None = None, **kw: Any) -> bytes:
        return b"{}"

    async def delete(self, path: str, **kw: Any) -> bytes:
        self.calls.append(("DELETE", path, None))
        return b"{}"


def config(args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The default plugins (DefaultPreemption on), no gang plugin."""
    cfg = chart_config(plugins={})
    cfg["profiles"][0]["pluginConfig"] = [{"name": "DefaultPreemption", "args": dict(args)}] if args else []
    return cfg


class World:
    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        cfg = parse_config(config(args), "test")
        self.writer = Writer()
        self.recorder = Recorder()
        self.s = Scheduler(cfg, metrics=Metrics(), binder=Binder(), recorder=self.recorder, api_writer=self.writer)
        self.fw = self.s.frameworks["ome-scheduler"]
        pl = self.fw.plugins["DefaultPreemption"]
        assert isinstance(pl, DefaultPreemption)
        self.plugin = pl
        self.plugin.evaluator.offset = lambda n: 0

    def nodes(self, *names: str, cpu: str = "4") -> None:
        for n in names:
            self.s.handlers.on_node_add(node(n, alloc={"cpu": cpu}))

    def running(self, name: str, on: str, cpu: str, prio: int, **kw: Any) -> Pod:
        p = prio_pod(name, cpu, prio, node_name=on, **kw)
        self.s.handlers.on_pod_add(p)
        return p

    def attempt(self, p: Pod) -> tuple[str, str | None]:
        """(FailedScheduling message or the chosen node, nominated node)."""
        self.s.handlers.on_pod_add(p)
        pi = self.s.pods[f"{p.metadata.namespace}/{p.metadata.name}"]
        state = CycleState()
        try:
            return self.s.cycles.algorithm.schedule_pod(self.fw, state, pi), None
        except FitError as fe:
            fe.diagnosis.post_filter_msg = self.fw.run_post_filter(state, pi, fe.diagnosis.node_to_status).message()
            return str(fe), state.get(POST_FILTER_NOMINATION_KEY)

    def pdb(self, name: str, match: Mapping[str, str], allowed: int) -> None:
        raw = {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": dict(match)}},
            "status": {"disruptionsAllowed": allowed},
        }
        self.s.workloads.on_pdb_add(msgspec.convert(raw, PodDisruptionBudget))


def prio_pod(name: str, cpu: str, prio: int, *, node_name: str = "", start: str = "", **kw: Any) -> Pod:
    spec = {"priority": prio, **kw.pop("spec", {})}
    p = pod(name, requests={"cpu": cpu}, node_name=node_name, spec=spec, **kw)
    if start:
        p = msgspec.structs.replace(p, status=msgspec.structs.replace(p.status, start_time=start))
    return p


def victims_of(w: World, preemptor: Pod, node_name: str) -> list[str]:
    pi = PodInfo(preemptor)
    state = CycleState()
    w.fw.run_pre_filter(state, pi, w.s.cache.node_infos())
    ni = w.s.cache.get_node_info(node_name)
    assert ni is not None
    victims, _, st = w.plugin.evaluator.select_victims_on_node(state, pi, ni.snapshot(), [])
    assert st is None, st.message()
    return [v.name for v in victims]


# ---- pure pieces ------------------------------------------------------------------------


def test_num_candidates_percentage_absolute_and_cap() -> None:
    assert num_candidates(1000, 10, 100) == 100
    assert num_candidates(5000, 10, 100) == 500
    assert num_candidates(50, 10, 100) == 50
    assert num_candidates(1000, 0, 7) == 7


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"minCandidateNodesPercentage": 101},
            "minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            {"minCandidateNodesAbsolute": -1},
            "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
        ),
        (
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as "
            "minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the "
            "same time as minCandidateNodesPercentage]",
        ),
    ],
)
def test_invalid_args_are_refused_with_upstreams_texts(args: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        World(args)
    assert str(ei.value).endswith(message)


def _cand(name: str, prios: list[int], pdb: int = 0, starts: list[str] | None = None) -> Candidate:
    pods = []
    for i, p in enumerate(prios):
        pods.append(PodInfo(prio_pod(f"{name}-{i}", "1", p, start=(starts or [""] * len(prios))[i])))
    return Candidate(name, tuple(pods), pdb)


def test_node_pick_criteria_in_upstream_order() -> None:
    # fewest PDB violations first
    assert pick_one_node_for_preemption([_cand("a", [1], 1), _cand("b", [5, 5], 0)], 0).name == "b"  # type: ignore[union-attr]
    # then the lowest highest-priority victim
    assert pick_one_node_for_preemption([_cand("a", [5]), _cand("b", [3, 3, 3])], 0).name == "b"  # type: ignore[union-attr]
    # then the lowest sum of priorities
    assert pick_one_node_for_preemption([_cand("a", [5, 4]), _cand("b", [5, 1])], 0).name == "b"  # type: ignore[union-attr]
    # then the fewest victims (same sum)
    assert pick_one_node_for_preemption([_cand("a", [5, 0, 0]), _cand("b", [5, 0])], 0).name == "b"  # type: ignore[union-attr]
    # then the latest start of the highest-priority victims
    old, young = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"
    a, b = _cand("a", [5], starts=[old]), _cand("b", [5], starts=[young])
    assert pick_one_node_for_preemption([a, b], 0).name == "b"  # type: ignore[union-attr]
    # and finally the first
    assert pick_one_node_for_preemption([_cand("a", [5]), _cand("b", [5])], 0).name == "a"  # type: ignore[union-attr]


def test_pdb_budget_is_spent_in_order() -> None:
    pods = [PodInfo(prio_pod(f"p{i}", "1", 1, labels={"app": "x"})) for i in range(3)]
    raw = {
        "metadata": {"name": "b", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 1, "disruptedPods": {"p0": "2026-01-01T00:00:00Z"}},
    }
    pdb = msgspec.convert(raw, PodDisruptionBudget)
    violating, ok = filter_pods_with_pdb_violation(pods, [pdb])
    assert [p.name for p in ok] == ["p0", "p1"] and [p.name for p in violating] == ["p2"]
    empty = msgspec.convert({**raw, "spec": {"selector": {}}}, PodDisruptionBudget)
    assert filter_pods_with_pdb_violation(pods, [empty])[0] == []


# ---- through the framework ------------------------------------------------------------


def test_basic_preemption_nominates_and_writes() -> None:
    async def main() -> None:
        w = World()
        w.nodes("n1")
        w.running("low", "n1", "3", 1)
        msg, nominated = w.attempt(prio_pod("high", "2", 100))
        assert msg == "0/1 nodes are available: 1 Insufficient cpu."
        assert nominated == "n1"
        assert w.plugin.evaluator.is_pod_running_preemption(w.s.pods["default/high"].uid)
        await asyncio.gather(*w.plugin.evaluator.tasks)
        kinds = [(c[0], c[1]) for c in w.writer.calls]
        assert kinds == [
            ("PATCH", "/api/v1/namespaces/default/pods/low/status"),
            ("DELETE", "/api/v1/namespaces/default/pods/low"),
        ]
        cond = w.writer.calls[0][2]["status"]["conditions"][0]
        assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionTarget", "True", "PreemptionByScheduler")
        assert cond["message"] == "ome-scheduler: preempting to accommodate a higher priority pod"
        uid = w.s.pods["default/high"].uid
        assert w.recorder.events == [("low", "Preempted", f"Preempted by pod {uid} on node n1")]
        assert not w.plugin.evaluator.is_pod_running_preemption(uid)
        m = w.s.metrics.registry
        assert m.get_sample_value("scheduler_preemption_attempts_total") == 1
        assert m.get_sample_value("scheduler_preemption_victims_sum") == 1

    asyncio.run(main())


def test_equal_priority_has_no_victims() -> None:
    w = World()
    w.nodes("n1", "n2")
    w.running("a", "n1", "3", 5)
    w.running("b", "n2", "3", 5)
    msg, nominated = w.attempt(prio_pod("p", "2", 5))
    assert msg == (
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )
    assert nominated == ""


def test_preemption_policy_never() -> None:
    w = World()
    w.nodes("n1")
    w.running("a", "n1", "3", 1)
    msg, nominated = w.attempt(prio_pod("p", "2", 10, spec={"preemptionPolicy": "Never"}))
    assert msg == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."
    )
    assert nominated is None


def test_not_helpful_when_no_node_is_merely_unschedulable() -> None:
    w = World()
    w.nodes("n1")
    w.running("a", "n1", "1", 1)
    msg, _ = w.attempt(prio_pod("p", "1", 10, spec={"nodeSelector": {"zone": "x"}}))
    assert msg == (
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_reprieve_in_priority_order() -> None:
    w = World()
    w.nodes("n1")
    for name, prio in (("p1", 1), ("p2", 2), ("p3", 3)):
        w.running(name, "n1", "1", prio)
    w.running("big", "n1", "1", 0)
    # 4 cpu used; the preemptor needs 2: p3 and p2 are reprieved (most important first), p1 and big go.
    assert victims_of(w, prio_pod("high", "2", 10), "n1") == ["p1", "big"]


def test_pdb_violating_pods_reprieved_first_and_steer_the_node() -> None:
    w = World()
    w.nodes("n1", "n2")
    w.running("guarded", "n1", "3", 1, labels={"app": "db"})
    w.running("free", "n2", "3", 1)
    w.pdb("db", {"app": "db"}, 0)
    msg, nominated = w.attempt(prio_pod("high", "2", 10))
    assert nominated == "n2"


def test_terminating_victim_on_the_nominated_node_blocks() -> None:
    w = World()
    w.nodes("n1")
    victim = w.running("low", "n1", "3", 1)
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    raw = msgspec.to_builtins(victim)
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raw["status"]["conditions"] = [cond]
    terminating = msgspec.convert(raw, Pod)
    w.s.handlers.on_pod_update(victim, terminating)
    p = prio_pod("high", "2", 10)
    raw = msgspec.to_builtins(p)
    raw["status"]["nominatedNodeName"] = "n1"
    msg, _ = w.attempt(msgspec.convert(raw, Pod))
    assert msg.endswith("preemption: not eligible due to a terminating pod on the nominated node.")


def test_nominated_pod_room_held_against_lower_priority_not_higher() -> None:
    w = World()
    w.nodes("n1")
    w.running("low", "n1", "3", 1)
    _, nominated = w.attempt(prio_pod("high", "2", 100))
    assert nominated == "n1"
    # the victim is gone; the preemptor (nominated, unbound) holds 2 of the 4 cpu
    w.s.handlers.on_pod_delete(w.s.pods["default/low"].pod)
    w.s.nominate(w.s.pods["default/high"], "n1")
    msg, _ = w.attempt(prio_pod("mid", "3", 50))
    assert msg.startswith("0/1 nodes are available: 1 Insufficient cpu.")
    host, _ = w.attempt(prio_pod("top", "3", 1000))
    assert host == "n1"


def test_gang_members_are_never_victims() -> None:
    w = World()
    w.nodes("n1")
    w.running("member", "n1", "3", 1, labels={"scheduling.x-k8s.io/pod-group": "g"})
    msg, _ = w.attempt(prio_pod("high", "2", 100))
    assert msg.endswith("preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")


def test_anti_affinity_victim_removed_through_the_prefilter_extension() -> None:
    w = World()
    w.nodes("n1", cpu="8")
    anti = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    }
    w.running("hater", "n1", "1", 1, spec=anti)
    w.running("bystander", "n1", "1", 1)
    msg, nominated = w.attempt(prio_pod("web", "1", 10, labels={"app": "web"}))
    assert "didn't satisfy existing pods anti-affinity rules" in msg and nominated == "n1"
    assert victims_of(w, prio_pod("web2", "1", 10, labels={"app": "web"}), "n1") == ["hater"]


def test_topology_spread_victim_through_the_prefilter_extension() -> None:
    w = World()
    w.s.handlers.on_node_add(node("a", {"zone": "z1"}))
    w.s.handlers.on_node_add(node("b", {"zone": "z2"}))
    spread = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "s"}},
            }
        ]
    }
    w.running("s1", "a", "1", 1, labels={"app": "s"})
    w.running("s2", "a", "1", 1, labels={"app": "s"})
    w.running("fill", "b", "8", 1)
    # zone z1 has 2 matching pods, z2 none: the preemptor fits only z2 (full), or z1 after a spread victim goes
    p = prio_pod("s3", "1", 10, labels={"app": "s"}, spec=spread)
    assert victims_of(w, p, "b") == ["fill"]
    assert victims_of(w, p, "a") == ["s1", "s2"]
