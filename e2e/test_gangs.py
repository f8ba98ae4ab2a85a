"""End-to-end: OMEGangPack's behaviours on the real control plane (issue 4).

One ome-scheduler process with the chart's configuration (``gcIntervalSeconds`` lowered to 2 s
so PodGroup deletions are collected quickly). Every test creates its own nodes under a
domain label key of its own, so tests never share domains; the shared invariant check runs at
the end of every test while its nodes still exist. The last test reads ``/metrics`` with a
real ServiceAccount token and checks that every pin result, gate result and activation
trigger exercised above was counted.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.gangs import create_held_gang, release_held
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_at_permit, wait_bound, wait_for, wait_message
from tests.support.manifests import HOSTNAME, chart_config, domain_key, domain_nodes, node, pod, pod_group, unique


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    """The chart's configuration with ``gcIntervalSeconds`` lowered to 2 s."""
    return chart_config(gang_args={"gcIntervalSeconds": 2})


def domain_of(api: Api, ns: str, pods: list[str], dk: str) -> set[str]:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(dk, "") for n in api.nodes()}
    return {nodes[p] for p in wait_bound(api, ns, pods).values()}


def test_two_gangs_race_for_domains_of_three_and_four(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("race")
    with temp_nodes(api, domain_nodes(key, dk, {"three": 3, "four": 4})):
        for g in ("ga", "gb"):
            api.create_pod_group(pod_group(g, ns, 3, topology_key=dk))
        for i in range(3):
            for g in ("ga", "gb"):
                api.create_pod(pod(f"{g}-{i}", ns, gang=g, anti_affinity_on=HOSTNAME))
        da = domain_of(api, ns, [f"ga-{i}" for i in range(3)], dk)
        db = domain_of(api, ns, [f"gb-{i}" for i in range(3)], dk)
        assert len(da) == 1 and len(db) == 1 and da != db
        assert da | db == {"three", "four"}
        assert_invariants(api, ns)


def leader_worker(ns: str, dk: str, name: str, role: str) -> dict[str, object]:
    aff = None
    if role == "worker":
        aff = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"role": "leader", "lws": "lw"}}, "topologyKey": dk}
                ]
            }
        }
    return pod(name, ns, gang="lw", labels={"role": role, "lws": "lw"}, anti_affinity_on=HOSTNAME, affinity=aff)


@pytest.mark.parametrize("first", ["leader", "worker"])
def test_leader_worker_gang(api: Api, scheduler: SchedulerProcess, ns: str, first: str) -> None:
    key, dk = domain_key("lw")
    with temp_nodes(api, domain_nodes(key, dk, {"small": 2, "big": 3})):
        api.create_pod_group(pod_group("lw", ns, 3, topology_key=dk))
        order = ["leader", "worker", "worker"] if first == "leader" else ["worker", "worker", "leader"]
        names = []
        for i, role in enumerate(order):
            name = f"{role}-{i}"
            names.append(name)
            api.create_pod(leader_worker(ns, dk, name, role))
            time.sleep(0.3)
        assert domain_of(api, ns, names, dk) == {"big"}
        assert_invariants(api, ns)


def test_member_times_out_and_gang_recovers(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("timeout")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        create_held_gang(api, ns, 3, dk, permit_timeout=3)

        # The first member to wait times out; its release rejects the other waiter ("unwound").
        def timed_out() -> str | None:
            notes = [m for n in ("m0", "m1") for m in api.event_notes(ns, n, "FailedScheduling")]
            return next(
                (m for m in notes if "rejected due to timeout after waiting 3s at plugin OMEGangPack" in m), None
            )

        msg = wait_for("a member rejected after its 3 s Permit wait", timed_out, timeout=30)
        assert msg.startswith("0/1 nodes are available: 1 ")
        pg = api.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/g")
        timed = [
            e
            for e in api.events(ns)
            if e.get("reason") == "TimedOut" and e["regarding"]["name"] == pg["metadata"]["name"]
        ]
        assert timed and "with 2 of 3 members on nodes" in timed[0]["note"], timed
        assert not any(p["spec"].get("nodeName") for p in api.pods(ns))
        assert not api.event_notes(ns, "m2", "FailedScheduling")  # held: never attempted
        release_held(api, ns, "m2")
        placed = wait_bound(api, ns, ["m0", "m1", "m2"])
        assert len(set(placed.values())) == 3
        assert_invariants(api, ns)


def test_podgroup_recreated_while_members_wait(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("recreate")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        create_held_gang(api, ns, 3, dk)
        wait_at_permit(api, ns, "m0")
        api.delete_pod_group(ns, "g")
        wait_message(api, ns, "m0", f"PodGroup {ns}/g not resolvable yet", timeout=20)
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk, timeout=600))
        release_held(api, ns, "m2")
        placed = wait_bound(api, ns, ["m0", "m1", "m2"])
        assert len(set(placed.values())) == 3
        assert_invariants(api, ns)


