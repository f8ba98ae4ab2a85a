"""§3.9 (docs/design/gang-scheduling.md): preferred topology levels inside the required key.

Fixture: blocks of cliques, 4-GPU nodes, one 4-GPU member per node. A gang whose PodGroup
requires a block and prefers a clique lands in one clique when one fits, otherwise in the
fewest cliques of one block, and never across blocks."""

from __future__ import annotations

import msgspec
import pytest

from ome_scheduler.api.workloads import LeaderWorkerSet
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.topology import describe, domain_value, level_key, parse_described
from ome_scheduler.plugins.gangpack.levels import PREFERRED_KEYS_ANNOTATION, parse_preferred_keys
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from tests.plugins.gangpack.test_plugin import members, plugin, prefilter, schedule
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.fakes import FakeHandle

BLOCK = "topology.ome.io/block"
CLIQUE = "nvidia.com/gpu.clique"


def fabric(h: FakeHandle, spec: dict[str, dict[str, int]]) -> None:
    """Nodes ``<block><clique>-<i>`` labelled with their block and clique, 4 GPUs each."""
    for block, cliques in spec.items():
        for clique, n in cliques.items():
            for i in range(n):
                labels = {BLOCK: block, CLIQUE: clique}
                h.add_node(make_node(f"{block}{clique}-{i + 1}", labels, alloc={"nvidia.com/gpu": "4"}))


def gang(h: FakeHandle, n: int, preferred: str | None = CLIQUE) -> None:
    pg = make_pod_group("g", min_member=n, topology_key=BLOCK, timeout=30)
    if preferred is not None:
        pg.metadata.annotations[PREFERRED_KEYS_ANNOTATION] = preferred
    h.groups["ns/g"] = pg


def run_gang(h: FakeHandle, p: OMEGangPack, n: int) -> dict[str, str]:
    """Schedule the gang's ``n`` members in order (first candidate each); member -> node."""
    placed: dict[str, str] = {}
    for pi in members(h, "g", n):
        node, _, _ = schedule(p, h, pi)
        placed[pi.name] = node
    return placed


def cliques_of(h: FakeHandle, placed: dict[str, str]) -> set[tuple[str, str]]:
    return {(h.nodes[n].labels[BLOCK], h.nodes[n].labels[CLIQUE]) for n in placed.values()}


def pinned_events(h: FakeHandle) -> list[str]:
    return [note for _, _, reason, note in h.events if reason == "Pinned"]


def test_one_clique_when_one_fits_best_fit_among_cliques() -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"a0": 1, "c1": 3, "c2": 3}, "b2": {"c3": 4, "c4": 4}})
    p, _ = plugin(h)
    gang(h, 3)
    placed = run_gang(h, p, 3)
    # c1 and c2 both have room 3 (least room that fits): the tie goes to the smaller name.
    assert cliques_of(h, placed) == {("b1", "c1")}
    assert p.gangs.pins.get("ns/g") is not None
    assert pinned_events(h) == [f"pinned to {BLOCK}=b1,{CLIQUE}=c1 (room for 3 members, the gang needs 3), holding it"]


def test_relaxed_to_the_fewest_cliques_of_one_block() -> None:
    h = FakeHandle()
    # No clique fits 5. Block b1 (room 7) is the best fit; inside it c1 + c2 cover 5, and the
    # one-node clique a0 (whose node sorts first) is left out.
    fabric(h, {"b1": {"a0": 1, "c1": 3, "c2": 3}, "b2": {"c3": 4, "c4": 4}})
    p, _ = plugin(h)
    gang(h, 5)
    placed = run_gang(h, p, 5)
    assert cliques_of(h, placed) == {("b1", "c1"), ("b1", "c2")}
    (note,) = pinned_events(h)
    assert note.startswith(f"pinned to {BLOCK}=b1 (room for 7 members, the gang needs 5), holding it")
    assert note.endswith(f"preferred level {CLIQUE} relaxed: no domain of it had room for the gang")


