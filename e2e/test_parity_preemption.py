"""DefaultPreemption parity on the real control plane: kube-scheduler 1.35 is the oracle.

Each case runs twice on the same objects, once per scheduler, both with DefaultPreemption on:
a stock kube-scheduler with profile ``pp-kube`` (the chart's plugin set minus OMEGangPack) and
ome-scheduler with the chart's profile as ``pp-ome``. Every case has two node sets (one per
scheduler, created up front, so both see the same ``0/N``); a phase creates the victims bound
to its nodes, waits until kwok runs them, then creates the preemptor and watches its
namespace. Compared, after names are normalised (node and namespace prefixes, the preemptor's
UID, the scheduler's name): where the preemptor ended (bound node or not), the first
``FailedScheduling`` note, the nominated node, which victims were deleted, the
``DisruptionTarget`` condition each carried before it went, and the ``Preempted`` events.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import wait_for
from e2e.parity_gen_preemption import PRIORITIES, PCase, Victim, generate
from e2e.parity_harness import KubeSchedulerProcess
from tests.support.manifests import chart_config, kube_counterpart_config

KUBE = "pp-kube"
OME = "pp-ome"
LABEL = "pp-case"
CLASSES: dict[str, tuple[int, str | None]] = {
    "pp-low": (10, None),
    "pp-mid": (20, None),
    "pp-high": (1000, None),
    "pp-high-never": (1000, "Never"),
    **{name: (value, None) for name, value in PRIORITIES.items()},
}
SEED = int(os.environ.get("OME_PREEMPT_SEED", 1354))
GENERATED = int(os.environ.get("OME_PREEMPT_CASES", 24))
BATCH = int(os.environ.get("OME_PREEMPT_BATCH", 24))
SETTLE_S = 20.0


def _with_preemption(cfg: dict[str, Any]) -> dict[str, Any]:
    """The configuration with DefaultPreemption no longer disabled."""
    mp = cfg["profiles"][0]["plugins"]["multiPoint"]
    mp["disabled"] = [p for p in mp.get("disabled", []) if p["name"] != "DefaultPreemption"]
    return cfg


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Iterator[KubeSchedulerProcess]:
    kc = str(cluster.component_kubeconfig("kube-scheduler"))
    with KubeSchedulerProcess(cluster, _with_preemption(kube_counterpart_config(KUBE, kc))) as k:
        yield k


@pytest.fixture(scope="module")
def ome(cluster: Cluster) -> Iterator[SchedulerProcess]:
    with SchedulerProcess(cluster, _with_preemption(chart_config(scheduler_name=OME)), name="pp-ome", v=2) as s:
        yield s


@pytest.fixture(scope="module")
def classes(api: Api) -> None:
    api.ensure_priority_classes(CLASSES)


def _node(name: str, cid: str) -> dict[str, Any]:
    res = {"cpu": "4", "memory": "8Gi", "pods": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {LABEL: cid, "kubernetes.io/hostname": name},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": []},
        "status": {"capacity": res, "allocatable": res},
    }


def _pod(ns: str, name: str, cpu: str, cls: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {
            "priorityClassName": cls,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
            ],
            **spec,
        },
    }


class Watch:
    """Every pod event of one namespace, from a background watch."""

    def __init__(self, api: Api, ns: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        rv = api.get(f"/api/v1/namespaces/{ns}/pods")["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, args=(api, ns, rv), daemon=True)
        self.thread.start()

    def _run(self, api: Api, ns: str, rv: str) -> None:
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "90"}
        try:
            with api.http.stream("GET", f"/api/v1/namespaces/{ns}/pods", params=params, timeout=None) as r:
                for line in r.iter_lines():
                    if line:
                        ev = json.loads(line)
                        self.events.append((ev["type"], ev["object"]))
        except httpx.HTTPError:
            pass  # the namespace went away or the server ended the watch: the phase is over


def run_phase(api: Api, case: PCase, cid: str, who: str) -> dict[str, Any]:
    """One scheduler's outcome, normalised."""
    tag = "k" if who == KUBE else "o"
    ns = f"{cid}-{tag}"
    api.create_namespace(ns)
    prefix = f"{cid}-{tag}-"
    for pdb in case.pdbs:
        # As many pods as match: no disruption allowed, whenever the disruption controller looks.
        guarded = max(1, sum(1 for v in case.victims if v.labels.get("app") == pdb["app"]))
        api.post(
            f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": pdb["name"]},
                "spec": {"minAvailable": guarded, "selector": {"matchLabels": {"app": pdb["app"]}}},
            },
        )
    same = [(v.node, v.cls) for v in case.victims]
    spaced = len(set(same)) < len(same)  # equal priorities on a node: start times order them
    for v in case.victims:
        api.create_pod(_pod(ns, v.name, v.cpu, v.cls, nodeName=f"{prefix}n{v.node}", labels=v.labels))
        if spaced:
            time.sleep(1.05)  # distinct start times (second precision), in creation order

    def running() -> bool:
        return all(p.get("status", {}).get("startTime") for p in api.pods(ns))

    wait_for("victims running", running, timeout=60)
    watch = Watch(api, ns)
    api.create_pod(
        _pod(ns, "preemptor", case.cpu, cls=case.cls, nodeSelector={LABEL: f"{cid}-{tag}"}, schedulerName=who)
    )

    def decided() -> bool:
        p = api.pod(ns, "preemptor")
        return bool(p["spec"].get("nodeName")) or bool(api.event_notes(ns, "preemptor", "FailedScheduling"))

    wait_for(f"{who} decides", decided, timeout=60)
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and not api.pod(ns, "preemptor")["spec"].get("nodeName"):
        time.sleep(0.5)
    time.sleep(1.0)
    pre = api.pod(ns, "preemptor")
    uid = pre["metadata"]["uid"]

    def norm(text: str) -> str:
        return text.replace(prefix, "").replace(uid, "<uid>").replace(who, "<scheduler>")

    nominated = sorted(
        {
            norm(o["status"]["nominatedNodeName"])
            for t, o in watch.events
            if o["metadata"]["name"] == "preemptor" and o["status"].get("nominatedNodeName")
        }
    )
    deleted = sorted({o["metadata"]["name"] for t, o in watch.events if t == "DELETED"})
    conditions: dict[str, list[Any]] = {}
    for _, o in watch.events:
        for c in o.get("status", {}).get("conditions", []):
            if c["type"] == "DisruptionTarget":
                conditions[o["metadata"]["name"]] = [c["status"], c["reason"], norm(c.get("message", ""))]

    def preempted_events() -> list[tuple[str, str]]:
        return sorted(
            (e["regarding"]["name"], norm(str(e.get("note", ""))))
            for e in api.events(ns)
            if e.get("reason") == "Preempted"
        )

    # The event follows the deletion (both schedulers send it in the background): wait for one
    # per deleted victim, for a while.
    deleted_now = {o["metadata"]["name"] for t, o in watch.events if t == "DELETED"}
    end = time.monotonic() + 10
    while len(preempted_events()) < len(deleted_now) and time.monotonic() < end:
        time.sleep(0.5)
    preempted = preempted_events()
    notes = api.event_notes(ns, "preemptor", "FailedScheduling")
    api.delete_namespace(ns)
    return {
        "node": norm(pre["spec"].get("nodeName", "")),
        "first_failed": norm(notes[0]) if notes else "",
        "nominated": nominated,
        "deleted": deleted,
        "conditions": conditions,
        "preempted": preempted,
    }


