"""What every benchmark scenario shares: the objects it creates, API access as cluster admin, the
watch that records binds, and the schedulers it starts (ome-scheduler, scheduler-plugins'
Coscheduling, the stock kube-scheduler), with their CPU and peak RSS.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml

from e2e.harness.cluster import Cluster
from e2e.harness.paths import REPO
from tests.support.manifests import chart_config, coscheduling_config, kube_counterpart_config

CLIQUE = "nvidia.com/gpu.clique"
NS = "bench"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
TOPOLOGY_ANNOTATION = "ome.io/topology-key"

OME = "ome-scheduler"
COSCHED = "coscheduling"
KUBE = "kube-scheduler"
SCHEDULERS = (OME, COSCHED, KUBE)
"""Every scheduler the benchmark compares, in table order."""
SCHEDULER_NAME = {OME: "ome-scheduler", COSCHED: "bench-coscheduling", KUBE: "bench-kube"}
"""``spec.schedulerName`` of each scheduler's pods."""
GANG_AWARE = {OME, COSCHED}


@dataclass
class RunResult:
    """One scheduler's run of one scenario.

    ``pods_per_s`` is pods / (last bind - first bind), except for S6, where it is the highest
    arrival rate the scheduler sustained. Latencies in seconds; ``cpu_s`` the scheduler's
    user+system CPU; ``rss_mb`` its peak RSS in MiB.
    """

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
    nodes: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    gangs_split: int = 0
    """Gangs some but not all of whose members were bound when the run ended (all-or-nothing broken)."""


# ---- objects ---------------------------------------------------------------------------


def node_obj(i: int, clique: int) -> dict[str, Any]:
    """Node ``n<i>`` with 8 GPUs, 64 CPU, 512Gi, Ready, in clique ``c<i // clique>``."""
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
    """A pause pod requesting ``gpu`` GPUs, 100m CPU and 128Mi; ``anti``: required anti-affinity
    on hostname against pods with the same ``app`` label."""
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


def pod_group_obj(name: str, min_member: int) -> dict[str, Any]:
    """A ``scheduling.x-k8s.io/v1alpha1`` PodGroup annotated with the clique topology key."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "annotations": {TOPOLOGY_ANNOTATION: CLIQUE}},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 600},
    }


PG_PATH = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups"
POD_PATH = f"/api/v1/namespaces/{NS}/pods"


# ---- API access ------------------------------------------------------------------------


class BenchApi:
    """HTTP access to the benchmark's API server as cluster admin (no RBAC in the way)."""

    def __init__(self, cluster: Cluster) -> None:
        ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
        ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
        self.ctx = ctx
        self.base = cluster.server

    def client(self, limit: int = 64) -> aiohttp.ClientSession:
        """An aiohttp session (``limit`` connections); the harness must not be the bottleneck."""
        return aiohttp.ClientSession(
            base_url=self.base,
            connector=aiohttp.TCPConnector(limit=limit, ssl=self.ctx),
            timeout=aiohttp.ClientTimeout(total=120),
            headers={"Content-Type": "application/json"},
            read_bufsize=1 << 20,
        )

    async def create_all(
        self, path_of: Callable[[dict[str, Any]], str], objs: Sequence[dict[str, Any]], conc: int = 48
    ) -> None:
        """POST every object, ``conc`` at a time; 409 counts as created; RuntimeError after 5 failures."""
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
        """Delete every pod and PodGroup of the namespace and wait until no pod is left."""
        async with self.client() as c:
            async with c.delete(POD_PATH, params={"gracePeriodSeconds": "0"}) as r:
                await r.read()
            async with c.delete(PG_PATH) as r:
                await r.read()
            while True:
                async with c.get(POD_PATH, params={"limit": "1"}) as r:
                    items = (await r.json())["items"]
                if not items:
                    return
                await asyncio.sleep(0.5)


class Nodes:
    """The benchmark's Node objects: one layout (count, clique size) at a time.

    ``ensure`` adds nodes when only the count grows, and otherwise deletes every node and
    creates the new layout (no pod may be bound then).
    """

    def __init__(self, api: BenchApi) -> None:
        self.api = api
        self.count = 0
        self.clique = 0

    async def ensure(self, count: int, clique: int) -> tuple[list[str], dict[str, str]]:
        """Make the layout exist; return (node names, node -> clique)."""
        t0 = time.monotonic()
        if clique != self.clique or count < self.count:
            if self.count:
                async with self.api.client() as c:
                    async with c.delete("/api/v1/nodes") as r:
                        await r.read()
                    while True:
                        async with c.get("/api/v1/nodes", params={"limit": "1"}) as r:
                            if not (await r.json())["items"]:
                                break
                        await asyncio.sleep(0.5)
            self.count = 0
        if count > self.count:
            new = [node_obj(i, clique) for i in range(self.count, count)]
            await self.api.create_all(lambda o: "/api/v1/nodes", new)
            print(f"nodes: {count} in cliques of {clique} ({time.monotonic() - t0:.1f} s)", flush=True)
        self.count, self.clique = count, clique
        names = [f"n{i:05d}" for i in range(count)]
        return names, {n: f"c{i // clique:04d}" for i, n in enumerate(names)}


