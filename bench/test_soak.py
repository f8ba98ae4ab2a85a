"""The soak's pure parts (``bench/soak.py``): RSS slope, fault schedule, latency phases.

Its invariant checks are the harness's (``e2e/harness/invariants.py``), tested in ``e2e/test_harness.py``.
"""

from __future__ import annotations

import pytest

from bench.soak import CYCLE, fault_schedule, fault_window, latency_by_phase, percentile, rss_slope


def test_rss_slope_is_the_least_squares_slope_in_mib_per_hour_after_the_warmup() -> None:
    growing = [(t, 100.0 + t / 36.0) for t in range(0, 600, 2)]  # 100 MiB/h
    assert rss_slope(growing) == pytest.approx(100.0)
    # A jump during the warm-up does not count; flat afterwards is 0.
    jump = [(t, 50.0 if t < 60 else 80.0) for t in range(0, 600, 2)]
    assert (rss_slope(jump) or 0.0) > 10.0
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


def test_a_schedule_of_chosen_kinds_has_only_those_and_unknown_kinds_are_refused() -> None:
    faults = fault_schedule(600.0, kinds=["blackhole"])
    assert len(faults) >= 8 and {f.kind for f in faults} == {"blackhole"}
    with pytest.raises(ValueError):
        fault_schedule(600.0, kinds=["blackhole", "flood"])
