"""End-to-end: the documented demo gang and the first gang/standalone behaviours.

Runs against the real local control plane (kube-apiserver 1.35.4, etcd, KCM, the stock
kube-scheduler as default scheduler, kwok) with one ome-scheduler process using the chart's
default configuration.
"""

from __future__ import annotations

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.gangs import run_demo_gang
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import HOSTNAME, domain_key, node, pod, pod_group, unique

pytestmark = pytest.mark.invariants_after_test


def test_documented_demo_gang(cluster: Cluster, api: Api, scheduler: SchedulerProcess) -> None:
    """Step 2 and 3 of the user guide, with its manifests unchanged."""
    cluster.kubectl("delete", "namespace", "gang-demo", "--ignore-not-found", "--wait=true", timeout=120)
    cluster.kubectl("create", "namespace", "gang-demo")
    try:
        for p in run_demo_gang(cluster, api):
            ev = [e for e in api.events("gang-demo", p["name"]) if e["reason"] == "Scheduled"][0]
            assert ev["reportingController"] == "ome-scheduler"
        described = cluster.kubectl("describe", "pods", "-n", "gang-demo", "-l", "app=gang-demo").stdout
        assert "ome-scheduler" in described and "Successfully assigned gang-demo/" in described
        assert_invariants(api, "gang-demo")
    finally:
        cluster.kubectl("delete", "deployment", "gang-demo", "-n", "gang-demo", "--ignore-not-found")
        cluster.kubectl("delete", "namespace", "gang-demo", "--wait=false")


def test_gang_before_podgroup_waits_then_binds(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("dom")
    nodes = [node(f"{key}-{i}", {dk: "d1"}) for i in range(2)]
    with temp_nodes(api, nodes):
        for i in range(2):
            api.create_pod(pod(f"m{i}", ns, gang="g", anti_affinity_on=HOSTNAME))
        wait_message(api, ns, "m0", f"PodGroup {ns}/g not resolvable yet")
        assert not any(p["spec"].get("nodeName") for p in api.pods(ns))
        api.create_pod_group(pod_group("g", ns, 2, topology_key=dk))
        placed = wait_bound(api, ns, ["m0", "m1"])
        assert set(placed.values()) == {f"{key}-0", f"{key}-1"}
        assert_invariants(api, ns)


def test_gang_without_room_waits_for_capacity(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("dom")
    with temp_nodes(api, [node(f"{key}-a0", {dk: "a"}), node(f"{key}-a1", {dk: "a"})]):
        api.create_gang(ns, 3, dk)
        wait_message(api, ns, "m0", f"no domain has room for gang {ns}/g")
        assert not any(p["spec"].get("nodeName") for p in api.pods(ns))
        with temp_nodes(api, [node(f"{key}-a2", {dk: "a"})]):
            placed = wait_bound(api, ns, ["m0", "m1", "m2"])
            assert len(set(placed.values())) == 3
            assert_invariants(api, ns)


def test_gang_binds_when_blocking_pod_deleted(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("dom")
    with temp_nodes(api, [node(f"{key}-0", {dk: "a"}), node(f"{key}-1", {dk: "a"})]):
        api.create_pod(pod("blocker", ns, node_name=f"{key}-1", scheduler="default-scheduler"))
        wait_bound(api, ns, ["blocker"])
        api.create_gang(ns, 2, dk)
        wait_message(api, ns, "m0", f"no domain has room for gang {ns}/g")
        api.delete_pod(ns, "blocker")
        placed = wait_bound(api, ns, ["m0", "m1"])
        assert set(placed.values()) == {f"{key}-0", f"{key}-1"}
        assert_invariants(api, ns)


def test_podgroup_without_topology_key(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    api.create_pod_group(pod_group("g", ns, 1))
    api.create_pod(pod("m0", ns, gang="g"))
    msg = wait_message(
        api, ns, "m0", f"PodGroup {ns}/g must declare ome.io/topology-key or the scheduler must configure topologyKey"
    )
    assert msg.startswith("0/")
    assert not api.pod(ns, "m0")["spec"].get("nodeName")


def test_best_fit_picks_smallest_domain(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("dom")
    nodes = [node(f"{key}-big{i}", {dk: "big"}) for i in range(3)] + [
        node(f"{key}-small{i}", {dk: "small"}) for i in range(2)
    ]
    with temp_nodes(api, nodes):
        api.create_gang(ns, 2, dk)
        placed = wait_bound(api, ns, ["m0", "m1"])
        assert set(placed.values()) == {f"{key}-small0", f"{key}-small1"}
        assert_invariants(api, ns)


def test_standalone_pod_goes_to_busiest_node(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key = unique("mostalloc")
    sel = {"e2e.ome.io/test": key}
    nodes = [node(f"{key}-{i}", sel, gpu=0, cpu="4", memory="8Gi") for i in range(3)]
    with temp_nodes(api, nodes):
        api.create_pod(pod("busy", ns, gpu=0, cpu="2", memory="4Gi", node_name=f"{key}-1"))
        api.create_pod(pod("busier", ns, gpu=0, cpu="3", memory="6Gi", node_name=f"{key}-2"))
        wait_bound(api, ns, ["busy", "busier"])
        api.create_pod(pod("p", ns, gpu=0, cpu="500m", memory="1Gi", node_selector=sel))
        assert wait_bound(api, ns, ["p"])["p"] == f"{key}-2"


def test_default_scheduler_pods_count_but_are_ignored(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("dom")
    with temp_nodes(api, [node(f"{key}-0", {dk: "a"}), node(f"{key}-1", {dk: "a"})]):
        api.create_pod(pod("stock", ns, scheduler="default-scheduler", node_selector={dk: "a"}))
        placed = wait_bound(api, ns, ["stock"])
        # kube-scheduler writes its events asynchronously, after the Binding.
        ev = wait_for(
            "the stock pod's Scheduled event",
            lambda: [e for e in api.events(ns, "stock") if e["reason"] == "Scheduled"],
            timeout=15,
        )
        assert ev[0]["reportingController"] == "default-scheduler"
        assert "stock" not in scheduler.log()
        api.create_gang(ns, 2, dk)
        wait_message(api, ns, "m0", f"no domain has room for gang {ns}/g")
        api.delete_pod(ns, "stock")
        got = wait_bound(api, ns, ["m0", "m1"])
        assert set(got.values()) == {f"{key}-0", f"{key}-1"}
        assert placed["stock"] in got.values()
        assert_invariants(api, ns)
