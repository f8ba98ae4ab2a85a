"""§3.10 (docs/design/gang-scheduling.md): sub-gangs, each inside one domain of the sub-gang key,
all inside one domain of the required key, placed by exact counting."""

from __future__ import annotations

import pytest

from ome_scheduler.framework.status import Code
from ome_scheduler.plugins.gangpack.levels import SUBGROUP_INDEX_LABEL, plan_subgroups
from tests.plugins.gangpack.test_levels import BLOCK, CLIQUE, cliques_of, fabric, pinned_events
from tests.plugins.gangpack.test_plugin import members, plugin, prefilter, schedule
from tests.support.builders import make_pod, make_pod_group
from tests.support.fakes import FakeHandle

# b1 has room for 8 members but no clique of it takes a sub-gang of 4 whole; b2 takes two (in c3
# and c4), and its clique a6, whose nodes sort first, takes none.
FABRIC = {"b1": {"c1": 3, "c2": 3, "c5": 2}, "b2": {"a6": 2, "c3": 4, "c4": 4}}


def sub_gang(h: FakeHandle, n: int, size: str, key: str = CLIQUE, **extra: str) -> None:
    pg = make_pod_group("g", min_member=n, topology_key=BLOCK, timeout=30)
    pg.metadata.annotations |= {"ome.io/subgroup-size": size, "ome.io/subgroup-topology-key": key, **extra}
    h.groups["ns/g"] = pg


def test_a_gang_of_two_sub_gangs_goes_to_the_block_that_takes_both_whole() -> None:
    h = FakeHandle()
    fabric(h, FABRIC)
    p, _ = plugin(h)
    sub_gang(h, 8, "4")
    placed: dict[str, str] = {}
    for pi in members(h, "g", 8):
        node, _, _ = schedule(p, h, pi)
        placed[pi.name] = node
    assert cliques_of(h, placed) == {("b2", "c3"), ("b2", "c4")}
    by_clique: dict[str, int] = {}
    for node in placed.values():
        c = h.nodes[node].labels[CLIQUE]
        by_clique[c] = by_clique.get(c, 0) + 1
    assert by_clique == {"c3": 4, "c4": 4}
    assert pinned_events(h) == [f"pinned to {BLOCK}=b2 (room for 10 members, the gang needs 8), holding it"]


def test_without_sub_gangs_the_same_gang_takes_the_first_block() -> None:
    h = FakeHandle()
    fabric(h, FABRIC)
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=8, topology_key=BLOCK, timeout=30)
    (pi, *_) = members(h, "g", 8)
    _, _, _ = schedule(p, h, pi)
    pin = p.gangs.pins.get("ns/g")  # type: ignore[arg-type]
    assert pin is not None and pin.domain.value == "b1"


def test_no_block_takes_the_sub_gangs_whole() -> None:
    h = FakeHandle()
    fabric(h, {"b1": {"c1": 3, "c2": 3, "c5": 2}})
    p, _ = plugin(h)
    sub_gang(h, 8, "4")
    (pi, *_) = members(h, "g", 8)
    _, status, _ = prefilter(p, h, pi)
    assert status is not None and status.code == Code.UNSCHEDULABLE
    assert status.message() == (
        f"no domain has room for gang ns/g: no {BLOCK} domain takes 2 sub-gangs of 4 members, each inside one "
        f"{CLIQUE} domain"
    )
    assert p.gangs.pins.get("ns/g") is None  # type: ignore[arg-type]


def test_labelled_members_keep_their_sub_gang_together() -> None:
    h = FakeHandle()
    fabric(h, FABRIC)
    p, _ = plugin(h)
    sub_gang(h, 8, "4")
    pods = [
        h.add_pod(
            make_pod(
                f"g-{i}",
                gang="g",
                labels={SUBGROUP_INDEX_LABEL: str(i % 2)},
                requests={"nvidia.com/gpu": "4"},
                anti_affinity_on="kubernetes.io/hostname",
            )
        )
        for i in range(8)
    ]
    where: dict[str, set[str]] = {}
    for pi in pods:
        node, _, _ = schedule(p, h, pi)
        where.setdefault(pi.pod.metadata.labels[SUBGROUP_INDEX_LABEL], set()).add(h.nodes[node].labels[CLIQUE])
    assert sorted(map(len, where.values())) == [1, 1] and where["0"] != where["1"], where


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"ome.io/subgroup-size": "3"}, "ome.io/subgroup-size 3 does not divide minMember 8"),
        ({"ome.io/subgroup-size": "x"}, "ome.io/subgroup-size 'x' is not a positive integer"),
        ({"ome.io/subgroup-topology-key": BLOCK}, f"ome.io/subgroup-topology-key {BLOCK} is the required topology key"),
        (
            {"ome.io/topology-preferred-keys": CLIQUE},
            "ome.io/subgroup-size cannot be combined with ome.io/topology-preferred-keys",
        ),
    ],
)
def test_invalid_sub_gang_annotations(extra: dict[str, str], why: str) -> None:
    h = FakeHandle()
    fabric(h, FABRIC)
    p, _ = plugin(h)
    sub_gang(h, 8, "4", **extra)
    (pi, *_) = members(h, "g", 8)
    _, status, _ = prefilter(p, h, pi)
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message().startswith(f"PodGroup ns/g has invalid sub-gang annotations: {why}"), status.message()


def test_plan_subgroups_counts_exactly() -> None:
    # Fewest sub-domains: the one taking two sub-gangs first.
    assert plan_subgroups({"a": 4, "b": 8, "c": 4}, {}, 4, 2) == {"b": 8}
    # Placed members complete their partial sub-gang first.
    assert plan_subgroups({"a": 1, "b": 8}, {"a": 3}, 4, 2) == {"a": 4, "b": 4}
    # A partial sub-gang that cannot be completed where it is: impossible.
    assert plan_subgroups({"a": 0, "b": 8}, {"a": 3}, 4, 2) is None
    # Room in sum is not enough: 3 + 3 + 2 takes no sub-gang of 4.
    assert plan_subgroups({"a": 3, "b": 3, "c": 2}, {}, 4, 2) is None
