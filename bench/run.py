"""Side-by-side benchmark: ome-scheduler and the stock kube-scheduler 1.35.4 on one API server.

``python -m bench.run`` (or ``make bench``) starts a local control plane in benchmark mode (no
kwok or controller manager; nodes are Node objects with status set), then for every scenario
and every scheduler, ``--runs`` times: creates the scenario's pods, starts the scheduler with
the same client QPS and burst, and measures until every pod is bound. Scenarios (default
sizes; ``--small`` shrinks them for CI):

* S1 standalone: 10,000 one-GPU pods in 100 groups of identical pods;
* S2 gangs: 625 gangs of 8 whole-node members (8 GPUs, required anti-affinity on hostname),
  PodGroups annotated ``ome.io/topology-key: nvidia.com/gpu.clique``;
* S3 mixed: 500 gangs plus 5,000 standalone pods, created together (S2's 625 gangs use every
  node, which would leave the standalone pods no room);
* limit: a client that only POSTs Bindings, round-robin over nodes, with the same QPS and
  concurrency: what this API server and machine can bind.

Nodes: 5,000 with 8 ``nvidia.com/gpu``, 64 CPU and 512Gi each, in 625 cliques of 8. All pods
exist before a scheduler starts; throughput is pods / (last bind - first bind), latency is
from the scheduler's start to each pod's bind. Results: ``bench/results/<date>.md`` and a PNG.

ome-scheduler's leader keeps PodGroup status; each run also reports the PodGroup writes the API
server answered (``apiserver_request_total``), counted until they stop, and
``--no-pod-group-status`` runs it without them, to measure their cost.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml

from e2e.cluster import Cluster
from e2e.helpers import REPO, chart_config, kube_counterpart_config

STALL_S = 30.0
"""A run ends when no pod was bound for this long (a scheduler that cannot place the rest)."""
CLIQUE = "nvidia.com/gpu.clique"
NS = "bench"
KUBE_NAME = "bench-kube"
OME_NAME = "ome-scheduler"


@dataclass
class Sizes:
    nodes: int = 5000
    clique: int = 8
    s1_pods: int = 10000
    s1_groups: int = 100
    s2_gangs: int = 625
    s3_gangs: int = 500
    s3_pods: int = 5000
    gang_size: int = 8

    def scaled(self, f: float) -> Sizes:
        """Every count times ``f`` (clique and gang size unchanged; nodes stay whole cliques)."""
        cliques = max(1, round(self.nodes / self.clique * f))
        return Sizes(
            nodes=cliques * self.clique,
            clique=self.clique,
            s1_pods=max(1, round(self.s1_pods * f)),
            s1_groups=max(1, round(self.s1_groups * f)),
            s2_gangs=min(cliques, max(1, round(self.s2_gangs * f))),
            s3_gangs=max(1, round(self.s3_gangs * f)),
            s3_pods=max(1, round(self.s3_pods * f)),
            gang_size=self.gang_size,
        )

    @classmethod
    def small(cls) -> Sizes:
        return cls(nodes=80, clique=8, s1_pods=320, s1_groups=4, s2_gangs=10, s3_gangs=6, s3_pods=160, gang_size=8)


@dataclass
class RunResult:
    scenario: str
    scheduler: str
    pods: int
    seconds: float
    pods_per_s: float
    lat_p50: float
    lat_p99: float
    skew_p50: float | None
    skew_p99: float | None
    cpu_s: float
    rss_mb: float
    gangs_in_one_domain: str = ""
    bound: int = -1
    """Pods bound when the run ended (-1: all); a run ends early after STALL_S without a bind."""
    notes: dict[str, Any] = field(default_factory=dict)


# ---- objects ---------------------------------------------------------------------------


def node_obj(i: int, clique: int) -> dict[str, Any]:
    name = f"n{i:05d}"
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                CLIQUE: f"c{i // clique:04d}",
            },
        },
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
            "phase": "Running",
        },
    }


def pod_obj(name: str, scheduler: str, *, gpu: int, labels: dict[str, str], anti: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": {"nvidia.com/gpu": str(gpu), "cpu": "100m", "memory": "128Mi"},
                    "limits": {"nvidia.com/gpu": str(gpu)},
                },
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if anti:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": labels["app"]}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    }


def scenario_objects(
    name: str, sz: Sizes, scheduler: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[str]]]:
    """(PodGroups, pods, gang -> member names) for one scenario."""
    pgs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    gangs: dict[str, list[str]] = {}

    def standalone(n: int, groups: int) -> None:
        per = max(1, n // groups)
        for i in range(n):
            app = f"app{i // per:03d}"
            pods.append(pod_obj(f"s{i:05d}", scheduler, gpu=1, labels={"app": app}))

    def gang_set(n: int) -> None:
        for g in range(n):
            gname = f"g{g:04d}"
            pgs.append(
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": gname, "namespace": NS, "annotations": {"ome.io/topology-key": CLIQUE}},
                    "spec": {"minMember": sz.gang_size, "scheduleTimeoutSeconds": 600},
                }
            )
            members = [f"{gname}-{i}" for i in range(sz.gang_size)]
            gangs[gname] = members
            for m in members:
                pods.append(
                    pod_obj(
                        m, scheduler, gpu=8, anti=True, labels={"app": gname, "scheduling.x-k8s.io/pod-group": gname}
                    )
                )

    if name == "S1" or name == "limit":
        standalone(sz.s1_pods, sz.s1_groups)
    elif name == "S2":
        gang_set(sz.s2_gangs)
    elif name == "S3":
        gang_set(sz.s3_gangs)
        standalone(sz.s3_pods, max(1, sz.s3_pods // 100))
        # interleave: standalone pods and gang members arrive together
        g = [p for p in pods if p["metadata"]["name"].startswith("g")]
        s = [p for p in pods if p["metadata"]["name"].startswith("s")]
        pods = [x for pair in zip(g, s, strict=False) for x in pair] + g[len(s) :] + s[len(g) :]
    return pgs, pods, gangs


# ---- API access ------------------------------------------------------------------------


class BenchApi:
    def __init__(self, cluster: Cluster) -> None:
        ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
        ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
        self.ctx = ctx
        self.base = cluster.server

    def client(self) -> aiohttp.ClientSession:
        """An aiohttp session (64 connections) as cluster admin; the harness must not be the bottleneck."""
        return aiohttp.ClientSession(
            base_url=self.base,
            connector=aiohttp.TCPConnector(limit=64, ssl=self.ctx),
            timeout=aiohttp.ClientTimeout(total=120),
            headers={"Content-Type": "application/json"},
            read_bufsize=1 << 20,
        )

    async def create_all(
        self, path_of: Callable[[dict[str, Any]], str], objs: Sequence[dict[str, Any]], conc: int = 48
    ) -> None:
        async with self.client() as c:
            it = iter(objs)

            async def worker() -> None:
                for o in it:
                    for _ in range(5):
                        async with c.post(path_of(o), data=json.dumps(o)) as r:
                            status, text = r.status, await r.text()
                        if status in (200, 201, 409):
                            break
                        await asyncio.sleep(0.5)
                    else:
                        raise RuntimeError(f"create {o['metadata']['name']}: {status} {text[:200]}")

            await asyncio.gather(*(worker() for _ in range(conc)))

    async def delete_pods(self) -> None:
        async with self.client() as c:
            async with c.delete(f"/api/v1/namespaces/{NS}/pods", params={"gracePeriodSeconds": "0"}) as r:
                await r.read()
            async with c.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups") as r:
                await r.read()
            while True:
                async with c.get(f"/api/v1/namespaces/{NS}/pods", params={"limit": "1"}) as r:
                    items = (await r.json())["items"]
                if not items:
                    return
                await asyncio.sleep(0.5)


class _Ev(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _PodLite(msgspec.Struct):
    class _M(msgspec.Struct):
        name: str = ""

    class _S(msgspec.Struct, rename="camel"):
        node_name: str = ""

    metadata: _M = msgspec.field(default_factory=_M)
    spec: _S = msgspec.field(default_factory=_S)


class _PodList(msgspec.Struct):
    class _LM(msgspec.Struct, rename="camel"):
        resource_version: str = ""

    metadata: _LM = msgspec.field(default_factory=_LM)
    items: list[_PodLite] = []


async def watch_binds(
    api: BenchApi, expected: set[str], bound: dict[str, tuple[float, str]], done: asyncio.Event
) -> None:
    """Record (time, node) of the first bound observation of every expected pod."""
    dec_list = msgspec.json.Decoder(_PodList)
    dec_ev = msgspec.json.Decoder(_Ev)
    dec_pod = msgspec.json.Decoder(_PodLite)
    async with api.client() as c:
        async with c.get(f"/api/v1/namespaces/{NS}/pods") as r:
            lst = dec_list.decode(await r.read())
        now = time.monotonic()
        for p in lst.items:
            if p.spec.node_name and p.metadata.name in expected:
                bound.setdefault(p.metadata.name, (now, p.spec.node_name))
        if len(bound) >= len(expected):
            done.set()
            return
        params = {"watch": "true", "resourceVersion": lst.metadata.resource_version, "timeoutSeconds": "3600"}
        tmo = aiohttp.ClientTimeout(total=None, sock_read=3700)
        async with c.get(f"/api/v1/namespaces/{NS}/pods", params=params, timeout=tmo) as s:
            buf = b""
            async for chunk in s.content.iter_any():
                buf += chunk
                while (i := buf.find(b"\n")) >= 0:
                    line, buf = buf[:i], buf[i + 1 :]
                    if not line:
                        continue
                    ev = dec_ev.decode(line)
                    if ev.type not in ("ADDED", "MODIFIED"):
                        continue
                    p = dec_pod.decode(bytes(ev.object))
                    if p.spec.node_name and p.metadata.name in expected and p.metadata.name not in bound:
                        bound[p.metadata.name] = (time.monotonic(), p.spec.node_name)
                        if len(bound) >= len(expected):
                            done.set()
                            return


# ---- processes -------------------------------------------------------------------------


def proc_cpu_rss(pid: int) -> tuple[float, float]:
    """(CPU seconds user+system, peak RSS MiB) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / ticks
    rss = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024
    return cpu, rss


