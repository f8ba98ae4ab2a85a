"""Differential runner: the same generated cases through kube-scheduler 1.35 and ome-scheduler.

Design (one real API server, two schedulers side by side):

* A second stock kube-scheduler runs with one profile, ``parity-kube``: the chart's plugin set
  without OMEGangPack (MostAllocated NodeResourcesFit with weight 10, PodTopologySpread score
  off, DefaultPreemption off). ome-scheduler runs the chart's profile as ``parity-ome``.
* Cases run in *batches*. A batch creates the namespaces, nodes and existing pods of all its
  cases, waits until every node is Ready with exactly its generated taints, then runs three
  phases over all cases at once: **K** (the new pod for kube-scheduler), **O** (the same pod
  for ome-scheduler, after the K pods are deleted) and **V** (for every case ome-scheduler
  bound, a kube-scheduler copy pinned to ome's node with a required ``matchFields
  metadata.name`` term ANDed into every node selector term). Pods of one phase never see the
  pods of another: a phase's pods are deleted (grace 0) before the next phase creates its
  own, and a pod watch delivers the deletions before the new pods.
* Cases are isolated inside a batch: each has its own namespaces and nodes, topology values
  carry the case id, the new pod always has ``nodeSelector: parity-case=<id>`` and namespace
  selectors only select the case's namespaces. The node set is fixed while a batch runs, so
  both schedulers compute ``0/N nodes are available`` over the same N (the batch's nodes plus
  whatever else the cluster holds, e.g. the demo nodes).
* Verdicts per case: both bound or both unschedulable; when unschedulable, the PodScheduled
  message and the FailedScheduling event note are equal byte for byte; when ome bound, the
  pinned kube-scheduler copy binds to the same node (not checked when the pin itself changes
  PodTopologySpread's verdict: ``pin_changes_spread``); a gated pod gets no event from either
  scheduler until its gate is removed (then it is compared like any other pod).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.components import ALWAYS_ALLOW_PATHS
from e2e.harness.processes import free_ports
from e2e.harness.waits import wait_for
from e2e.parity_gen import CASE_LABEL, RUNTIME_CLASS, RUNTIME_CLASS_OVERHEAD, Case
from tests.support.manifests import kube_counterpart_config, unique

KUBE_PROFILE = "parity-kube"
OME_PROFILE = "parity-ome"
TEST_LABEL = "parity-test"
NOT_READY = "node.kubernetes.io/not-ready"
PHASE_TIMEOUT = 30.0
PHASES = ("k", "o", "v")
"""Suffixes of the per-phase copies of a volume case's storage (kube, ome, verify)."""