def test_without_the_annotation_the_block_is_packed_as_before() -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"a0": 1, "c1": 3, "c2": 3}, "b2": {"c3": 4, "c4": 4}})
    p, _ = plugin(h)
    gang(h, 5, preferred=None)
    placed = run_gang(h, p, 5)
    # Best fit at the block level, first candidates by name: a0's node is used.
    assert ("b1", "a0") in cliques_of(h, placed)
    assert pinned_events(h) == [f"pinned to {BLOCK}=b1 (room for 7 members, the gang needs 5), holding it"]


def test_never_across_blocks() -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 4, "c2": 4}, "b2": {"c3": 4, "c4": 4}})
    p, _ = plugin(h)
    gang(h, 9)
    (pi, *_) = members(h, "g", 9)
    _, status, _ = prefilter(p, h, pi)
    assert status is not None and status.code == Code.UNSCHEDULABLE
    assert status.message() == "no domain has room for gang ns/g"


def test_a_clique_value_under_two_blocks_is_two_domains() -> None:
    h = FakeHandle()
    # "c1" appears in both blocks with 2 nodes each: no clique domain has room for 3.
    fabric(h, {"b1": {"c1": 2, "c2": 1}, "b2": {"c1": 2}})
    p, _ = plugin(h)
    gang(h, 3)
    placed = run_gang(h, p, 3)
    assert {b for b, _ in cliques_of(h, placed)} == {"b1"}
    assert "relaxed" in pinned_events(h)[0]
    warnings = [(t, note) for _, t, reason, note in h.events if reason == "TopologyNotNested"]
    assert warnings == [("Warning", f"{CLIQUE}=c1 appears under {BLOCK}=b1, b2: each is treated as a separate domain")]


def test_not_nested_is_warned_once_per_gang_and_level() -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 2, "c2": 1}, "b2": {"c1": 2}})
    p, _ = plugin(h)
    gang(h, 4)  # fits no block: every member's PreFilter plans the levels again
    for pi in members(h, "g", 4)[:2]:
        _, status, _ = prefilter(p, h, pi)
        assert status is not None and status.message() == "no domain has room for gang ns/g"
    assert [reason for _, _, reason, _ in h.events].count("TopologyNotNested") == 1


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("x/", "'x/' is not a label key: name part must be non-empty"),
        (BLOCK, f"{BLOCK} is the required topology key itself"),
        (f"{CLIQUE},{CLIQUE}", f"{CLIQUE} is listed twice"),
        ("a,b,c,d,e", "at most 4 keys are allowed, got 5"),
    ],
)
def test_invalid_annotations_are_unresolvable_naming_it(value: str, why: str) -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 2}})
    p, _ = plugin(h)
    gang(h, 2, preferred=value)
    (pi, _) = members(h, "g", 2)
    _, status, _ = prefilter(p, h, pi)
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message().startswith(f"PodGroup ns/g has an invalid {PREFERRED_KEYS_ANNOTATION} annotation: {why}")


def test_level_names() -> None:
    assert parse_preferred_keys(" a/b , c ", "r") == ("a/b", "c")
    assert parse_preferred_keys("", "r") == ()
    k = level_key(BLOCK, CLIQUE)
    assert domain_value({BLOCK: "b1", CLIQUE: "c3"}, k) == "b1,c3"
    assert domain_value({CLIQUE: "c3"}, k) == ""
    assert domain_value({BLOCK: "b1"}, BLOCK) == "b1"
    assert describe(k, "b1,c3") == f"{BLOCK}=b1,{CLIQUE}=c3"
    assert describe(BLOCK, "b1") == f"{BLOCK}=b1"


def test_described_paths_round_trip() -> None:
    k = level_key(BLOCK, CLIQUE)
    assert parse_described(k, describe(k, "b1,c3")) == "b1,c3"
    assert parse_described(k, f"{BLOCK}=b1") == ""
    assert parse_described(BLOCK, "b1") == "b1"


def test_a_tie_on_room_goes_to_the_fuller_block() -> None:
    h = FakeHandle()
    # c3 (in b1) and c1 (in b2) both have room 3; b1 has 4 left in all, b2 7: c3 wins, though
    # c1 sorts first, so b2 stays whole for a bigger gang.
    fabric(h, {"b1": {"c3": 3, "c4": 1}, "b2": {"c1": 3, "c2": 4}})
    p, _ = plugin(h)
    gang(h, 3)
    placed = run_gang(h, p, 3)
    assert cliques_of(h, placed) == {("b1", "c3")}


