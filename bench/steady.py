"""S6 steady state: an open-loop arrival of gangs and standalone pods at a fixed rate.

Arrivals follow a fixed cycle: one gang (a PodGroup, then ``gang_size`` members of
``gang_gpu`` GPUs, all at once) and ``standalone_per_gang`` one-GPU pods; with the defaults
half the pods are gang members. Arrivals do not wait for the scheduler (open loop): the
harness POSTs each unit at its time, ``create_conc`` at a time. A pod "completes"
``lifetime_s`` after it was seen bound and is then deleted (a gang's PodGroup with its last
member). Every second the harness samples created, bound and deleted pods; pending depth is
created - bound. Latency is from the pod's creation (its POST answered) to its bind (seen on
the watch).

A step at rate R is **sustained** when the harness offered R (pods created >= 90 % of R x step,
creation lag p99 <= ``max_lag_s``, 1 s by default), the p99 creation-to-bound latency of the pods created in the step is
at most ``max_p99_s`` (5 s, the SIG Scalability pod startup SLO; pods still pending count with
their age), and the pending depth at the step's end is at most ``max_backlog_s`` x R.

``ramp``: from ``start_rate``, ``step_s`` seconds per step, raising by ``rate_step`` until a
step is not sustained (or the harness cannot offer the rate, or the live pods would hold more
than 60 % of the GPUs). ``steady``: one run at a fixed rate for ``steady_s`` seconds, then up
to ``drain_s`` for the last pods; reports p50/p99 and the pending depth over time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from bench.common import (
    PG_PATH,
    POD_GROUP_LABEL,
    POD_PATH,
    SCHEDULER_NAME,
    BenchApi,
    gangs_in_one_domain,
    gangs_split,
    pct,
    pod_group_obj,
    pod_obj,
    proc_cpu_rss,
    stop_scheduler,
    watch_bound,
)


@dataclass
class SteadyPlan:
    """Rates in pods/s, times in s; see the module docstring."""

    start_rate: float = 100.0
    rate_step: float = 100.0
    step_s: float = 20.0
    max_steps: int = 15
    steady_s: float = 300.0
    lifetime_s: float = 5.0
    gang_size: int = 8
    gang_gpu: int = 2
    standalone_per_gang: int = 8
    max_p99_s: float = 5.0
    max_backlog_s: float = 2.0
    max_lag_s: float = 1.0
    """The harness offered a rate when its p99 creation lag (POST answered - arrival time) is at
    most this. Latency counts from the POST's answer, so a lag does not bias it; on a loaded
    machine a larger bound (``--max-lag-seconds``) keeps the harness's own delays from ending a ramp."""
    drain_s: float = 30.0
    create_conc: int = 64

    @classmethod
    def small(cls) -> SteadyPlan:
        """CI: two 5 s ramp steps (20, 40 pods/s) and 10 s steady; checks correctness, not speed."""
        return cls(start_rate=20, rate_step=20, step_s=5, max_steps=2, steady_s=10, lifetime_s=2, drain_s=30)

    def gpu_per_pod(self) -> float:
        """Mean GPUs per arriving pod."""
        pods = self.gang_size + self.standalone_per_gang
        return (self.gang_size * self.gang_gpu + self.standalone_per_gang) / pods

    def max_rate(self, gpus: int) -> float:
        """The rate above which pods living ``lifetime_s`` would hold more than 60 % of ``gpus``."""
        return 0.6 * gpus / (self.lifetime_s * self.gpu_per_pod())


@dataclass
class StepStats:
    """One step (or the steady run): offered ``rate``; ``created`` pods, their creation-to-bound
    p50/p99 in s (pending ones with their age), pending depth at the end, p99 creation lag."""

    rate: float
    seconds: float
    created: int
    bound: int
    p50: float
    p99: float
    pending_end: int
    lag_p99: float
    offered: bool
    sustained: bool


