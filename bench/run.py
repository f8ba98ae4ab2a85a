"""Side-by-side benchmark: ome-scheduler, scheduler-plugins' Coscheduling (v0.34.7) and the stock
kube-scheduler 1.35.4 on one API server.

``python -m bench.run`` (or ``make bench``) starts a local control plane in benchmark mode (no
kwok or controller manager; nodes are Node objects with status set, 8 ``nvidia.com/gpu``, 64
CPU and 512Gi each, grouped into ``nvidia.com/gpu.clique`` domains), then for every scenario,
``--runs`` times, every scheduler in turn, all with the same client QPS and burst. Scenarios
(default sizes; ``--scale`` multiplies counts, ``--small`` shrinks them for CI):

* limit: a client that only POSTs Bindings (S1's pods), round-robin over nodes, with the same
  QPS and 64 at a time: what this API server and machine can bind;
* S1 standalone: 10,000 one-GPU pods in 100 groups of identical pods (5,000 nodes, cliques of 8);
* S2 gangs: 625 gangs of 8 whole-node members (8 GPUs, required anti-affinity on hostname),
  PodGroups annotated ``ome.io/topology-key: nvidia.com/gpu.clique``;
* S3 mixed: 500 gangs plus 5,000 standalone pods, created together;
* S4 big gangs: 40 gangs of 128 one-GPU members (one clique's GPUs each) and 20 gangs mixing
  member shapes (4 each of 8, 4, 2 and 1 GPUs; or 32 each of 2 and 1 GPUs), 5,000 nodes in
  cliques of 16 (4,992 nodes). ome-scheduler counts a node's room in the gang's largest member (gangpack.md
  rule 1), so a mixed gang is sized to one clique by that rule, not by its GPUs;
* S5 scale: S1 and S2 at 1,000 and 20,000 nodes (cliques of 8); with S1/S2 the 5,000-node point.
  The workload follows the nodes up to S1/S2's size and stays there;
* S6 steady state: open-loop arrival of gangs and standalone pods, completed pods deleted
  (``bench/steady.py``): ramps, then one ``--steady-seconds`` run at the highest sustained rate.

In S1-S5 all pods exist before a scheduler starts; throughput is pods / (last bind - first bind),
latency is from the scheduler's start to each pod's bind. A run ends when every pod is bound or
no bind happened for 30 s. Results: ``bench/results/<date>.md`` and PNGs (``bench/report.py``).

ome-scheduler's leader keeps PodGroup status; each closed-loop run also reports the PodGroup
writes the API server answered (``apiserver_request_total``), counted until they stop, and
``--no-pod-group-status`` runs it without them, to measure their cost.

``--small`` (CI) runs every scheduler once at tiny sizes and fails unless ome-scheduler binds
every pod with every gang in one clique and Coscheduling leaves no gang split; what else
Coscheduling and kube-scheduler do (pending pods, cliques) is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import common
from bench import steady as s6
from bench.common import (
    GANG_AWARE,
    NS,
    OME,
    PG_PATH,
    POD_GROUP_LABEL,
    POD_PATH,
    SCHEDULER_NAME,
    SCHEDULERS,
    BenchApi,
    Nodes,
    RunResult,
    gangs_in_one_domain,
    gangs_split,
    pct,
    pod_group_obj,
    pod_obj,
    podgroup_writes,
    proc_cpu_rss,
    start_scheduler,
    stop_scheduler,
    watch_bound,
)
from bench.report import ReportContext, machine_info, versions, write_report
from e2e.harness.cluster import Cluster
from e2e.harness.paths import REPO

STALL_S = 30.0
"""A run ends when no pod was bound for this long (a scheduler that cannot place the rest);
``--stall-seconds`` sets it (``--small``: 15)."""
ALL_SCENARIOS = ("limit", "S1", "S2", "S3", "S4", "S5", "S6")


@dataclass
class Sizes:
    """Every count of every scenario (see the module docstring)."""

    nodes: int = 5000
    clique: int = 8
    s1_pods: int = 10000
    s1_groups: int = 100
    s2_gangs: int = 625
    s3_gangs: int = 500
    s3_pods: int = 5000
    gang_size: int = 8
    s4_nodes: int = 4992
    """312 whole cliques of 16: the 5,000-node size of S4."""
    s4_clique: int = 16
    s4_gangs: int = 40
    s4_mixed: int = 20
    s5_nodes: tuple[int, ...] = (1000, 20000)
    s6: s6.SteadyPlan = field(default_factory=s6.SteadyPlan)

    def scaled(self, f: float) -> Sizes:
        """Every count times ``f`` (clique and gang sizes unchanged; nodes stay whole cliques; S6 rates unchanged)."""
        cliques = max(1, round(self.nodes / self.clique * f))
        s4_cliques = max(2, round(self.s4_nodes / self.s4_clique * f))
        s4_gangs = max(1, round(self.s4_gangs * f))
        return replace(
            self,
            nodes=cliques * self.clique,
            s1_pods=max(1, round(self.s1_pods * f)),
            s1_groups=max(1, round(self.s1_groups * f)),
            s2_gangs=min(cliques, max(1, round(self.s2_gangs * f))),
            s3_gangs=max(1, round(self.s3_gangs * f)),
            s3_pods=max(1, round(self.s3_pods * f)),
            s4_nodes=s4_cliques * self.s4_clique,
            s4_gangs=min(s4_cliques - 1, s4_gangs),
            s4_mixed=min(s4_cliques - min(s4_cliques - 1, s4_gangs), max(1, round(self.s4_mixed * f))),
            s5_nodes=tuple(max(1, round(n / self.clique * f)) * self.clique for n in self.s5_nodes),
        )

    @classmethod
    def small(cls) -> Sizes:
        """CI sizes: 80 nodes in cliques of 8 (S1-S3, S6) or 16 (S4); 40 and 160 nodes (S5)."""
        return cls(
            nodes=80,
            clique=8,
            s1_pods=320,
            s1_groups=4,
            s2_gangs=10,
            s3_gangs=6,
            s3_pods=160,
            gang_size=8,
            s4_nodes=80,
            s4_clique=16,
            s4_gangs=2,
            s4_mixed=2,
            s5_nodes=(40, 160),
            s6=s6.SteadyPlan.small(),
        )

    def at_nodes(self, n: int) -> Sizes:
        """S5: ``n`` nodes; S1 and S2 follow the node count up to their own size."""
        f = min(1.0, n / self.nodes)
        return replace(
            self,
            nodes=n,
            s1_pods=max(1, round(self.s1_pods * f)),
            s1_groups=max(1, round(self.s1_groups * f)),
            s2_gangs=min(n // self.clique, max(1, round(self.s2_gangs * f))),
        )

    def mixed_shapes(self, i: int) -> list[tuple[int, int]]:
        """S4's mixed gang ``i`` as [(GPUs per member, members)], sized to one clique of ``c`` nodes
        under gangpack.md rule 1 (a node's room is counted in the gang's largest member):
        even ``i``: c/4 members each of 8, 4, 2 and 1 GPUs (c members); odd ``i``: 2c members
        each of 2 and 1 GPUs (4c members)."""
        c = self.s4_clique
        if i % 2 == 0:
            return [(8, c // 4), (4, c // 4), (2, c // 4), (1, c // 4)]
        return [(2, 2 * c), (1, 2 * c)]


@dataclass
class Variant:
    """One scenario as run: its label in the results, the base scenario, the node layout, sizes."""

    label: str
    base: str
    nodes: int
    clique: int
    sizes: Sizes


def plan(scenarios: Sequence[str], sz: Sizes) -> list[Variant]:
    """The variants to run, grouped by node layout (the main layout first, then S4's, then S5's
    by node count) so that nodes are re-created as rarely as possible."""
    main, big, scale = [], [], []
    for s in scenarios:
        if s in ("limit", "S1", "S2", "S3", "S6"):
            main.append(Variant(s, s, sz.nodes, sz.clique, sz))
        elif s == "S4":
            big.append(Variant("S4", "S4", sz.s4_nodes, sz.s4_clique, sz))
        elif s == "S5":
            for n in sorted(sz.s5_nodes):
                at = sz.at_nodes(n)
                scale += [Variant(f"S5 {b}@{n}", b, n, sz.clique, at) for b in ("S1", "S2")]
        else:
            raise SystemExit(f"unknown scenario {s!r}; known: {', '.join(ALL_SCENARIOS)}")
    return main + big + scale


# ---- scenario objects ------------------------------------------------------------------


def scenario_objects(
    name: str, sz: Sizes, scheduler: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[str]]]:
    """(PodGroups, pods, gang -> member names) for one closed-loop scenario (limit, S1-S4)."""
    pgs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    gangs: dict[str, list[str]] = {}

    def standalone(n: int, groups: int) -> None:
        per = max(1, n // groups)
        for i in range(n):
            pods.append(pod_obj(f"s{i:05d}", scheduler, gpu=1, labels={"app": f"app{i // per:03d}"}))

    def gang(gname: str, shapes: list[tuple[int, int]], anti: bool = False) -> None:
        members: list[str] = []
        for gpu, count in shapes:
            for _ in range(count):
                m = f"{gname}-{len(members)}"
                members.append(m)
                pods.append(pod_obj(m, scheduler, gpu=gpu, anti=anti, labels={"app": gname, POD_GROUP_LABEL: gname}))
        pgs.append(pod_group_obj(gname, len(members)))
        gangs[gname] = members

    if name in ("S1", "limit"):
        standalone(sz.s1_pods, sz.s1_groups)
    elif name in ("S2", "S3"):
        for i in range(sz.s2_gangs if name == "S2" else sz.s3_gangs):
            gang(f"g{i:04d}", [(8, sz.gang_size)], anti=True)
        if name == "S3":
            standalone(sz.s3_pods, max(1, sz.s3_pods // 100))
            # interleave: standalone pods and gang members arrive together
            g = [p for p in pods if p["metadata"]["name"].startswith("g")]
            s = [p for p in pods if p["metadata"]["name"].startswith("s")]
            pods = [x for pair in zip(g, s, strict=False) for x in pair] + g[len(s) :] + s[len(g) :]
    elif name == "S4":
        for i in range(sz.s4_gangs):
            gang(f"b{i:03d}", [(1, 8 * sz.s4_clique)])
        for i in range(sz.s4_mixed):
            gang(f"m{i:03d}", sz.mixed_shapes(i))
    else:
        raise ValueError(f"no closed-loop objects for {name}")
    return pgs, pods, gangs


# ---- closed-loop runs ------------------------------------------------------------------


async def limit_run(
    api: BenchApi, names: list[str], nodes: list[str], qps: float, burst: int, conc: int = 64
) -> tuple[float, float]:
    """Bind pods round-robin over nodes as fast as QPS/burst and ``conc`` allow: (seconds, pods/s)."""
    from ome_scheduler.kube.client import TokenBucket

    bucket = TokenBucket(qps, burst)
    it = iter(enumerate(names))
    t0 = time.monotonic()
    async with api.client() as c:

        async def worker() -> None:
            for i, name in it:
                await bucket.acquire()
                body = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": NS},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]},
                }
                async with c.post(f"{POD_PATH}/{name}/binding", data=json.dumps(body)) as r:
                    if r.status >= 300:
                        raise RuntimeError(f"bind {name}: {r.status} {(await r.text())[:200]}")
                    await r.read()

        await asyncio.gather(*(worker() for _ in range(conc)))
    took = time.monotonic() - t0
    return took, len(names) / took


async def one_run(
    cluster: Cluster,
    api: BenchApi,
    v: Variant,
    which: str,
    qps: float,
    burst: int,
    workdir: Path,
    node_names: list[str],
    node_domain: dict[str, str],
    stall_s: float = STALL_S,
) -> RunResult:
    """One scheduler on one closed-loop scenario: create everything, start the scheduler, wait
    until every pod is bound (or ``stall_s`` without a bind), stop it, delete the pods."""
    sched_name = "nobody" if v.base == "limit" else SCHEDULER_NAME[which]
    pgs, pods, gangs = scenario_objects(v.base, v.sizes, sched_name)
    await api.create_all(lambda o: PG_PATH, pgs)
    await api.create_all(lambda o: POD_PATH, pods)
    names = [p["metadata"]["name"] for p in pods]
    if v.base == "limit":
        took, rate = await limit_run(api, names, node_names, qps, burst)
        await api.delete_pods()
        return RunResult(v.label, "binding client", len(names), took, rate, 0, 0, None, None, 0, 0, nodes=v.nodes)
    expected = set(names)
    bound: dict[str, tuple[float, str]] = {}
    done = asyncio.Event()

    def on_bound(name: str, node: str) -> bool:
        if name in expected and name not in bound:
            bound[name] = (time.monotonic(), node)
            if len(bound) >= len(expected):
                done.set()
                return True
        return False

    watcher = asyncio.create_task(watch_bound(api, on_bound))
    await asyncio.sleep(0.5)
    writes0 = await podgroup_writes(api)
    t_start = time.monotonic()
    proc = start_scheduler(which, cluster, workdir, qps, burst)
    cpu = rss = 0.0
    try:
        timeout = 60 + len(names) * 0.2
        deadline = time.monotonic() + timeout
        last_count, last_change = 0, time.monotonic()
        while not done.is_set():
            if proc.poll() is not None:
                raise RuntimeError(f"{which} exited with {proc.returncode}; see {workdir}")
            now = time.monotonic()
            if len(bound) != last_count:
                last_count, last_change = len(bound), now
            elif bound and now - last_change > stall_s:
                print(f"{which}: no bind for {stall_s:.0f} s; {len(bound)}/{len(names)} pods bound", flush=True)
                break
            if now > deadline:
                raise RuntimeError(f"{which} bound {len(bound)}/{len(names)} pods within {timeout:.0f} s")
            try:
                cpu, rss = proc_cpu_rss(proc.pid)
            except OSError:
                pass
            await asyncio.sleep(0.5)
        cpu, rss = proc_cpu_rss(proc.pid)
        # The status keeper writes at the lowest priority: while Bindings and events saturate the
        # API server its writes wait, so count them until they stop (3 s without one, 60 s at most).
        writes, t_last_write = await podgroup_writes(api) - writes0, time.monotonic()
        quiet_until = time.monotonic() + 3.0
        while which == OME and common.POD_GROUP_STATUS and time.monotonic() < min(quiet_until, t_start + 60):
            await asyncio.sleep(0.5)
            w = await podgroup_writes(api) - writes0
            if w != writes:
                writes, t_last_write = w, time.monotonic()
                quiet_until = t_last_write + 3.0
        writes_span = max(t_last_write - t_start, 1e-6)
    finally:
        stop_scheduler(which, proc)
        watcher.cancel()
    times = [t for t, _ in bound.values()]
    first, last = min(times), max(times)
    lat = [t - t_start for t in times]
    one, _, skews = gangs_in_one_domain(gangs, bound, node_domain)
    await api.delete_pods()
    return RunResult(
        scenario=v.label,
        scheduler=which,
        pods=len(names),
        seconds=last - t_start,
        pods_per_s=len(times) / max(last - first, 1e-6),
        lat_p50=pct(lat, 50),
        lat_p99=pct(lat, 99),
        skew_p50=pct(skews, 50) if skews else None,
        skew_p99=pct(skews, 99) if skews else None,
        cpu_s=cpu,
        rss_mb=rss,
        gangs_in_one_domain=f"{one}/{len(gangs)}" if gangs else "",
        bound=-1 if len(times) == len(names) else len(times),
        nodes=v.nodes,
        gangs_split=gangs_split(gangs, bound),
        notes={
            "podgroup_writes": writes,
            "podgroup_writes_per_s": round(writes / writes_span, 1),
            "podgroup_writes_done_s": round(t_last_write - t_start, 1),
        },
    )


# ---- S6 ----------------------------------------------------------------------------------


async def run_s6(
    cluster: Cluster,
    api: BenchApi,
    v: Variant,
    scheds: Sequence[str],
    runs: int,
    qps: float,
    burst: int,
    workdir: Path,
    node_domain: dict[str, str],
) -> dict[str, RunResult]:
    """S6 for every scheduler: ``runs`` ramps each, then one steady run at the median highest
    sustained rate (at least the start rate)."""
    plan_ = v.sizes.s6

    def starter(which: str) -> s6.Starter:
        return lambda: start_scheduler(which, cluster, workdir, qps, burst)

    ramps: dict[str, list[s6.RampResult]] = {w: [] for w in scheds}
    for run in range(runs):
        for which in scheds:
            r = await s6.ramp(api, which, plan_, node_domain, starter(which))
            ramps[which].append(r)
            print(f"S6 ramp {run + 1} {which}: sustained {r.sustained:.0f} pods/s ({r.stopped})", flush=True)
    out: dict[str, RunResult] = {}
    for which in scheds:
        best = sorted(r.sustained for r in ramps[which])[len(ramps[which]) // 2]
        rate = max(best, plan_.start_rate)
        st = await s6.steady(api, which, plan_, rate, node_domain, starter(which))
        pods = st.stats.created
        res = RunResult(
            scenario="S6",
            scheduler=which,
            pods=pods,
            seconds=st.stats.seconds,
            pods_per_s=best,
            lat_p50=st.stats.p50,
            lat_p99=st.stats.p99,
            skew_p50=None,
            skew_p99=st.skew_p99,
            cpu_s=st.cpu_s,
            rss_mb=max([st.rss_mb, *(r.rss_mb for r in ramps[which])]),
            gangs_in_one_domain=f"{st.gangs_one}/{st.gangs}" if st.gangs else "",
            bound=-1 if st.bound_all else pods - st.unbound,
            nodes=v.nodes,
            notes=s6.steady_notes(ramps[which], st),
            gangs_split=st.gangs_split,
        )
        print(
            f"S6 steady {which} at {rate:.0f} pods/s for {st.stats.seconds:.0f} s: p50 {st.stats.p50:.2f} s, "
            f"p99 {st.stats.p99:.2f} s, max pending {res.notes['steady']['max_pending']}, unbound {st.unbound}, "
            f"one-clique {res.gangs_in_one_domain}",
            flush=True,
        )
        out[which] = res
    return out


# ---- main --------------------------------------------------------------------------------


def check_small(r: RunResult) -> tuple[list[str], list[str]]:
    """--small: (why ``r`` fails CI, what is only noted). ome-scheduler must bind every pod with
    every gang in one clique; Coscheduling must leave no gang split (some members bound, some
    not). Pods Coscheduling leaves pending whole-gang (it has no topology, so a spread can leave
    no empty node for whole-node members), its cliques and everything kube-scheduler does are noted."""
    fail: list[str] = []
    note: list[str] = []
    if r.gangs_split:
        msg = f"{r.scheduler} left {r.gangs_split} gang(s) split in {r.scenario}"
        (fail if r.scheduler in GANG_AWARE else note).append(msg)
    if r.bound >= 0:
        (fail if r.scheduler == OME else note).append(f"{r.scheduler} bound {r.bound}/{r.pods} pods in {r.scenario}")
    n, total = (r.gangs_in_one_domain or "0/0").split("/")
    if n != total:
        msg = f"{r.scheduler} kept {n}/{total} gangs in one clique in {r.scenario}"
        (fail if r.scheduler == OME else note).append(msg)
    return fail, note


async def amain(args: argparse.Namespace) -> int:
    """Run the benchmark as ``args`` say; 1 if --small finds a gang scheduler incorrect (``check_small``)."""
    t_begin = time.monotonic()
    sz = Sizes.small() if args.small else Sizes()
    if args.scale != 1.0:
        sz = sz.scaled(args.scale)
    if args.nodes:
        sz.nodes = args.nodes
    if args.steady_seconds:
        sz.s6.steady_s = args.steady_seconds
    if args.step_seconds:
        sz.s6.step_s = args.step_seconds
    if args.max_lag_seconds:
        sz.s6.max_lag_s = args.max_lag_seconds
    stall = args.stall_seconds or (15.0 if args.small else STALL_S)
    scheds = args.schedulers.split(",")
    unknown = set(scheds) - set(SCHEDULERS)
    if unknown:
        raise SystemExit(f"unknown scheduler(s) {sorted(unknown)}; known: {', '.join(SCHEDULERS)}")
    variants = plan(args.scenarios.split(","), sz)
    state = REPO / ".local-cluster-bench"
    cluster = Cluster(state, bench=True)
    cluster.up(fresh=True, nodes=None)
    api = BenchApi(cluster)
    workdir = cluster.log_dir / "runs"  # kept after the run (down(keep_logs=True))
    out = Path(args.out) if args.out else (cluster.log_dir / "results" if args.small else REPO / "bench" / "results")
    ctx = ReportContext(
        command=" ".join(["python -m bench.run", *args.argv]),
        small=args.small,
        qps=args.qps,
        burst=args.burst,
        sizes=asdict(sz),
        machine=machine_info(),
        versions=versions(cluster.bin_dir),
    )
    failures: list[str] = []
    notes: list[str] = []
    results: dict[tuple[str, str], list[RunResult]] = {}
    md = out
    try:
        async with api.client() as c:
            ns_body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            async with c.post("/api/v1/namespaces", data=ns_body) as resp:
                await resp.read()
        nodes = Nodes(api)
        for v in variants:
            node_names, node_domain = await nodes.ensure(v.nodes, v.clique)
            t_scen = time.monotonic()
            if v.base == "S6":
                got = await run_s6(
                    cluster, api, v, scheds, args.runs, args.qps, args.burst, workdir / "S6", node_domain
                )
                new = list(got.values())
            else:
                new = []
                for run in range(args.runs):
                    for which in ["limit"] if v.base == "limit" else scheds:
                        r = await one_run(
                            cluster, api, v, which, args.qps, args.burst, workdir, node_names, node_domain, stall
                        )
                        new.append(r)
                        print(
                            f"{v.label} run {run + 1} {r.scheduler}: {r.pods} pods"
                            f"{'' if r.bound < 0 else f' ({r.bound} bound)'}, {r.pods_per_s:.1f} pods/s, "
                            f"p99 {r.lat_p99:.2f} s, skew p99 {r.skew_p99}, cpu {r.cpu_s:.1f} s, "
                            f"rss {r.rss_mb:.0f} MiB, one-clique {r.gangs_in_one_domain}, "
                            f"PodGroup writes {r.notes.get('podgroup_writes', 0)} "
                            f"({r.notes.get('podgroup_writes_per_s', 0)}/s, last at "
                            f"{r.notes.get('podgroup_writes_done_s', 0)} s)",
                            flush=True,
                        )
            for r in new:
                results.setdefault((r.scenario, r.scheduler), []).append(r)
                if args.small and r.scheduler in SCHEDULERS:
                    fail, note = check_small(r)
                    failures += fail
                    notes += note
            print(f"{v.label}: {time.monotonic() - t_scen:.0f} s", flush=True)
            ctx.elapsed_s = time.monotonic() - t_begin
            ctx.loads[v.label] = " ".join(f"{x:.2f}" for x in os.getloadavg())
            md = write_report(out, results, ctx)
        print(f"wrote {md} ({(time.monotonic() - t_begin) / 60:.1f} min)")
        for n in notes:
            print(f"note (not a failure): {n}")
        for f in failures:
            print(f"FAIL: {f}", file=sys.stderr)
        return 1 if failures else 0
    finally:
        if not args.keep:
            cluster.down(keep_logs=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m bench.run [--small] [--scale F] [--runs N] [--scenarios ...]``."""
    p = argparse.ArgumentParser(prog="python -m bench.run", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--small", action="store_true", help="CI sizes: checks every pod bound and no gang split")
    p.add_argument("--runs", type=int, default=3, help="runs per scenario and scheduler (S6: ramps); medians")
    p.add_argument(
        "--scenarios", default=",".join(ALL_SCENARIOS), help="comma-separated, of " + ",".join(ALL_SCENARIOS)
    )
    p.add_argument("--schedulers", default=",".join(SCHEDULERS))
    p.add_argument("--qps", type=float, default=5000.0)
    p.add_argument("--burst", type=int, default=5000)
    p.add_argument("--nodes", type=int, default=0, help="node count of S1-S3 and S6 (other sizes unchanged)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every default count (nodes, pods, gangs)")
    p.add_argument("--steady-seconds", type=float, default=0, help="S6 steady run length (default 300; --small 10)")
    p.add_argument("--step-seconds", type=float, default=0, help="S6 ramp step length (default 20; --small 5)")
    p.add_argument(
        "--max-lag-seconds", type=float, default=0, help="S6: p99 creation lag up to which a rate counts as offered (1)"
    )
    p.add_argument(
        "--stall-seconds", type=float, default=0, help="end a run after this long without a bind (30; --small 15)"
    )
    p.add_argument("--keep", action="store_true", help="leave the benchmark control plane running")
    p.add_argument(
        "--no-pod-group-status",
        action="store_true",
        help="run ome-scheduler with --pod-group-status=false (measures the status keeper's cost)",
    )
    p.add_argument("--out", default="", help="report directory (default: bench/results; --small: the state dir)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    common.POD_GROUP_STATUS = not args.no_pod_group_status
    return asyncio.run(amain(args))


if __name__ == "__main__":
    raise SystemExit(main())
