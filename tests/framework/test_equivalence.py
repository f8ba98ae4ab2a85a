"""The equivalence cache (``framework/equivalence.py``): positional tables per shape, version and
node list, LRU- and size-bounded; and the cached node search agreeing with the uncached one."""

from __future__ import annotations

import random

import pytest

from ome_scheduler.framework.equivalence import FEASIBLE, INFEASIBLE, UNKNOWN, EquivalenceCache
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.runtime import Diagnosis
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from tests.support.plugins_env import Env, chart_config, node, pod


def infos(*names: str) -> list[NodeInfo]:
    return [NodeInfo(n) for n in names]


def test_tables_are_per_shape_version_and_node_list() -> None:
    c = EquivalenceCache()
    nodes = infos("n0", "n1")
    t, fresh = c.table(b"shape-a", (1, ()), nodes, cursor=5)
    assert fresh and t.cursor == 5 and t.state == bytearray(2) and t.index == {"n0": 0, "n1": 1}
    t.state[1] = INFEASIBLE
    again, fresh = c.table(b"shape-a", (1, ()), nodes, cursor=9)
    assert again is t and not fresh and again.cursor == 5  # the caller brings it up to date
    assert c.table(b"shape-a", (2, ()), nodes, 9)[1]  # a new cluster version starts a new table
    assert c.table(b"shape-b", (1, ()), nodes, 9)[1]
    rebuilt, fresh = c.table(b"shape-a", (1, ()), infos("n0", "n1"), 9)  # another node list
    assert fresh and rebuilt.state == bytearray(2)


def test_least_recently_used_tables_are_dropped_by_count_and_by_size() -> None:
    nodes = infos("a", "b", "c", "d")
    c = EquivalenceCache(max_shapes=2)
    ta = c.table(b"a", 0, nodes, 1)[0]
    c.table(b"b", 0, nodes, 1)
    assert c.table(b"a", 0, nodes, 1)[0] is ta  # touch a: b is now the oldest
    c.table(b"c", 0, nodes, 1)
    assert c.table(b"a", 0, nodes, 1)[0] is ta
    assert c.table(b"b", 0, nodes, 1)[1]  # dropped, so new
    small = EquivalenceCache(max_slots=8)  # two tables of four nodes
    t1 = small.table(b"1", 0, nodes, 1)[0]
    small.table(b"2", 0, nodes, 1)
    small.table(b"3", 0, nodes, 1)
    assert small.table(b"1", 0, nodes, 1)[0] is not t1


def test_forget_drops_named_nodes_or_everything() -> None:
    c = EquivalenceCache()
    t = c.table(b"s", 0, infos("n0", "n1", "n2"), 1)[0]
    t.state[:] = bytes([FEASIBLE, INFEASIBLE, FEASIBLE])
    t.statuses[1] = Status.unschedulable("Insufficient cpu")
    t.set_plain_key(("A",))
    t.plain[:] = [10, 20, 30]
    t.plain_stale[:] = bytes(3)
    raw, stale = t.raw_of("B")
    stale[:] = bytes(3)
    t.forget(["n1", "gone"])
    assert t.state == bytearray([FEASIBLE, UNKNOWN, FEASIBLE]) and t.statuses == {}
    assert t.plain_stale == bytearray([0, 1, 0]) and stale == bytearray([0, 1, 0])
    t.set_plain_key(("A",))  # same plugins: kept
    assert t.plain == [10, 20, 30]
    t.set_plain_key(("A", "C"))  # other plugins: start over
    assert t.plain_stale == bytearray([1, 1, 1])
    t.forget(None)
    assert t.state == bytearray(3) and t.raw_of("B")[1] == bytearray([1, 1, 1])


def _cluster(seed: int, n: int) -> Env:
    rnd = random.Random(seed)
    env = Env(chart_config(percentageOfNodesToScore=rnd.choice([0, 5, 30, 100])))
    for i in range(n):
        cpu = rnd.choice(["1", "2", "4", "8"])
        taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if rnd.random() < 0.1 else []
        env.add_node(node(f"n{i:03d}", {"zone": f"z{i % 3}"}, alloc={"cpu": cpu}, taints=taints))
    return env


@pytest.mark.parametrize("seed", range(12))
def test_cached_search_and_scores_agree_with_the_uncached_ones(seed: int) -> None:
    """Pods of a few shapes land one after another (each assumed on the chosen node, which the
    change feed reports); every cycle the cached search finds the same nodes, moves the start
    index the same way, and the cached scores equal the uncached ones."""
    rnd = random.Random(seed)
    env = _cluster(seed, rnd.choice([7, 120, 300]))
    s = env.s
    fw = s.frameworks["ome-scheduler"]
    alg = s.cycles.algorithm
    shapes = [
        {
            "requests": {"cpu": rnd.choice(["100m", "500m", "1", "3"])},
            "node_selector": rnd.choice([None, {"zone": "z1"}]),
        }
        for _ in range(3)
    ]
    for i in range(150):
        shape = rnd.choice(shapes)
        sel = shape["node_selector"]
        pi = PodInfo(pod(f"p{i}", requests=shape["requests"], spec={"nodeSelector": sel} if sel else None))
        nodes = s.node_infos()
        state = CycleState()
        _, st, _ = fw.run_pre_filter(state, pi, nodes)
        if st is not None:
            continue
        assert fw.filters_node_local(state)
        start = alg.next_start_node_index
        plain_diag, cached_diag = Diagnosis(), Diagnosis()
        want = alg.find_nodes_that_pass_filters(fw, state, pi, plain_diag, nodes, len(nodes))
        after = alg.next_start_node_index
        alg.next_start_node_index = start
        version = (s.cache.version, fw.cache_version(state, pi))
        table, fresh = fw.equivalence.table(pi.shape, version, nodes, s.cache.change_cursor())
        if not fresh:
            table.cursor, changed = s.cache.node_changes(table.cursor)
            table.forget(changed)
        got = alg.find_feasible_cached(fw, state, pi, cached_diag, table)
        assert [nodes[p].name for p in got] == [ni.name for ni in want], i
        assert alg.next_start_node_index == after
        if not want:

            def described(d: Diagnosis) -> dict[str, str]:
                return {k: repr(v) for k, v in d.node_to_status.statuses.items()}

            assert described(cached_diag) == described(plain_diag)
            assert cached_diag.unschedulable_plugins == plain_diag.unschedulable_plugins
            continue
        assert fw.run_pre_score(state, pi, want) is None
        assert fw.scores_node_local(state)
        totals = fw.run_score(state, pi, want)
        assert fw.run_score_cached(state, pi, want, got, table) == totals, i
        best = want[totals.index(max(totals))].name
        s.cache.assume_pod(pi.with_node(best), best)