def test_min_member_lowered_while_lone_member_waits(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("lower")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2})):
        api.create_pod_group(pod_group("g", ns, 2, topology_key=dk))
        api.create_pod(pod("m0", ns, gang="g"))
        wait_message(api, ns, "m0", f"waiting for all PodGroup member templates for {ns}/g")
        t0 = time.monotonic()
        api.patch_pod_group(ns, "g", {"spec": {"minMember": 1}})
        wait_bound(api, ns, ["m0"], timeout=15)
        assert time.monotonic() - t0 < 5.0, "the PodGroup change should wake the member at once"
        assert_invariants(api, ns)


def test_cordoned_domain_is_avoided(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("cordon")
    nodes = domain_nodes(key, dk, {"small": 2}) + domain_nodes(key, dk, {"big": 3})
    for n in nodes[:2]:
        n["spec"]["unschedulable"] = True
    with temp_nodes(api, nodes):
        api.create_gang(ns, 2, dk)
        assert domain_of(api, ns, ["m0", "m1"], dk) == {"big"}
        assert_invariants(api, ns)


def test_domain_emptied_while_gang_forms(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("emptied")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2, "b": 3})):
        create_held_gang(api, ns, 2, dk)
        assert wait_at_permit(api, ns, "m0").startswith(f"{key}-a")
        for i in range(2):
            api.delete_node(f"{key}-a{i}")
        release_held(api, ns, "m1")
        assert domain_of(api, ns, ["m0", "m1"], dk) == {"b"}
        assert_invariants(api, ns)


def test_scheduler_restart_with_part_of_gang_bound(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str
) -> None:
    key, dk = domain_key("adopt")
    with temp_nodes(api, domain_nodes(key, dk, {"small": 3, "big": 4})):
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk))
        # A previous leader bound one member in "big" before it stopped.
        api.create_pod(pod("m0", ns, gang="g", anti_affinity_on=HOSTNAME, node_name=f"{key}-big0"))
        wait_bound(api, ns, ["m0"])
        with SchedulerProcess(cluster, chart_config(scheduler_name="ome-scheduler-restarted")) as fresh:
            for i in (1, 2):
                api.create_pod(
                    pod(f"m{i}", ns, gang="g", anti_affinity_on=HOSTNAME, scheduler="ome-scheduler-restarted")
                )
            assert domain_of(api, ns, ["m0", "m1", "m2"], dk) == {"big"}
            token = api.metrics_token()
            assert fresh.metric("ome_scheduler_gang_pin_total", {"result": "adopted"}, token) >= 1
        assert_invariants(api, ns)


def test_standalone_pod_parked_by_hold_until_it_drains(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("hold")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        create_held_gang(api, ns, 2, dk)
        wait_at_permit(api, ns, "m0")
        api.create_pod(pod("solo", ns, node_selector={dk: "a"}))
        wait_message(api, ns, "solo", "node is reserved for a forming gang")
        assert not api.pod(ns, "solo")["spec"].get("nodeName")
        release_held(api, ns, "m1")
        wait_bound(api, ns, ["m0", "m1"])
        wait_bound(api, ns, ["solo"], timeout=15)
        assert_invariants(api, ns)


def test_standalone_packing_prefers_partly_used_domain(cluster: Cluster, api: Api, ns: str) -> None:
    key, dk = domain_key("pack")
    cfg = chart_config(scheduler_name="ome-packing", topology_key=dk, percentage=100)
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2, "b": 2, "c": 2})), SchedulerProcess(cluster, cfg):
        api.create_pod(pod("busy", ns, node_name=f"{key}-b0", scheduler="default-scheduler"))
        wait_bound(api, ns, ["busy"])
        api.create_pod(
            pod(
                "solo",
                ns,
                scheduler="ome-packing",
                node_selector={"type": "kwok"},
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": dk, "operator": "Exists"}]}]
                        }
                    }
                },
            )
        )
        assert wait_bound(api, ns, ["solo"])["solo"] == f"{key}-b1"
        assert_invariants(api, ns)


