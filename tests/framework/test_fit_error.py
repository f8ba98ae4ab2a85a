"""FailedScheduling messages, byte for byte as kube-scheduler 1.35 writes them.

Each test schedules through the chart's real profile (``tests/support/plugins_env.py``) and checks
the whole ``0/N nodes are available: ...`` text: reasons counted per node, sorted as Go's
``sort.Strings`` sorts ``"<count> <reason>"``, PreFilter messages, absent nodes after a
PreFilter narrowed the node set, and the PostFilter sentence the default profile's
DynamicResources plugin appends.
"""

from __future__ import annotations

from ome_scheduler.framework.runtime import Diagnosis, FitError
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo
from tests.support.plugins_env import Env, node, pod

DRA = " no new claims to deallocate"


def test_regression_dynamic_resources_postfilter_sentence() -> None:
    """Mismatch #1 of the differential test: kube-scheduler 1.35's default profile has the
    DynamicResources plugin (DRA is GA), whose PostFilter appends 'no new claims to
    deallocate' to every FitError message of a pod without ResourceClaims."""
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "1"}))
    msg = env.schedule(pod("p", requests={"cpu": "2"}))
    assert msg == "0/1 nodes are available: 1 Insufficient cpu." + DRA


def test_regression_prefilter_rejection_appends_not_found() -> None:
    """When a PreFilter before DynamicResources rejects as unresolvable, DynamicResources'
    PreFilter never ran and its PostFilter fails reading its state: kube-scheduler appends
    the error text 'not found'."""
    env = Env()
    env.add_node(node("n1"))
    env.add_node(node("n2"))
    term = {
        "matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]},
            {"key": "metadata.name", "operator": "In", "values": ["n2"]},
        ]
    }
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    msg = env.schedule(pod("p", spec={"affinity": aff}))
    assert msg == "0/2 nodes are available: pod affinity terms conflict. not found"


def test_reasons_sorted_as_strings_and_counted_per_node() -> None:
    env = Env()
    for i in range(11):
        env.add_node(node(f"small{i}", alloc={"cpu": "1", "memory": "1Gi"}))
    env.add_node(node("cordoned", unschedulable=True))
    env.add_node(node("tainted", taints=[{"key": "k", "effect": "NoSchedule"}]))
    msg = env.schedule(pod("p", requests={"cpu": "2", "memory": "2Gi"}))
    # "11 Insufficient ..." sorts before "1 node(s) ..." as in Go (byte-wise, '1' then ' ' vs '1').
    assert msg == (
        "0/13 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, "
        "11 Insufficient cpu, 11 Insufficient memory." + DRA
    )


def test_absent_nodes_after_prefilter_narrowing() -> None:
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "1"}))
    env.add_node(node("n2"))
    env.add_node(node("n3"))
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    msg = env.schedule(pod("p", requests={"cpu": "2"}, spec={"affinity": aff}))
    assert msg == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]." + DRA
    )


def test_prefilter_result_naming_only_unknown_nodes() -> None:
    env = Env()
    env.add_node(node("n1"))
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ghost"]}]}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert env.schedule(pod("p", spec={"affinity": aff})) == (
        "0/1 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity]." + DRA
    )


def test_no_nodes() -> None:
    assert Env().schedule(pod("p")) == "no nodes available to schedule pods"


def test_several_reasons_of_one_node_each_count() -> None:
    env = Env()
    env.add_node(node("n1", alloc={"cpu": "1", "memory": "1Gi", "pods": "1"}))
    env.add_pod(pod("x", node_name="n1"))
    msg = env.schedule(pod("p", requests={"cpu": "2", "memory": "2Gi"}))
    assert msg == "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 Too many pods." + DRA


def test_fit_error_text_prefilter_and_postfilter_messages() -> None:
    d = Diagnosis()
    d.pre_filter_msg = "pod has unbound immediate PersistentVolumeClaims"
    d.post_filter_msg = "no new claims to deallocate"
    pi = PodInfo(pod("p"))
    assert str(FitError(pi, 4, d)) == (
        "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. no new claims to deallocate"
    )
    d = Diagnosis()
    d.node_to_status.set("a", Status.unschedulable("x", "y"))
    assert str(FitError(pi, 1, d)) == "0/1 nodes are available: 1 x, 1 y."


def test_gang_outside_domain_reason_text() -> None:
    d = Diagnosis()
    d.node_to_status.absent = Status.unresolvable("node(s) didn't satisfy plugin(s) [OMEGangPack]")
    assert str(FitError(PodInfo(pod("p")), 3, d)) == (
        "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [OMEGangPack]."
    )
