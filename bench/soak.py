"""Soak: ome-scheduler under continuous churn while the control plane breaks on a schedule (issue 12, item 8).

``python -m bench.soak`` (30 minutes) or ``python -m bench.soak --ci`` (3 minutes; ``make soak-ci``,
part of ``make test``) starts a local control plane with kwok (``e2e/harness/cluster.py``; an already running
one in ``OME_CLUSTER_DIR`` is reused and left running), Toxiproxy in front of kube-apiserver
(``e2e/harness/toxiproxy.py``) and one ome-scheduler whose only way to the API server is the proxy (leader
election off, as in ``e2e/faults/test_proxy_faults.py``: a blackholed lease renewal would rightly
end a leader, and the soak measures one process's memory). Then, for ``--minutes``:

* **churn** (one thread, seeded): gangs (a PodGroup with a domain label key and 2-4 members of
  2 GPUs each; one in ten is created a member short and never completes), standalone pods (half
  with one GPU) and their deletion when their lifetime (20-60 s) ends; PodGroups go with their
  gangs;
* **node churn**: every ``NODE_CHURN_S`` seconds a random kwok node is deleted together with its
  pods (what the pod garbage collector would do) and a new node with a new name joins its domain;
* **faults** (:func:`fault_schedule`), only in the middle half of the run: kube-apiserver
  ``SIGSTOP`` then ``SIGCONT``, and Toxiproxy toxics between the scheduler and the API server:
  ``latency`` (300 ± 100 ms), ``timeout`` 0 both ways (a blackhole) and ``reset_peer`` (half the
  connections, 500 ms after data). Each fault is followed by a quiet gap.

Measured (printed, and written as ``soak-<date>-<N>m.md`` / ``.json`` / ``.png`` under ``--out``):

* **RSS slope** of the scheduler process (MiB per hour, least squares over the samples after
  the first 20 % of the run; goal ≤ 5; meaningful only for long runs);
* **invariant violations** (goal 0) by the checker the e2e tests use (``e2e/harness/invariants.py``),
  every ``CHECK_EVERY_S`` seconds and at the end from fresh LISTs: no node over-committed by
  effective requests (component-helpers' ``PodRequests``), no gang with bound members in two
  domains, no pod seen on two nodes; at the end, once the pending pods settled, also no gang
  partly bound and no pod with more than one ``Scheduled`` event;
* **cache drift** at the end (goal 0): ``SIGUSR2`` runs the scheduler's cache comparer
  (``ome_scheduler/app/debugger.py``) against a fresh LIST after the churn stopped and the pending
  pods settled;
* **scheduling latency** (creation request sent → bound seen on a direct watch) p50/p99 by the
  phase the pod was created in: before, during and after the fault window;
* **pending pods** and RSS over time (the PNG, fault intervals shaded).

Exit status: 0 when there was no invariant violation, zero drift and the scheduler never
exited; 1 otherwise (CI uses it as a correctness check, not as a timing check); 2 when the
harness itself failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from e2e.harness import invariants
from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.paths import REPO
from e2e.harness.processes import proc_rss_bytes
from e2e.harness.scheduler import SchedulerProcess, parse_drift
from e2e.harness.toxiproxy import Toxiproxy, proxied_kubeconfig
from e2e.harness.waits import wait_for
from tests.support.manifests import chart_config, node, pod, pod_group, unique

PROXY = "apiserver"
DOMAINS = 6
NODES_PER_DOMAIN = 4
NODE_GPUS = 4
GANG_GPUS = 2
"""GPUs per gang member; a domain (4 nodes of 4 GPUs) holds two gangs of 4."""
NODE_CHURN_S = 15.0
CHECK_EVERY_S = 10.0
SAMPLE_EVERY_S = 2.0
WARMUP_SHARE = 0.2
"""The first share of the run left out of the RSS slope (caches and allocator arenas fill)."""
SETTLE_S = 90.0
"""After the churn stops, wait at most this long for the pending pods to bind."""
RSS_GOAL_MIB_H = 5.0


# ---- pure parts: statistics, the fault schedule (unit-tested in bench/test_soak.py) ----


def rss_slope(samples: Sequence[tuple[float, float]], warmup_s: float = 0.0) -> float | None:
    """Least-squares slope of RSS over time in MiB per hour.

    ``samples``: (seconds since start, RSS MiB); those before ``warmup_s`` are left out. None
    with fewer than 3 samples left or no time spread.
    """
    pts = [(t, r) for t, r in samples if t >= warmup_s]
    if len(pts) < 3:
        return None
    mt = sum(t for t, _ in pts) / len(pts)
    mr = sum(r for _, r in pts) / len(pts)
    var = sum((t - mt) ** 2 for t, _ in pts)
    if var <= 0:
        return None
    cov = sum((t - mt) * (r - mr) for t, r in pts)
    return cov / var * 3600.0


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, nearest rank on the sorted values); None for no values."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``kind`` starts at ``start`` seconds into the run and lasts ``seconds``.

    Kinds: ``sigstop`` (kube-apiserver SIGSTOP, then SIGCONT), ``latency``, ``blackhole``,
    ``reset_peer`` (Toxiproxy toxics on the scheduler's path).
    """

    start: float
    kind: str
    seconds: float


