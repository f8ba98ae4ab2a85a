"""Differential test, OpportunisticBatching: a profile where batching is active, four identical
pods in sequence, through the stock kube-scheduler 1.35.4 and through ome-scheduler.

The profile is kube-scheduler's defaults with PodTopologySpread ``defaultingType: List`` and no
default constraints (every PreFilter, Filter, PreScore and Score plugin then signs these pods).
Four nodes take one pod each (``pods: 1``): ``a`` is the most preferred (NodeAffinity weight
10), ``c`` half as much (weight 5) with one PreferNoSchedule taint, ``b`` neither, ``d`` two
PreferNoSchedule taints. The first pod ranks them a, b, c, d. Once ``a`` is full, a rescored
cycle would rank c above b (NodeAffinity normalises by the best remaining preference, so c's
doubles), giving a, c, b, d; batching offers the next pods b, then c, then d from the first
ranking. Both schedulers must place the four pods alike, and kube-scheduler must show the
batched order (else the case compares nothing). The same case runs in-process in
``tests/framework/test_batch.py::test_batched_pods_follow_the_first_ranking_where_rescoring_would_reorder``.

Each phase has its own four nodes, deleted after it; the pods are created one after another
within a few milliseconds, well inside the 500 ms a kept ranking lives.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster, node_not_ready
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import wait_bound, wait_for
from e2e.parity_harness import KubeSchedulerProcess
from tests.support.manifests import node, pod

KUBE = "batching-kube"
OME = "batching-ome"
CASE = "parity-batching"
PREFER = {"effect": "PreferNoSchedule", "value": "x"}
ROLES: dict[str, tuple[dict[str, str], list[dict[str, str]]]] = {
    "a": ({"pa": "yes"}, []),
    "b": ({}, []),
    "c": ({"pc": "yes"}, [{"key": "t1", **PREFER}]),
    "d": ({}, [{"key": "t1", **PREFER}, {"key": "t2", **PREFER}]),
}
PREFERRING = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "pa", "operator": "In", "values": ["yes"]}]}},
            {"weight": 5, "preference": {"matchExpressions": [{"key": "pc", "operator": "In", "values": ["yes"]}]}},
        ]
    }
}


def _profile(name: str) -> dict[str, Any]:
    return {"schedulerName": name, "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "List"}}]}


def _config(name: str, kubeconfig: str | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [_profile(name)],
    }
    if kubeconfig is not None:
        cfg["clientConnection"] = {"kubeconfig": kubeconfig}
    return cfg


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Iterator[KubeSchedulerProcess]:
    kc = str(cluster.component_kubeconfig("kube-scheduler"))
    with KubeSchedulerProcess(cluster, _config(KUBE, kc)) as k:
        yield k


@pytest.fixture(scope="module")
def ome(cluster: Cluster) -> Iterator[SchedulerProcess]:
    with SchedulerProcess(cluster, _config(OME), name="parity-batching-ome", v=2) as s:
        yield s


def _phase(api: Api, ns: str, scheduler: str) -> list[str]:
    """The roles of the nodes the four pods got, in creation order."""
    cid = f"pb{uuid.uuid4().hex[:6]}"
    names = {f"{cid}-{r}": r for r in ROLES}
    for name, r in names.items():
        api.create_node(node(name, {CASE: cid, **ROLES[r][0]}, gpu=0, pods=1))
    try:

        def ready() -> bool:
            got = {n["metadata"]["name"]: n for n in api.nodes(f"{CASE}={cid}")}
            return len(got) == len(names) and all(node_not_ready(n) is None for n in got.values())

        wait_for("batching nodes Ready", ready, timeout=90)
        for name, r in names.items():
            api.patch_node(name, {"spec": {"taints": ROLES[r][1] or None}})

        def tainted() -> bool:
            got = {n["metadata"]["name"]: n for n in api.nodes(f"{CASE}={cid}")}
            return all(len(got[n]["spec"].get("taints") or []) == len(ROLES[r][1]) for n, r in names.items())

        wait_for("batching nodes tainted", tainted, timeout=30)
        pods = [f"{scheduler}-{i}" for i in range(4)]
        for p in pods:
            api.create_pod(
                pod(
                    p,
                    ns,
                    gpu=0,
                    cpu="100m",
                    labels={"app": "batching"},
                    scheduler=scheduler,
                    node_selector={CASE: cid},
                    affinity=PREFERRING,
                )
            )
        bound = wait_bound(api, ns, pods, timeout=60)
        for p in pods:
            api.delete_pod(ns, p)
        return [names[bound[p]] for p in pods]
    finally:
        for name in names:
            api.delete_node(name)


def test_identical_pods_are_batched_as_kube_scheduler_batches_them(
    api: Api, ns: str, kube: KubeSchedulerProcess, ome: SchedulerProcess
) -> None:
    kube_roles = _phase(api, ns, KUBE)
    assert kube_roles == ["a", "b", "c", "d"], f"kube-scheduler did not batch ({kube_roles}); the case compares nothing"
    ome_roles = _phase(api, ns, OME)
    assert ome_roles == kube_roles
