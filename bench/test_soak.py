"""The soak's pure parts (``bench/soak.py``): invariant checks, RSS slope, fault schedule, latency phases."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from bench.soak import (
    CYCLE,
    bound_twice,
    effective_requests,
    fault_schedule,
    fault_window,
    latency_by_phase,
    overcommitted,
    parse_drift,
    percentile,
    rss_slope,
    scheduled_twice,
    split_gangs,
)
from ome_scheduler.api.core import Pod
from ome_scheduler.framework.types import pod_requests


def _c(name: str, restart: str | None = None, **req: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": dict(req)}}
    if restart:
        c["restartPolicy"] = restart
    return c


def _pod(
    name: str,
    node: str = "",
    containers: list[dict[str, Any]] | None = None,
    *,
    init: list[dict[str, Any]] | None = None,
    gang: str | None = None,
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if gang:
        md["labels"] = {"scheduling.x-k8s.io/pod-group": gang}
    s: dict[str, Any] = {"containers": containers or [_c("c", cpu="1")], **spec}
    if init:
        s["initContainers"] = init
    if node:
        s["nodeName"] = node
    return {"metadata": md, "spec": s, "status": {"phase": phase}}


def _node(name: str, **alloc: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


SIDECAR_POD = _pod(
    "p",
    containers=[_c("app", cpu="500m", memory="1Gi"), _c("app2", cpu="250m")],
    init=[
        _c("setup", cpu="2", memory="512Mi"),  # alone: 2 CPU
        _c("proxy", "Always", cpu="200m", memory="256Mi"),  # sidecar: joins the app sum
        _c("migrate", cpu="1900m"),  # runs next to the sidecar: 2.1 CPU
    ],
    overhead={"cpu": "100m", "memory": "64Mi"},
)


def test_effective_requests_follow_pod_requests_with_sidecars_init_containers_and_overhead() -> None:
    got = effective_requests(SIDECAR_POD)
    # cpu: app sum 750m + sidecar 200m = 950m; init steps 2000m and 1900m + 200m = 2100m; max 2100m + 100m overhead.
    # memory: app 1Gi + sidecar 256Mi; init steps 512Mi and 256Mi; max is the app sum; + 64Mi overhead.
    assert got == {"cpu": 2200, "memory": (1024 + 256 + 64) * 2**20, "pods": 1}


def test_effective_requests_agree_with_the_schedulers_own_computation() -> None:
    pod_level = _pod("q", containers=[_c("a", cpu="1", memory="1Gi", **{"nvidia.com/gpu": "2"})])
    pod_level["spec"]["resources"] = {"requests": {"cpu": "3", "memory": "2Gi"}}
    for p in (SIDECAR_POD, pod_level, _pod("r", containers=[_c("a", cpu="1"), _c("b", memory="1Gi")])):
        theirs = pod_requests(msgspec.convert(p, Pod))
        mine = effective_requests(p)
        assert mine.pop("pods") == 1
        assert mine == theirs, p["metadata"]["name"]


def test_overcommitted_reports_a_node_over_allocatable_by_effective_requests_only() -> None:
    nodes = [_node("n1", cpu="2", pods="110"), _node("n2", cpu="4")]
    fits = [_pod("a", "n1", [_c("c", cpu="1")]), _pod("b", "n1", [_c("c", cpu="1")])]
    assert overcommitted(fits, nodes) == []
    # The container sum (950m) would fit in 2 CPUs; the effective request (2200m) does not.
    assert overcommitted([{**SIDECAR_POD, "spec": {**SIDECAR_POD["spec"], "nodeName": "n1"}}], nodes) == [
        "node n1 over-committed on cpu: 2200 > 2000"
    ]
    over = [*fits, _pod("c", "n1", [_c("c", cpu="1m")])]
    assert overcommitted(over, nodes) == ["node n1 over-committed on cpu: 2001 > 2000"]
    # Finished pods, unbound pods and pods on a node no longer listed do not count.
    ignored = [
        *fits,
        _pod("d", "n1", phase="Succeeded"),
        _pod("e", "n1", phase="Failed"),
        _pod("f"),
        _pod("g", "gone", [_c("c", cpu="100")]),
    ]
    assert overcommitted(ignored, nodes) == []
    assert overcommitted([_pod(f"p{i}", "n2", [_c("c", cpu="1m")]) for i in range(3)], [_node("n2", pods="2")]) == [
        "node n2 over-committed on pods: 3 > 2"
    ]


def test_split_gangs_finds_bound_members_in_two_domains() -> None:
    dom = {"a1": "A", "a2": "A", "b1": "B"}
    whole = [_pod("m0", "a1", gang="g"), _pod("m1", "a2", gang="g"), _pod("m2", gang="g")]
    assert split_gangs(whole, dom) == []
    split = [*whole, _pod("m3", "b1", gang="g"), _pod("s", "b1")]
    assert split_gangs(split, dom) == ["gang ns/g split across domains ['A', 'B']"]
    unlabelled = [_pod("x0", "a1", gang="h"), _pod("x1", "elsewhere", gang="h")]
    assert split_gangs(unlabelled, dom) == ["gang ns/h split across domains ['<none>', 'A']"]
    finished = [_pod("y0", "a1", gang="k"), _pod("y1", "b1", gang="k", phase="Succeeded")]
    assert split_gangs(finished, dom) == []


def test_a_pod_bound_twice_is_found_by_nodes_seen_and_by_scheduled_events() -> None:
    assert bound_twice({"u1": {"n1"}, "u2": {"n1", "n2"}}) == ["pod u2 bound to ['n1', 'n2']"]

    def ev(uid: str, reason: str = "Scheduled", count: int | None = None) -> dict[str, Any]:
        e: dict[str, Any] = {"reason": reason, "regarding": {"uid": uid, "namespace": "ns", "name": f"p-{uid}"}}
        if count is not None:
            e["series"] = {"count": count}
        return e

    assert scheduled_twice([ev("1"), ev("2"), ev("2", "FailedScheduling"), ev("3", count=1)]) == []
    assert scheduled_twice([ev("1"), ev("1"), ev("2", count=2)]) == [
        "pod ns/p-1 (uid 1) has 2 Scheduled events",
        "pod ns/p-2 (uid 2) has 2 Scheduled events",
    ]


def test_rss_slope_is_the_least_squares_slope_in_mib_per_hour_after_the_warmup() -> None:
    growing = [(t, 100.0 + t / 36.0) for t in range(0, 600, 2)]  # 100 MiB/h
    assert rss_slope(growing) == pytest.approx(100.0)
    # A jump during the warm-up does not count; flat afterwards is 0.
    jump = [(t, 50.0 if t < 60 else 80.0) for t in range(0, 600, 2)]
    assert rss_slope(jump) > 10.0
    assert rss_slope(jump, warmup_s=60) == pytest.approx(0.0)
    noisy = [(t, 80.0 + (1.0 if (t // 2) % 2 else -1.0)) for t in range(0, 3600, 2)]
    assert abs(rss_slope(noisy) or 0.0) < 0.1
    assert rss_slope([(0, 1.0), (1, 2.0)]) is None
    assert rss_slope([(5, 1.0), (5, 2.0), (5, 3.0)]) is None


@pytest.mark.parametrize("minutes", [3, 10, 30])
def test_faults_stay_inside_the_window_and_never_overlap(minutes: int) -> None:
    duration = minutes * 60.0
    lo, hi = fault_window(duration)
    faults = fault_schedule(duration)
    assert faults and all(lo <= f.start and f.start + f.seconds <= hi for f in faults)
    for a, b in zip(faults, faults[1:], strict=False):
        assert a.start + a.seconds < b.start
    assert {f.kind for f in faults} == {k for k, _, _ in CYCLE}  # even the 3-minute form has every kind
    stops = [f.seconds for f in faults if f.kind == "sigstop"]
    assert stops[0] == 10.0 and all(s == 20.0 for s in stops[1:])
    if minutes == 30:
        assert len(stops) >= 8


def test_latency_by_phase_uses_the_creation_time_and_leaves_unbound_pods_out_of_percentiles() -> None:
    created = {"a": 1.0, "b": 2.0, "c": 50.0, "d": 60.0, "e": 120.0}
    bound = {"a": 1.5, "b": 2.1, "c": 70.0, "e": 121.0}
    got = latency_by_phase(created, bound, (30.0, 90.0))
    assert got["before"] == {
        "pods": 2,
        "bound": 2,
        "p50": pytest.approx(0.1),
        "p99": 0.5,
        "max": 0.5,
        "slowest": [["a", 1.0, 0.5], ["b", 2.0, 0.1]],
    }
    assert got["during"] == {
        "pods": 2,
        "bound": 1,
        "p50": 20.0,
        "p99": 20.0,
        "max": 20.0,
        "slowest": [["c", 50.0, 20.0]],
    }
    assert got["after"]["p99"] == 1.0
    assert percentile([], 99) is None
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_parse_drift_reads_the_comparers_summary_and_mismatch_lines() -> None:
    assert parse_drift('I1130 x "Cache comparer started"\n') is None
    ok = parse_drift('I1130 "Cache comparer finished" differences=0\n')
    assert ok == ("finished", 0, [])
    text = (
        'W1130 "Cache mismatch" kind="pod" object="ns/p" what="missed"\nI1130 "Cache comparer finished" differences=1\n'
    )
    assert parse_drift(text) == ("finished", 1, ['W1130 "Cache mismatch" kind="pod" object="ns/p" what="missed"'])
    assert parse_drift('E1130 "Cache comparer failed" err="x"') == ("failed", 0, [])


def test_a_schedule_of_chosen_kinds_has_only_those_and_unknown_kinds_are_refused() -> None:
    faults = fault_schedule(600.0, kinds=["blackhole"])
    assert len(faults) >= 8 and {f.kind for f in faults} == {"blackhole"}
    with pytest.raises(ValueError):
        fault_schedule(600.0, kinds=["blackhole", "flood"])
