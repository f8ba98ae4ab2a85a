"""NodeResourcesFit and NodeResourcesBalancedAllocation (``plugins/noderesources``)."""

from __future__ import annotations

import pytest

from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.pluginargs import NodeResourcesBalancedAllocationArgs, NodeResourcesFitArgs
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.types import PodInfo, pod_requests
from ome_scheduler.plugins.noderesources.balanced_allocation import NodeResourcesBalancedAllocation, balanced_score
from ome_scheduler.plugins.noderesources.fit import NodeResourcesFit, broken_linear, resource_score
from tests.support.builders import node_info
from tests.support.plugins_env import Env, chart_config, node, pod

MI = 1024 * 1024
GI = 1024 * MI


def c(name: str, req: dict[str, str], restart: str | None = None) -> dict[str, object]:
    out: dict[str, object] = {"name": name, "resources": {"requests": req}}
    if restart:
        out["restartPolicy"] = restart
    return out


def test_requests_max_of_init_and_sum_of_app_containers() -> None:
    p = pod(
        "p",
        spec={
            "containers": [c("a", {"cpu": "1"}), c("b", {"cpu": "500m", "memory": "1Gi"})],
            "initContainers": [c("i", {"cpu": "2", "memory": "100Mi"})],
        },
    )
    assert pod_requests(p) == {"cpu": 2000, "memory": 1 * GI}


def test_sidecars_add_to_app_containers_and_to_later_init_containers() -> None:
    p = pod(
        "p",
        spec={
            "containers": [c("a", {"cpu": "1"})],
            "initContainers": [
                c("side", {"cpu": "500m"}, "Always"),
                c("init", {"cpu": "1200m"}),
                c("side2", {"cpu": "100m"}, "Always"),
            ],
        },
    )
    # app 1000 + sidecars 600 = 1600; init container at its time: 1200 + 500 = 1700.
    assert pod_requests(p)["cpu"] == 1700