class KubeSchedulerProcess:
    """A second stock kube-scheduler (``--leader-elect=false``, its own secure port)."""

    def __init__(self, cluster: Cluster, config: Mapping[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.dir = cluster.state_dir / "schedulers" / unique("parity-kube")
        self.dir.mkdir(parents=True, exist_ok=True)
        kc = str(cluster.component_kubeconfig("kube-scheduler"))
        self.config_path = self.dir / "config.yaml"
        self.config_path.write_text(
            yaml.safe_dump(dict(config or kube_counterpart_config(KUBE_PROFILE, kc)), sort_keys=False)
        )
        self.log_path = self.dir / "kube-scheduler.log"
        self.port = free_ports(1)[0]
        self.argv = [
            str(cluster.bin_dir / "kube-scheduler"),
            f"--config={self.config_path}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--authorization-always-allow-paths={ALWAYS_ALLOW_PATHS}",
            "--leader-elect=false",
            "--v=2",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> KubeSchedulerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

        def healthy() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"kube-scheduler exited:\n{self.log()[-3000:]}")
            try:
                r = httpx.get(f"https://127.0.0.1:{self.port}/healthz", verify=False, timeout=1.0)
            except httpx.HTTPError:
                return False
            return r.status_code == 200

        wait_for("parity kube-scheduler healthy", healthy, timeout=60)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def __enter__(self) -> KubeSchedulerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stream_slice(prefix: str, default_cases: int) -> tuple[int, int]:
    """``(first, count)``: which cases of a generated stream a run covers, from the environment.

    ``<prefix>_FIRST`` (default 0) is the index of the first case and ``<prefix>_CASES``
    (default ``default_cases``) how many run, so ``OME_PARITY_FIRST=225 OME_PARITY_CASES=25``
    runs cases 225-249 exactly as a run of 250 from 0 would (every generator keys its random
    stream by the case index). Raises ``ValueError`` for a non-integer or negative value.
    """
    first = int(os.environ.get(f"{prefix}_FIRST", 0))
    count = int(os.environ.get(f"{prefix}_CASES", default_cases))
    if first < 0 or count < 0:
        raise ValueError(f"{prefix}_FIRST and {prefix}_CASES must be >= 0, got {first} and {count}")
    return first, count


# ---- outcomes -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one scheduler did with one pod."""

    node: str = ""
    reason: str = ""
    message: str = ""
    events: list[str] = field(default_factory=list)
    gated_events: list[str] = field(default_factory=list)

    @property
    def bound(self) -> bool:
        return bool(self.node)

    def short(self) -> str:
        return f"bound to {self.node}" if self.node else f"{self.reason}: {self.message!r} events={self.events!r}"


_FILTER_ERROR = re.compile(r'^running "[A-Za-z]+" filter plugin: ')


def same_filter_error(kube: str, ome: str, case: Case) -> bool:
    """True when ``kube`` and ``ome`` are both a Filter *error* (not a rejection) and are equal
    once the case's node names are replaced by ``<node>``.

    Upstream runs Filter on all nodes in parallel and aborts the cycle with the first error a
    worker sends (``findNodesThatPassFilters`` in ``pkg/scheduler/schedule_one.go``, v1.35.4:
    ``errCh.SendErrorWithCancel``), so when two nodes fail with the same error, which node the
    message names is a race between goroutines; ome-scheduler names the first in node order.
    Any other difference, and any difference in a rejection message, is still a mismatch.
    """
    if not (_FILTER_ERROR.match(kube) and _FILTER_ERROR.match(ome)):
        return False
    names = sorted((str(n["metadata"]["name"]) for n in case.nodes), key=len, reverse=True)
    if not names:
        return False
    pattern = re.compile("|".join(re.escape(n) for n in names))
    return pattern.sub("<node>", kube) == pattern.sub("<node>", ome)


@dataclass
class CaseResult:
    """Both schedulers' outcomes for one case, the verification, and what differed."""

    case: Case
    kube: Outcome = field(default_factory=Outcome)
    ome: Outcome = field(default_factory=Outcome)
    verify: Outcome | None = None
    problems: list[str] = field(default_factory=list)

    def judge(self) -> None:
        """Fill ``problems``: bound-or-not, messages, reasons, events, pinned verification."""
        k, o = self.kube, self.ome
        for who, out in (("kube-scheduler", k), ("ome-scheduler", o)):
            if out.reason == "Timeout":
                self.problems.append(f"{who} made no decision within {PHASE_TIMEOUT:.0f} s")
            if out.gated_events:
                self.problems.append(f"{who} recorded events for a gated pod: {out.gated_events}")
        if k.bound != o.bound:
            self.problems.append(f"kube-scheduler {k.short()} but ome-scheduler {o.short()}")
            return
        if not k.bound:
            if k.message != o.message and not same_filter_error(k.message, o.message, self.case):
                self.problems.append(f"messages differ:\n  kube: {k.message!r}\n  ome:  {o.message!r}")
            if k.reason != o.reason:
                self.problems.append(f"reasons differ: kube {k.reason!r}, ome {o.reason!r}")
            if o.message and o.message not in o.events:
                self.problems.append(f"ome-scheduler event notes {o.events!r} lack the message {o.message!r}")
            if k.message and k.message not in k.events:
                self.problems.append(f"kube-scheduler event notes {k.events!r} lack the message {k.message!r}")
            return
        if pin_changes_spread(self.case.pod):
            return
        v = self.verify
        if v is None or v.node != o.node:
            got = v.short() if v is not None else "nothing"
            self.problems.append(f"ome-scheduler bound to {o.node} but kube-scheduler pinned there: {got}")

    def describe(self) -> str:
        """The problems plus the case (pod, nodes, existing pods) as JSON, for the report."""
        c = self.case
        return (
            f"case {c.index} ({c.id}): "
            + "; ".join(self.problems)
            + f"\n  pod: {json.dumps(c.pod, sort_keys=True)}"
            + f"\n  nodes: {json.dumps([_node_brief(n) for n in c.nodes], sort_keys=True)}"
            + f"\n  existing: {json.dumps([_pod_brief(p) for p in c.existing], sort_keys=True)}"
        )


def _node_brief(n: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": n["metadata"]["name"],
        "labels": {k: v for k, v in n["metadata"]["labels"].items() if k not in ("kubernetes.io/os", "type")},
        "taints": n["spec"]["taints"],
        "alloc": n["status"]["allocatable"],
    }


def _pod_brief(p: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": f"{p['metadata']['namespace']}/{p['metadata']['name']}",
        "node": p["spec"]["nodeName"],
        "labels": p["metadata"]["labels"],
        "containers": [c.get("resources", {}) for c in p["spec"]["containers"]],
        "ports": [c.get("ports") for c in p["spec"]["containers"] if c.get("ports")],
        "affinity": p["spec"].get("affinity"),
    }


def pinned(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """A copy whose required node affinity also demands ``metadata.name == node``."""
    p = copy.deepcopy(dict(pod))
    spec = p["spec"]
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    na = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not req or not req.get("nodeSelectorTerms"):
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [{"matchFields": [pin]}]}
    else:
        for term in req["nodeSelectorTerms"]:
            term.setdefault("matchFields", []).append(pin)
    spec.pop("schedulingGates", None)
    return p


def pin_changes_spread(pod: Mapping[str, Any]) -> bool:
    """Whether pinning ``pod`` (:func:`pinned`) can change PodTopologySpread's verdict: a
    ``DoNotSchedule`` constraint with ``minDomains`` > 1 and ``nodeAffinityPolicy`` Honor (the
    default). Upstream counts domains only over nodes matching the pod's required node
    affinity (``calPreFilterState``, ``matchNodeInclusionPolicies``), so the pin leaves one
    eligible domain, fewer than ``minDomains``, and ``minMatchNum`` treats the global minimum
    as 0: the pinned copy fails on a node the unpinned pod may use. Such cases are compared on
    bound-or-not only (``CaseResult.unverifiable``)."""
    for c in pod.get("spec", {}).get("topologySpreadConstraints") or []:
        if (
            c.get("whenUnsatisfiable") == "DoNotSchedule"
            and (c.get("minDomains") or 1) > 1
            and c.get("nodeAffinityPolicy", "Honor") == "Honor"
        ):
            return True
    return False


# ---- the runner ---------------------------------------------------------------------------


class ParityRunner:
    """Runs batches of cases; one instance per test session."""

    def __init__(self, api: Api, *, workers: int = 8, log: Callable[[str], None] | None = None) -> None:
        self.api = api
        self.pool = cf.ThreadPoolExecutor(max_workers=workers)
        self.log = log or (lambda _msg: None)
        self.timings: dict[str, float] = {}
        self._prepared: dict[str, Callable[[], None]] = {}
        self._background: list[cf.Future[None]] = []

    def prepare(self, cases: Sequence[Case]) -> None:
        """Create the storage of a later batch now (storage of other cases never changes what
        a case's pod can use, so this may overlap the running batch)."""
        t = time.monotonic()
        ids = ",".join(sorted({c.id for c in cases}))
        self._prepared[ids] = self._create_volumes(cases, ids)
        self._time("prepare next batch", t)

    def close(self) -> None:
        """Wait for background deletions and stop the worker threads."""
        for f in self._background:
            f.result()
        self.pool.shutdown(wait=True)

    def _time(self, what: str, start: float) -> None:
        self.timings[what] = self.timings.get(what, 0.0) + time.monotonic() - start

    def _parallel(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        return list(self.pool.map(fn, items))

    def ensure_runtime_class(self) -> None:
        """The RuntimeClass whose ``overhead`` generated pods may use."""
        if self.api.try_get(f"/apis/node.k8s.io/v1/runtimeclasses/{RUNTIME_CLASS}") is None:
            self.api.post(
                "/apis/node.k8s.io/v1/runtimeclasses",
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": RUNTIME_CLASS},
                    "handler": "parity",
                    "overhead": {"podFixed": dict(RUNTIME_CLASS_OVERHEAD)},
                },
            )

    # ---- setup / teardown ----------------------------------------------------------------

    def setup(self, cases: Sequence[Case]) -> None:
        """Namespaces, storage, nodes (Ready, with exactly their taints), existing pods."""
        t = time.monotonic()
        ids = ",".join(sorted({c.id for c in cases}))
        self._parallel(lambda ns: self.api.post("/api/v1/namespaces", ns), [ns for c in cases for ns in c.namespaces])
        # Storage first (or already created during the previous batch): kube-controller-manager
        # binds pre-bound claims while the nodes come up.
        settle_volumes = self._prepared.pop(ids, None) or self._create_volumes(cases, ids)
        nodes = [n for c in cases for n in c.nodes]
        self._parallel(self.api.create_node, nodes)
        want = {n["metadata"]["name"]: n["spec"]["taints"] for n in nodes}

        def listed() -> dict[str, Any]:
            return {n["metadata"]["name"]: n for n in self.api.nodes(f"{CASE_LABEL} in ({ids})")}

        def ready() -> bool:
            got = listed()
            return len(got) == len(want) and all(_is_ready(n) for n in got.values())

        t1 = time.monotonic()
        wait_for("batch nodes Ready", ready, timeout=60, interval=0.1)
        self._time("setup: nodes Ready", t1)
        # kube-controller-manager removes the not-ready taint slowly (a few nodes a second);
        # the nodes are Ready, so set the generated taints ourselves.
        self._parallel(
            lambda item: self.api.patch(f"/api/v1/nodes/{item[0]}", {"spec": {"taints": item[1] or None}}),
            list(want.items()),
        )

        def tainted() -> bool:
            got = listed()
            return all(_taint_set(got[name]) == _taint_set_of(taints) for name, taints in want.items())

        wait_for("batch node taints settled", tainted, timeout=30, interval=0.1)
        t1 = time.monotonic()
        settle_volumes()
        self._time("setup: volumes settled", t1)
        self._parallel(self.api.create_pod, [p for c in cases for p in c.existing])
        self._time("setup", t)

    def _create_volumes(self, cases: Sequence[Case], ids: str) -> Callable[[], None]:
        """Create every phase's namespaces, StorageClasses, PVs and claims of the volume cases;
        return a function that waits until kube-controller-manager's PV controller bound the
        pre-bound claims (a few per second: its client is rate limited) and the free PVs are
        Available, then creates the pods already using ReadWriteOncePod claims."""
        objs: dict[str, list[dict[str, Any]]] = {
            "namespaces": [],
            "storageclasses": [],
            "pvs": [],
            "pvcs": [],
            "pods": [],
        }
        for c in cases:
            if c.volumes is None:
                continue
            for phase in PHASES:
                for kind, items in c.volumes.materialise(phase).items():
                    objs[kind].extend(items)
        if not objs["namespaces"]:
            return lambda: None
        self._parallel(lambda ns: self.api.post("/api/v1/namespaces", ns), objs["namespaces"])
        self._parallel(lambda sc: self.api.post("/apis/storage.k8s.io/v1/storageclasses", sc), objs["storageclasses"])
        self._parallel(lambda pv: self.api.post("/api/v1/persistentvolumes", pv), objs["pvs"])
        # A new PV is Pending until the PV controller marks it Available; do that ourselves.
        self._parallel(
            lambda pv: self.api.patch(
                f"/api/v1/persistentvolumes/{pv['metadata']['name']}/status", {"status": {"phase": "Available"}}
            ),
            [pv for pv in objs["pvs"] if "claimRef" not in pv["spec"]],
        )
        want_bound = {
            (pvc["metadata"]["namespace"], pvc["metadata"]["name"])
            for pvc in objs["pvcs"]
            if pvc["spec"].get("volumeName")
        }
        free_pvs = {pv["metadata"]["name"] for pv in objs["pvs"] if "claimRef" not in pv["spec"]}

        def settled() -> bool:
            sel = f"{CASE_LABEL} in ({ids})"
            pvcs = self.api.get("/api/v1/persistentvolumeclaims", labelSelector=sel)["items"]
            bound = {
                (p["metadata"]["namespace"], p["metadata"]["name"])
                for p in pvcs
                if "pv.kubernetes.io/bind-completed" in (p["metadata"].get("annotations") or {})
            }
            pvs = self.api.get("/api/v1/persistentvolumes", labelSelector=sel)["items"]
            available = {p["metadata"]["name"] for p in pvs if p.get("status", {}).get("phase") == "Available"}
            return want_bound <= bound and free_pvs <= available

        self._parallel(
            lambda pvc: self.api.post(f"/api/v1/namespaces/{pvc['metadata']['namespace']}/persistentvolumeclaims", pvc),
            objs["pvcs"],
        )

        def wait() -> None:
            wait_for("batch volumes settled", settled, timeout=60, interval=0.1)
            self._parallel(self.api.create_pod, objs["pods"])

        return wait

    def teardown(self, cases: Sequence[Case]) -> None:
        """Delete the batch's nodes now (the next batch needs a stable node set); delete its
        pods, claims, PVs, StorageClasses and namespaces in the background (objects of deleted
        nodes are outside both schedulers' snapshots)."""
        t = time.monotonic()
        self._parallel(self.api.delete_node, [n["metadata"]["name"] for c in cases for n in c.nodes])
        namespaces = [ns["metadata"]["name"] for c in cases for ns in c.namespaces]
        vol_namespaces = [c.volumes.namespace(p) for c in cases if c.volumes is not None for p in PHASES]
        vol_ids = [c.id for c in cases if c.volumes is not None]

        def rest() -> None:
            for ns in namespaces + vol_namespaces:
                self.api.delete(f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            for ns in vol_namespaces:
                self.api.delete(f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
            if vol_ids:
                sel = f"{CASE_LABEL} in ({','.join(vol_ids)})"
                self.api.delete(f"/api/v1/persistentvolumes?labelSelector={sel}")
                self.api.delete(f"/apis/storage.k8s.io/v1/storageclasses?labelSelector={sel}")
            for ns in namespaces + vol_namespaces:
                self.api.delete_namespace(ns)

        self._background.append(self.pool.submit(rest))
        self._time("teardown", t)

    # ---- phases --------------------------------------------------------------------------

    def _test_pods(self) -> dict[tuple[str, str], Any]:
        items = self.api.get("/api/v1/pods", labelSelector=f"{TEST_LABEL}=1")["items"]
        return {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in items}

    def _events(self) -> dict[tuple[str, str], list[str]]:
        items = self.api.get("/api/v1/events", fieldSelector="reason=FailedScheduling")["items"]
        out: dict[tuple[str, str], list[str]] = {}
        for e in items:
            io = e.get("involvedObject") or e.get("regarding") or {}
            out.setdefault((io.get("namespace", ""), io.get("name", "")), []).append(str(e.get("message", "")))
        return out

    def run_phase(self, name: str, pods: Mapping[str, dict[str, Any]]) -> dict[str, Outcome]:
        """Create ``pods`` (case id -> pod), wait until each is bound or reported
        unschedulable, ungate gated ones after the others settle; return outcomes by case id."""
        t = time.monotonic()
        labelled = {}
        for cid, p in pods.items():
            q = copy.deepcopy(p)
            q["metadata"].setdefault("labels", {})[TEST_LABEL] = "1"
            labelled[cid] = q
        self._parallel(self.api.create_pod, list(labelled.values()))
        key = {cid: (p["metadata"]["namespace"], p["metadata"]["name"]) for cid, p in labelled.items()}
        gated = {cid for cid, p in labelled.items() if p["spec"].get("schedulingGates")}
        out = {cid: Outcome() for cid in labelled}

        def settle(ids: set[str]) -> None:
            pending = set(ids)

            def done() -> bool:
                got = self._test_pods()
                for cid in list(pending):
                    p = got.get(key[cid])
                    if p is None:
                        continue
                    node = p["spec"].get("nodeName") or ""
                    cond = next((c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
                    if node:
                        out[cid].node = node
                        pending.discard(cid)
                    elif (
                        cond
                        and cond.get("status") == "False"
                        and cond.get("reason") in ("Unschedulable", "SchedulerError")
                    ):
                        out[cid].reason = cond["reason"]
                        out[cid].message = cond.get("message", "")
                        pending.discard(cid)
                return not pending

            try:
                wait_for(f"phase {name} decisions", done, timeout=PHASE_TIMEOUT, interval=0.05)
            except AssertionError:
                for cid in pending:
                    out[cid].reason = "Timeout"
                    out[cid].message = "no decision within the phase timeout"

        settle(set(labelled) - gated)
        if gated:
            # A scheduler that wrongly attempts a gated pod does so as fast as the others.
            time.sleep(0.3 if len(gated) < len(labelled) else 1.5)
            events = self._events()
            got = self._test_pods()
            for cid in gated:
                out[cid].gated_events = events.get(key[cid], [])
                gp = got.get(key[cid])
                if gp is not None and gp["spec"].get("nodeName"):
                    out[cid].gated_events.append(f"bound to {gp['spec']['nodeName']} while gated")
            self._parallel(
                lambda cid: self.api.patch(
                    f"/api/v1/namespaces/{key[cid][0]}/pods/{key[cid][1]}", {"spec": {"schedulingGates": None}}
                ),
                sorted(gated),
            )
            settle(gated)
        failed = [cid for cid, o in out.items() if not o.node and o.reason != "Timeout"]
        if failed:

            def have_events() -> bool:
                ev = self._events()
                for cid in failed:
                    out[cid].events = ev.get(key[cid], [])
                return all(out[cid].message in out[cid].events for cid in failed)

            try:
                wait_for(f"phase {name} FailedScheduling events", have_events, timeout=10, interval=0.1)
            except AssertionError:
                pass
        self._parallel(lambda k: self.api.delete_pod(k[0], k[1], grace=0), list(key.values()))
        self._time(f"phase {name}", t)
        return out

    def run_batch(self, cases: Sequence[Case], upcoming: Sequence[Case] = ()) -> list[CaseResult]:
        """Set up, run phases K, O and V, tear down; ``upcoming`` (the next batch) gets its
        storage created while this batch's phases run."""
        results = {c.id: CaseResult(c) for c in cases}
        self.setup(cases)
        if upcoming:
            self.prepare(upcoming)
        try:
            kube = self.run_phase("K", {c.id: c.pod_for("t-kube", KUBE_PROFILE, "k") for c in cases})
            ome = self.run_phase("O", {c.id: c.pod_for("t-ome", OME_PROFILE, "o") for c in cases})
            for cid, r in results.items():
                r.kube, r.ome = kube[cid], ome[cid]
            to_verify = {
                c.id: pinned(c.pod_for("t-verify", KUBE_PROFILE, "v"), ome[c.id].node)
                for c in cases
                if ome[c.id].node and not pin_changes_spread(c.pod)
            }
            if to_verify:
                for cid, o in self.run_phase("V", to_verify).items():
                    results[cid].verify = o
        finally:
            self.teardown(cases)
        for r in results.values():
            r.judge()
        return list(results.values())


def _is_ready(n: Mapping[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))


def _taint_set_of(taints: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    return {(t["key"], t.get("value", ""), t["effect"]) for t in taints}


def _taint_set(n: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    return _taint_set_of(n["spec"].get("taints") or [])


def write_report(path: Path, results: Sequence[CaseResult], header: str) -> None:
    """Write ``header`` and every mismatching case to ``path``."""
    lines = [header]
    for r in results:
        if r.problems:
            lines.append(r.describe())
    path.write_text("\n\n".join(lines) + "\n")


def coverage(results: Sequence[CaseResult]) -> str:
    """How often each FailedScheduling reason occurred in kube-scheduler's messages."""
    import re

    hist: dict[str, int] = {}
    for r in results:
        msg = r.kube.message
        if not msg:
            continue
        body = msg.split(":", 1)[1] if ":" in msg else msg
        for part in re.split(r"[,.] ", body):
            reason = re.sub(r"^\s*\d+ ", "", part).strip(" .")
            if reason:
                hist[reason] = hist.get(reason, 0) + 1
    return "reasons seen: " + "; ".join(f"{k} x{v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1]))