CYCLE: tuple[tuple[str, float, float], ...] = (
    ("sigstop", 10.0, 8.0),
    ("latency", 15.0, 5.0),
    ("blackhole", 15.0, 10.0),
    ("reset_peer", 15.0, 5.0),
)
"""(kind, seconds, quiet gap after it) of one fault cycle; the run repeats it through its fault window."""


def fault_window(duration_s: float) -> tuple[float, float]:
    """(start, end) seconds of the fault window: the middle half of a run of ``duration_s`` seconds."""
    return duration_s * 0.25, duration_s * 0.75


def fault_schedule(duration_s: float, long_stop_s: float = 20.0, kinds: Iterable[str] | None = None) -> list[Fault]:
    """The faults of a run of ``duration_s`` seconds: :data:`CYCLE` (only its ``kinds``, default
    all) repeated while it fits in :func:`fault_window`, each fault followed by its gap; never
    overlapping. From the second cycle on, the SIGSTOP lasts ``long_stop_s`` seconds (still under
    the 30 s a Binding may wait for a stale view). Raises ValueError for an unknown kind."""
    wanted = set(kinds) if kinds is not None else {k for k, _, _ in CYCLE}
    if not wanted or wanted - {k for k, _, _ in CYCLE}:
        raise ValueError(f"fault kinds {sorted(wanted)}: choose from {[k for k, _, _ in CYCLE]}")
    cycle_faults = [c for c in CYCLE if c[0] in wanted]
    start, end = fault_window(duration_s)
    out: list[Fault] = []
    t, cycle = start, 0
    while True:
        for kind, secs, gap in cycle_faults:
            if kind == "sigstop" and cycle > 0:
                secs = long_stop_s
            if t + secs > end:
                return out
            out.append(Fault(round(t, 3), kind, secs))
            t += secs + gap
        cycle += 1


def phase_of(t: float, window: tuple[float, float]) -> str:
    """``before``, ``during`` or ``after`` the fault ``window`` (start, end) for a time ``t``."""
    return "before" if t < window[0] else ("during" if t < window[1] else "after")


def latency_by_phase(
    created: Mapping[str, float], bound: Mapping[str, float], window: tuple[float, float], slow: int = 10
) -> dict[str, dict[str, Any]]:
    """Creation-to-bound latency by the phase each pod was created in.

    ``created``/``bound``: pod name -> seconds since the run's start. Returns phase -> {pods,
    bound, p50, p99, max (seconds; None when nothing bound in that phase), slowest: the ``slow``
    slowest pods as [name, created, latency]}.
    """
    out: dict[str, dict[str, Any]] = {}
    for ph in ("before", "during", "after"):
        names = [n for n, t in created.items() if phase_of(t, window) == ph]
        lat = [bound[n] - created[n] for n in names if n in bound]
        slowest = sorted((n for n in names if n in bound), key=lambda n: bound[n] - created[n], reverse=True)[:slow]
        out[ph] = {
            "pods": len(names),
            "bound": len(lat),
            "p50": percentile(lat, 50),
            "p99": percentile(lat, 99),
            "max": max(lat) if lat else None,
            "slowest": [[n, round(created[n], 2), round(bound[n] - created[n], 2)] for n in slowest],
        }
    return out


# ---- the run -----------------------------------------------------------------------------------


@dataclass
class Item:
    """Something the churn created and will delete: pods (and a PodGroup) that expire at ``until``."""

    pods: list[str]
    until: float
    pod_group: str | None = None
    complete: bool = True
    """False for a gang created a member short of its minMember."""