def step_stats(
    plan: SteadyPlan,
    created_order: list[tuple[float, str]],
    bound: dict[str, tuple[float, str]],
    lag: list[tuple[float, float]],
    pending: int,
    t_from: float,
    t_to: float,
    rate: float,
    now: float,
) -> StepStats:
    """The pods created in [t_from, t_to) (``created_order``: (creation time, pod)) as of ``now``:
    latency to the bind in ``bound`` (pod -> (time, node)), or their age if not bound by ``now``;
    ``lag``: (scheduled time, creation lag) per arrival; ``pending``: pods pending at ``now``.
    Applies the sustained criteria of the module docstring."""
    lats = []
    n_bound = 0
    for tc, name in created_order:
        if t_from <= tc < t_to:
            b = bound.get(name)
            if b is not None and b[0] <= now:
                n_bound += 1
                lats.append(max(0.0, b[0] - tc))
            else:
                lats.append(now - tc)
    lags = [x for ts, x in lag if t_from <= ts < t_to]
    seconds = t_to - t_from
    created = len(lats)
    offered = created >= 0.9 * rate * seconds and pct(lags, 99) <= plan.max_lag_s
    p99 = pct(lats, 99)
    sustained = offered and p99 <= plan.max_p99_s and pending <= max(plan.max_backlog_s * rate, 2 * plan.gang_size)
    return StepStats(rate, seconds, created, n_bound, pct(lats, 50), p99, pending, pct(lags, 99), offered, sustained)


class OpenLoop:
    """The open-loop arrival process against one scheduler (see the module docstring)."""

    def __init__(
        self, api: BenchApi, which: str, plan: SteadyPlan, node_domain: dict[str, str], prefix: str = "x"
    ) -> None:
        self.api = api
        self.plan = plan
        self.sched = SCHEDULER_NAME[which]
        self.node_domain = node_domain
        self.prefix = prefix
        self.created: dict[str, float] = {}
        self.created_order: list[tuple[float, str]] = []
        self.lag: list[tuple[float, float]] = []
        self.bound: dict[str, tuple[float, str]] = {}
        self._bound_created = 0
        self.deleted = 0
        self.gangs: dict[str, list[str]] = {}
        self.gang_of: dict[str, str] = {}
        self.gang_left: dict[str, int] = {}
        self.samples: list[tuple[float, int, int, int]] = []
        self.t0 = time.monotonic()
        self._due: deque[tuple[float, str]] = deque()
        self._seq = 0
        self._queue: asyncio.Queue[tuple[float, str, list[str]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._del_sem = asyncio.Semaphore(32)
        self._bodies: dict[str, bytes] = {}

    # -- lifecycle --

    async def start(self) -> None:
        """Open the session, start the watch (waits for its list), deleter, sampler and creators."""
        self._session = self.api.client(limit=self.plan.create_conc + 40)
        listed = asyncio.Event()
        self._tasks.append(asyncio.create_task(watch_bound(self.api, self._on_bound, listed)))
        await asyncio.wait_for(listed.wait(), 30)
        self._tasks.append(asyncio.create_task(self._deleter()))
        self._tasks.append(asyncio.create_task(self._sampler()))
        self._tasks += [asyncio.create_task(self._creator()) for _ in range(self.plan.create_conc)]

    async def stop(self) -> None:
        """Cancel every task and close the session (the caller deletes what is left)."""
        for t in [*self._tasks, *self._inflight]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._inflight, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    # -- arrivals --

    def _next_unit(self) -> tuple[str, list[str]]:
        """("gang name", members) or ("", [pod]) in the fixed cycle."""
        cycle = self.plan.standalone_per_gang + 1
        k = self._seq
        self._seq += 1
        if k % cycle == 0:
            g = f"{self.prefix}g{k:07d}"
            return g, [f"{g}-{i}" for i in range(self.plan.gang_size)]
        return "", [f"{self.prefix}s{k:07d}"]

    async def arrive(self, rate: float, seconds: float) -> None:
        """Offer ``rate`` pods/s for ``seconds`` (units enter the creators' queue on time)."""
        start = time.monotonic()
        emitted = 0
        while (el := time.monotonic() - start) < seconds:
            due = int(rate * el)
            while emitted < due:
                gang, pods = self._next_unit()
                self._queue.put_nowait((start + emitted / rate, gang, pods))
                emitted += len(pods)
            await asyncio.sleep(0.01)

    async def warm_up(self, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
        """One standalone pod, bound within ``timeout``: the scheduler is up and synced.
        RuntimeError when it is not, or when ``proc`` (the scheduler) exits meanwhile."""
        gang, pods = self._next_unit()
        while gang:
            gang, pods = self._next_unit()
        self._queue.put_nowait((time.monotonic(), gang, pods))
        deadline = time.monotonic() + timeout
        while pods[0] not in self.bound:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.sched} exited with {proc.returncode} before its warm-up pod was bound")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.sched}: warm-up pod not bound within {timeout:.0f} s")
            await asyncio.sleep(0.1)

    def _body(self, name: str, gang: str) -> bytes:
        if gang:
            labels = {"app": gang, POD_GROUP_LABEL: gang}
            obj = pod_obj(name, self.sched, gpu=self.plan.gang_gpu, labels=labels)
        else:
            obj = pod_obj(name, self.sched, gpu=1, labels={"app": "steady"})
        return json.dumps(obj).encode()

    async def _post(self, path: str, body: bytes) -> None:
        assert self._session is not None
        for _ in range(5):
            async with self._session.post(path, data=body) as r:
                status = r.status
                text = await r.read()
            if status in (200, 201, 409):
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"POST {path}: {status} {text[:200]!r}")

    async def _create_pod(self, name: str, gang: str) -> None:
        await self._post(POD_PATH, self._body(name, gang))
        now = time.monotonic()
        self.created[name] = now
        self.created_order.append((now, name))
        if name in self.bound:
            self._bound_created += 1

    async def _creator(self) -> None:
        while True:
            t_sched, gang, pods = await self._queue.get()
            if gang:
                self.gangs[gang] = pods
                self.gang_left[gang] = len(pods)
                for p in pods:
                    self.gang_of[p] = gang
                await self._post(PG_PATH, json.dumps(pod_group_obj(gang, len(pods))).encode())
                await asyncio.gather(*(self._create_pod(p, gang) for p in pods))
            else:
                await self._create_pod(pods[0], "")
            self.lag.append((t_sched, time.monotonic() - t_sched))

    # -- binds and completions --

    def _on_bound(self, name: str, node: str) -> bool:
        if name not in self.bound:
            now = time.monotonic()
            self.bound[name] = (now, node)
            if name in self.created:
                self._bound_created += 1
            self._due.append((now + self.plan.lifetime_s, name))
        return False

    async def _delete(self, name: str) -> None:
        assert self._session is not None
        async with self._del_sem:
            async with self._session.delete(f"{POD_PATH}/{name}", params={"gracePeriodSeconds": "0"}) as r:
                await r.read()
            self.deleted += 1
            gang = self.gang_of.get(name)
            if gang:
                self.gang_left[gang] -= 1
                if self.gang_left[gang] == 0:
                    async with self._session.delete(f"{PG_PATH}/{gang}") as r:
                        await r.read()

    async def _deleter(self) -> None:
        while True:
            now = time.monotonic()
            while self._due and self._due[0][0] <= now:
                _, name = self._due.popleft()
                t = asyncio.create_task(self._delete(name))
                self._inflight.add(t)
                t.add_done_callback(self._inflight.discard)
            await asyncio.sleep(0.05)

    async def _sampler(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self.t0, len(self.created), self._bound_created, self.deleted))
            await asyncio.sleep(1.0)

    # -- measuring --

    def pending(self) -> int:
        """Pods created and not yet seen bound."""
        return len(self.created) - self._bound_created

    def window(self, t_from: float, t_to: float, rate: float) -> StepStats:
        """Statistics of the pods created in [t_from, t_to), as of now."""
        return step_stats(
            self.plan, self.created_order, self.bound, self.lag, self.pending(), t_from, t_to, rate, time.monotonic()
        )

    async def drain(self) -> None:
        """Wait until every created pod is bound, or no bind happened for ``drain_s``."""
        last, since = -1, time.monotonic()
        while (p := self.pending()) > 0 or not self._queue.empty():
            if p != last:
                last, since = p, time.monotonic()
            elif time.monotonic() - since > self.plan.drain_s:
                return
            await asyncio.sleep(0.2)


