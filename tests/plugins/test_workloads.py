"""The workload selector of PodTopologySpread's default constraints (``plugins/workloads.py``).

Ports ``TestGetPodServices`` and ``TestDefaultSelector`` of upstream's
``pkg/scheduler/framework/plugins/helper/spread_test.go`` (v1.35.4), then the system default
constraints through a profile that scores PodTopologySpread.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.api.meta import OwnerReference
from ome_scheduler.api.workloads import ReplicaSet, ReplicationController, Service, StatefulSet
from ome_scheduler.plugins.workloads import WorkloadStore
from tests.support.plugins_env import Env, chart_config, node, pod

NS = "test"
ZONE = "topology.kubernetes.io/zone"


def service(name: str, selector: dict[str, str] | None, ns: str = NS) -> Service:
    spec = {"selector": selector} if selector is not None else {}
    return msgspec.convert({"metadata": {"name": name, "namespace": ns}, "spec": spec}, Service)


def owned(p: Pod, name: str, api_version: str, kind: str) -> Pod:
    """``PodWrapper.OwnerReference``: the pod's controller."""
    ref = OwnerReference(api_version=api_version, kind=kind, name=name, controller=True)
    return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, owner_references=[ref]))


def requirement_pairs(store: WorkloadStore, p: Pod) -> dict[str, str]:
    sel = store.default_selector(p)
    assert not sel.is_nothing()
    out = {}
    for r in sel.requirements:
        assert r.op == "In" and len(r.values) == 1
        out[r.key] = next(iter(r.values))
    return out


def test_get_pod_services() -> None:
    store = WorkloadStore()
    for i in range(3):
        store.on_service_add(service(f"service-{i}", {"app": f"test-{i}"}))
    for i in range(5):
        p = pod(f"test-pod-{i}", NS, labels={"app": f"test-{i}", "label": f"label-{i}"})
        want = {"app": f"test-{i}"} if i < 3 else {}
        assert requirement_pairs(store, p) == want


def test_services_with_nil_selectors_select_nothing_and_empty_ones_everything() -> None:
    store = WorkloadStore()
    store.on_service_add(service("nil", None))
    p = pod("p", NS, labels={"app": "x"})
    assert store.default_selector(p).is_empty()
    store.on_service_add(service("other-ns", {"app": "x"}, ns="elsewhere"))
    assert store.default_selector(p).is_empty()
    store.on_service_add(service("empty", {}))
    store.on_service_add(service("match", {"app": "x"}))
    assert requirement_pairs(store, p) == {"app": "x"}
    store.on_service_delete(service("match", {"app": "x"}))
    assert store.default_selector(p).is_empty()


@pytest.mark.parametrize(
    ("case", "owner", "want"),
    [
        ("DefaultSelector for no OwnerReference pod case", None, {"podLabelKey": "podLabelVal"}),
        (
            "DefaultSelector for ReplicaSet OwnerReference pod case",
            ("test-replicaset", "apps/v1", "ReplicaSet"),
            {"podLabelKey": "podLabelVal", "replicaSetLabelKey": "replicaSetLabelVal"},
        ),
        (
            "DefaultSelector for ReplicationController OwnerReference pod case",
            ("test-replicationcontroller", "v1", "ReplicationController"),
            {"podLabelKey": "podLabelVal", "replicationLabelKey": "replicationLabelVal"},
        ),
        (
            "DefaultSelector for StatefulSet OwnerReference pod case",
            ("test-statefulset", "apps/v1", "StatefulSet"),
            {"podLabelKey": "podLabelVal", "statefulSetLabelKey": "statefulSetLabelVal"},
        ),
        # Beyond upstream's table: a controller of another group version, or not in the store.
        (
            "extensions ReplicaSet",
            ("test-replicaset", "extensions/v1beta1", "ReplicaSet"),
            {"podLabelKey": "podLabelVal"},
        ),
        ("missing StatefulSet", ("nope", "apps/v1", "StatefulSet"), {"podLabelKey": "podLabelVal"}),
    ],
)
def test_default_selector(case: str, owner: tuple[str, str, str] | None, want: dict[str, str]) -> None:
    store = WorkloadStore()
    assert store.default_selector(pod("test-pod", NS, labels={"podLabelKey": "podLabelVal"})).is_empty()
    store.on_service_add(service("test-service", {"podLabelKey": "podLabelVal"}))
    store.on_replicaset_add(_rs("test-replicaset", {"matchLabels": {"replicaSetLabelKey": "replicaSetLabelVal"}}))
    store.on_rc_add(_rc("test-replicationcontroller", {"replicationLabelKey": "replicationLabelVal"}))
    store.on_statefulset_add(_ss("test-statefulset", {"matchLabels": {"statefulSetLabelKey": "statefulSetLabelVal"}}))
    p = pod("test-pod", NS, labels={"podLabelKey": "podLabelVal"})
    if owner is not None:
        p = owned(p, *owner)
    assert requirement_pairs(store, p) == want, case


def _rs(name: str, selector: dict[str, Any] | None) -> ReplicaSet:
    return msgspec.convert({"metadata": {"name": name, "namespace": NS}, "spec": {"selector": selector}}, ReplicaSet)


def _ss(name: str, selector: dict[str, Any] | None) -> StatefulSet:
    return msgspec.convert({"metadata": {"name": name, "namespace": NS}, "spec": {"selector": selector}}, StatefulSet)


def _rc(name: str, selector: dict[str, str]) -> ReplicationController:
    raw = {"metadata": {"name": name, "namespace": NS}, "spec": {"selector": selector}}
    return msgspec.convert(raw, ReplicationController)


def test_a_replica_set_with_a_nil_or_invalid_selector_adds_nothing() -> None:
    store = WorkloadStore()
    store.on_service_add(service("s", {"a": "b"}))
    p = owned(pod("p", NS, labels={"a": "b"}), "rs", "apps/v1", "ReplicaSet")
    store.on_replicaset_add(_rs("rs", None))
    assert requirement_pairs(store, p) == {"a": "b"}
    store.on_replicaset_update(_rs("rs", None), _rs("rs", {"matchExpressions": [{"key": "k", "operator": "Bad"}]}))
    assert requirement_pairs(store, p) == {"a": "b"}


def test_system_default_constraints_spread_a_services_pods_when_scored() -> None:
    """The default profile's system constraints (ScheduleAnyway, zone skew 5, hostname skew 3)
    use the Service's selector: with PodTopologySpread scoring, the zone without the Service's
    pods wins over MostAllocated's packing; without the Service there is no default constraint."""
    cfg = chart_config()
    cfg["profiles"][0]["plugins"]["score"]["disabled"] = []
    env = Env(cfg)
    for name, zone in (("a1", "a"), ("b1", "b")):
        env.add_node(node(name, {ZONE: zone}))
    for i in range(3):
        env.add_pod(pod(f"w{i}", labels={"app": "web"}, node_name="a1"))
    fw = env.s.frameworks["ome-scheduler"]
    spread = fw.plugins["PodTopologySpread"]
    p = pod("p", labels={"app": "web"})
    assert spread.constraints(p, "ScheduleAnyway") == []  # type: ignore[attr-defined]
    env.s.workloads.on_service_add(service("web", {"app": "web"}, ns="default"))
    cons = spread.constraints(p, "ScheduleAnyway")  # type: ignore[attr-defined]
    assert [(c.topology_key, c.max_skew) for c in cons] == [("kubernetes.io/hostname", 3), (ZONE, 5)]
    assert env.schedule(p) == "b1"