def create_nodes(api: Api, case: PCase) -> tuple[str, list[str]]:
    """A case id and both phases' nodes, Ready and untainted."""
    cid = f"pp{uuid.uuid4().hex[:6]}"
    names = [f"{cid}-{t}-n{i}" for t in ("k", "o") for i in range(case.nodes)]
    for n in names:
        api.create_node(_node(n, f"{cid}-{n.split('-')[1]}"))

    def listed() -> dict[str, Any]:
        return {n["metadata"]["name"]: n for n in api.nodes(f"{LABEL} in ({cid}-k,{cid}-o)")}

    def ready() -> bool:
        got = listed()
        return len(got) == len(names) and all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
            for n in got.values()
        )

    wait_for("case nodes Ready", ready, timeout=90)
    # kube-controller-manager lifts the not-ready taint slowly; the nodes are Ready.
    for n in names:
        api.patch_node(n, {"spec": {"taints": None}})
    wait_for("case nodes untainted", lambda: not any(n["spec"].get("taints") for n in listed().values()), timeout=30)
    return cid, names


def run_case(api: Api, case: PCase, cid: str = "") -> tuple[dict[str, Any], dict[str, Any], str]:
    """Both phases of ``case`` (its nodes created here, unless ``cid`` names nodes made already)."""
    names: list[str] = []
    if not cid:
        cid, names = create_nodes(api, case)
    try:
        k = run_phase(api, case, cid, KUBE)
        o = run_phase(api, case, cid, OME)
    finally:
        for n in names:
            api.delete_node(n)
    return k, o, cid


