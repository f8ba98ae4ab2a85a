"""The benchmark harness without a cluster: sizes and scenario objects, the order scenarios run
in, S6's sustained criteria, Coscheduling's profile and the report (tables and PNGs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.common import COSCHED, KUBE, OME, POD_GROUP_LABEL, RunResult, gangs_split
from bench.report import ReportContext, write_report
from bench.run import ALL_SCENARIOS, Sizes, check_small, plan, scenario_objects
from bench.steady import SteadyPlan, step_stats
from bench.test_micro import _chart, _NoIO
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from ome_scheduler.scheduler import Scheduler
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.manifests import coscheduling_config, kube_counterpart_config


def _gpus(pod: dict[str, Any]) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])


@pytest.mark.parametrize("f", [0.02, 0.2, 0.4, 1.0])
def test_scaled_sizes_keep_whole_cliques_and_room_for_s4(f: float) -> None:
    sz = Sizes().scaled(f) if f != 1.0 else Sizes()
    assert sz.nodes % sz.clique == 0 and sz.s4_nodes % sz.s4_clique == 0
    assert all(n % sz.clique == 0 for n in sz.s5_nodes)
    # every S4 gang takes a clique of its own, and one clique stays free
    assert sz.s4_gangs + sz.s4_mixed < sz.s4_nodes // sz.s4_clique
    assert sz.s2_gangs <= sz.nodes // sz.clique


def test_default_sizes_are_the_issue_s() -> None:
    sz = Sizes()
    assert (sz.nodes, sz.clique, sz.s1_pods, sz.s2_gangs) == (5000, 8, 10000, 625)
    assert (sz.s4_nodes, sz.s4_clique, sz.s4_gangs, sz.s4_mixed) == (4992, 16, 40, 20)
    assert sz.s5_nodes == (1000, 20000)
    assert sz.s6.start_rate == 100 and sz.s6.steady_s == 300


@pytest.mark.parametrize("sz", [Sizes(), Sizes.small()], ids=["full", "small"])
def test_s4_gangs_fill_one_clique_each(sz: Sizes) -> None:
    pgs, pods, gangs = scenario_objects("S4", sz, "x")
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert len(by_name) == len(pods)
    assert {pg["metadata"]["name"]: pg["spec"]["minMember"] for pg in pgs} == {g: len(m) for g, m in gangs.items()}
    clique_gpus = 8 * sz.s4_clique
    big = [g for g in gangs if g.startswith("b")]
    mixed = [g for g in gangs if g.startswith("m")]
    assert len(big) == sz.s4_gangs and len(mixed) == sz.s4_mixed
    for g in big:
        assert len(gangs[g]) == 128 if sz.s4_clique == 16 else True
        assert sum(_gpus(by_name[m]) for m in gangs[g]) == clique_gpus
    shapes = set()
    for g in mixed:
        gpus = [_gpus(by_name[m]) for m in gangs[g]]
        shapes.add(tuple(sorted(set(gpus))))
        assert sum(gpus) <= clique_gpus
        # gangpack.md rule 1: a node's room counts members of the gang's largest shape
        assert len(gpus) <= sz.s4_clique * (8 // max(gpus))
        assert all(by_name[m]["metadata"]["labels"][POD_GROUP_LABEL] == g for m in gangs[g])
    assert shapes == {(1, 2, 4, 8), (1, 2)}


def test_s4_mixed_gangs_are_plannable_by_ome_scheduler() -> None:
    """Every S4 gang shape, alone on two empty cliques of 16, gets a plan (no 'no room')."""
    sz = Sizes()
    clique = "nvidia.com/gpu.clique"
    for shapes in ([(1, 8 * sz.s4_clique)], sz.mixed_shapes(0), sz.mixed_shapes(1)):
        s = Scheduler(parse_config(_chart()), metrics=Metrics(), binder=_NoIO(), recorder=_NoIO())
        for i in range(2 * sz.s4_clique):
            alloc = {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}
            s.handlers.on_node_add(make_node(f"n{i:05d}", {clique: f"c{i // sz.s4_clique}"}, alloc=alloc))
        n = sum(c for _, c in shapes)
        s.handlers.on_pod_group_add(make_pod_group("g", min_member=n, topology_key=clique))
        k = 0
        for gpu, count in shapes:
            for _ in range(count):
                req = {"nvidia.com/gpu": str(gpu), "cpu": "100m", "memory": "128Mi"}
                s.handlers.on_pod_add(make_pod(f"g-{k:05d}", gang="g", requests=req))
                k += 1
        gp = s.frameworks["ome-scheduler"].plugins["OMEGangPack"]
        assert isinstance(gp, OMEGangPack)
        nodes, st = gp.pre_filter(CycleState(), s.pods["ns/g-00000"], s.cache.node_infos())
        assert st is None, (shapes, st)
        assert nodes and len({s.cache.nodes[x].labels[clique] for x in nodes}) == 1


def test_plan_runs_each_node_layout_once() -> None:
    sz = Sizes()
    vs = plan(ALL_SCENARIOS, sz)
    layouts = [(v.nodes, v.clique) for v in vs]
    # the layouts come in blocks: main, S4's, then S5's by node count
    blocks = [x for i, x in enumerate(layouts) if i == 0 or layouts[i - 1] != x]
    assert blocks == [(5000, 8), (4992, 16), (1000, 8), (20000, 8)]
    assert [v.label for v in vs] == [
        "limit",
        "S1",
        "S2",
        "S3",
        "S6",
        "S4",
        "S5 S1@1000",
        "S5 S2@1000",
        "S5 S1@20000",
        "S5 S2@20000",
    ]
    at_1k = next(v for v in vs if v.label == "S5 S1@1000").sizes
    at_20k = next(v for v in vs if v.label == "S5 S2@20000").sizes
    assert (at_1k.s1_pods, at_1k.s2_gangs) == (2000, 125)
    assert (at_20k.s1_pods, at_20k.s2_gangs) == (sz.s1_pods, sz.s2_gangs)
    with pytest.raises(SystemExit):
        plan(["S9"], sz)


def _stats(pending: int, bind_after: float, rate: float = 100, created_share: float = 1.0) -> Any:
    plan_ = SteadyPlan()
    n = int(rate * 10 * created_share)
    created = [(i / rate, f"p{i}") for i in range(n)]
    bound = {name: (tc + bind_after, "n0") for tc, name in created}
    lag = [(tc, 0.01) for tc, _ in created]
    return step_stats(plan_, created, bound, lag, pending, 0.0, 10.0, rate, now=10.0)


def test_step_sustained_when_binds_follow_within_the_slo() -> None:
    st = _stats(pending=5, bind_after=0.255)
    assert st.offered and st.sustained
    assert st.created == 1000 and st.p99 == pytest.approx(0.255)
    # pods created in the last 0.255 s are not bound by the end of the step: they count with their age
    assert st.bound == 975


def test_step_not_sustained_on_slow_binds_a_backlog_or_too_few_arrivals() -> None:
    slow = _stats(pending=5, bind_after=6.0)
    assert slow.offered and not slow.sustained and slow.p99 > 5.0
    backlog = _stats(pending=201, bind_after=0.2)  # more than 2 s of arrivals at 100 pods/s
    assert backlog.offered and not backlog.sustained
    short = _stats(pending=0, bind_after=0.1, created_share=0.8)
    assert not short.offered and not short.sustained


def test_coscheduling_profile_is_the_counterpart_plus_coscheduling() -> None:
    co = coscheduling_config("co", "/kc", qps=10, burst=20)
    kube = kube_counterpart_config("co", "/kc", qps=10, burst=20)
    plugins = co["profiles"][0]["plugins"]
    for point in ("queueSort", "preFilter", "postFilter", "permit", "reserve"):
        assert plugins[point]["enabled"] == [{"name": "Coscheduling"}], point
    assert plugins["queueSort"]["disabled"] == [{"name": "*"}]
    for point, conf in kube["profiles"][0]["plugins"].items():
        assert plugins[point] == conf
    assert co["profiles"][0]["pluginConfig"][:-1] == kube["profiles"][0]["pluginConfig"]
    assert co["profiles"][0]["pluginConfig"][-1]["name"] == "Coscheduling"
    assert co["clientConnection"] == kube["clientConnection"]


def _r(scen: str, sched: str, rate: float, nodes: int = 5000, **kw: Any) -> RunResult:
    return RunResult(scen, sched, 1000, 10.0, rate, 1.0, 2.0, 0.1, 0.2, 1.5, 200.0, nodes=nodes, **kw)


def test_report_has_every_table_and_plot(tmp_path: Path) -> None:
    results: dict[tuple[str, str], list[RunResult]] = {
        ("limit", "binding client"): [_r("limit", "binding client", 1000)]
    }
    for sched, rate in ((OME, 700.0), (COSCHED, 200.0), (KUBE, 250.0)):
        for scen in ("S1", "S2", "S3", "S4"):
            results[(scen, sched)] = [_r(scen, sched, rate * f) for f in (0.9, 1.0, 1.1)]
        for n in (1000, 20000):
            for base in ("S1", "S2"):
                results[(f"S5 {base}@{n}", sched)] = [_r(f"S5 {base}@{n}", sched, rate, nodes=n)]
        steps = [{"rate": 100.0, "p99": 0.5, "sustained": True}, {"rate": 200.0, "p99": 9.0, "sustained": False}]
        notes = {
            "ramps": [{"sustained": 100.0, "stopped": "fell behind at 200 pods/s", "steps": steps}],
            "steady": {
                "rate": 100.0,
                "max_pending": 7,
                "bound_rate": 99.0,
                "unbound_after_drain": 0,
                "pending": [[0, 1]],
            },
        }
        results[("S6", sched)] = [_r("S6", sched, 100.0, notes=notes)]
    ctx = ReportContext(command="python -m bench.run", small=False, qps=5000, burst=5000, sizes={"nodes": 5000})
    ctx.loads["S1"] = "1.00 2.00 3.00"
    md = write_report(tmp_path, results, ctx)
    text = md.read_text()
    assert "| S1 | ome-scheduler | 5000 | 1000 | 700.0 |" in text
    assert "| 2.80x | 3.50x | 0.70x |" in text  # vs kube-scheduler, vs Coscheduling, vs the limit
    assert "## S5 scale" in text and "| S2 | Coscheduling | 20,000 |" in text
    assert "## S6 steady state" in text and "fell behind at 200 pods/s" in text
    assert "Volcano" in text and "YuniKorn" in text
    assert "when each scenario ended: S1 1.00 2.00 3.00." in text
    for suffix in ("", "-scale", "-steady"):
        png = md.with_name(md.stem + suffix + ".png")
        assert png.exists() and png.stat().st_size > 1000


def test_small_check_fails_gang_schedulers_only() -> None:
    ok = _r("S2", OME, 100.0, gangs_in_one_domain="10/10")
    assert check_small(ok) == ([], [])
    split = _r("S2", OME, 100.0, gangs_in_one_domain="9/10")
    assert check_small(split)[0] == ["ome-scheduler kept 9/10 gangs in one clique in S2"]
    ome_unbound = _r("S1", OME, 100.0, bound=999)
    assert check_small(ome_unbound)[0] == ["ome-scheduler bound 999/1000 pods in S1"]
    # Coscheduling has no cliques and may leave a whole gang pending (noted), but never splits one
    co = _r("S4", COSCHED, 100.0, bound=984, gangs_in_one_domain="0/10")
    assert check_small(co) == (
        [],
        ["coscheduling bound 984/1000 pods in S4", "coscheduling kept 0/10 gangs in one clique in S4"],
    )
    co_split = _r("S4", COSCHED, 100.0, bound=990, gangs_in_one_domain="0/10", gangs_split=1)
    assert check_small(co_split)[0] == ["coscheduling left 1 gang(s) split in S4"]
    kube = _r("S2", KUBE, 100.0, bound=990, gangs_split=2)
    assert check_small(kube)[0] == []


def test_gangs_split_counts_partly_bound_gangs() -> None:
    gangs = {"a": ["a-0", "a-1"], "b": ["b-0", "b-1"], "c": ["c-0", "c-1"]}
    assert gangs_split(gangs, {"a-0", "a-1", "b-0"}) == 1  # a whole, b split, c pending whole


def test_creation_lag_bound_decides_offered() -> None:
    created = [(i / 100, f"p{i}") for i in range(1000)]
    bound = {name: (tc + 0.2, "n0") for tc, name in created}
    lag = [(tc, 1.5) for tc, _ in created]  # the harness answered each POST 1.5 s late
    strict = step_stats(SteadyPlan(), created, bound, lag, 0, 0.0, 10.0, 100, now=10.0)
    assert not strict.offered and not strict.sustained
    lenient = step_stats(SteadyPlan(max_lag_s=2.0), created, bound, lag, 0, 0.0, 10.0, 100, now=10.0)
    assert lenient.offered and lenient.sustained
