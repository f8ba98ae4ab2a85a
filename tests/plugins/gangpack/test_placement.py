"""The pure placement core: room counted in members, best fit, candidate narrowing (spec §3.4-3.8)."""

from __future__ import annotations

from itertools import product

from hypothesis import given, settings
from hypothesis import strategies as st

from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.placement import GangPlanner, best_fit, group_by_domain, max_flow
from tests.support.builders import make_node, make_pod, node_info

DK = "topology.ome.io/domain"


def plan(templates: list[PodInfo], need: int, nodes: list[NodeInfo]) -> dict[str, tuple[int, bool]]:
    planner = GangPlanner(
        templates, need, member_capacity, one_per_node=one_per_node(templates), signature=template_signature
    )
    by = group_by_domain(nodes, lambda n: n.labels.get(DK, ""))
    return {d: (p.room, p.joinable) for d, p in ((d, planner.plan_domain(d, ns)) for d, ns in by.items())}


def gpu_nodes(spec: dict[str, int], gpus: int = 4) -> list[NodeInfo]:
    out = []
    for dom, count in spec.items():
        for i in range(count):
            out.append(node_info(make_node(f"{dom}{i + 1}", {DK: dom}, alloc={"nvidia.com/gpu": str(gpus)})))
    return out


def gang(n: int, gpu: str = "4", anti: bool = False) -> list[PodInfo]:
    return [
        PodInfo(
            make_pod(
                f"m{i}",
                gang="g",
                requests={"nvidia.com/gpu": gpu},
                anti_affinity_on="kubernetes.io/hostname" if anti else None,
            )
        )
        for i in range(n)
    ]


def test_best_fit_picks_least_room_and_breaks_ties_by_name() -> None:
    assert best_fit({"a": 18, "b": 6, "c": 4}, 4) == "c"
    assert best_fit({"a": 18, "b": 5, "c": 2}, 4) == "b"
    assert best_fit({"z": 6, "a": 6, "m": 6}, 4) == "a"
    assert best_fit({"a": 3}, 4) is None
    assert best_fit({"a": 3}, 0) is None


def test_worked_example_domains_of_two_and_three() -> None:
    nodes = gpu_nodes({"a": 2, "b": 3})
    rooms = plan(gang(2), 2, nodes)
    assert rooms == {"a": (2, True), "b": (3, True)}
    assert best_fit({d: r for d, (r, ok) in rooms.items() if ok}, 2) == "a"
    rooms10 = plan(gang(10), 10, nodes)
    assert best_fit({d: r for d, (r, ok) in rooms10.items() if ok}, 10) is None


def test_room_counts_members_not_nodes() -> None:
    """Rule 1: two 2-GPU members share a 4-GPU node."""
    nodes = gpu_nodes({"a": 1, "b": 2})
    rooms = plan(gang(2, gpu="2"), 2, nodes)
    assert rooms["a"] == (2, True)
    assert rooms["b"] == (4, True)


def test_anti_affinity_keeps_one_member_per_node() -> None:
    nodes = gpu_nodes({"a": 1, "b": 2})
    templates = gang(2, gpu="2", anti=True)
    assert one_per_node(templates)
    rooms = plan(templates, 2, nodes)
    assert rooms["a"] == (1, False)
    assert rooms["b"] == (2, True)


def test_room_uses_largest_member_that_fits_the_node() -> None:
    nodes = [node_info(make_node("a1", {DK: "a"}, alloc={"nvidia.com/gpu": "4"}))]
    small = PodInfo(make_pod("s", gang="g", requests={"nvidia.com/gpu": "1"}))
    big = PodInfo(make_pod("b", gang="g", requests={"nvidia.com/gpu": "2"}))
    assert plan([small, big], 2, nodes)["a"] == (2, True)


def test_heterogeneous_gang_needs_a_domain_for_its_large_member() -> None:
    nodes = [
        node_info(make_node("a1", {DK: "a"}, alloc={"nvidia.com/gpu": "4"})),
        node_info(make_node("a2", {DK: "a"}, alloc={"nvidia.com/gpu": "4"})),
        node_info(make_node("b1", {DK: "b"}, alloc={"nvidia.com/gpu": "8"})),
        node_info(make_node("b2", {DK: "b"}, alloc={"nvidia.com/gpu": "8"})),
    ]
    small = PodInfo(
        make_pod("small", gang="g", requests={"nvidia.com/gpu": "4"}, anti_affinity_on="kubernetes.io/hostname")
    )
    large = PodInfo(
        make_pod("large", gang="g", requests={"nvidia.com/gpu": "8"}, anti_affinity_on="kubernetes.io/hostname")
    )
    rooms = plan([small, large], 2, nodes)
    assert rooms["a"][1] is False
    assert rooms["b"] == (2, True)
    planner = GangPlanner([small, large], 2, member_capacity, one_per_node=True, signature=template_signature)
    p = planner.plan_domain("b", nodes[2:])
    assert {n.name for n in planner.candidates(p)} == {"b1", "b2"}