async def podgroup_writes(api: BenchApi) -> int:
    """PodGroup writes the API server has answered (``apiserver_request_total``, PUT and PATCH
    of ``podgroups`` and ``podgroups/status``): what the leader's status keeper sent."""
    async with api.client() as c:
        async with c.get("/metrics") as r:
            text = await r.text()
    n = 0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'resource="podgroups"' in line:
            if 'verb="PUT"' in line or 'verb="PATCH"' in line:
                n += int(float(line.rsplit(" ", 1)[1]))
    return n


POD_GROUP_STATUS = True
"""Whether ome-scheduler keeps PodGroup status (``--no-pod-group-status`` measures without)."""


def start_scheduler(which: str, cluster: Cluster, workdir: Path, qps: float, burst: int) -> subprocess.Popen[bytes]:
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / f"{which}.log").open("ab")
    if which == "kube-scheduler":
        cfg = kube_counterpart_config(KUBE_NAME, str(cluster.kubeconfig), qps=qps, burst=burst)
        path = workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        argv = [str(cluster.bin_dir / "kube-scheduler"), f"--config={path}", "--secure-port=0", "--v=1"]
        # --secure-port=0 is rejected by some versions; fall back to a free port.
        argv[-2] = f"--secure-port={_free_port()}"
    else:
        cfg = chart_config(scheduler_name=OME_NAME)
        cfg["clientConnection"] = {"qps": qps, "burst": burst}
        path = workdir / "ome-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        argv = [
            sys.executable,
            "-m",
            "ome_scheduler",
            f"--config={path}",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--v={os.environ.get('BENCH_OME_V', '1')}",
            "--secure-port=0",
            f"--pod-group-status={str(POD_GROUP_STATUS).lower()}",
        ]
    profiler = os.environ.get("BENCH_OME_PROFILE")  # e.g. "py-spy record --format raw -o ome.txt --"
    if profiler and which != "kube-scheduler":
        argv = [*profiler.split(), *argv]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(xs: Sequence[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


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
                async with c.post(f"/api/v1/namespaces/{NS}/pods/{name}/binding", data=json.dumps(body)) as r:
                    if r.status >= 300:
                        raise RuntimeError(f"bind {name}: {r.status} {(await r.text())[:200]}")
                    await r.read()

        await asyncio.gather(*(worker() for _ in range(conc)))
    took = time.monotonic() - t0
    return took, len(names) / took


async def one_run(
    cluster: Cluster,
    api: BenchApi,
    scenario: str,
    which: str,
    sz: Sizes,
    qps: float,
    burst: int,
    workdir: Path,
    node_names: list[str],
    node_domain: dict[str, str],
) -> RunResult:
    sched_name = KUBE_NAME if which == "kube-scheduler" else OME_NAME
    if scenario == "limit":
        sched_name = "nobody"
    pgs, pods, gangs = scenario_objects(scenario, sz, sched_name)
    await api.create_all(lambda o: f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups", pgs)
    await api.create_all(lambda o: f"/api/v1/namespaces/{NS}/pods", pods)
    names = [p["metadata"]["name"] for p in pods]
    if scenario == "limit":
        took, rate = await limit_run(api, names, node_names, qps, burst)
        await api.delete_pods()
        return RunResult(scenario, "binding client", len(names), took, rate, 0, 0, None, None, 0, 0)
    bound: dict[str, tuple[float, str]] = {}
    done = asyncio.Event()
    watcher = asyncio.create_task(watch_binds(api, set(names), bound, done))
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
            elif bound and now - last_change > STALL_S:
                print(f"{which}: no bind for {STALL_S:.0f} s; {len(bound)}/{len(names)} pods bound", flush=True)
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
        while which != "kube-scheduler" and POD_GROUP_STATUS and time.monotonic() < min(quiet_until, t_start + 60):
            await asyncio.sleep(0.5)
            w = await podgroup_writes(api) - writes0
            if w != writes:
                writes, t_last_write = w, time.monotonic()
                quiet_until = t_last_write + 3.0
        writes_span = max(t_last_write - t_start, 1e-6)
    finally:
        if os.environ.get("BENCH_OME_PROFILE") and which != "kube-scheduler":
            os.killpg(proc.pid, signal.SIGINT)  # py-spy writes its profile on SIGINT
        else:
            proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        watcher.cancel()
    times = [t for t, _ in bound.values()]
    first, last = min(times), max(times)
    span = max(last - first, 1e-6)
    lat = [t - t_start for t in times]
    skews = []
    one_domain = 0
    for members in gangs.values():
        ts = [bound[m][0] for m in members if m in bound]
        if len(ts) == len(members):
            skews.append(max(ts) - min(ts))
            doms = {node_domain.get(bound[m][1]) for m in members}
            one_domain += 1 if len(doms) == 1 else 0
    await api.delete_pods()
    return RunResult(
        scenario=scenario,
        scheduler=which,
        pods=len(names),
        seconds=last - t_start,
        pods_per_s=len(times) / span,
        lat_p50=pct(lat, 50),
        lat_p99=pct(lat, 99),
        skew_p50=pct(skews, 50) if skews else None,
        skew_p99=pct(skews, 99) if skews else None,
        cpu_s=cpu,
        rss_mb=rss,
        gangs_in_one_domain=f"{one_domain}/{len(gangs)}" if gangs else "",
        bound=-1 if len(times) == len(names) else len(times),
        notes={
            "podgroup_writes": writes,
            "podgroup_writes_per_s": round(writes / writes_span, 1),
            "podgroup_writes_done_s": round(t_last_write - t_start, 1),
        },
    )


def median_result(rs: list[RunResult]) -> RunResult:
    rs = sorted(rs, key=lambda r: r.pods_per_s)
    return rs[len(rs) // 2]


def write_report(
    out: Path,
    results: dict[tuple[str, str], list[RunResult]],
    sz: Sizes,
    qps: float,
    burst: int,
    small: bool,
    command: str,
) -> Path:
    date = dt.date.today().isoformat()
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{date}{'-small' if small else ''}.md"
    png = out / f"{date}{'-small' if small else ''}.png"
    limit = results.get(("limit", "binding client"))
    limit_rate = median_result(limit).pods_per_s if limit else None
    lines = [
        f"# Benchmark {date}{' (small)' if small else ''}",
        "",
        f"Command: `{command}`; "
        f"{sz.nodes} nodes in cliques of {sz.clique}; client QPS {qps:g}, burst {burst}; median of runs by pods/s.",
        "",
        "| scenario | scheduler | pods | pods/s | p50 s | p99 s | skew p50 s | skew p99 s | CPU s / 1k pods | peak RSS MiB | gangs in one clique | vs kube-scheduler | vs limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (scen, sched), rs in sorted(results.items()):
        r = median_result(rs)
        kube = results.get((scen, "kube-scheduler"))
        vs_kube = vs_limit = ""
        if sched == "ome-scheduler" and kube:
            vs_kube = f"{r.pods_per_s / median_result(kube).pods_per_s:.2f}x"
        if sched == "ome-scheduler" and limit_rate:
            vs_limit = f"{r.pods_per_s / limit_rate:.2f}x"

        def f(v: float | None) -> str:
            return "" if v is None else f"{v:.2f}"

        done = r.pods if r.bound < 0 else r.bound
        cpu_k = r.cpu_s / done * 1000 if done and r.cpu_s else 0
        pods = f"{r.pods}" if r.bound < 0 else f"{r.bound}/{r.pods} bound"
        lines.append(
            f"| {scen} | {sched} | {pods} | {r.pods_per_s:.1f} | {f(r.lat_p50)} | {f(r.lat_p99)} | {f(r.skew_p50)} | "
            f"{f(r.skew_p99)} | {cpu_k:.1f} | {r.rss_mb:.0f} | {r.gangs_in_one_domain} | {vs_kube} | {vs_limit} |"
        )
    lines += [
        "",
        "All runs:",
        "",
        "```",
        json.dumps({f"{k[0]}/{k[1]}": [r.__dict__ for r in v] for k, v in results.items()}, indent=1),
        "```",
        "",
    ]
    md.write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        scen = sorted({k[0] for k in results if k[0] != "limit"})
        scheds = ["ome-scheduler", "kube-scheduler"]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        w = 0.38
        for i, s in enumerate(scheds):
            vals = [median_result(results[(c, s)]).pods_per_s if (c, s) in results else 0 for c in scen]
            ax1.bar([x + i * w for x in range(len(scen))], vals, w, label=s)
            p99 = [median_result(results[(c, s)]).lat_p99 if (c, s) in results else 0 for c in scen]
            ax2.bar([x + i * w for x in range(len(scen))], p99, w, label=s)
        if limit_rate:
            ax1.axhline(limit_rate, color="grey", linestyle="--", label="binding limit")
        for ax, title in ((ax1, "throughput (pods/s)"), (ax2, "p99 start-to-bound latency (s)")):
            ax.set_xticks([x + w / 2 for x in range(len(scen))], scen)
            ax.set_title(title)
            ax.legend()
        fig.tight_layout()
        fig.savefig(png, dpi=100)
        plt.close(fig)
    except ImportError:
        pass
    return md


async def amain(args: argparse.Namespace) -> int:
    sz = Sizes.small() if args.small else Sizes()
    if args.scale != 1.0:
        sz = sz.scaled(args.scale)
    if args.nodes:
        sz.nodes = args.nodes
    state = REPO / ".local-cluster-bench"
    cluster = Cluster(state, bench=True)
    cluster.up(fresh=True, nodes=None)
    api = BenchApi(cluster)
    workdir = state / "runs"
    try:
        async with api.client() as c:
            ns_body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            async with c.post("/api/v1/namespaces", data=ns_body) as r:
                await r.read()
        t0 = time.monotonic()
        nodes = [node_obj(i, sz.clique) for i in range(sz.nodes)]
        await api.create_all(lambda o: "/api/v1/nodes", nodes)
        print(f"created {len(nodes)} nodes in {time.monotonic() - t0:.1f} s", flush=True)
        node_names = [n["metadata"]["name"] for n in nodes]
        node_domain = {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE] for n in nodes}
        results: dict[tuple[str, str], list[RunResult]] = {}
        out = Path(args.out) if args.out else (state / "results" if args.small else REPO / "bench" / "results")
        command = " ".join(["python -m bench.run", *args.argv])
        md = out
        for scen in args.scenarios.split(","):
            scheds = ["limit"] if scen == "limit" else args.schedulers.split(",")
            for run in range(args.runs):
                for which in scheds:
                    r = await one_run(
                        cluster, api, scen, which, sz, args.qps, args.burst, workdir, node_names, node_domain
                    )
                    results.setdefault((scen, r.scheduler), []).append(r)
                    print(
                        f"{scen} run {run + 1} {r.scheduler}: {r.pods} pods, {r.pods_per_s:.1f} pods/s, "
                        f"p99 {r.lat_p99:.2f} s, skew p99 {r.skew_p99}, cpu {r.cpu_s:.1f} s, rss {r.rss_mb:.0f} MiB, "
                        f"one-clique {r.gangs_in_one_domain}, PodGroup writes {r.notes.get('podgroup_writes', 0)} "
                        f"({r.notes.get('podgroup_writes_per_s', 0)}/s, last at "
                        f"{r.notes.get('podgroup_writes_done_s', 0)} s)",
                        flush=True,
                    )
                    md = write_report(out, results, sz, args.qps, args.burst, args.small, command)
                    if args.small and r.scheduler == "ome-scheduler":
                        if r.bound >= 0:
                            print(f"FAIL: ome-scheduler bound {r.bound}/{r.pods} pods in {scen}", file=sys.stderr)
                            return 1
                        n, total = (r.gangs_in_one_domain or "0/0").split("/")
                        if n != total:
                            print(f"FAIL: ome-scheduler split gangs in {scen}", file=sys.stderr)
                            return 1
        print(f"wrote {md}")
        return 0
    finally:
        if not args.keep:
            cluster.down()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--small", action="store_true", help="CI sizes: checks every pod bound and no gang split")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scenarios", default="limit,S1,S2,S3")
    p.add_argument("--schedulers", default="ome-scheduler,kube-scheduler")
    p.add_argument("--qps", type=float, default=5000.0)
    p.add_argument("--burst", type=int, default=5000)
    p.add_argument("--nodes", type=int, default=0, help="node count (other sizes unchanged)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every default size (nodes, pods, gangs)")
    p.add_argument("--keep", action="store_true", help="leave the benchmark control plane running")
    p.add_argument(
        "--no-pod-group-status",
        action="store_true",
        help="run ome-scheduler with --pod-group-status=false (measures the status keeper's cost)",
    )
    p.add_argument("--out", default="", help="report directory (default: bench/results; --small: the state dir)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    global POD_GROUP_STATUS
    POD_GROUP_STATUS = not args.no_pod_group_status
    return asyncio.run(amain(args))


if __name__ == "__main__":
    raise SystemExit(main())
