"""In-place pod resize (InPlacePodVerticalScaling, GA in 1.35) in the requests the scheduler counts.

Ports ``TestCalculatePodResourcesWithResize`` (``pkg/scheduler/framework/types_test.go``),
``Test_isSchedulableAfterPodChange`` (``plugins/noderesources/fit_test.go``) and the scale-down
cases of ``TestPodSchedulingPropertiesChange`` (``framework/events_test.go``), v1.35.4, then
follows a resize through the cache, NodeResourcesFit, BalancedAllocation and the queue.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.framework.events import (
    ASSIGNED_POD,
    UNSCHEDULED_POD,
    ActionType,
    ClusterEvent,
    QueueingHint,
    pod_scheduling_properties_change,
)
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.types import PodInfo, QueuedPodInfo, pod_requests
from ome_scheduler.plugins.gangpack.fit import member_capacity
from ome_scheduler.plugins.noderesources.fit import NodeResourcesFit
from tests.support.plugins_env import Env, node, pod

MI = 1024 * 1024
DRA = " no new claims to deallocate"


def resized(
    requests: dict[str, str] | None = None,
    status: dict[str, str] | None = None,
    *,
    allocated: dict[str, str] | None = None,
    init: tuple[dict[str, str], dict[str, str] | None] | None = None,
    sidecar: tuple[dict[str, str], dict[str, str] | None] | None = None,
    pod_level: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
    name: str = "testpod",
    node_name: str = "",
) -> Pod:
    """``preparePodInfo``: container c1 with ``requests`` and status ``status`` (actuated) /
    ``allocated``; optional init container i1 and sidecar s1 with their (spec, status)."""
    spec: dict[str, Any] = {"containers": [{"name": "c1", "resources": {"requests": requests or {}}}]}
    statuses: list[dict[str, Any]] = []
    if status is not None or allocated is not None:
        cs: dict[str, Any] = {"name": "c1"}
        if status is not None:
            cs["resources"] = {"requests": status}
        if allocated is not None:
            cs["allocatedResources"] = allocated
        statuses.append(cs)
    inits: list[dict[str, Any]] = []
    init_statuses: list[dict[str, Any]] = []
    for cname, part, restart in (("i1", init, None), ("s1", sidecar, "Always")):
        if part is None:
            continue
        c: dict[str, Any] = {"name": cname, "resources": {"requests": part[0]}}
        if restart:
            c["restartPolicy"] = restart
        inits.append(c)
        if part[1] is not None:
            init_statuses.append({"name": cname, "resources": {"requests": part[1]}})
    if inits:
        spec["initContainers"] = inits
    if pod_level is not None:
        spec["resources"] = {"requests": pod_level}
    if node_name:
        spec["nodeName"] = node_name
    raw = {
        "metadata": {"name": name, "namespace": "pod_resize_test", "uid": name},
        "spec": {"schedulerName": "ome-scheduler", **spec},
        "status": {
            "phase": "Running",
            "containerStatuses": statuses,
            "initContainerStatuses": init_statuses,
            "conditions": conditions or [],
        },
    }
    return msgspec.convert(raw, Pod)


C500 = {"cpu": "500m", "memory": "500Mi"}
C700 = {"cpu": "700m", "memory": "800Mi"}
IN_PROGRESS = [{"type": "PodResizeInProgress", "status": "True"}]
DEFERRED = [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]
INFEASIBLE = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]


@pytest.mark.parametrize(
    ("name", "p", "cpu", "mem"),
    [
        ("Pod with no pending resize", resized(C500, C500), 500, 500 * MI),
        # Pod-level status resources are read only with InPlacePodLevelResourcesVerticalScaling
        # (alpha, off in 1.35); the spec's pod-level requests give the same answer here.
        ("Pod with pod-level resources no pending resize",
         resized(C500, {"cpu": "700m", "memory": "500Mi"}, pod_level={"cpu": "700m", "memory": "500Mi"}),
         700, 500 * MI),
        ("Pod with resize in progress", resized(C500, C500, conditions=IN_PROGRESS), 500, 500 * MI),
        ("Pod with deferred resize", resized(C700, C500, conditions=DEFERRED), 700, 800 * MI),
        ("Pod with pod-level resources and with deferred resize",
         resized(C500, C500, pod_level=C700, conditions=DEFERRED), 700, 800 * MI),
        ("Pod with infeasible resize", resized(C700, C500, conditions=INFEASIBLE), 500, 500 * MI),
        ("Pod with init container and no pending resize", resized(C500, C500, init=(C700, C700)), 700, 800 * MI),
        ("Pod with sider container and no pending resize",
         resized(C500, C500, init=(C700, C700), sidecar=(C700, C700)), 1200, 1300 * MI),
    ],
)  # fmt: skip
def test_calculate_pod_resources_with_resize(name: str, p: Pod, cpu: int, mem: int) -> None:
    pi = PodInfo(p)
    assert (pi.requests.milli_cpu, pi.requests.memory, pi.non0_cpu, pi.non0_mem) == (cpu, mem, cpu, mem), name


def test_effective_requests_take_the_max_of_spec_actuated_and_allocated() -> None:
    # Scaled down in the spec, not yet actuated: the old, larger amount counts.
    assert pod_requests(resized({"cpu": "1"}, {"cpu": "2"})) == {"cpu": 2000}
    # Scaled up, admitted (allocated) but not actuated yet: the new amount.
    assert pod_requests(resized({"cpu": "3"}, {"cpu": "2"}, allocated={"cpu": "3"})) == {"cpu": 3000}
    # Per resource, and a resource only the status names still counts.
    p = resized({"cpu": "1", "memory": "2Gi"}, {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"})
    assert pod_requests(p) == {"cpu": 2000, "memory": 2048 * MI, "nvidia.com/gpu": 1}
    # Infeasible: the spec is ignored, the max of actuated and allocated counts.
    p = resized({"cpu": "8"}, {"cpu": "1"}, allocated={"cpu": "2"}, conditions=INFEASIBLE)
    assert pod_requests(p) == {"cpu": 2000}
    # Only the first PodResizePending condition is read.
    conds = [*DEFERRED, *INFEASIBLE]
    assert pod_requests(resized({"cpu": "8"}, {"cpu": "1"}, conditions=conds)) == {"cpu": 8000}
    # A status without resources, or for another container, changes nothing.
    raw = msgspec.to_builtins(resized({"cpu": "1"}))
    raw["status"]["containerStatuses"] = [{"name": "c1"}, {"name": "other", "resources": {"requests": {"cpu": "9"}}}]
    assert pod_requests(msgspec.convert(raw, Pod)) == {"cpu": 1000}
    # Ordinary init containers count their spec only; the spec alone is ``use_status=False``.
    assert pod_requests(resized({"cpu": "1"}, {"cpu": "1"}, init=({"cpu": "1"}, {"cpu": "5"}))) == {"cpu": 1000}
    assert pod_requests(resized({"cpu": "1"}, {"cpu": "2"}), use_status=False) == {"cpu": 1000}


def test_scoring_defaults_apply_after_the_status() -> None:
    # No memory in the spec, but the status reports one: it counts and no 200Mi default is added.
    pi = PodInfo(resized({"cpu": "1"}, {"cpu": "1", "memory": "64Mi"}))
    assert (pi.non0_cpu, pi.non0_mem) == (1000, 64 * MI)
    pi = PodInfo(resized({}, None))
    assert (pi.non0_cpu, pi.non0_mem) == (100, 200 * MI)


def test_pod_info_flags_and_rebase() -> None:
    plain = PodInfo(resized({"cpu": "1"}))
    assert not plain.status_resources
    bound = plain.rebase(msgspec.structs.replace(plain.pod, status=resized({"cpu": "1"}, {"cpu": "2"}).status))
    assert bound is None  # the status changes the requests: a new PodInfo is built
    assert plain.rebase(plain.pod) is not None
    assert PodInfo(resized({"cpu": "1"}, {"cpu": "1"})).status_resources


# ---- events (extractPodScaleDown) and the Fit hint -------------------------------------------


def test_scale_down_events_read_the_status() -> None:
    old = resized({"cpu": "2"}, node_name="n")
    new = resized({"cpu": "1"}, node_name="n")
    assert pod_scheduling_properties_change(new, old) == [ClusterEvent(ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN)]
    up = resized({"cpu": "3"})
    assert pod_scheduling_properties_change(up, resized({"cpu": "2"})) == [
        ClusterEvent(UNSCHEDULED_POD, ActionType.UPDATE)
    ]
    # The spec shrank but the kubelet has not actuated it: nothing is freed yet.
    pending = resized({"cpu": "1"}, {"cpu": "2"}, node_name="n")
    before = resized({"cpu": "2"}, {"cpu": "2"}, node_name="n")
    assert pod_scheduling_properties_change(pending, before) == [ClusterEvent(ASSIGNED_POD, ActionType.UPDATE)]
    # ...then it is: a scale down.
    done = resized({"cpu": "1"}, {"cpu": "1"}, node_name="n")
    assert ClusterEvent(ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN) in pod_scheduling_properties_change(
        done, pending
    )
    # A resource no longer requested at all is a scale down, even from 0.
    gone = pod_scheduling_properties_change(resized({"cpu": "1"}), resized({"cpu": "1", "memory": "0"}))
    assert gone == [ClusterEvent(UNSCHEDULED_POD, ActionType.UPDATE_POD_SCALE_DOWN)]


def _p(name: str, req: dict[str, str], node_name: str = "", pod_level: bool = False) -> Pod:
    spec: dict[str, Any] = {"resources": {"requests": req}} if pod_level else {}
    return pod(name, requests={} if pod_level else req, node_name=node_name, spec=spec)


def _same_uid(p: Pod, uid: str) -> Pod:
    return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid=uid))


@pytest.mark.parametrize(
    ("target", "old", "new", "want"),
    [
        # queue-on-other-pod-deleted
        (_p("pod1", {"cpu": "1"}), _p("pod2", {"cpu": "1"}, "fake"), None, QueueingHint.QUEUE),
        # skip-queue-on-unscheduled-pod-deleted
        (pod("pod1"), pod("pod2"), None, QueueingHint.QUEUE_SKIP),
        # skip-queue-on-other-unscheduled-pod
        (_p("pod1", {"cpu": "1"}), _same_uid(_p("pod2", {"cpu": "2"}), "uid1"), _same_uid(_p("pod2", {"cpu": "1"}), "uid1"),
         QueueingHint.QUEUE_SKIP),
        # skip-queue-on-other-pod-unrelated-resource-scaled-down
        (_p("pod1", {"cpu": "1"}), _same_uid(_p("pod2", {"memory": "2"}, "fake"), "u2"),
         _same_uid(_p("pod2", {"memory": "1"}, "fake"), "u2"), QueueingHint.QUEUE_SKIP),
        (_p("pod1", {"cpu": "1"}, pod_level=True), _same_uid(_p("pod2", {"memory": "2"}, "fake", True), "u2"),
         _same_uid(_p("pod2", {"memory": "1"}, "fake", True), "u2"), QueueingHint.QUEUE_SKIP),
        # queue-on-other-pod-some-resource-scale-down
        (_p("pod1", {"cpu": "1"}), _same_uid(_p("pod2", {"cpu": "2"}, "fake"), "u2"),
         _same_uid(_p("pod2", {"cpu": "1"}, "fake"), "u2"), QueueingHint.QUEUE),
        (_p("pod1", {"cpu": "1"}, pod_level=True), _same_uid(_p("pod2", {"cpu": "2"}, "fake", True), "u2"),
         _same_uid(_p("pod2", {"cpu": "1"}, "fake", True), "u2"), QueueingHint.QUEUE),
        # queue-on-target-pod-some-resource-scale-down
        (_same_uid(_p("pod1", {"cpu": "1"}), "u1"), _same_uid(_p("pod1", {"cpu": "2"}), "u1"),
         _same_uid(_p("pod1", {"cpu": "1"}), "u1"), QueueingHint.QUEUE),
        # Beyond upstream's table: an actuated resize of a bound pod frees room.
        (_p("pod1", {"cpu": "1"}), resized({"cpu": "1"}, {"cpu": "2"}, name="other", node_name="fake"),
         resized({"cpu": "1"}, {"cpu": "1"}, name="other", node_name="fake"), QueueingHint.QUEUE),
    ],
)  # fmt: skip
def test_fit_pod_event_hint(target: Pod, old: Pod, new: Pod | None, want: QueueingHint) -> None:
    assert NodeResourcesFit.is_schedulable_after_pod_event(target, old, new) == want


# ---- through the cache, the plugins and the queue ------------------------------------------------


def test_a_bound_pod_mid_resize_counts_its_larger_requests_on_its_node() -> None:
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "4"}))
    # Spec says 1 cpu, the runtime still runs it with 3 (scale down not yet actuated).
    env.add_pod(resized({"cpu": "1"}, {"cpu": "3"}, name="big", node_name="n1"))
    ni = env.s.cache.get_node_info("n1")
    assert ni is not None and ni.requested.milli_cpu == 3000 and ni.non_zero_requested.milli_cpu == 3000
    want = "0/1 nodes are available: 1 Insufficient cpu." + DRA
    assert env.schedule(pod("p", requests={"cpu": "2"})) == want
    # OMEGangPack counts a node's room from the same NodeInfo.
    assert member_capacity(PodInfo(pod("g", requests={"cpu": "2"})), ni) == 0
    # The kubelet actuates the resize: the pod is updated in the cache and the room appears.
    old = resized({"cpu": "1"}, {"cpu": "3"}, name="big", node_name="n1")
    env.s.handlers.on_pod_update(old, resized({"cpu": "1"}, {"cpu": "1"}, name="big", node_name="n1"))
    assert ni.requested.milli_cpu == 1000
    assert env.schedule(pod("p", requests={"cpu": "2"})) == "n1"
    assert member_capacity(PodInfo(pod("g", requests={"cpu": "2"})), ni) == 1


def test_an_infeasible_scale_up_is_not_counted_and_a_deferred_one_is() -> None:
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "4"}))
    env.add_pod(resized({"cpu": "6"}, {"cpu": "1"}, name="inf", node_name="n1", conditions=INFEASIBLE))
    assert env.schedule(pod("p", requests={"cpu": "3"})) == "n1"
    env.add_node(node("n2", alloc={"cpu": "4"}))
    env.add_pod(resized({"cpu": "3"}, {"cpu": "1"}, name="def", node_name="n2", conditions=DEFERRED))
    assert env.feasible(pod("q", requests={"cpu": "2"})) == {"n1"}


def test_balanced_allocation_and_fit_scores_see_the_resize() -> None:
    env = Env()
    env.add_node(node("a", alloc={"cpu": "4", "memory": "4Gi"}))
    env.add_node(node("b", alloc={"cpu": "4", "memory": "4Gi"}))
    # Equal specs; on "a" the runtime still holds 3 cpu for the pod.
    env.add_pod(resized({"cpu": "1", "memory": "1Gi"}, {"cpu": "3", "memory": "1Gi"}, name="x", node_name="a"))
    env.add_pod(resized({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}, name="y", node_name="b"))
    fw = env.s.frameworks["ome-scheduler"]
    nodes = env.s.node_infos()
    assert [n.name for n in nodes] == ["a", "b"]
    pi = PodInfo(pod("p", requests={"cpu": "500m", "memory": "512Mi"}))
    state = CycleState()
    balanced = fw.plugins["NodeResourcesBalancedAllocation"]
    assert balanced.pre_score(state, pi, nodes) is None  # type: ignore[attr-defined]
    # a: cpu 3.5/4, memory 1.5/4 -> 1 - 0.25; b: both 1.5/4 -> 100.
    assert balanced.score(state, pi, nodes) == [75, 100]  # type: ignore[attr-defined]
    fit = fw.plugins["NodeResourcesFit"]
    fit.pre_score(state, pi, nodes)  # type: ignore[attr-defined]
    # MostAllocated (the chart's): a: cpu 3.5/4 -> 87, memory 1.5/4 -> 37; b: 37 and 37.
    assert fit.score(state, pi, nodes) == [62, 37]  # type: ignore[attr-defined]


def test_fit_prefilter_uses_the_spec_of_a_pending_pod() -> None:
    """``computePodResourceRequest`` ignores the status: a pending pod whose status (written by
    someone) reports more than its spec is filtered on its spec."""
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "2"}))
    p = resized({"cpu": "1"}, {"cpu": "3"}, name="pending")
    pi = PodInfo(p)
    assert pi.requests.milli_cpu == 3000 and pi.status_resources
    fw = env.s.frameworks["ome-scheduler"]
    state = CycleState()
    fw.run_pre_filter(state, pi, env.s.node_infos())
    fit = fw.plugins["NodeResourcesFit"]
    assert fit.filter(state, pi, env.s.node_infos()[0]) is None  # type: ignore[attr-defined]


def test_a_pod_waiting_for_cpu_is_woken_by_the_actuated_scale_down() -> None:
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "4"}))
    before = resized({"cpu": "1"}, {"cpu": "3"}, name="big", node_name="n1")
    env.add_pod(before)
    q = env.s.queue
    waiting = QueuedPodInfo(PodInfo(pod("w", requests={"cpu": "2"})))
    waiting.unschedulable_plugins = {"NodeResourcesFit"}
    q.unschedulable[waiting.pod_info.pod_key] = waiting
    # A status update that changes nothing the pod counts: no move.
    same = resized({"cpu": "1"}, {"cpu": "3"}, name="big", node_name="n1", conditions=IN_PROGRESS)
    env.s.handlers.on_pod_update(before, same)
    assert waiting.pod_info.pod_key in q.unschedulable
    env.s.handlers.on_pod_update(same, resized({"cpu": "1"}, {"cpu": "1"}, name="big", node_name="n1"))
    assert waiting.pod_info.pod_key not in q.unschedulable
