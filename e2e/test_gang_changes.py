"""End-to-end: gangs that change while they form (issue 18; spec product rules 8, 9 and 10).

* No livelock (rule 10): a member that cannot pass Filter is paced by the queue's backoff; the
  gang's failed attempts stay below a few per second and the scheduler stays near idle, for a
  member failing on required pod affinity, taints, host ports and spread constraints.
* No split (rule 9): a member waiting at Permit on a node that leaves the pinned domain is
  rejected before the gate can open; the gang ends in one domain.
* The gang follows its PodGroup (rule 9): ``minMember`` lowered or raised, a new
  ``scheduleTimeoutSeconds``, reach members already waiting at Permit at once.
* Gated members (rule 8): a gang holds nothing while a member it needs is scheduling-gated, and
  forms when the gate is lifted.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.gangs import HELD_SCHEDULER, create_held_gang, release_held
from e2e.harness.invariants import assert_invariants
from e2e.harness.processes import process_cpu_seconds
from e2e.harness.scheduler import SchedulerProcess, assert_no_drift, failed_attempts_by_gang
from e2e.harness.waits import temp_nodes, wait_at_permit, wait_bound, wait_for, wait_message
from tests.support.manifests import HOSTNAME, domain_key, node, pod, pod_group

WINDOW = 10.0
MAX_FAILED_PER_WINDOW = 30  # 3 per second
MAX_CPU_PER_WINDOW = 3.0  # seconds of scheduler CPU in WINDOW: 30%, far from a busy loop


def four_nodes(key: str, dk: str, **kw: Any) -> list[dict[str, Any]]:
    """The issue's nodes: clique a with 2 and 1 GPUs, clique b with 2 and 1 GPUs."""
    return [
        node(f"{key}-a1", {dk: "a"}, gpu=2, **kw),
        node(f"{key}-a2", {dk: "a"}, gpu=1, **kw),
        node(f"{key}-b1", {dk: "b"}, gpu=2, **kw),
        node(f"{key}-b2", {dk: "b"}, gpu=1, **kw),
    ]


def target_affinity(label: str) -> dict[str, Any]:
    """Required pod affinity on the hostname to pods labelled ``target=<label>``."""
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"target": label}}, "topologyKey": HOSTNAME}
            ]
        }
    }


def failing_member(kind: str, ns: str, key: str) -> dict[str, Any]:
    """Member ``small`` (1 GPU) that no node accepts, for the reason ``kind``."""
    if kind == "affinity":
        return pod("small", ns, gang="g", affinity=target_affinity(key))
    if kind == "taint":
        return pod("small", ns, gang="g")  # the nodes carry a NoSchedule taint only "big" tolerates
    if kind == "port":
        p = pod("small", ns, gang="g")
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 18080}]
        return p
    assert kind == "spread"
    p = pod("small", ns, gang="g", labels={"spread": key})
    p["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": f"e2e.ome.io/{key}-no-such-label",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"spread": key}},
        }
    ]
    return p


TAINT = {"key": "e2e.ome.io/reserved", "value": "x", "effect": "NoSchedule"}


@pytest.mark.parametrize("kind", ["affinity", "taint", "port", "spread"])
def test_member_failing_filter_is_paced_by_backoff(api: Api, scheduler: SchedulerProcess, ns: str, kind: str) -> None:
    key, dk = domain_key(f"pace-{kind}")
    taints = [TAINT] if kind == "taint" else []
    with temp_nodes(api, four_nodes(key, dk, taints=taints)):
        if kind == "port":  # every node's host port 18080 is taken by a pod of another scheduler
            for n in ("a1", "a2", "b1", "b2"):
                blocker = pod(f"port-{n}", ns, gpu=0, node_name=f"{key}-{n}", scheduler="default-scheduler")
                blocker["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 18080}]
                api.create_pod(blocker)
        api.create_pod_group(pod_group("g", ns, 2, topology_key=dk, timeout=60))
        tolerate = [{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}] if kind == "taint" else []
        api.create_pod(failing_member(kind, ns, key))
        api.create_pod(pod("big", ns, gang="g", gpu=2, tolerations=tolerate))
        wait_for("small failed once", lambda: api.event_notes(ns, "small", "FailedScheduling") or None, timeout=20)
        time.sleep(3)  # let the first burst of the gang's attempts settle into backoff
        assert scheduler.proc is not None
        cpu0, log0 = process_cpu_seconds(scheduler.proc.pid), len(scheduler.log())
        time.sleep(WINDOW)
        cpu = process_cpu_seconds(scheduler.proc.pid) - cpu0
        failed = len(failed_attempts_by_gang(scheduler.log()[log0:]).get(f"{ns}/g", []))
        print(f"{kind}: {failed} failed attempts and {cpu:.2f} CPU s in {WINDOW:g} s")
        assert failed <= MAX_FAILED_PER_WINDOW, f"{failed} failed attempts in {WINDOW:g} s"
        assert cpu <= MAX_CPU_PER_WINDOW, f"scheduler used {cpu:.2f} CPU s in {WINDOW:g} s while the gang waits"
        assert not any(p["spec"].get("nodeName") for p in api.pods(ns) if p["metadata"]["name"] in ("small", "big"))


def test_node_leaving_the_pinned_domain_rejects_its_waiter(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("leave")
    with temp_nodes(api, four_nodes(key, dk)):
        create_held_gang(api, ns, 2, dk)  # m0 waits at Permit until m1 is released
        waiting_on = wait_at_permit(api, ns, "m0")
        api.patch_node(waiting_on, {"metadata": {"labels": {dk: "z"}}})
        wait_message(api, ns, "m0", f"gang {ns}/g unwound: node {waiting_on} left the domain", timeout=10)
        release_held(api, ns, "m1")
        placed = wait_bound(api, ns, ["m0", "m1"], timeout=30)
        labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(dk, "") for n in api.nodes()}
        assert len({labels[n] for n in placed.values()}) == 1, f"gang split across domains: {placed}"
        assert_invariants(api, ns, domain_key=dk)


def test_bound_member_moved_out_of_the_pin_releases_it(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("moved")
    nodes = [node(f"{key}-a{i}", {dk: "a"}) for i in range(3)] + [node(f"{key}-b{i}", {dk: "b"}) for i in range(3)]
    with temp_nodes(api, nodes):
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk))
        # A previous leader bound m0 in "a"; m1 waits there at Permit while m2 is held.
        api.create_pod(pod("m0", ns, gang="g", anti_affinity_on=HOSTNAME, node_name=f"{key}-a0"))
        wait_bound(api, ns, ["m0"])
        api.create_pod(pod("m2", ns, gang="g", anti_affinity_on=HOSTNAME, scheduler=HELD_SCHEDULER))
        api.create_pod(pod("m1", ns, gang="g", anti_affinity_on=HOSTNAME))
        assert wait_at_permit(api, ns, "m1").startswith(f"{key}-a")
        for i in range(3):  # the whole of "a" moves to "b"'s label, except m1's node
            if f"{key}-a{i}" != api.pod(ns, "m1")["status"].get("nominatedNodeName"):
                api.patch_node(f"{key}-a{i}", {"metadata": {"labels": {dk: "b"}}})
        release_held(api, ns, "m2")
        placed = wait_bound(api, ns, ["m0", "m1", "m2"], timeout=40)
        labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(dk, "") for n in api.nodes()}
        assert {labels[n] for n in placed.values()} == {"b"}, f"gang not whole in m0's domain: {placed}"
        assert_invariants(api, ns, domain_key=dk)