@dataclass
class Soak:
    """One soak run's state, shared by its threads (guarded by ``lock``)."""

    cluster: Cluster
    api: Api
    ns: str
    name: str
    domain_key: str
    duration: float
    seed: int
    t0: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop_churn: threading.Event = field(default_factory=threading.Event)
    quiet: threading.Event = field(default_factory=threading.Event)
    """Set once the pending pods settled: the churn stops deleting too."""
    stop_all: threading.Event = field(default_factory=threading.Event)
    node_domain: dict[str, str] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    bound_at: dict[str, float] = field(default_factory=dict)
    seen_nodes: dict[str, set[str]] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    """Nodes the node churn deleted."""
    never_bind: set[str] = field(default_factory=set)
    """Members of the gangs created a member short (left out of the latency figures)."""
    live: dict[str, str] = field(default_factory=dict)
    """Pods in the namespace as the watch shows them: name -> nodeName ("" while pending)."""
    samples: list[dict[str, float]] = field(default_factory=list)
    faults_done: list[dict[str, Any]] = field(default_factory=list)
    violations: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    sched: SchedulerProcess | None = None
    toxiproxy: Toxiproxy | None = None

    @property
    def placement(self) -> dict[str, Any]:
        """Keyword arguments of ``tests.support.manifests.pod`` for every soak pod: this run's scheduler,
        and only this run's nodes (required node affinity on the domain label)."""
        term = {"matchExpressions": [{"key": self.domain_key, "operator": "Exists"}]}
        return {
            "scheduler": self.name,
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
            },
        }

    def now(self) -> float:
        """Seconds since the run's start."""
        return time.monotonic() - self.t0

    def bump(self, what: str, n: int = 1) -> None:
        """Count ``n`` more of ``what`` (a churn counter in the report)."""
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def violation(self, msgs: Iterable[str]) -> None:
        """Record invariant violations (each message once, with the first time it was seen)."""
        with self.lock:
            for m in msgs:
                self.violations.setdefault(m, round(self.now(), 1))

    # -- objects ---------------------------------------------------------------------------

    def _try(self, fn: Any, *args: Any) -> bool:
        """Call an Api method, retrying transport errors and 5xx for up to 90 s (the API server
        may be stopped); a 409 (a retried create that landed) counts as done."""
        deadline = time.monotonic() + 90.0
        while not self.stop_all.is_set():
            try:
                fn(*args)
                return True
            except httpx.TransportError:
                pass
            except AssertionError as exc:  # Api's error: "<METHOD> <path>: <code> <body>"
                code = str(exc).split(": ", 1)[1][:3] if ": " in str(exc) else ""
                if code == "409":
                    return True
                if not code.startswith("5"):
                    self.errors.append(str(exc)[:300])
                    return False
            if time.monotonic() > deadline:
                self.errors.append(f"{getattr(fn, '__name__', fn)} {args[:1]}: gave up after 90 s")
                return False
            time.sleep(0.5)
        return False

    def create_pod(self, obj: dict[str, Any]) -> None:
        """Create a pod, recording the time before the request as its creation time."""
        name = obj["metadata"]["name"]
        with self.lock:
            self.created[name] = self.now()
        self._try(self.api.create_pod, obj)

    def add_node(self, domain: int, i: int) -> str:
        """Create kwok node ``<run>-d<domain>-n<i>`` in domain ``d<domain>``; returns its name."""
        name = f"{self.name}-d{domain}-n{i}"
        self.node_domain[name] = f"d{domain}"
        obj = node(name, {self.domain_key: f"d{domain}"}, gpu=NODE_GPUS, cpu="16", memory="64Gi")
        self._try(self.api.create_node, obj)
        return name

    # -- threads ---------------------------------------------------------------------------

    def churn(self) -> None:
        """Create gangs and standalone pods at a steady rate; delete each when its lifetime ends.

        After ``stop_churn`` nothing is created and the gangs that can never complete are
        deleted; lifetimes keep ending (freeing capacity for the pending pods) until ``quiet``."""
        rng = random.Random(self.seed)
        items: list[Item] = []
        gangs = standalone = 0
        next_gang = next_pod = 0.0
        while not self.stop_churn.is_set():
            now = self.now()
            self._expire(items, now)
            if now >= next_gang:
                g = f"g{gangs:05d}"
                gangs += 1
                size = rng.randint(2, 4)
                short = rng.random() < 0.1  # a member short: never completes, its hold must end
                self._try(
                    self.api.create_pod_group,
                    pod_group(g, self.ns, size, topology_key=self.domain_key, timeout=20 if short else 300),
                )
                members = [f"{g}-{i}" for i in range(size - 1 if short else size)]
                if short:
                    with self.lock:
                        self.never_bind.update(members)
                for m in members:
                    self.create_pod(pod(m, self.ns, gang=g, gpu=GANG_GPUS, cpu="1", **self.placement))
                items.append(Item(members, self.now() + rng.uniform(20, 60), pod_group=g, complete=not short))
                self.bump("incomplete gangs created" if short else "gangs created")
                next_gang = now + rng.uniform(2.0, 6.0)
            if now >= next_pod:
                p = f"s{standalone:05d}"
                standalone += 1
                gpu = rng.choice((0, 1))
                self.create_pod(pod(p, self.ns, gpu=gpu, cpu="500m", memory="1Gi", **self.placement))
                items.append(Item([p], self.now() + rng.uniform(20, 60)))
                self.bump("standalone pods created")
                next_pod = now + rng.uniform(0.5, 1.5)
            self.stop_churn.wait(0.1)
        # The incomplete gangs can never bind: remove them so that the end state can settle.
        self._expire(items, float("inf"), only_incomplete=True)
        while not self.quiet.wait(0.5):
            self._expire(items, self.now())

    def _expire(self, items: list[Item], now: float, only_incomplete: bool = False) -> None:
        """Delete the items whose lifetime ended by ``now`` (pods first, then the PodGroup)."""
        for it in [i for i in items if i.until <= now and not (only_incomplete and i.complete)]:
            items.remove(it)
            for p in it.pods:
                self._try(self.api.delete_pod, self.ns, p)
            if it.pod_group:
                self._try(self.api.delete_pod_group, self.ns, it.pod_group)
            self.bump("gangs deleted" if it.pod_group else "pods deleted")

    def node_churn(self) -> None:
        """Every NODE_CHURN_S: delete a random node with its pods; a new node joins its domain."""
        rng = random.Random(self.seed + 1)
        i = DOMAINS * NODES_PER_DOMAIN
        while not self.stop_churn.wait(NODE_CHURN_S):
            victim = rng.choice(sorted(n for n in self.node_domain if n not in self.gone))
            self._try(self.api.delete_node, victim)
            self.gone.add(victim)
            try:
                on = self.api.get("/api/v1/pods", fieldSelector=f"spec.nodeName={victim}")["items"]
            except (httpx.HTTPError, AssertionError):
                on = []
            for p in on:
                self._try(self.api.delete_pod, p["metadata"]["namespace"], p["metadata"]["name"])
            self.add_node(int(self.node_domain[victim][1:]), i)
            i += 1
            self.bump("nodes replaced")

    def watch(self) -> None:
        """Follow the namespace's pods on a direct watch: bind times, nodes seen per pod, pending."""
        path = f"/api/v1/namespaces/{self.ns}/pods"
        while not self.stop_all.is_set():
            try:
                lst = self.api.get(path)
                with self.lock:
                    self.live = {}
                    for p in lst["items"]:
                        self._observe(p)
                rv = lst["metadata"]["resourceVersion"]
                params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "240"}
                with self.api.http.stream("GET", path, params=params, timeout=httpx.Timeout(10.0, read=90.0)) as r:
                    if r.status_code != 200:
                        raise httpx.HTTPError(f"watch: {r.status_code}")
                    for line in r.iter_lines():
                        if self.stop_all.is_set():
                            return
                        if not line:
                            continue
                        ev = json.loads(line)
                        if ev["type"] == "ERROR":
                            break
                        if ev["type"] == "BOOKMARK":
                            continue
                        with self.lock:
                            if ev["type"] == "DELETED":
                                self.live.pop(ev["object"]["metadata"]["name"], None)
                            else:
                                self._observe(ev["object"])
            except (httpx.HTTPError, AssertionError, KeyError, ValueError):
                self.stop_all.wait(1.0)

    def _observe(self, p: Mapping[str, Any]) -> None:
        """Record a pod's state (lock held)."""
        name, uid = p["metadata"]["name"], p["metadata"]["uid"]
        n = p["spec"].get("nodeName") or ""
        self.live[name] = n
        if n:
            self.seen_nodes.setdefault(uid, set()).add(n)
            self.bound_at.setdefault(name, self.now())

    def sample(self) -> None:
        """Every SAMPLE_EVERY_S: the scheduler's RSS and the pending pods; notes an exit."""
        while not self.stop_all.wait(SAMPLE_EVERY_S):
            assert self.sched is not None and self.sched.proc is not None
            rss_bytes = proc_rss_bytes(self.sched.proc.pid)
            rss = rss_bytes / 2**20 if rss_bytes is not None else None
            with self.lock:
                pending = sum(1 for n in self.live.values() if not n)
                self.samples.append({"t": round(self.now(), 2), "rss_mib": rss or 0.0, "pending": pending})
            if self.sched.proc.poll() is not None:
                self.violation([f"ome-scheduler exited with {self.sched.proc.returncode}"])
                return

    def check(self) -> None:
        """Every CHECK_EVERY_S: the invariants on fresh LISTs."""
        while not self.stop_all.wait(CHECK_EVERY_S):
            self.check_once()

    def check_once(self, settled: bool = False) -> None:
        """Check the invariants once (``e2e/harness/invariants.py``) on fresh LISTs of pods and
        nodes, with the watch's nodes per pod and the domain of every node the run created.
        ``settled`` (the final check, once the pending pods settled) adds the rules that need a
        settled cluster, on the namespace's PodGroups and events: no gang partly bound, no pod
        with two ``Scheduled`` events."""
        try:
            pods = self.api.get("/api/v1/pods")["items"]
            nodes = self.api.get("/api/v1/nodes", labelSelector=self.domain_key)["items"]
            pg_path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{self.ns}/podgroups"
            pgs = self.api.get(pg_path)["items"] if settled else []  # mid-run: every gang's key is domain_key
            events = self.api.events(self.ns) if settled else []
        except (httpx.HTTPError, AssertionError) as exc:
            if settled:
                self.errors.append(f"final invariant check: {exc}"[:300])
            return  # mid-run the API server may be stopped: the next check will do
        with self.lock:
            seen = {u: set(s) for u, s in self.seen_nodes.items()}
        known = {n: {self.domain_key: d} for n, d in self.node_domain.items()}
        self.violation(
            invariants.violations(
                pods,
                nodes,
                pgs,
                events=events,
                namespace=self.ns,
                domain_key=self.domain_key,
                node_labels=known,
                seen_nodes=seen,
                settled=settled,
            )
        )
        self.bump("invariant checks")

    def faults(self, schedule: Sequence[Fault]) -> None:
        """Run the fault schedule; every fault is undone even when the run is stopped."""
        assert self.toxiproxy is not None
        tp = self.toxiproxy
        for f in schedule:
            if self.stop_churn.wait(max(0.0, f.start - self.now())):
                return
            t = self.now()
            try:
                if f.kind == "sigstop":
                    self.cluster.pause_component("kube-apiserver")
                elif f.kind == "latency":
                    tp.add_toxic(PROXY, "latency", "latency", {"latency": 300, "jitter": 100})
                    tp.add_toxic(PROXY, "latency-up", "latency", {"latency": 300, "jitter": 100}, stream="upstream")
                elif f.kind == "blackhole":
                    tp.blackhole(PROXY)
                elif f.kind == "reset_peer":
                    tp.add_toxic(PROXY, "reset", "reset_peer", {"timeout": 500}, toxicity=0.5)
                self.stop_all.wait(f.seconds)
            finally:
                if f.kind == "sigstop":
                    self.cluster.resume_component("kube-apiserver")
                else:
                    tp.reset()
            self.faults_done.append({"kind": f.kind, "start": round(t, 2), "end": round(self.now(), 2)})
            print(f"[{self.now():7.1f}s] fault {f.kind} {self.now() - t:.1f} s", flush=True)

    def settle(self) -> int:
        """Wait up to SETTLE_S for no pending pod; returns the pods still pending."""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            with self.lock:
                pending = sum(1 for n in self.live.values() if not n)
            if pending == 0:
                return 0
            time.sleep(1.0)
        return pending

    def drift(self) -> dict[str, Any]:
        """Run the scheduler's cache comparer (SIGUSR2) and return its outcome."""
        sched = self.sched
        assert sched is not None
        start = len(sched.log())
        sched.signal(signal.SIGUSR2)
        try:
            got = wait_for(
                "the cache comparer's summary", lambda: parse_drift(sched.log()[start:]), timeout=90, interval=0.5
            )
        except AssertionError as exc:
            return {"outcome": "no summary", "differences": -1, "mismatches": [str(exc)[:300]]}
        outcome, n, lines = got
        # A comparison that failed proves nothing: it counts as drift (-1), never as zero.
        return {"outcome": outcome, "differences": n if outcome == "finished" else -1, "mismatches": lines[:50]}