# ---- watching binds --------------------------------------------------------------------


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


async def watch_bound(api: BenchApi, on_bound: Callable[[str, str], bool], listed: asyncio.Event | None = None) -> None:
    """Call ``on_bound(pod, node)`` for every bound pod of the namespace: those listed first, then
    every ADDED/MODIFIED watch event with a node; stops when it returns True. ``listed`` is set
    once the list is in (the watch starts from its resourceVersion)."""
    dec_list = msgspec.json.Decoder(_PodList)
    dec_ev = msgspec.json.Decoder(_Ev)
    dec_pod = msgspec.json.Decoder(_PodLite)
    async with api.client(limit=2) as c:
        async with c.get(POD_PATH) as r:
            lst = dec_list.decode(await r.read())
        if listed is not None:
            listed.set()
        for p in lst.items:
            if p.spec.node_name and on_bound(p.metadata.name, p.spec.node_name):
                return
        params = {"watch": "true", "resourceVersion": lst.metadata.resource_version, "timeoutSeconds": "3600"}
        tmo = aiohttp.ClientTimeout(total=None, sock_read=3700)
        async with c.get(POD_PATH, params=params, timeout=tmo) as s:
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
                    if p.spec.node_name and on_bound(p.metadata.name, p.spec.node_name):
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
    of ``podgroups`` and ``podgroups/status``): what ome-scheduler's status keeper sent."""
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
"""Whether ome-scheduler keeps PodGroup status (``python -m bench.run --no-pod-group-status`` measures without)."""


def scheduler_config(which: str, cluster: Cluster, qps: float, burst: int) -> dict[str, Any]:
    """The KubeSchedulerConfiguration ``which`` runs with: the chart's profile for ome-scheduler,
    its counterpart for kube-scheduler, the counterpart plus Coscheduling for Coscheduling; all
    with the same client QPS and burst."""
    kc = str(cluster.kubeconfig)
    if which == KUBE:
        return kube_counterpart_config(SCHEDULER_NAME[KUBE], kc, qps=qps, burst=burst)
    if which == COSCHED:
        return coscheduling_config(SCHEDULER_NAME[COSCHED], kc, qps=qps, burst=burst)
    cfg = chart_config(scheduler_name=SCHEDULER_NAME[OME])
    cfg["clientConnection"] = {"qps": qps, "burst": burst}
    return cfg


def start_scheduler(which: str, cluster: Cluster, workdir: Path, qps: float, burst: int) -> subprocess.Popen[bytes]:
    """Start one scheduler (log: ``workdir/<which>.log``) in its own session, serving no HTTPS
    (``--secure-port=0``: no port to collide with another process's).

    ``BENCH_OME_PROFILE`` (e.g. ``py-spy record --format raw -o ome.txt --``) wraps
    ome-scheduler; ``BENCH_OME_V`` sets its ``--v``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / f"{which}.log").open("ab")
    path = workdir / f"{which}.yaml"
    path.write_text(yaml.safe_dump(scheduler_config(which, cluster, qps, burst)))
    if which in (KUBE, COSCHED):
        binary = "kube-scheduler" if which == KUBE else "scheduler-plugins"
        argv = [str(cluster.bin_dir / binary), f"--config={path}", "--secure-port=0", "--v=1"]
    else:
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
        profiler = os.environ.get("BENCH_OME_PROFILE")
        if profiler:
            argv = [*profiler.split(), *argv]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)


def stop_scheduler(which: str, proc: subprocess.Popen[bytes]) -> None:
    """Stop a scheduler started by ``start_scheduler`` (SIGINT under a profiler, so it writes its profile)."""
    if os.environ.get("BENCH_OME_PROFILE") and which == OME:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``xs``; 0 when empty."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def gangs_in_one_domain(
    gangs: dict[str, list[str]], bound: dict[str, tuple[float, str]], node_domain: dict[str, str]
) -> tuple[int, int, list[float]]:
    """(gangs bound whole in one clique, gangs bound whole, their bind skews in s)."""
    one = whole = 0
    skews: list[float] = []
    for members in gangs.values():
        if not all(m in bound for m in members):
            continue
        whole += 1
        ts = [bound[m][0] for m in members]
        skews.append(max(ts) - min(ts))
        if len({node_domain.get(bound[m][1]) for m in members}) == 1:
            one += 1
    return one, whole, skews


def gangs_split(gangs: dict[str, list[str]], bound: Container[str]) -> int:
    """Gangs (name -> member pods) with some but not all members in ``bound``."""
    n = 0
    for members in gangs.values():
        k = sum(1 for m in members if m in bound)
        if 0 < k < len(members):
            n += 1
    return n
