"""End-to-end: a bound gang keeps its place (product rule 11, docs/design/gang-scheduling.md).

Two cliques of one-GPU nodes, c1 with 4 and c2 with 8; a gang of 4 lands in c1 (best fit).

* A member is deleted: the running scheduler holds c1 for it (``Repairing``), so a one-member
  gang that arrives before the replacement, and would take c1's free node by best fit, goes to
  c2; the replacement binds in c1.
* With c1 full (another pod took the free node), the replacement pends naming c1, and the hold
  ends at the gang's ``scheduleTimeoutSeconds`` (Warning ``HoldReleased``); once the node is
  free again the replacement binds there.

The restarted scheduler's side (the repair sweep adopts with a hold) is in
``e2e/faults/test_no_hold_outlives_its_gang.py``.
"""

from __future__ import annotations

import time

from e2e.harness.api import Api
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess, assert_no_drift
from e2e.harness.waits import temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import HOSTNAME, domain_key, domain_nodes, pod, pod_group

TIMEOUT_S = 10


def _events(api: Api, ns: str, group: str, reason: str) -> list[str]:
    return [str(e.get("note", "")) for e in api.events(ns, group) if e.get("reason") == reason]


def _gang_in_c1(api: Api, ns: str, dk: str, key: str) -> dict[str, str]:
    api.create_pod_group(pod_group("g", ns, 4, topology_key=dk, timeout=TIMEOUT_S))
    for i in range(4):
        api.create_pod(pod(f"g-{i}", ns, gang="g", anti_affinity_on=HOSTNAME))
    placed = wait_bound(api, ns, [f"g-{i}" for i in range(4)], timeout=30)
    assert all(n.startswith(f"{key}-c1") for n in placed.values()), placed
    return placed


def test_a_replacement_gets_its_place_back_before_another_gang(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("repair")
    with temp_nodes(api, domain_nodes(key, dk, {"c1": 4, "c2": 8})):
        _gang_in_c1(api, ns, dk, key)
        api.delete_pod(ns, "g-3")
        notes = wait_for("the Repairing event", lambda: _events(api, ns, "g", "Repairing"), timeout=15)
        assert notes[-1] == (
            f"member {ns}/g-3 was deleted: holding {dk}=c1 for 1 missing member(s), at most {TIMEOUT_S}s"
        ), notes
        api.create_pod_group(pod_group("h", ns, 1, topology_key=dk, timeout=TIMEOUT_S))
        api.create_pod(pod("h-0", ns, gang="h"))
        (h_node,) = wait_bound(api, ns, ["h-0"], timeout=15).values()
        assert h_node.startswith(f"{key}-c2"), f"the other gang took {h_node} from the held clique"
        api.create_pod(pod("g-4", ns, gang="g", anti_affinity_on=HOSTNAME))
        (g_node,) = wait_bound(api, ns, ["g-4"], timeout=15).values()
        assert g_node.startswith(f"{key}-c1"), g_node
        assert_invariants(api, ns, dk)
        assert_no_drift(scheduler)
        api.delete_namespace(ns, wait=60.0)  # before the nodes go


def test_with_its_clique_full_a_replacement_waits_there_and_the_hold_ends_on_time(
    api: Api, scheduler: SchedulerProcess, ns: str
) -> None:
    key, dk = domain_key("repairfull")
    with temp_nodes(api, domain_nodes(key, dk, {"c1": 4, "c2": 8})):
        placed = _gang_in_c1(api, ns, dk, key)
        api.delete_pod(ns, "g-3")
        t0 = time.monotonic()
        wait_for("the Repairing event", lambda: _events(api, ns, "g", "Repairing"), timeout=15)
        # Another client binds a pod to the freed node directly (no scheduler can stop it).
        api.create_pod(pod("squatter", ns, node_name=placed["g-3"]))
        api.create_pod(pod("g-4", ns, gang="g", anti_affinity_on=HOSTNAME))
        wait_message(api, ns, "g-4", "pinned domain c1 cannot fit all remaining gang members", timeout=20)
        wait_for(
            "the hold's expiry",
            lambda: [n for n in _events(api, ns, "g", "HoldReleased") if "scheduleTimeoutSeconds" in n],
            timeout=TIMEOUT_S + 10,
        )
        held = time.monotonic() - t0
        assert held <= TIMEOUT_S + 6, f"the repair hold lasted {held:.1f} s (timeout {TIMEOUT_S} s)"
        assert not api.pod(ns, "g-4")["spec"].get("nodeName"), "the replacement left its clique"
        # The node is freed: the replacement completes the gang there, and only there.
        api.delete_pod(ns, "squatter")
        assert wait_bound(api, ns, ["g-4"], timeout=30)["g-4"] == placed["g-3"]
        assert_invariants(api, ns, dk)
        assert_no_drift(scheduler)
        api.delete_namespace(ns, wait=60.0)