def test_burst_of_sixteen_gangs_pods_before_podgroups(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("burst")
    with temp_nodes(api, domain_nodes(key, dk, {f"d{i:02d}": 2 for i in range(16)}), ready_timeout=60):
        t0 = time.monotonic()
        for g in range(16):
            for i in range(2):
                api.create_pod(pod(f"g{g}-{i}", ns, gang=f"g{g}", anti_affinity_on=HOSTNAME))
        for g in range(16):
            api.create_pod_group(pod_group(f"g{g}", ns, 2, topology_key=dk))
        names = [f"g{g}-{i}" for g in range(16) for i in range(2)]
        wait_bound(api, ns, names, timeout=60)
        assert time.monotonic() - t0 < 60
        for g in range(16):
            assert len(domain_of(api, ns, [f"g{g}-0", f"g{g}-1"], dk)) == 1
        assert_invariants(api, ns)


def test_held_domain_gives_reserved_then_no_fit(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("held")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2})):
        api.create_pod_group(pod_group("gb", ns, 1, topology_key=dk))
        create_held_gang(api, ns, 2, dk, gang="ga", member="ga-")
        wait_at_permit(api, ns, "ga-0")
        api.create_pod(pod("gb-0", ns, gang="gb"))
        wait_message(
            api, ns, "gb-0", f"no domain has room for gang {ns}/gb: every fitting domain is reserved for a forming gang"
        )
        release_held(api, ns, "ga-1")
        wait_bound(api, ns, ["ga-0", "ga-1"])
        wait_message(api, ns, "gb-0", f"no domain has room for gang {ns}/gb.", timeout=20)
        assert_invariants(api, ns)


def test_topology_key_changed_while_forming(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key = unique("retopo")
    k1, k2 = f"e2e.ome.io/{key}-one", f"e2e.ome.io/{key}-two"
    nodes = [node(f"{key}-x{i}", {k1: "x"}) for i in range(2)] + [node(f"{key}-y{i}", {k2: "y"}) for i in range(2)]
    with temp_nodes(api, nodes):
        create_held_gang(api, ns, 2, k1)
        wait_at_permit(api, ns, "m0")
        api.patch_pod_group(ns, "g", {"metadata": {"annotations": {"ome.io/topology-key": k2}}})
        release_held(api, ns, "m1")
        placed = wait_bound(api, ns, ["m0", "m1"])
        assert set(placed.values()) == {f"{key}-y0", f"{key}-y1"}
        assert_invariants(api, ns, domain_key=k2)


def test_metrics_show_what_the_tests_exercised(api: Api, scheduler: SchedulerProcess) -> None:
    token = api.metrics_token()
    r = scheduler.get("/metrics", token=token)
    assert r.status_code == 200, r.text
    m = scheduler.metric
    for result in ("pinned", "no_fit", "reserved", "stale_replan", "topology_replan"):
        assert m("ome_scheduler_gang_pin_total", {"result": result}, token) > 0, result
    assert m("ome_scheduler_gang_gate_total", {"result": "wait"}, token) > 0
    assert m("ome_scheduler_gang_gate_total", {"result": "admit"}, token) > 0
    for trigger in ("permit", "templates_complete", "reservation_released", "podgroup_change"):
        assert m("ome_scheduler_gang_activation_total", {"trigger": trigger}, token) > 0, trigger
    assert m("ome_scheduler_gang_unwind_total", None, token) > 0
    assert m("scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "ome-scheduler"}, token) > 0
    assert m("ome_scheduler_gang_bind_skew_seconds_count", None, token) > 0