def test_overhead_and_pod_level_requests() -> None:
    p = pod(
        "p",
        spec={
            "containers": [c("a", {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"})],
            "resources": {"requests": {"cpu": "3"}},
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        },
    )
    r = pod_requests(p)
    assert r["cpu"] == 3250 and r["memory"] == GI + 120 * MI and r["ephemeral-storage"] == GI


def test_scoring_defaults_only_for_containers_without_requests() -> None:
    p = pod("p", spec={"containers": [c("a", {}), c("b", {"cpu": "300m"})]})
    pi = PodInfo(p)
    assert (pi.non0_cpu, pi.non0_mem) == (400, 400 * MI)
    assert pi.requests.milli_cpu == 300


def test_filter_reasons_and_unresolvable() -> None:
    env = Env()
    env.add_node(node("n", alloc={"cpu": "2", "memory": "2Gi", "example.com/foo": "1", "hugepages-2Mi": "8Mi"}))
    env.add_pod(pod("x", node_name="n", requests={"cpu": "1500m"}))
    st = env.attempt(pod("p", requests={"cpu": "1", "example.com/foo": "2", "hugepages-2Mi": "4Mi"}))[1]
    assert "1 Insufficient cpu, 1 Insufficient example.com/foo" in st
    fit = NodeResourcesFit(NodeResourcesFitArgs())
    ni = env.s.cache.get_node_info("n")
    assert ni is not None
    s = fit.filter(CycleState(), PodInfo(pod("q", requests={"cpu": "1"})), ni)
    assert s is not None and s.code.name == "UNSCHEDULABLE"
    s = fit.filter(CycleState(), PodInfo(pod("q", requests={"cpu": "3"})), ni)
    assert s is not None and s.code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"


def test_zero_scalar_request_still_checks_pods_and_ignored_resources() -> None:
    ni = node_info(node("n", alloc={"pods": "1"}), [pod("x")])
    fit = NodeResourcesFit(NodeResourcesFitArgs(ignored_resources=("example.com/foo",)))
    s = fit.filter(CycleState(), PodInfo(pod("p", requests={"example.com/foo": "5"})), ni)
    assert s is not None and s.reasons == ["Too many pods"]
    fit = NodeResourcesFit(NodeResourcesFitArgs(ignored_resource_groups=("example.com",)))
    ni = node_info(node("n"))
    assert fit.filter(CycleState(), PodInfo(pod("p", requests={"example.com/foo": "5"})), ni) is None


def test_most_least_allocated_and_weights() -> None:
    ni = node_info(node("n", alloc={"cpu": "4", "memory": "8Gi"}), [pod("x", requests={"cpu": "1", "memory": "2Gi"})])
    res = [("cpu", 1), ("memory", 1)]
    # requested after the pod: cpu 2000/4000, memory 4Gi/8Gi
    assert resource_score("MostAllocated", res, [1000, 2 * GI], ni) == 50
    assert resource_score("LeastAllocated", res, [1000, 2 * GI], ni) == 50
    assert resource_score("MostAllocated", [("cpu", 3), ("memory", 1)], [3000, 0], ni) == (100 * 3 + 25) // 4
    assert resource_score("LeastAllocated", res, [5000, 0], ni) == (0 + 75) // 2


def test_requested_to_capacity_ratio_rounds_half_away() -> None:
    fn = broken_linear([(0, 0), (100, 100)])
    ni = node_info(node("n", alloc={"cpu": "3", "memory": "3Gi"}))
    # cpu 1000/3000 -> utilization 33 -> 33; memory 2Gi/3Gi -> 66: mean 49.5 -> 50
    assert resource_score("RequestedToCapacityRatio", [("cpu", 1), ("memory", 1)], [1000, 2 * GI], ni, fn) == 50


def test_broken_linear_truncates_toward_zero() -> None:
    f = broken_linear([(0, 100), (100, 0)])
    assert f(33) == 67  # 100 - 33 (Go truncates -33.0 toward zero)
    assert f(150) == 0


def test_scoring_strategy_validation() -> None:
    with pytest.raises(ConfigError, match="Unsupported value"):
        Env(chart_config(pluginConfig=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "X"}}}]))
    with pytest.raises(ConfigError, match="weight"):
        Env(
            chart_config(
                pluginConfig=[
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0}]}
                        },
                    }
                ]
            )
        )


def test_most_allocated_prefers_busier_node_end_to_end() -> None:
    env = Env()
    env.add_node(node("idle"))
    env.add_node(node("busy"))
    env.add_pod(pod("x", node_name="busy", requests={"cpu": "4", "memory": "8Gi"}))
    assert env.schedule(pod("p", requests={"cpu": "1", "memory": "1Gi"})) == "busy"


def test_balanced_allocation() -> None:
    assert balanced_score([1, 1], [2, 2]) == 100
    assert balanced_score([1, 0], [2, 2]) == 75
    assert balanced_score([3, 0], [2, 2]) == 50  # fraction capped at 1
    assert balanced_score([1, 1, 0], [2, 2, 2]) == int((1 - ((2 * (1 / 6) ** 2 + (1 / 3) ** 2) / 3) ** 0.5) * 100)
    ba = NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs())
    state = CycleState()
    best_effort = PodInfo(pod("p"))
    assert ba.pre_score(state, best_effort, []) is not None  # Skip
    ni = node_info(node("n", alloc={"cpu": "4", "memory": "4Gi"}), [pod("x", requests={"cpu": "1"})])
    pi = PodInfo(pod("p", requests={"cpu": "1", "memory": "2Gi"}))
    assert ba.pre_score(state, pi, [ni]) is None
    # cpu 2/4 = .5, memory 2/4 = .5 -> 100
    assert ba.score(state, pi, [ni]) == [100]


def test_balanced_allocation_args() -> None:
    cfg = chart_config(
        pluginConfig=[
            {"name": "NodeResourcesBalancedAllocation", "args": {"resources": [{"name": "cpu", "weight": 2}]}}
        ]
    )
    with pytest.raises(ConfigError, match="must be 1"):
        Env(cfg)