@dataclass
class RampResult:
    """One ramp: its steps, the highest sustained rate (0: not even ``start_rate``) and why it stopped."""

    steps: list[StepStats]
    sustained: float
    stopped: str
    cpu_s: float
    rss_mb: float


@dataclass
class SteadyResult:
    """One steady run at ``rate``: window statistics, pending depth [(s, pods)], gangs, scheduler CPU/RSS."""

    stats: StepStats
    pending: list[tuple[float, int]]
    bound_all: bool
    unbound: int
    gangs_one: int
    gangs: int
    skew_p99: float | None
    cpu_s: float
    rss_mb: float
    bound_rate: float
    extra: dict[str, Any] = field(default_factory=dict)
    gangs_split: int = 0


Starter = Callable[[], subprocess.Popen[bytes]]


async def ramp(api: BenchApi, which: str, plan: SteadyPlan, node_domain: dict[str, str], start: Starter) -> RampResult:
    """Raise the arrival rate step by step until the scheduler falls behind (module docstring)."""
    loop = OpenLoop(api, which, plan, node_domain, prefix="r")
    await loop.start()
    proc = start()
    steps: list[StepStats] = []
    best, stopped = 0.0, f"max steps ({plan.max_steps})"
    cap = plan.max_rate(8 * len(node_domain))
    cpu0 = 0.0
    try:
        await loop.warm_up(proc)
        cpu0, _ = proc_cpu_rss(proc.pid)
        rate = plan.start_rate
        for _ in range(plan.max_steps):
            if rate > cap:
                stopped = f"GPU capacity ({cap:.0f} pods/s would hold 60% of the GPUs)"
                break
            t_a = time.monotonic()
            await loop.arrive(rate, plan.step_s)
            st = loop.window(t_a, time.monotonic(), rate)
            steps.append(st)
            if proc.poll() is not None:
                raise RuntimeError(f"{which} exited with {proc.returncode}")
            print(
                f"  S6 ramp {which}: {rate:.0f} pods/s: created {st.created}, p50 {st.p50:.2f} s, p99 {st.p99:.2f} s, "
                f"pending {st.pending_end}, lag p99 {st.lag_p99:.2f} s -> {'ok' if st.sustained else 'behind'}",
                flush=True,
            )
            if not st.offered:
                stopped = f"harness could not offer {rate:.0f} pods/s"
                break
            if not st.sustained:
                stopped = f"fell behind at {rate:.0f} pods/s"
                break
            best = rate
            rate += plan.rate_step
        cpu1, rss = proc_cpu_rss(proc.pid)
    finally:
        stop_scheduler(which, proc)
        await loop.stop()
        await api.delete_pods()
    return RampResult(steps, best, stopped, cpu1 - cpu0, rss)


