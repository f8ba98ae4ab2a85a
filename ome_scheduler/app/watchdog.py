"""The event loop's health: how late it runs, and a watchdog thread that ends a stalled leader.

Everything the scheduler does runs on one asyncio loop: scheduling cycles, Bindings, Lease
renewals and the HTTPS endpoint. A loop that stops running (a blocking call, a pathological
input, a debugger, a paused VM) renews nothing and answers nothing, and a loop that stops
*between* the fence's check and the write of a Binding (``framework/fence.py``) could send that
Binding late. Two parts watch it:

* :meth:`LoopWatchdog.heartbeat`, a task on the loop, wakes every ``interval`` seconds and
  records how late it woke in ``ome_scheduler_event_loop_lag_seconds`` (a healthy loop shows
  a few milliseconds). A wake-up later than ``bound`` is a *stall*: it is logged, and
  :meth:`LoopWatchdog.problem` reports it for ``recent`` seconds, so ``/livez`` (served on the
  same loop) answers 500 to the probes that were queued during the stall and to those right
  after it. While the loop is stalled nothing is answered at all: the kubelet's probe times
  out (``timeoutSeconds``, 1 s by default) and counts a failure, which covers that case. A
  single stall fails one or two probes (the chart probes every 20 s, and restarts after 3
  failures); stalls that recur within ``recent`` seconds fail every probe and get the pod
  restarted.
* A thread (not the loop: it must run when the loop does not) checks every ``poll`` seconds
  how long ago the heartbeat last ran. While ``armed()`` (this process leads) and the loop has
  not run for longer than ``bound``, it ends the process at once with status 1, as
  kube-scheduler exits when it loses its lease; the standby takes over.

The bound (:func:`stall_bound`) is half of ``leaseDuration - renewDeadline`` (2.5 s with the
defaults 15 s and 10 s). Why below that difference: the fence lets a Binding out only while the
last renewal is younger than ``renewDeadline``, and a standby cannot take the Lease before
``leaseDuration`` after that renewal; the only way a checked Binding leaves later is a pause
between the check and the write, and the watchdog caps such a pause at ``bound + interval +
poll`` (2.85 s with the defaults: the heartbeat runs every 0.25 s, the thread looks every 0.1 s). Why
half: the other half is the margin for the write itself (a new connection's TCP and TLS
handshake), for waking the thread (the GIL is handed over within 5 ms) and for clocks running at
slightly different rates on the two replicas. The price is that a leader whose loop is blocked
longer than the bound by legitimate work is restarted too: raise ``leaseDuration -
renewDeadline`` to allow longer pauses.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable

from ome_scheduler import logs
from ome_scheduler.metrics import Metrics

log = logs.get_logger()

RECENT_STALL_SECONDS = 10.0
"""How long after a stall ``/livez`` keeps failing (see the module docstring)."""


def stall_bound(lease_duration: float, renew_deadline: float) -> float:
    """The longest the loop may stall on a leader, in seconds: ``(leaseDuration -
    renewDeadline) / 2`` (the module docstring says why). Both arguments are seconds, and
    ``lease_duration > renew_deadline`` (the configuration's validation enforces it)."""
    return (lease_duration - renew_deadline) / 2


def _exit_stalled(stalled: float, bound: float) -> None:
    """End the process for a stall: one log line written straight to fd 2 (no logging locks:
    the stalled loop may hold them), then ``os._exit(1)``."""
    line = logs.format_line(
        "error",
        "event loop stalled on the leader; exiting",
        stalledSeconds=round(stalled, 3),
        boundSeconds=round(bound, 3),
    )
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode())
    finally:
        os._exit(1)


class LoopWatchdog:
    """The loop's heartbeat and the thread that watches it; times are seconds on ``clock``.

    ``bound``: the longest stall tolerated while ``armed()``; ``interval``: the heartbeat
    period (default ``min(0.25, bound / 10)``); ``poll``: the thread's check period (default
    ``min(0.1, bound / 10)``); ``on_stall(stalled_seconds)``: what the thread does to an armed
    stall (default: log to fd 2 and ``os._exit(1)``).
    """

    def __init__(
        self,
        bound: float,
        *,
        metrics: Metrics | None = None,
        armed: Callable[[], bool] = lambda: False,
        interval: float | None = None,
        poll: float | None = None,
        recent: float = RECENT_STALL_SECONDS,
        on_stall: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bound = bound
        self.metrics = metrics
        self.armed = armed
        self.interval = interval if interval is not None else min(0.25, bound / 10)
        self.poll = poll if poll is not None else min(0.1, bound / 10)
        self.recent = recent
        self.on_stall = on_stall or (lambda stalled: _exit_stalled(stalled, bound))
        self.clock = clock
        self.last_beat = clock()
        """When the heartbeat last ran (written by the loop, read by the thread)."""
        self.last_stall: tuple[float, float] | None = None
        """(when it ended, how long it lasted) of the last stall longer than ``bound``."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def heartbeat(self) -> None:
        """Run until cancelled: sleep ``interval``, record the lateness, note stalls."""
        self.last_beat = self.clock()
        while True:
            t0 = self.clock()
            await asyncio.sleep(self.interval)
            self.beat(self.clock() - t0 - self.interval)

    def beat(self, lag: float) -> None:
        """One heartbeat that woke ``lag`` seconds late."""
        now = self.last_beat = self.clock()
        lag = max(0.0, lag)
        if self.metrics is not None:
            self.metrics.event_loop_lag.observe(lag)
        if lag > self.bound:
            self.last_stall = (now, lag)
            log.error("event loop stalled", stalledSeconds=round(lag, 3), boundSeconds=round(self.bound, 3))

    def problem(self) -> str | None:
        """What ``/livez`` reports: None when the loop is healthy, else the stall (current, or
        ended less than ``recent`` seconds ago)."""
        now = self.clock()
        since = now - self.last_beat
        if since > self.bound + self.interval:
            return f"event loop has not run for {since:.1f}s"
        if self.last_stall is not None and now - self.last_stall[0] < self.recent:
            ended, lasted = self.last_stall
            return f"event loop stalled for {lasted:.1f}s, {now - ended:.1f}s ago"
        return None

    def check(self) -> None:
        """One look by the thread: an armed loop that has not run for longer than ``bound``
        (plus the heartbeat's own ``interval``) is ended through ``on_stall``."""
        stalled = self.clock() - self.last_beat - self.interval
        if stalled > self.bound and self.armed():
            self.on_stall(stalled)

    def start(self) -> None:
        """Start the watching thread (a daemon; :meth:`stop` ends it)."""
        if self._thread is not None:
            return
        self.last_beat = self.clock()
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watching thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            self.check()