def test_flexible_member_does_not_take_the_constrained_siblings_node() -> None:
    nodes = [
        node_info(make_node("n1", {DK: "a"}, alloc={"nvidia.com/gpu": "4"})),
        node_info(make_node("n2", {DK: "a"}, alloc={"nvidia.com/gpu": "4"})),
    ]
    constrained = PodInfo(
        make_pod(
            "constrained",
            gang="g",
            requests={"nvidia.com/gpu": "4"},
            spec={"nodeSelector": {"kubernetes.io/hostname": "n1"}},
        )
    )
    flexible = PodInfo(make_pod("flexible", gang="g", requests={"nvidia.com/gpu": "4"}))
    planner = GangPlanner([flexible, constrained], 2, member_capacity, signature=template_signature)
    p = planner.plan_domain("a", nodes)
    assert p.joinable
    assert [n.name for n in planner.candidates(p)] == ["n2"]


def test_busy_nodes_reduce_room_and_cordon_taint_exclude() -> None:
    busy = make_pod("busy", requests={"nvidia.com/gpu": "4"}, node_name="a1")
    nodes = [
        node_info(make_node("a1", {DK: "a"}, alloc={"nvidia.com/gpu": "4"}), [busy]),
        node_info(make_node("a2", {DK: "a"}, alloc={"nvidia.com/gpu": "4"}, unschedulable=True)),
        node_info(
            make_node(
                "a3",
                {DK: "a"},
                alloc={"nvidia.com/gpu": "4"},
                taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}],
            )
        ),
        node_info(make_node("a4", {DK: "a"}, alloc={"nvidia.com/gpu": "4"})),
    ]
    assert plan(gang(2), 2, nodes)["a"] == (1, False)


def test_nodes_without_label_belong_to_no_domain() -> None:
    nodes = gpu_nodes({"a": 2}) + [node_info(make_node("x", alloc={"nvidia.com/gpu": "4"}))]
    assert set(plan(gang(2), 2, nodes)) == {"a"}


def test_surplus_templates_any_subset_completes() -> None:
    nodes = gpu_nodes({"a": 2})
    templates = gang(3)
    planner = GangPlanner(templates, 2, member_capacity, signature=template_signature)
    assert planner.plan_domain("a", nodes).joinable


def test_planning_at_fleet_size() -> None:
    """One homogeneous gang of 8 over 5,000 nodes: every full domain fits, the first name wins."""
    nodes = gpu_nodes({f"d{i:03d}": 8 for i in range(625)}, gpus=8)
    templates = gang(8, gpu="8", anti=True)
    rooms = plan(templates, 8, nodes)
    assert all(r == (8, True) for r in rooms.values())
    assert best_fit({d: r for d, (r, ok) in rooms.items() if ok}, 8) == "d000"


# ---- the shape-group flow against brute force ------------------------------------------------


def brute_force_assignable(shapes: list[int], fits: list[set[int]], caps: list[int], limit: int) -> int:
    """The most members (each of shape ``shapes[i]``) placeable on nodes, by trying every choice."""
    best = 0
    for choice in product(*[[-1, *sorted(fits[s])] for s in shapes]):
        used = [0] * len(caps)
        ok = True
        for n in choice:
            if n >= 0:
                used[n] += 1
                ok = ok and used[n] <= caps[n]
        if ok:
            best = max(best, sum(1 for n in choice if n >= 0))
    return min(best, limit)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    shapes=st.lists(st.integers(0, 2), min_size=1, max_size=6),
    fits=st.lists(st.sets(st.integers(0, 3)), min_size=3, max_size=3),
    caps=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    limit=st.integers(1, 6),
)
def test_max_flow_matches_brute_force(shapes: list[int], fits: list[set[int]], caps: list[int], limit: int) -> None:
    supply = [shapes.count(g) for g in range(3)]
    got = max_flow(supply, [sorted(f) for f in fits], caps, limit)
    assert got == brute_force_assignable(shapes, fits, caps, limit)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=6),
    free=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    need=st.integers(1, 6),
)
def test_mixed_gang_joinable_and_candidates_match_brute_force(sizes: list[int], free: list[int], need: int) -> None:
    """Members of ``sizes`` GPUs on nodes with ``free`` GPUs: the planner agrees with brute force
    on whether the gang can join and on which nodes the first member may take."""
    planner: GangPlanner[int, int] = GangPlanner(sizes, need, lambda t, n: free[n] // t, signature=lambda t: t)
    nodes = list(range(len(free)))
    plan = planner.plan_domain("d", nodes)
    caps = plan.node_caps
    fits = [{n for n in nodes if free[n] // s > 0} for s in sizes]

    def placeable_with_first_on(x: int) -> bool:
        if x not in fits[0] or caps[x] <= 0 or need > len(sizes):
            return False
        left = list(caps)
        left[x] -= 1
        return 1 + brute_force_assignable(list(range(1, len(sizes))), fits, left, need - 1) >= need

    want_nodes = [x for x in nodes if placeable_with_first_on(x)]
    assert plan.joinable == bool(want_nodes)
    if plan.joinable:
        assert planner.candidates(plan) == want_nodes