def _v(name: str, node: int, cpu: str, cls: str, **labels: str) -> Victim:
    return Victim(name, node, cpu, cls, dict(labels))


CASES: Mapping[str, PCase] = {
    "basic eviction": PCase(1, [_v("low", 0, "3", "pp-low")], "2", "pp-high"),
    "equal priority": PCase(1, [_v("same", 0, "3", "pp-high")], "2", "pp-high"),
    "preemptionPolicy Never": PCase(1, [_v("low", 0, "3", "pp-low")], "2", "pp-high-never"),
    "not helpful": PCase(1, [_v("low", 0, "1", "pp-low")], "6", "pp-high"),
    "reprieve order": PCase(
        1, [_v("mid", 0, "1", "pp-mid"), _v("low-a", 0, "1", "pp-low"), _v("low-b", 0, "2", "pp-low")], "2", "pp-high"
    ),
    "pdb steers the node": PCase(
        2,
        [_v("guarded", 0, "3", "pp-low", app="db"), _v("free", 1, "3", "pp-low")],
        "2",
        "pp-high",
        pdbs=[{"name": "db", "app": "db"}],
    ),
    "fewest victims": PCase(
        2, [_v("a1", 0, "1", "pp-low"), _v("a2", 0, "2", "pp-low"), _v("b1", 1, "3", "pp-low")], "2", "pp-high"
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_preemption_matches_kube_scheduler(
    name: str, api: Api, kube: KubeSchedulerProcess, ome: SchedulerProcess, classes: None
) -> None:
    k, o, cid = run_case(api, CASES[name])
    assert k == o, f"{name} ({cid}):\n  kube: {k}\n  ome:  {o}"
    if name in ("basic eviction", "reprieve order", "pdb steers the node", "fewest victims"):
        assert k["node"] and k["deleted"] and k["nominated"] == [k["node"]], k


@pytest.mark.timeout(max(600, GENERATED * 10))
def test_generated_preemption_cases_match_kube_scheduler(
    api: Api, kube: KubeSchedulerProcess, ome: SchedulerProcess, classes: None
) -> None:
    """``OME_PREEMPT_CASES`` (default 24) cases from ``OME_PREEMPT_SEED``, in batches of
    ``OME_PREEMPT_BATCH`` (default 24; at most 8 nodes a case), four cases at a time."""
    cases = generate(SEED, GENERATED)
    results: list[tuple[dict[str, Any], dict[str, Any], str]] = []
    for b in range(0, len(cases), BATCH):
        batch = cases[b : b + BATCH]
        # A batch's nodes exist for the whole batch, so both schedulers count the same 0/N.
        made = [create_nodes(api, c) for c in batch]
        try:
            with cf.ThreadPoolExecutor(max_workers=4) as pool:
                results += pool.map(run_case, [api] * len(batch), batch, [cid for cid, _ in made])
            differ = sum(1 for k, o, _ in results if k != o)
            print(f"preemption parity: {len(results)}/{len(cases)} cases run, {differ} differ", flush=True)
        finally:
            for _, names in made:
                for n in names:
                    api.delete_node(n)
    bad = [(i, k, o, cid) for i, (k, o, cid) in enumerate(results) if k != o]
    evicted = sum(1 for k, _, _ in results if k["deleted"])
    print(f"preemption parity: seed={SEED} cases={len(results)} mismatches={len(bad)} with evictions={evicted}")
    shown = "\n".join(f"case {i} ({cid}) {cases[i]}:\n  kube: {k}\n  ome:  {o}" for i, k, o, cid in bad[:5])
    assert not bad, f"{len(bad)} of {len(results)} differ (OME_PREEMPT_SEED={SEED}):\n{shown}"
