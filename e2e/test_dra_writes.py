"""End-to-end: DynamicResources' claim writes when the claim changes under them (issue 24).

PreBind writes a claim's finalizer, then ``status.allocation`` and ``reservedFor``, computed from
the claim as the scheduler read it at Reserve (``bindClaim`` in
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``, v1.35.4; here
``ome_scheduler/plugins/dynamicresources/binding.py``). A gang member waits at Permit between
Reserve and PreBind until its sibling arrives, which gives the test a window to change the claim:

* a metadata change (a new ``resourceVersion``): the write meets 409 Conflict, reads the claim
  again and writes; the pod binds with the allocation it reserved;
* another writer allocating the claim (as another scheduler would): PreBind fails with
  upstream's ``claim <ns>/<name> got allocated elsewhere in the meantime``, the pod is retried,
  not lost, and binds where that allocation says, keeping the other writer's devices.

And PostFilter's write: a claim allocated where the pod cannot go and reserved for nobody is
deallocated, and the pod binds elsewhere with a fresh allocation.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e import dra_objects as d
from e2e.harness.api import Api
from e2e.harness.gangs import HELD_SCHEDULER, release_held
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import wait_at_permit, wait_bound, wait_for
from e2e.test_dra import Setup, claim_of_pod, gang_member, pod_on
from tests.support.manifests import CLIQUE, pod_group

pytestmark = pytest.mark.invariants_after_test

TOUCHED = "e2e.ome.io/touched"


def claim_path(ns: str, name: str) -> str:
    return f"{d.GROUP}/namespaces/{ns}/resourceclaims/{name}"


def allocate(api: Api, ns: str, claim: str, driver: str, node: str, device: str) -> None:
    """Allocate ``claim`` as another scheduler would: the finalizer, then ``status.allocation``
    of ``device`` in ``node``'s pool with a node selector for ``node`` (reserved for nobody)."""
    path = claim_path(ns, claim)
    api.patch(path, {"metadata": {"finalizers": ["resource.kubernetes.io/delete-protection"]}})
    allocation: dict[str, Any] = {
        "devices": {"results": [{"request": "gpu", "driver": driver, "pool": node, "device": device}]},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }
    api.patch(path + "/status", {"status": {"allocation": allocation}})


def first_member_waits(api: Api, s: Setup, ns: str) -> tuple[str, str]:
    """PodGroup ``g`` (minMember 2, one clique): ``m1`` for a scheduler nobody serves (a template
    that never reaches Reserve; :func:`release_held` hands it over), then ``m0``, which reserves a
    device and waits at Permit; returns (its nominated node, its claim's name)."""
    d.create(api, d.claim_template("one", ns, d.claim_spec([d.exactly("gpu", s.cls, 1)])))
    api.create_pod_group(pod_group("g", ns, 2, topology_key=CLIQUE))
    held = gang_member(s, "m1", ns, "g", "one")
    held["spec"]["schedulerName"] = HELD_SCHEDULER
    api.create_pod(held)
    api.create_pod(gang_member(s, "m0", ns, "g", "one"))
    node = wait_at_permit(api, ns, "m0", timeout=30.0)
    claim = claim_of_pod(api, ns, "m0")
    assert not (d.get_claim(api, ns, claim).get("status") or {}).get("allocation")  # in flight only
    return node, claim


def test_a_claim_modified_between_reserve_and_prebind_still_binds(
    api: Api, scheduler: SchedulerProcess, ns: str
) -> None:
    with Setup(api, "mod", 2, 2, cliques=["a", "a"]) as s:
        node, claim = first_member_waits(api, s, ns)
        before = d.get_claim(api, ns, claim)["metadata"]["resourceVersion"]
        api.patch(claim_path(ns, claim), {"metadata": {"labels": {TOUCHED: "yes"}}})
        assert d.get_claim(api, ns, claim)["metadata"]["resourceVersion"] != before
        release_held(api, ns, "m1")
        got = wait_bound(api, ns, ["m0", "m1"], timeout=30.0)
        assert got["m0"] == node
        c = d.get_claim(api, ns, claim)
        assert c["metadata"]["labels"].get(TOUCHED) == "yes"  # the write kept what it did not set
        assert "resource.kubernetes.io/delete-protection" in c["metadata"]["finalizers"]
        assert [r["name"] for r in c["status"]["reservedFor"]] == ["m0"]
        ((drv, pool, _dev),) = d.allocated_devices(c)
        assert (drv, pool) == (s.driver, node)


def test_another_writer_allocating_the_claim_first_wins_and_the_pod_is_retried(
    api: Api, scheduler: SchedulerProcess, ns: str
) -> None:
    with Setup(api, "win", 2, 3, cliques=["a", "a"]) as s:
        node, claim = first_member_waits(api, s, ns)
        # Another writer allocates m0's claim first: gpu-2 of the node m0 waits on (the lowest
        # free device is what ome-scheduler's allocator reserved for it, gpu-0).
        allocate(api, ns, claim, s.driver, node, "gpu-2")
        release_held(api, ns, "m1")
        want = f"claim {ns}/{claim} got allocated elsewhere in the meantime"
        note = wait_for(
            "m0's PreBind refused",
            lambda: next((n for n in api.event_notes(ns, "m0", "FailedScheduling") if want in n), None),
            timeout=30.0,
        )
        assert note.startswith('running PreBind plugin "DynamicResources": '), note
        got = wait_bound(api, ns, ["m0", "m1"], timeout=60.0)
        assert got["m0"] == node  # where the winner's allocation says
        c = d.get_claim(api, ns, claim)
        assert d.allocated_devices(c) == [(s.driver, node, "gpu-2")]  # the winner's devices kept
        assert [r["name"] for r in c["status"]["reservedFor"]] == ["m0"]
        # no device in two claims
        devs = [dev for c in d.claims_of(api, ns) for dev in d.allocated_devices(c)]
        assert len(devs) == len(set(devs)) == 2, devs


def test_postfilter_deallocates_an_unused_allocation_where_the_pod_cannot_go(
    api: Api, scheduler: SchedulerProcess, ns: str
) -> None:
    """``PostFilter``: a claim allocated (by someone else, reserved for nobody) on a node the pod
    cannot use is deallocated (``deallocation of ResourceClaim completed``), and the pod then
    binds elsewhere with a fresh allocation of the claim."""
    with Setup(api, "dea", 2, 1) as s:
        n0, n1 = s.node_names
        d.create(api, d.claim("c", ns, d.claim_spec([d.exactly("gpu", s.cls, 1)])))
        allocate(api, ns, "c", s.driver, n0, "gpu-0")
        api.patch_node(n0, {"spec": {"taints": [{"key": "e2e.ome.io/closed", "effect": "NoSchedule"}]}})
        api.create_pod(pod_on(s, "p", ns, claims={"gpu": "c"}))
        got = wait_bound(api, ns, ["p"], timeout=60.0)
        assert got["p"] == n1
        c = d.get_claim(api, ns, "c")
        assert d.allocated_devices(c) == [(s.driver, n1, "gpu-0")]
        assert [r["name"] for r in c["status"]["reservedFor"]] == ["p"]
        notes = api.event_notes(ns, "p", "FailedScheduling")
        assert any(n.endswith("deallocation of ResourceClaim completed") for n in notes), notes
        assert any("1 node(s) had untolerated taint" in n for n in notes), notes
