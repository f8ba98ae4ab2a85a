"""End-to-end: in-place pod resize accounting on the real control plane, kube-scheduler 1.35.4
as the oracle.

kwok fakes the kubelet, so the test writes what a kubelet would: the running pod's
``containerStatuses[].resources`` and ``allocatedResources`` and the ``PodResizePending``
(reason ``Deferred`` or ``Infeasible``) / ``PodResizeInProgress`` conditions, all through
``pods/status``; the resize itself goes through the ``resize`` subresource (which the API
server accepts only once the running container reports resources). States and patches:
``e2e/parity_gen_volumes.py`` (:data:`RESIZE_STATES`, :func:`resize_status`).

Expected outcomes follow ``k8s.io/component-helpers/resource`` v0.35.4
(``determineEffectiveRequests``: the max of spec, actuated and allocated requests; with an
Infeasible resize the spec is left out), and kube-scheduler must show the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import wait_for
from e2e.parity_gen_volumes import RESIZE_STATES, FamilyCase, FamilyRunner, Resize, hand_case, running_pod
from e2e.parity_harness import KUBE_PROFILE, OME_PROFILE, KubeSchedulerProcess


@pytest.fixture(scope="module")
def runner(api: Api, kube: KubeSchedulerProcess, ome: SchedulerProcess) -> Iterator[FamilyRunner]:
    r = FamilyRunner(api)
    yield r
    r.close()


def resized_case(state: str, old: str, new: str) -> FamilyCase:
    """A 4-CPU node running ``e0`` (cpu ``old``) resized to ``new`` in ``state``; the new pod asks for 2 CPUs."""
    case = hand_case("rz", requests={"cpu": "2"})
    case.existing = [running_pod(case, "e0", {"cpu": old})]
    case.resizes = [Resize(case.ns, "e0", {"cpu": old}, {"cpu": new}, state)]
    return case


# (state, up) -> does the 2-CPU pod fit beside e0 on 4 CPUs? Up is 1 -> 3 CPUs, down 3 -> 1.
FITS = {
    ("deferred", True): False,  # max(spec 3, actuated 1, allocated 1) = 3
    ("infeasible", True): True,  # the spec is left out: max(1, 1) = 1
    ("in-progress", True): False,  # allocated 3
    ("unreported", True): False,  # spec 3
    ("done", True): False,  # 3 everywhere
    ("deferred", False): False,  # actuated and allocated 3
    ("infeasible", False): False,
    ("in-progress", False): False,  # actuated 3
    ("unreported", False): False,
    ("done", False): True,  # 1 everywhere
}


def test_a_pod_beside_a_resizing_pod_fits_exactly_as_in_kube_scheduler(runner: FamilyRunner) -> None:
    cases = {
        (s, up): resized_case(s, *(("1", "3") if up else ("3", "1"))) for s in RESIZE_STATES for up in (True, False)
    }
    results = {r.case.id: r for r in runner.run_batch(list(cases.values()))}
    wrong = []
    for key, case in cases.items():
        r = results[case.id]
        if r.problems or r.kube.bound != FITS[key]:
            wrong.append(f"{key}: expected fits={FITS[key]}, kube {r.kube.short()}, ome {r.ome.short()}; {r.problems}")
    assert not wrong, "\n".join(wrong)


def scheduled(api: Api, ns: str, name: str) -> dict[str, Any]:
    p = api.pod(ns, name)
    cond: dict[str, Any] = next((c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {})
    return {"node": p["spec"].get("nodeName") or "", "message": cond.get("message", "")}


def test_a_completed_downward_resize_requeues_a_waiting_pod(api: Api, runner: FamilyRunner) -> None:
    """e0 holds 3 of 4 CPUs; a 1500m pod per scheduler waits (Insufficient cpu). Once e0's
    resize to 1 CPU is actuated (status reports 1, no condition) both bind within seconds."""
    case = hand_case("rd", requests={"cpu": "1500m"})
    case.existing = [running_pod(case, "e0", {"cpu": "3"})]
    runner.setup([case])
    try:
        pods = {n: case.pod_for(n, prof) for n, prof in (("t-kube", KUBE_PROFILE), ("t-ome", OME_PROFILE))}
        for p in pods.values():
            api.create_pod(p)

        def both_waiting() -> bool:
            return all("Insufficient cpu" in scheduled(api, case.ns, n)["message"] for n in pods)

        wait_for("both pods rejected for cpu", both_waiting, timeout=30)
        runner.apply_resizes([Resize(case.ns, "e0", {"cpu": "3"}, {"cpu": "1"}, "done")])
        node = case.nodes[0]["metadata"]["name"]
        wait_for(
            "both pods bound after the scale-down",
            lambda: all(scheduled(api, case.ns, n)["node"] == node for n in pods),
            timeout=20,
        )
    finally:
        runner.teardown([case])
