"""Profile assembly and the node search of ``schedule_one.go``: default plugins and weights,
percentageOfNodesToScore (adaptive default, global and per profile), the round-robin start
index and random tie-breaking among the best nodes."""

from __future__ import annotations

import random

import pytest

from ome_scheduler.config.load import DEFAULT_CONFIG
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.runtime import Diagnosis
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.generic_scheduler import num_feasible_nodes_to_find
from ome_scheduler.plugins.registry import DEFAULT_MULTI_POINT
from tests.support.plugins_env import Env, chart_config, node, pod


def test_default_multi_point_order_and_weights() -> None:
    assert DEFAULT_MULTI_POINT == [
        ("SchedulingGates", None),
        ("PrioritySort", None),
        ("NodeUnschedulable", None),
        ("NodeName", None),
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodePorts", None),
        ("NodeResourcesFit", 1),
        ("VolumeRestrictions", None),
        ("NodeVolumeLimits", None),
        ("VolumeBinding", None),
        ("VolumeZone", None),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("DynamicResources", 2),
        ("DefaultPreemption", None),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
        ("DefaultBinder", None),
    ]


def test_chart_profile_extension_points() -> None:
    fw = Env().s.frameworks["ome-scheduler"]
    assert [p.name for p in fw.filter_plugins] == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "OMEGangPack",
    ]
    assert [p.name for p in fw.score_plugins] == [
        "NodeResourcesFit",
        "OMEGangPack",
        "TaintToleration",
        "NodeAffinity",
        "InterPodAffinity",
        "DynamicResources",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
    ]
    assert fw.score_weights["NodeResourcesFit"] == 10 and fw.score_weights["TaintToleration"] == 3
    assert fw.score_weights["DynamicResources"] == 2
    assert [p.name for p in fw.pre_enqueue_plugins] == ["SchedulingGates", "DynamicResources"]
    assert [p.name for p in fw.reserve_plugins] == ["VolumeBinding", "DynamicResources", "OMEGangPack"]
    assert [p.name for p in fw.pre_bind_plugins] == ["VolumeBinding", "DynamicResources"]
    assert [p.name for p in fw.post_filter_plugins] == ["DynamicResources", "OMEGangPack"]
    assert DEFAULT_CONFIG["profiles"][0]["plugins"]["multiPoint"]["disabled"] == [{"name": "DefaultPreemption"}]


@pytest.mark.parametrize(
    ("pct", "n", "want"),
    [
        (None, 50, 50),
        (None, 99, 99),
        (None, 100, 100),
        (None, 1000, 420),  # 50 - 1000/125 = 42 %
        (None, 5000, 500),  # 50 - 40 = 10 %
        (None, 6000, 300),  # 50 - 48 = 2 % -> at least 5 %
        (0, 1000, 420),
        (30, 1000, 300),
        (1, 1000, 100),  # never fewer than 100
        (100, 1000, 1000),
    ],
)
def test_num_feasible_nodes_to_find(pct: int | None, n: int, want: int) -> None:
    assert num_feasible_nodes_to_find(pct, n) == want


def test_profile_percentage_overrides_global() -> None:
    cfg = chart_config(percentageOfNodesToScore=20)
    cfg["percentageOfNodesToScore"] = 70
    assert Env(cfg).s.frameworks["ome-scheduler"].percentage_of_nodes_to_score == 20
    cfg = chart_config()
    cfg["percentageOfNodesToScore"] = 70
    assert Env(cfg).s.frameworks["ome-scheduler"].percentage_of_nodes_to_score == 70


def test_search_stops_early_and_rotates_the_start_index() -> None:
    cfg = chart_config(percentageOfNodesToScore=1)
    env = Env(cfg)
    for i in range(250):
        env.add_node(node(f"n{i:03d}"))
    fw = env.s.frameworks["ome-scheduler"]
    nodes = env.s.node_infos()
    pi = PodInfo(pod("p"))
    state = CycleState()
    fw.run_pre_filter(state, pi, nodes)
    feasible = env.s.cycles.algorithm.find_nodes_that_pass_filters(fw, state, pi, Diagnosis(), nodes, len(nodes))
    assert len(feasible) == 100 and feasible[0].name == nodes[0].name
    assert env.s.cycles.algorithm.next_start_node_index == 100
    feasible = env.s.cycles.algorithm.find_nodes_that_pass_filters(fw, state, pi, Diagnosis(), nodes, len(nodes))
    assert feasible[0].name == nodes[100].name
    feasible = env.s.cycles.algorithm.find_nodes_that_pass_filters(fw, state, pi, Diagnosis(), nodes, len(nodes))
    assert feasible[0].name == nodes[200].name and feasible[-1].name == nodes[49].name
    assert env.s.cycles.algorithm.next_start_node_index == 50


def test_rejected_nodes_count_towards_the_next_start_index() -> None:
    env = Env()
    for i in range(5):
        env.add_node(node(f"n{i}", alloc={"cpu": "1" if i < 2 else "8"}))
    env.schedule(pod("p", requests={"cpu": "2"}))
    assert env.s.cycles.algorithm.next_start_node_index == 0  # 5 processed, modulo 5


def test_ties_broken_at_random() -> None:
    env = Env()
    for i in range(4):
        env.add_node(node(f"n{i}"))
    random.seed(7)
    seen = {env.schedule(pod(f"p{i}")) for i in range(40)}
    assert seen == {"n0", "n1", "n2", "n3"}


def test_multipoint_overrides_keep_multipoint_order() -> None:
    """``expandMultiPointPlugins`` puts plugins that a specific extension point re-lists first,
    in their multiPoint order, then the other multiPoint plugins, then the remaining ones."""
    cfg = chart_config()
    cfg["profiles"][0]["plugins"]["filter"] = {"enabled": [{"name": "NodeAffinity"}, {"name": "TaintToleration"}]}
    fw = Env(cfg).s.frameworks["ome-scheduler"]
    assert [p.name for p in fw.filter_plugins][:5] == [
        "TaintToleration",
        "NodeAffinity",
        "NodeUnschedulable",
        "NodeName",
        "NodePorts",
    ]
