"""Gang preemption's decision (design §16.1–§16.4, product rule 13): which domain is freed and whom it evicts.

The cases are the issue's gang acceptance cases on two cliques of four one-GPU nodes, decided
over real NodeInfos with the planner PreFilter uses; a timing-free cost check at 5,000 nodes
and 625 running gangs is in ``bench/test_micro.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from ome_scheduler.api.core import Pod
from ome_scheduler.api.workloads import PodDisruptionBudget
from ome_scheduler.framework.types import GangKey, NodeInfo, PodInfo
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.placement import GangPlanner
from ome_scheduler.plugins.gangpack.preemption import (
    NO_PRIORITY,
    Decision,
    Snapshot,
    decide,
    gang_may_preempt,
    gang_priority,
    preempting_note,
    preemption_in_progress,
)
from tests.support.builders import make_node, make_pod, node_info

CLIQUE = "nvidia.com/gpu.clique"
ME = GangKey("ns/hi")
OURS = frozenset({"ome-scheduler"})
NOW = 1_000_000.0


def cliques(spec: Mapping[str, int], gpus: int = 1) -> dict[str, NodeInfo]:
    """Nodes ``{clique}-{i}`` of ``gpus`` GPUs, ``spec[clique]`` per clique."""
    return {
        f"{c}-{i}": node_info(make_node(f"{c}-{i}", {CLIQUE: c}, alloc={"nvidia.com/gpu": str(gpus)}))
        for c, count in spec.items()
        for i in range(count)
    }


def run(
    nodes: dict[str, NodeInfo],
    name: str,
    node: str,
    *,
    priority: int,
    gang: str | None = None,
    gpus: str = "1",
    scheduler: str = "ome-scheduler",
    labels: Mapping[str, str] | None = None,
    started: str = "2026-01-01T00:00:00Z",
    deleting: bool = False,
) -> PodInfo:
    """A pod bound to ``node`` (added to its NodeInfo)."""
    pod = make_pod(
        name,
        gang=gang,
        requests={"nvidia.com/gpu": gpus},
        node_name=node,
        priority=priority,
        labels=labels,
        spec={"schedulerName": scheduler},
    )
    raw: dict[str, Any] = msgspec.to_builtins(pod)
    raw.setdefault("status", {})["startTime"] = started
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pi = PodInfo(msgspec.convert(raw, Pod))
    nodes[node].add_pod(pi)
    return pi


def preemptor(members: int, priority: int = 100, gpus: str = "1", **spec: Any) -> list[PodInfo]:
    return [
        PodInfo(make_pod(f"hi-{i}", gang="hi", requests={"nvidia.com/gpu": gpus}, priority=priority, spec=spec))
        for i in range(members)
    ]


def decide_for(
    nodes: dict[str, NodeInfo],
    members: Sequence[PodInfo],
    pdbs: Sequence[PodDisruptionBudget] = (),
    *,
    need: int | None = None,
    schedulers: frozenset[str] | None = OURS,
    held: frozenset[str] = frozenset(),
) -> Decision:
    planner = GangPlanner(
        list(members),
        len(members) if need is None else need,
        member_capacity,
        one_per_node=one_per_node(members),
        signature=template_signature,
    )
    snap = Snapshot.of(nodes.values(), CLIQUE)
    return decide(
        planner, snap, ME, gang_priority(members), pdbs, schedulers=schedulers, held=lambda d: d in held, now=NOW
    )


def names(pods: Sequence[PodInfo]) -> list[str]:
    return sorted(p.name for p in pods)


def pdb(selector: Mapping[str, str], allowed: int) -> PodDisruptionBudget:
    return msgspec.convert(
        {
            "metadata": {"name": "budget", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": dict(selector)}},
            "status": {"disruptionsAllowed": allowed},
        },
        PodDisruptionBudget,
    )


def test_the_cheaper_clique_is_freed_and_the_other_untouched() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"batch-{i}", f"a-{i}", priority=10)
        run(nodes, f"eval-{i}", f"b-{i}", priority=50)
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is not None
    assert d.chosen.domain == "a"
    assert names(d.chosen.victims) == ["batch-0", "batch-1", "batch-2", "batch-3"]
    assert d.why == "lowest highest victim priority (10 vs 50 in b)"
    assert [c.domain for c in d.ranked] == ["a", "b"]


def test_a_lower_priority_gang_is_evicted_whole_although_half_would_do() -> None:
    # Two-GPU nodes; gang "lo" uses one GPU on each node of a (and one member sits in b): the
    # preemptor needs 6 GPUs in a, of which 4 are free, so two members' GPUs would do.
    nodes = cliques({"a": 4, "b": 4}, gpus=2)
    lo = [run(nodes, f"lo-{i}", f"a-{i}", priority=10, gang="lo") for i in range(4)]
    lo.append(run(nodes, "lo-4", "b-0", priority=10, gang="lo"))
    for i in range(4):
        run(nodes, f"serve-{i}", f"b-{i}", priority=500, gpus="1")
    d = decide_for(nodes, preemptor(6))
    assert d.chosen is not None and d.chosen.domain == "a"
    assert names(d.chosen.victims) == names(lo)  # every member, the one in b included
    assert d.chosen.gangs == ("ns/lo",)
    assert d.hopeless == ("b",)  # the serving pods there have a higher priority


def test_a_gang_with_one_member_of_equal_priority_is_no_victim_at_all() -> None:
    nodes = cliques({"a": 4})
    for i in range(4):
        run(nodes, f"lo-{i}", f"a-{i}", priority=100 if i == 3 else 10, gang="lo")
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is None and d.hopeless == ("a",)


def test_no_eviction_when_no_domain_could_fit() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"batch-{i}", f"a-{i}", priority=10)
    d = decide_for(nodes, preemptor(5))  # five members, four nodes per clique
    assert d.chosen is None
    assert d.hopeless == ("a", "b")
    assert d.why == (
        "preemption cannot make gang ns/hi fit any domain: 2 without room even after evicting every lower-priority pod"
    )


def test_no_victims_of_equal_priority() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"peer-{i}", f"a-{i}", priority=100)
        run(nodes, f"peer-b-{i}", f"b-{i}", priority=100, gang="peers")
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is None and d.hopeless == ("a", "b")


def test_never_does_not_preempt() -> None:
    members = preemptor(4)
    members[2] = PodInfo(
        make_pod("hi-2", gang="hi", requests={"nvidia.com/gpu": "1"}, priority=100, spec={"preemptionPolicy": "Never"})
    )
    assert gang_may_preempt(members) == (False, "not eligible due to preemptionPolicy=Never of member ns/hi-2")
    assert gang_may_preempt(preemptor(4)) == (True, "")


def test_the_gang_priority_is_its_lowest_member() -> None:
    members = preemptor(3) + [PodInfo(make_pod("hi-3", gang="hi", requests={"nvidia.com/gpu": "1"}, priority=20))]
    assert gang_priority(members) == 20
    nodes = cliques({"a": 4})
    for i in range(4):
        run(nodes, f"mid-{i}", f"a-{i}", priority=50)
    assert decide_for(nodes, members).chosen is None
    assert decide_for(nodes, preemptor(4)).chosen is not None


def test_only_this_schedulers_pods_are_victims_by_default() -> None:
    nodes = cliques({"a": 4})
    for i in range(4):
        run(nodes, f"other-{i}", f"a-{i}", priority=10, scheduler="default-scheduler")
    assert decide_for(nodes, preemptor(4)).chosen is None
    anyone = decide_for(nodes, preemptor(4), schedulers=None)
    assert anyone.chosen is not None and len(anyone.chosen.victims) == 4


def test_victims_are_the_least_important_ones_needed() -> None:
    # The gang needs three of a's four nodes: the most important pod is reprieved.
    nodes = cliques({"a": 4})
    for i, prio in enumerate((40, 10, 30, 20)):
        run(nodes, f"p{prio}", f"a-{i}", priority=prio)
    d = decide_for(nodes, preemptor(3))
    assert d.chosen is not None
    assert [p.name for p in d.chosen.victims] == ["p30", "p20", "p10"]  # most important first
    assert d.chosen.top_priority == 30 and d.chosen.leftover == 0


def test_of_equal_priority_the_younger_pod_is_evicted() -> None:
    nodes = cliques({"a": 2})
    run(nodes, "old", "a-0", priority=10, started="2026-01-01T00:00:00Z")
    run(nodes, "young", "a-1", priority=10, started="2026-01-02T00:00:00Z")
    d = decide_for(nodes, preemptor(1))
    assert d.chosen is not None and names(d.chosen.victims) == ["young"]


def test_pdbs_steer_the_domain() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"guarded-{i}", f"a-{i}", priority=10, labels={"app": "guarded"})
        run(nodes, f"free-{i}", f"b-{i}", priority=10)
    d = decide_for(nodes, preemptor(4), [pdb({"app": "guarded"}, 1)])
    assert d.chosen is not None and d.chosen.domain == "b"
    assert d.why == "fewest PodDisruptionBudget violations (0 vs 3 in a)"


def test_of_equal_cost_the_domain_breaking_no_gang_wins() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"job-{i}", f"a-{i}", priority=10, gang="job")
        run(nodes, f"solo-{i}", f"b-{i}", priority=10)
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is not None and d.chosen.domain == "b"
    assert d.why == "fewest gangs broken (0 vs 1 in a)"


def test_of_equal_cost_the_best_fit_wins() -> None:
    # Two-GPU nodes, four one-GPU members. Either clique needs one victim of priority 10:
    # b is left with no GPU to spare, a with one.
    nodes = cliques({"a": 3, "b": 2}, gpus=2)
    run(nodes, "y", "a-0", priority=10, gpus="2")
    run(nodes, "w", "a-2", priority=10_000)
    run(nodes, "x", "b-0", priority=10)
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is not None and d.chosen.domain == "b" and names(d.chosen.victims) == ["x"]
    assert d.why == "least room left over (0 vs 1 in a)"


def test_fewer_victim_pods_win() -> None:
    nodes = cliques({"a": 4, "b": 5})
    for i in range(4):
        run(nodes, f"x-{i}", f"a-{i}", priority=10)
        run(nodes, f"y-{i}", f"b-{i}", priority=10)
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is not None and d.chosen.domain == "b" and len(d.chosen.victims) == 3
    assert d.why == "fewest victim pods (3 vs 4 in a)"


def test_terminating_pods_free_room_without_victims() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"going-{i}", f"a-{i}", priority=10, deleting=True)
        run(nodes, f"stay-{i}", f"b-{i}", priority=10)
    d = decide_for(nodes, preemptor(4))
    assert d.chosen is not None and d.chosen.domain == "a"
    assert d.chosen.victims == () and d.chosen.top_priority == NO_PRIORITY


def test_held_domains_are_not_evaluated() -> None:
    nodes = cliques({"a": 4, "b": 4})
    for i in range(4):
        run(nodes, f"x-{i}", f"a-{i}", priority=10)
        run(nodes, f"y-{i}", f"b-{i}", priority=20)
    d = decide_for(nodes, preemptor(4), held=frozenset({"a"}))
    assert d.chosen is not None and d.chosen.domain == "b" and d.held == ("a",)
    assert d.why == "the only domain where eviction makes the gang fit"


def test_the_preemptors_own_placed_members_stay() -> None:
    nodes = cliques({"a": 4})
    run(nodes, "hi-placed", "a-0", priority=100, gang="hi")
    for i in range(1, 4):
        run(nodes, f"x-{i}", f"a-{i}", priority=10)
    d = decide_for(nodes, preemptor(3))
    assert d.chosen is not None and names(d.chosen.victims) == ["x-1", "x-2", "x-3"]


def test_a_mixed_gang_counts_its_large_member() -> None:
    # a's nodes take one two-GPU member each only once both one-GPU pods on a node go.
    nodes = cliques({"a": 2}, gpus=2)
    run(nodes, "s0", "a-0", priority=10)
    run(nodes, "s1", "a-0", priority=10)
    run(nodes, "s2", "a-1", priority=10)
    members = [
        PodInfo(make_pod("hi-0", gang="hi", requests={"nvidia.com/gpu": "2"}, priority=100)),
        PodInfo(make_pod("hi-1", gang="hi", requests={"nvidia.com/gpu": "1"}, priority=100)),
    ]
    d = decide_for(nodes, members)
    # s0 is reprieved (hi-1 takes its neighbour's GPU on a-0); s1 must go for hi-1 and s2 for
    # hi-0, which needs all of a-1.
    assert d.chosen is not None and names(d.chosen.victims) == ["s1", "s2"]


def test_a_victim_leaves_room_for_a_reprieve_on_its_node() -> None:
    # One three-GPU node: x (two GPUs, more important) is tried first and must go; with x gone
    # y (one GPU) can stay beside the two-GPU member.
    nodes = {"a-0": node_info(make_node("a-0", {CLIQUE: "a"}, alloc={"nvidia.com/gpu": "3"}))}
    run(nodes, "x", "a-0", priority=20, gpus="2")
    run(nodes, "y", "a-0", priority=10, gpus="1")
    d = decide_for(nodes, preemptor(1, gpus="2"))
    assert d.chosen is not None and names(d.chosen.victims) == ["x"] and d.chosen.leftover == 0


def joins(members: Sequence[PodInfo], need: int, nodes: Sequence[NodeInfo]) -> bool:
    planner = GangPlanner(list(members), need, member_capacity, signature=template_signature)
    return planner.plan_domain("d", nodes).joinable


def without(nodes: Sequence[NodeInfo], gone: set[str]) -> list[NodeInfo]:
    out = []
    for n in nodes:
        c = n.snapshot()
        for k in [k for k, p in c.pods.items() if p.pod_key in gone]:
            c.remove_pod(k)
        out.append(c)
    return out


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 2),  # GPUs
            st.sampled_from([10, 10, 50, 100, 200]),  # priority
            st.sampled_from(["", "", "g1", "g2", "g3"]),  # gang
            st.sampled_from([True, True, True, False]),  # this scheduler's
            st.sampled_from([False, False, False, False, True]),  # being deleted
        ),
        min_size=8,
        max_size=16,
    ),
    st.integers(3, 8),
    st.sampled_from([1, 1, 2]),
)
def test_invariants(pods: list[tuple[int, int, str, bool, bool]], size: int, gpus: int) -> None:
    """Over random cliques (two of four two-GPU nodes, filled round-robin): victims are strictly
    lower-priority pods of this scheduler, gangs go whole, the gang joins the chosen domain once
    the victims (and pods being deleted) are gone, no victim could be spared, and no decision
    means no domain could be freed at all."""
    nodes = cliques({"a": 4, "b": 4}, gpus=2)
    names_ = list(nodes)
    placed = []
    for i, (g, prio, gang, ours, deleting) in enumerate(pods):
        ni = nodes[names_[i % 8]]
        free = ni.allocatable.scalar["nvidia.com/gpu"] - ni.requested.scalar.get("nvidia.com/gpu", 0)
        if free < g:
            continue
        placed.append(
            run(
                nodes,
                f"p{i}",
                ni.name,
                priority=prio,
                gang=gang or None,
                gpus=str(g),
                scheduler="ome-scheduler" if ours else "other",
                deleting=deleting,
            )
        )
    members = preemptor(size, gpus=str(gpus))
    d = decide_for(nodes, members)
    by_domain = {c: [n for n in nodes.values() if n.labels[CLIQUE] == c] for c in ("a", "b")}
    leaving = {p.pod_key for p in placed if p.pod.metadata.deletion_timestamp is not None}
    if d.chosen is None:
        for c, dn in by_domain.items():
            if c in d.hopeless:
                allowed = set(leaving)
                for p in placed:
                    if p.priority >= 100 or p.pod.spec.scheduler_name != "ome-scheduler":
                        continue
                    mates = [q for q in placed if p.gang and q.gang == p.gang and q.pod_key not in leaving]
                    if all(q.priority < 100 and q.pod.spec.scheduler_name == "ome-scheduler" for q in mates):
                        allowed.add(p.pod_key)
                assert not joins(members, size, without(dn, allowed))
        return
    victims = {p.pod_key for p in d.chosen.victims}
    for p in d.chosen.victims:
        assert p.priority < 100 and p.pod.spec.scheduler_name == "ome-scheduler"
        assert p.pod_key not in leaving
    for p in d.chosen.victims:
        if p.gang:
            assert p.gang_key in d.chosen.gangs
            assert {q.pod_key for q in placed if q.gang_key == p.gang_key and q.pod_key not in leaving} <= victims
    dn = by_domain[d.chosen.domain]
    assert joins(members, size, without(dn, victims | leaving))
    for u in d.chosen.units:
        spared = victims - {p.pod_key for p in u.pods}
        if not any(p.pod_key in {q.pod_key for n in dn for q in n.pods.values()} for p in u.pods):
            continue
        assert not joins(members, size, without(dn, spared | leaving)), f"{u.key} could be spared"


def test_a_partly_placed_gang_frees_only_its_own_domain() -> None:
    nodes = cliques({"a": 4, "b": 4})
    run(nodes, "hi-placed", "b-0", priority=100, gang="hi")
    for i in range(4):
        run(nodes, f"cheap-{i}", f"a-{i}", priority=10)
    for i in range(1, 4):
        run(nodes, f"dear-{i}", f"b-{i}", priority=50)
    members = preemptor(3)
    planner = GangPlanner(members, 3, member_capacity, signature=template_signature)
    snap = Snapshot.of(nodes.values(), CLIQUE)
    d = decide(planner, snap, ME, 100, (), schedulers=OURS, only="b", now=NOW)
    assert d.chosen is not None and d.chosen.domain == "b" and [c.domain for c in d.ranked] == ["b"]
    assert names(d.chosen.victims) == ["dear-1", "dear-2", "dear-3"]


def test_the_preempting_note() -> None:
    nodes = cliques({"a": 12, "b": 12})
    for i in range(12):
        run(nodes, f"batch-{i:02d}", f"a-{i}", priority=10)
        run(nodes, f"eval-{i:02d}", f"b-{i}", priority=50)
    d = decide_for(nodes, preemptor(12))
    assert preempting_note(d, CLIQUE, ME) == (
        "preempting 12 pod(s) in nvidia.com/gpu.clique=a for gang ns/hi: "
        + ", ".join(f"ns/batch-{i:02d}" for i in range(10))
        + " and 2 more; lowest highest victim priority (10 vs 50 in b)"
    )
    assert preempting_note(decide_for(cliques({"a": 1}), preemptor(1)), CLIQUE, ME) == ""  # fits, no victims


def preempted(pi: PodInfo) -> PodInfo:
    """``pi`` being deleted with the scheduler's DisruptionTarget condition."""
    raw: dict[str, Any] = msgspec.to_builtins(pi.pod)
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raw["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    return PodInfo(msgspec.convert(raw, Pod))


def nominated(pi: PodInfo, node: str) -> PodInfo:
    raw: dict[str, Any] = msgspec.to_builtins(pi.pod)
    raw.setdefault("status", {})["nominatedNodeName"] = node
    return PodInfo(msgspec.convert(raw, Pod))


def test_a_preemption_under_way_is_found_from_nominations_and_terminating_victims() -> None:
    nodes = cliques({"a": 4, "b": 4})
    victim = run(nodes, "batch-0", "a-0", priority=10)
    run(nodes, "other", "b-0", priority=10)
    members = preemptor(4)
    snap = Snapshot.of(nodes.values(), CLIQUE)
    assert preemption_in_progress(snap, members, 100) == ""  # nobody nominated
    members[1] = nominated(members[1], "a-2")
    assert preemption_in_progress(snap, members, 100) == ""  # nothing terminating there
    nodes["a-0"].add_pod(preempted(victim))
    snap = Snapshot.of(nodes.values(), CLIQUE)
    assert preemption_in_progress(snap, members, 100) == "a"
    assert preemption_in_progress(snap, members, 10) == ""  # not of lower priority
    members[1] = nominated(members[1], "b-1")
    assert preemption_in_progress(snap, members, 100) == ""  # the victim is in another domain