def test_min_member_lowered_reaches_the_waiting_member(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("lowerwait")
    with temp_nodes(api, four_nodes(key, dk)):
        create_held_gang(api, ns, 2, dk, permit_timeout=40)
        wait_at_permit(api, ns, "m0")
        t0 = time.monotonic()
        api.patch_pod_group(ns, "g", {"spec": {"minMember": 1}})
        wait_bound(api, ns, ["m0"], timeout=10)
        assert time.monotonic() - t0 < 5.0, "the waiting member should bind as soon as minMember allows"
        assert_invariants(api, ns, domain_key=dk)


def test_min_member_raised_keeps_the_gang_waiting_for_all(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("raisewait")
    nodes = [node(f"{key}-a{i}", {dk: "a"}) for i in range(3)]
    with temp_nodes(api, nodes):
        create_held_gang(api, ns, 2, dk)
        wait_at_permit(api, ns, "m0")
        api.patch_pod_group(ns, "g", {"spec": {"minMember": 3}})
        release_held(api, ns, "m1")
        time.sleep(3)
        assert not any(p["spec"].get("nodeName") for p in api.pods(ns)), "two of three members must not bind"
        api.create_pod(pod("m2", ns, gang="g", anti_affinity_on=HOSTNAME))
        placed = wait_bound(api, ns, ["m0", "m1", "m2"], timeout=30)
        assert len(set(placed.values())) == 3
        assert_invariants(api, ns, domain_key=dk)


def test_new_timeout_replaces_the_waiting_members_limit(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("retime")
    with temp_nodes(api, four_nodes(key, dk)):
        create_held_gang(api, ns, 2, dk, permit_timeout=600)
        wait_at_permit(api, ns, "m0")
        time.sleep(2)
        t0 = time.monotonic()
        api.patch_pod_group(ns, "g", {"spec": {"scheduleTimeoutSeconds": 3}})
        wait_message(api, ns, "m0", "rejected due to timeout after waiting 3s at plugin OMEGangPack", timeout=15)
        assert time.monotonic() - t0 < 8.0
        release_held(api, ns, "m1")
        wait_bound(api, ns, ["m0", "m1"], timeout=30)
        assert_invariants(api, ns, domain_key=dk)


def test_gated_member_means_no_hold_until_its_gate_is_lifted(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("gated")
    with temp_nodes(api, [node(f"{key}-a{i}", {dk: "a"}) for i in range(2)]):
        api.create_pod_group(pod_group("g", ns, 2, topology_key=dk))
        api.create_pod(pod("m1", ns, gang="g", anti_affinity_on=HOSTNAME, gates=["example.com/hold"]))
        api.create_pod(pod("m0", ns, gang="g", anti_affinity_on=HOSTNAME))
        wait_message(api, ns, "m0", f"waiting for scheduling-gated members of gang {ns}/g: m1")
        assert not api.pod(ns, "m0")["status"].get("nominatedNodeName")
        api.create_pod(pod("solo", ns, node_selector={dk: "a"}))  # nothing is held: it binds
        wait_bound(api, ns, ["solo"], timeout=20)
        api.delete_pod(ns, "solo")
        api.ungate(ns, "m1")
        placed = wait_bound(api, ns, ["m0", "m1"], timeout=30)
        assert len(set(placed.values())) == 2
        assert_invariants(api, ns, domain_key=dk)
        assert_no_drift(scheduler)  # issue 12: every fault test ends with zero cache drift