# ---- report ------------------------------------------------------------------------------------


def _fmt(v: float | None, nd: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}"


def write_report(out: Path, stem: str, result: dict[str, Any]) -> list[Path]:
    """Write ``<stem>.json``, ``<stem>.md`` and (with matplotlib) ``<stem>.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    js, md, png = out / f"{stem}.json", out / f"{stem}.md", out / f"{stem}.png"
    js.write_text(json.dumps(result, indent=1))
    f = result["figures"]
    lat = result["latency"]
    lines = [
        f"# Soak {result['date']}: {result['minutes']:g} minutes",
        "",
        f"Command: `{result['command']}`; {DOMAINS} domains of {NODES_PER_DOMAIN} kwok nodes ({NODE_GPUS} GPUs each), "
        f"a node replaced every {NODE_CHURN_S:g} s; faults in minutes "
        f"{result['fault_window'][0] / 60:.1f}-{result['fault_window'][1] / 60:.1f}; seed {result['seed']}.",
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| RSS slope (after the first {result.get('warmup_s', result['minutes'] * 60 * WARMUP_SHARE) / 60:g} min) "
        f"| {_fmt(f['rss_slope_mib_per_h'], 1)} MiB/h "
        f"({_fmt(f['rss_start_mib'], 0)} → {_fmt(f['rss_end_mib'], 0)} MiB, peak {_fmt(f['rss_peak_mib'], 0)}) "
        f"| ≤ {RSS_GOAL_MIB_H:g} MiB/h |",
        "| RSS slope before / during / after the faults | "
        + " / ".join(_fmt(f["rss_slope_by_phase"][ph], 1) for ph in ("before", "during", "after"))
        + " MiB/h | |",
        f"| invariant violations | {f['invariant_violations']} | 0 |",
        f"| cache drift at the end | {f['cache_drift']} ({result['drift']['outcome']}) | 0 |",
        f"| scheduler exits | {f['scheduler_exits']} | 0 |",
        f"| pending after churn stopped + {SETTLE_S:g} s | {f['pending_at_end']} | |",
        "",
        "| created in | pods | bound | p50 s | p99 s | max s |",
        "|---|---|---|---|---|---|",
    ]
    for ph in ("before", "during", "after"):
        x = lat[ph]
        lines.append(f"| {ph} | {x['pods']} | {x['bound']} | {_fmt(x['p50'])} | {_fmt(x['p99'])} | {_fmt(x['max'])} |")
    lines += [
        "",
        "Slowest pods (name, created at s, latency s): "
        + "; ".join(
            f"{ph}: " + ", ".join(f"{n} {c:g} {d:g}" for n, c, d in lat[ph]["slowest"][:3])
            for ph in ("before", "during", "after")
        ),
    ]
    lines += ["", "Faults: " + ", ".join(f"{x['kind']} {x['end'] - x['start']:.0f} s" for x in result["faults"]), ""]
    lines += ["Churn: " + ", ".join(f"{k} {v}" for k, v in sorted(result["counts"].items())), ""]
    if result["violations"]:
        lines += ["Violations:", "", *[f"* {v} (at {t} s)" for v, t in result["violations"].items()], ""]
    if result["drift"]["mismatches"]:
        lines += ["Cache mismatches:", "", "```", *result["drift"]["mismatches"], "```", ""]
    if result["errors"]:
        lines += [
            f"Harness errors ({len(result['errors'])}, first 10):",
            "",
            *[f"* {e}" for e in result["errors"][:10]],
        ]
    md.write_text("\n".join(lines) + "\n")
    paths = [md, js]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return paths
    s = result["samples"]
    t = [x["t"] / 60 for x in s]
    fig, ax1 = plt.subplots(figsize=(10, 4))
    ax1.plot(t, [x["rss_mib"] for x in s], color="tab:blue", label="RSS MiB")
    ax1.set_xlabel("minutes")
    ax1.set_ylabel("ome-scheduler RSS (MiB)", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(t, [x["pending"] for x in s], color="tab:orange", label="pending pods")
    ax2.set_ylabel("pending pods", color="tab:orange")
    colors = {"sigstop": "red", "latency": "gold", "blackhole": "black", "reset_peer": "purple"}
    for x in result["faults"]:
        ax1.axvspan(x["start"] / 60, x["end"] / 60, color=colors.get(x["kind"], "grey"), alpha=0.15)
    handles = [Patch(color=c, alpha=0.3) for c in colors.values()]
    ax1.legend(handles, list(colors), loc="upper left", fontsize=8, title="faults")
    ax1.set_title(f"soak {result['minutes']:g} min: RSS slope {_fmt(f['rss_slope_mib_per_h'], 1)} MiB/h")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return [*paths, png]


# ---- main ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """One soak (module docstring); returns the exit status (0 correct, 1 violation or drift)."""
    duration = args.minutes * 60.0
    state = Path(os.environ.get("OME_CLUSTER_DIR") or REPO / ".local-cluster-soak")
    cluster = Cluster.attach_if_running(state)
    own = cluster is None
    if cluster is None:
        cluster = Cluster(state)
        cluster.up(nodes=None)
    api = Api(cluster, timeout=60.0)
    name = unique("soak")
    dk = f"soak.ome.io/{name}"
    s = Soak(cluster, api, name, name, dk, duration, args.seed)
    threads: list[threading.Thread] = []
    ok = False
    try:
        api.create_namespace(s.ns)
        for d in range(DOMAINS):
            for i in range(NODES_PER_DOMAIN):
                s.add_node(d, d * NODES_PER_DOMAIN + i)
        s.toxiproxy = Toxiproxy(cluster.bin_dir, cluster.log_dir / "toxiproxy-soak.log")
        port = s.toxiproxy.proxy(PROXY, cluster.server.removeprefix("https://"))
        kubeconfig = proxied_kubeconfig(
            cluster.kubeconfig, cluster.state_dir / "soak.kubeconfig", f"https://127.0.0.1:{port}"
        )
        s.sched = SchedulerProcess(cluster, chart_config(scheduler_name=name), name="soak", v=2, kubeconfig=kubeconfig)
        s.sched.start()
        print(f"soak {name}: {args.minutes:g} min, scheduler log {s.sched.log_path}", flush=True)
        schedule = fault_schedule(duration, kinds=args.faults.split(","))
        s.t0 = time.monotonic()
        for target, arg in (
            (s.watch, ()),
            (s.sample, ()),
            (s.check, ()),
            (s.churn, ()),
            (s.node_churn, ()),
            (s.faults, (schedule,)),
        ):
            th = threading.Thread(target=target, args=arg, name=target.__name__, daemon=True)
            th.start()
            threads.append(th)
        next_print = 0.0
        while s.now() < duration and s.sched.proc is not None and s.sched.proc.poll() is None:
            if s.now() >= next_print:
                last = s.samples[-1] if s.samples else {"rss_mib": 0.0, "pending": 0}
                with s.lock:
                    nbound = len(s.bound_at)
                print(
                    f"[{s.now():7.1f}s] rss {last['rss_mib']:.0f} MiB, pending {last['pending']:.0f}, "
                    f"bound {nbound}, violations {len(s.violations)}",
                    flush=True,
                )
                next_print = s.now() + 30.0
            time.sleep(1.0)
        s.stop_churn.set()
        for th in threads:
            if th.name in ("node_churn", "faults"):
                th.join(120)
        pending = s.settle()
        s.quiet.set()
        threads[3].join(120)  # the churn: its last deletions are done
        s.check_once(settled=True)
        drift = (
            s.drift()
            if s.sched.proc is not None and s.sched.proc.poll() is None
            else {"outcome": "scheduler not running", "differences": -1, "mismatches": []}
        )
        s.stop_all.set()
        with s.lock:
            created = {n: t for n, t in s.created.items() if n not in s.never_bind}
            bound = dict(s.bound_at)
            samples = list(s.samples)
        rss = [x["rss_mib"] for x in samples if x["rss_mib"]]
        exits = 0 if s.sched.proc is not None and s.sched.proc.poll() is None else 1
        window = fault_window(duration)
        figures = {
            "rss_slope_mib_per_h": rss_slope([(x["t"], x["rss_mib"]) for x in samples], warmup_s(args, duration)),
            "rss_slope_by_phase": {
                ph: rss_slope(
                    [(x["t"], x["rss_mib"]) for x in samples if phase_of(x["t"], window) == ph and x["t"] <= duration]
                )
                for ph in ("before", "during", "after")
            },
            "rss_start_mib": rss[0] if rss else None,
            "rss_end_mib": rss[-1] if rss else None,
            "rss_peak_mib": max(rss) if rss else None,
            "invariant_violations": len(s.violations),
            "cache_drift": drift["differences"],
            "scheduler_exits": exits,
            "pending_at_end": pending,
            "pods_created": len(created),
            "pods_bound": len(bound),
        }
        result = {
            "date": dt.date.today().isoformat(),
            "minutes": args.minutes,
            "warmup_s": warmup_s(args, duration),
            "seed": args.seed,
            # Paths inside the repository are recorded relative to it (the report is committed).
            "command": " ".join(["python -m bench.soak", *(a.replace(f"{REPO}/", "") for a in args.argv)]),
            "fault_window": list(window),
            "figures": figures,
            "latency": latency_by_phase(created, bound, window),
            "faults": s.faults_done,
            "counts": dict(s.counts),
            "violations": dict(s.violations),
            "drift": drift,
            "errors": s.errors,
            "samples": samples,
        }
        stem = f"soak-{result['date']}-{args.minutes:g}m"
        paths = write_report(Path(args.out), stem, result)
        print((paths[0]).read_text())
        print("wrote " + ", ".join(str(p) for p in paths), flush=True)
        ok = figures["invariant_violations"] == 0 and figures["cache_drift"] == 0 and exits == 0
        if not ok:
            print("FAIL: invariant violations, cache drift or a scheduler exit (see above)", file=sys.stderr)
        return 0 if ok else 1
    finally:
        s.stop_churn.set()
        s.quiet.set()
        s.stop_all.set()
        if s.sched is not None:
            s.sched.stop()
        if s.toxiproxy is not None:
            s.toxiproxy.stop()
        if own:
            if args.keep:
                cluster.down(keep=True)
                print(f"state kept in {cluster.state_dir} (scheduler log under schedulers/)", file=sys.stderr)
            else:
                cluster.down(keep_logs=not ok)
                if not ok:
                    print(f"control plane logs kept in {cluster.log_dir}", file=sys.stderr)
        else:
            try:
                api.delete_namespace(s.ns)
                for n in s.node_domain:
                    api.delete_node(n)
            except (httpx.HTTPError, AssertionError):
                pass
        api.close()


def warmup_s(args: argparse.Namespace, duration: float) -> float:
    """Seconds at the start left out of the RSS slope: ``--warmup-minutes`` or WARMUP_SHARE of ``duration``."""
    minutes: float | None = args.warmup_minutes
    if minutes is None:
        return duration * WARMUP_SHARE
    return min(max(0.0, minutes * 60.0), duration)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (``python -m bench.soak --help``); returns the exit status (2: the harness failed)."""
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--minutes", type=float, default=None, help="run length (default 30; --ci: 3)")
    p.add_argument("--ci", action="store_true", help="the CI form: 3 minutes, report under .soak-results/")
    p.add_argument("--seed", type=int, default=12)
    p.add_argument(
        "--faults", default=",".join(k for k, _, _ in CYCLE), help="fault kinds to inject (default: %(default)s)"
    )
    p.add_argument(
        "--warmup-minutes",
        type=float,
        default=None,
        help="minutes left out of the RSS slope at the start (default: the first 20%% of the run)",
    )
    p.add_argument("--keep", action="store_true", help="keep the state directory (scheduler and control-plane logs)")
    p.add_argument("--out", default="", help="report directory (default bench/results; --ci: .soak-results)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.minutes is None:
        args.minutes = 3.0 if args.ci else 30.0
    if not args.out:
        args.out = str(REPO / (".soak-results" if args.ci else "bench/results"))
    try:
        return run(args)
    except Exception:  # the harness failed, not the scheduler
        traceback.print_exc()
        print("soak harness error", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