async def steady(
    api: BenchApi, which: str, plan: SteadyPlan, rate: float, node_domain: dict[str, str], start: Starter
) -> SteadyResult:
    """``steady_s`` seconds at ``rate``, then drain; statistics over the pods created meanwhile."""
    loop = OpenLoop(api, which, plan, node_domain, prefix="s")
    await loop.start()
    proc = start()
    try:
        await loop.warm_up(proc)
        cpu0, _ = proc_cpu_rss(proc.pid)
        n_bound0 = len(loop.bound)
        t_a = time.monotonic()
        await loop.arrive(rate, plan.steady_s)
        t_b = time.monotonic()
        stats_end = loop.window(t_a, t_b, rate)
        n_bound1 = len(loop.bound)
        await loop.drain()
        cpu1, rss = proc_cpu_rss(proc.pid)
        if proc.poll() is not None:
            raise RuntimeError(f"{which} exited with {proc.returncode}")
    finally:
        stop_scheduler(which, proc)
        await loop.stop()
    stats = loop.window(t_a, t_b, rate)
    in_window = {n for tc, n in loop.created_order if t_a <= tc < t_b}
    gangs = {g: ms for g, ms in loop.gangs.items() if ms[0] in in_window}
    one, _, skews = gangs_in_one_domain(gangs, loop.bound, node_domain)
    unbound = sum(1 for n in in_window if n not in loop.bound)
    t0 = t_a - loop.t0
    pending = [(round(t - t0, 1), c - b) for t, c, b, _ in loop.samples if t >= t0 - 1]
    await api.delete_pods()
    return SteadyResult(
        stats=stats,
        pending=pending,
        bound_all=unbound == 0,
        unbound=unbound,
        gangs_one=one,
        gangs=len(gangs),
        skew_p99=pct(skews, 99) if skews else None,
        cpu_s=cpu1 - cpu0,
        rss_mb=rss,
        bound_rate=(n_bound1 - n_bound0) / max(t_b - t_a, 1e-6),
        extra={"at_end_of_arrivals": asdict(stats_end)},
        gangs_split=gangs_split(gangs, loop.bound),
    )


def steady_notes(ramps: list[RampResult], st: SteadyResult) -> dict[str, Any]:
    """JSON-able details for the report: every ramp's steps and the steady run's series."""
    return {
        "ramps": [
            {"sustained": r.sustained, "stopped": r.stopped, "steps": [asdict(s) for s in r.steps]} for r in ramps
        ],
        "steady": {
            "rate": st.stats.rate,
            "seconds": st.stats.seconds,
            "created": st.stats.created,
            "bound_rate": st.bound_rate,
            "unbound_after_drain": st.unbound,
            "max_pending": max((p for _, p in st.pending), default=0),
            "pending": st.pending,
            **st.extra,
        },
    }
