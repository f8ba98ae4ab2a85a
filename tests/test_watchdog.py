"""The event loop's heartbeat and the watchdog thread (``ome_scheduler/app/watchdog.py``).

Real loops, real threads, real stalls (``time.sleep`` on the loop), scaled down: bounds of a
tenth of a second instead of 2.5 s. The last test runs the default stall action in a process
of its own and checks it really ends that process with status 1.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from ome_scheduler.app.watchdog import LoopWatchdog, stall_bound
from ome_scheduler.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]


def block_the_loop(seconds: float) -> None:
    """The fault: a synchronous call that keeps the event loop from running anything."""
    time.sleep(seconds)


def lag_samples(m: Metrics) -> tuple[float, float]:
    """(count, sum) of ``ome_scheduler_event_loop_lag_seconds``."""
    reg = m.registry
    count = reg.get_sample_value("ome_scheduler_event_loop_lag_seconds_count") or 0.0
    total = reg.get_sample_value("ome_scheduler_event_loop_lag_seconds_sum") or 0.0
    return count, total


def test_the_bound_is_half_the_margin_between_lease_duration_and_renew_deadline() -> None:
    assert stall_bound(15.0, 10.0) == 2.5  # kube-scheduler's defaults
    assert stall_bound(60.0, 30.0) == 15.0


def test_the_heartbeat_measures_lag_and_a_stall_fails_livez_for_a_while() -> None:
    async def main() -> None:
        m = Metrics()
        wd = LoopWatchdog(0.1, metrics=m, interval=0.02, recent=0.6)
        beating = asyncio.create_task(wd.heartbeat())
        await asyncio.sleep(0.2)
        count, total = lag_samples(m)
        assert count >= 3 and total / count < 0.1  # a healthy loop wakes on time (a loaded CI core: roughly)
        assert wd.problem() is None
        block_the_loop(0.3)
        await asyncio.sleep(0.05)  # the heartbeat runs again and records how late it was
        assert wd.last_stall is not None and 0.25 <= wd.last_stall[1] < 0.6, wd.last_stall
        problem = wd.problem()
        assert problem is not None and problem.startswith("event loop stalled for 0."), problem
        bucket = m.registry.get_sample_value("ome_scheduler_event_loop_lag_seconds_bucket", {"le": "0.256"})
        assert lag_samples(m)[0] - (bucket or 0.0) >= 1, "the stall is one sample above 0.256 s"
        await asyncio.sleep(0.7)
        assert wd.problem() is None, "a stall is reported for `recent` seconds only"
        beating.cancel()

    asyncio.run(main())


def test_livez_sees_a_loop_that_has_not_run_yet_after_a_stall() -> None:
    """A request served right after a stall may run before the heartbeat: the age of the last
    beat alone says the loop was stalled."""
    now = [100.0]
    wd = LoopWatchdog(1.0, interval=0.25, clock=lambda: now[0])
    wd.last_beat = 100.0
    now[0] = 101.2
    assert wd.problem() is None  # within bound + interval
    now[0] = 101.3
    assert wd.problem() == "event loop has not run for 1.3s"


def test_the_thread_ends_an_armed_loop_that_stalls_longer_than_the_bound() -> None:
    async def main(armed: bool) -> list[tuple[float, float, bool]]:
        calls: list[tuple[float, float, bool]] = []
        done = threading.Event()

        def on_stall(stalled: float) -> None:
            calls.append((stalled, time.monotonic(), done.is_set()))

        wd = LoopWatchdog(0.1, armed=lambda: armed, interval=0.02, poll=0.01, on_stall=on_stall)
        wd.start()
        beating = asyncio.create_task(wd.heartbeat())
        try:
            await asyncio.sleep(0.3)
            assert calls == [], "a running loop is never ended"
            t0 = time.monotonic()
            block_the_loop(0.4)
            done.set()
            await asyncio.sleep(0.1)
        finally:
            beating.cancel()
            wd.stop()
        return [(stalled, at - t0, after) for stalled, at, after in calls]

    assert asyncio.run(main(armed=False)) == [], "a standby's stall ends nothing"
    calls = asyncio.run(main(armed=True))
    assert calls, "an armed stall ends the process"
    stalled, at, after_the_stall = calls[0]
    assert not after_the_stall, "the thread acts while the loop is still stalled"
    # bound 0.1 s (+ interval 0.02 s and poll 0.01 s, and a loaded machine's thread wake-up)
    assert 0.1 < stalled < 0.35 and 0.08 < at < 0.35, calls[0]


def test_the_default_action_writes_one_line_and_exits_with_status_1() -> None:
    script = textwrap.dedent(
        """
        import asyncio, time
        from ome_scheduler.app.watchdog import LoopWatchdog

        async def main():
            wd = LoopWatchdog(0.2, armed=lambda: True)
            wd.start()
            asyncio.get_running_loop().create_task(wd.heartbeat())
            await asyncio.sleep(0.3)
            time.sleep(10)  # stalled for good
            print("still alive")

        asyncio.run(main())
        """
    )
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    took = time.monotonic() - t0
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "still alive" not in r.stdout
    assert took < 8, took
    lines = [ln for ln in r.stderr.splitlines() if "event loop stalled on the leader; exiting" in ln]
    assert len(lines) == 1 and "stalledSeconds=" in lines[0] and "boundSeconds=0.2" in lines[0], r.stderr
    assert lines[0].startswith("E")  # klog's error severity