@pytest.mark.parametrize("exclusive", [True, False])
def test_a_podgroup_over_an_lws_group_that_creates_workers_late_warns_once(exclusive: bool) -> None:
    """§2.1 LWS guard: the LWS controller creates an exclusive-topology (or LeaderReady) group's
    workers only once the leader runs, so a PodGroup needing leader and workers never forms."""
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 2}})
    p, _ = plugin(h)
    gang(h, 2, preferred=None)
    labels = {"leaderworkerset.sigs.k8s.io/name": "svc", "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    leader = make_pod("svc-0", gang="g", labels=labels, requests={"nvidia.com/gpu": "4"})
    if exclusive:
        leader.metadata.annotations["leaderworkerset.sigs.k8s.io/exclusive-topology"] = BLOCK
    else:
        h.lws[("ns", "svc")] = msgspec.convert(
            {"metadata": {"name": "svc", "namespace": "ns"}, "spec": {"startupPolicy": "LeaderReady"}}, LeaderWorkerSet
        )
    pi = h.add_pod(leader)
    for _ in range(2):
        _, status, _ = prefilter(p, h, pi)
        assert status is not None and status.message() == (
            "waiting for all PodGroup member templates for ns/g: its LeaderWorkerSet creates the workers only "
            "after the leader runs (see the PodGroup's events)"
        )
    warnings = [note for _, t, reason, note in h.events if reason == "LeaderWorkerSetDeadlock" and t == "Warning"]
    assert len(warnings) == 1
    why = "sets leaderworkerset.sigs.k8s.io/exclusive-topology" if exclusive else "has startupPolicy LeaderReady"
    assert f"LeaderWorkerSet ns/svc, which {why}" in warnings[0]


def test_a_waiting_podgroup_without_an_lws_says_only_that_it_waits() -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 2}})
    p, _ = plugin(h)
    gang(h, 2, preferred=None)
    (pi,) = members(h, "g", 1)
    _, status, _ = prefilter(p, h, pi)
    assert status is not None and status.message() == "waiting for all PodGroup member templates for ns/g"
    assert not [e for e in h.events if e[2] == "LeaderWorkerSetDeadlock"]


def test_editing_a_gang_pinned_at_a_preferred_level_keeps_its_hold() -> None:
    """Found by a new user: a pin at a preferred level (key ``R>P``) is not a changed topology key;
    a new timeout reaches the waiter and the hold stays. Changing the preferred keys re-plans."""
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 2}})
    p, _ = plugin(h)
    gang(h, 2)
    old = h.groups["ns/g"]
    g = members(h, "g", 2)
    node, _, _ = schedule(p, h, g[0])
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    retimed = make_pod_group("g", min_member=2, topology_key=BLOCK, timeout=500, uid=old.metadata.uid)
    retimed.metadata.annotations[PREFERRED_KEYS_ANNOTATION] = CLIQUE
    p.gangs.on_pod_group_change(old, retimed)
    assert waiting.timeouts == [("OMEGangPack", 500.0)] and not waiting.rejected
    assert len(p.gangs.pins) == 1
    relaxed = make_pod_group("g", min_member=2, topology_key=BLOCK, timeout=500, uid=old.metadata.uid)
    p.gangs.on_pod_group_change(retimed, relaxed)
    assert waiting.rejected and len(p.gangs.pins) == 0
    assert any(f"its {PREFERRED_KEYS_ANNOTATION} annotation changed" in n for *_, n in h.events)


def test_only_ascii_digits_make_a_sub_gang_size() -> None:
    from ome_scheduler.plugins.gangpack.levels import parse_subgroups

    assert parse_subgroups("\u00b2", CLIQUE, BLOCK, 4) == "ome.io/subgroup-size '\u00b2' is not a positive integer"
    assert parse_subgroups("\u0661", CLIQUE, BLOCK, 4) == "ome.io/subgroup-size '\u0661' is not a positive integer"
    assert parse_subgroups("2", CLIQUE, BLOCK, 4) == (2, CLIQUE)
