"""Plugin arguments: one decoder for every plugin, kube-scheduler's messages, upstream's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from ome_scheduler import logs
from ome_scheduler.api.core import Node
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.pluginargs import (
    DEFAULT_RESOURCES,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    PodTopologySpreadArgs,
    ResourceSpec,
    VolumeBindingArgs,
)
from ome_scheduler.config.validation_pluginargs import decode_plugin_args
from ome_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from ome_scheduler.framework.interface import FrameworkOptions
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.nodeunschedulable import NodeUnschedulable
from ome_scheduler.plugins.registry import in_tree_registry
from tests.support.builders import make_node, make_pod
from tests.support.fakes import FakeHandle

RTCR = "RequestedToCapacityRatio"


def build(name: str, args: dict[str, Any] | None) -> Any:
    return in_tree_registry()[name](args, FakeHandle(), FrameworkOptions("ome-scheduler", Metrics()))


@pytest.mark.parametrize(
    ("name", "args", "msg"),
    [
        ("NodeResourcesFit", {"zzz": 1}, 'strict decoding error: unknown field "zzz"'),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1, "zzz": 1}]}},
            'strict decoding error: unknown field "scoringStrategy.resources[0].zzz"',
        ),
        ("NodeResourcesFit", {"scoringStrategy": "x"}, "scoringStrategy: Invalid value: must be an object"),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"type": 5}},
            'scoringStrategy.type: Unsupported value: "5": supported values: '
            '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"',
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": "cpu"}},
            "scoringStrategy.resources: Invalid value: must be a list",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": ["cpu"]}},
            "scoringStrategy.resources[0]: Invalid value: must be an object with name and weight",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"weight": 1}]}},
            "scoringStrategy.resources[0].name: Required value",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"name": "", "weight": 1}]}},
            "scoringStrategy.resources[0].name: Required value",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"name": "cpu"}]}},
            "scoringStrategy.resources[0].weight: Invalid value: 0: resource weight of cpu should be in range [1, 100]",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": None}]}},
            "scoringStrategy.resources[0].weight: Invalid value: None: resource weight of cpu should be in range [1, 100]",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}]}},
            'scoringStrategy.resources[1].name: Duplicate value: "cpu"',
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"type": RTCR}},
            "scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified",
        ),
        (
            "NodeResourcesFit",
            {
                "scoringStrategy": {
                    "type": RTCR,
                    "requestedToCapacityRatio": {"shape": [{"utilization": 50}, {"utilization": 50}]},
                }
            },
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization: Invalid value: 50: "
            "utilization values must be sorted in increasing order",
        ),
        (
            "NodeResourcesFit",
            {"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [{"score": 11}]}}},
            "scoringStrategy.requestedToCapacityRatio.shape[0].score: Invalid value: 11: not in valid range [0, 10]",
        ),
        (
            "NodeResourcesFit",
            {"ignoredResourceGroups": ["example.com", "a/b"]},
            "ignoredResourceGroups[1]: Invalid value: \"a/b\": resource group name can't contain '/'",
        ),
        ("NodeResourcesBalancedAllocation", {"resources": "cpu"}, "resources: Invalid value: must be a list"),
        ("NodeResourcesBalancedAllocation", {"resources": ["cpu"]}, "resources[0].name: Required value"),
        (
            "NodeResourcesBalancedAllocation",
            {"resources": [{"name": "cpu", "weight": 2}]},
            "resources[0].weight: Invalid value: 2: must be 1",
        ),
        (
            "NodeResourcesBalancedAllocation",
            {"resources": [{"name": "cpu"}, {"name": "cpu"}]},
            'resources[1].name: Duplicate value: "cpu"',
        ),
        (
            "InterPodAffinity",
            {"hardPodAffinityWeight": 101},
            "hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            "InterPodAffinity",
            {"hardPodAffinityWeight": None},
            "hardPodAffinityWeight: Invalid value: None: not in valid range [0, 100]",
        ),
        (
            "VolumeBinding",
            {"bindTimeoutSeconds": -1},
            "bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be a negative value",
        ),
        ("NodeAffinity", {"addedAffinity": "x"}, "addedAffinity: Expected `object`, got `str`"),
        (
            "NodeAffinity",
            {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": "3"}]}},
            "addedAffinity: Expected `int`, got `str` - at `$.preferredDuringSchedulingIgnoredDuringExecution[0].weight`",
        ),
        (
            "NodeAffinity",
            {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
            "Required value: must have at least one node selector term",
        ),
        (
            "PodTopologySpread",
            {"defaultingType": "X"},
            'defaultingType: Unsupported value: "X": supported values: "System", "List"',
        ),
        (
            "PodTopologySpread",
            {"defaultConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]},
            'defaultingType: Invalid value: "System": when .defaultConstraints are not empty',
        ),
        (
            "PodTopologySpread",
            {"defaultingType": "List", "defaultConstraints": [{"maxSkew": "1"}]},
            "defaultConstraints: Expected `int`, got `str` - at `$.maxSkew`",
        ),
        (
            "PodTopologySpread",
            {"defaultingType": "List", "defaultConstraints": [5]},
            "defaultConstraints: Expected `object`, got `int`",
        ),
        (
            "PodTopologySpread",
            {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 0, "topologyKey": "z"}]},
            "defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)",
        ),
        (
            "PodTopologySpread",
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            "defaultConstraints[1]: Duplicate value: {z, DoNotSchedule}",
        ),
        (
            "PodTopologySpread",
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
                ],
            },
            "defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod",
        ),
    ],
)
def test_invalid_args_give_kube_scheduler_messages(name: str, args: dict[str, Any], msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        build(name, args)
    assert str(e.value) == msg


def test_defaults_are_upstream_v1_defaults() -> None:
    fit = decode_plugin_args("NodeResourcesFit", None)
    assert fit == NodeResourcesFitArgs() and fit.scoring_strategy.type == "LeastAllocated"
    assert fit.scoring_strategy.resources == DEFAULT_RESOURCES
    # null is absent (as in Go); an empty type is LeastAllocated; a missing resource list is the default one.
    ss = {"type": "", "resources": None, "requestedToCapacityRatio": None}
    assert decode_plugin_args("NodeResourcesFit", {"ignoredResources": None, "scoringStrategy": ss}) == fit
    most = decode_plugin_args("NodeResourcesFit", {"scoringStrategy": {"type": "MostAllocated"}})
    assert isinstance(most, NodeResourcesFitArgs) and most.scoring_strategy.resources == DEFAULT_RESOURCES
    balanced = decode_plugin_args("NodeResourcesBalancedAllocation", {"resources": [{"name": "gpu"}]})
    assert balanced == NodeResourcesBalancedAllocationArgs(resources=(ResourceSpec(name="gpu", weight=1),))
    assert (
        decode_plugin_args("NodeResourcesBalancedAllocation", {"resources": []})
        == NodeResourcesBalancedAllocationArgs()
    )
    assert decode_plugin_args("PodTopologySpread", {"defaultingType": ""}) == PodTopologySpreadArgs()
    assert decode_plugin_args("VolumeBinding", {"shape": None}) == VolumeBindingArgs(bind_timeout_seconds=600)
    # Plugins without an argument type ignore their args, as upstream does.
    assert decode_plugin_args("NodeName", {"anything": 1}) is None
    assert build("NodeName", {"anything": 1}).name == "NodeName"


def test_plugins_are_built_from_their_typed_args() -> None:
    fit = build(
        "NodeResourcesFit",
        {
            "ignoredResources": ["example.com/foo"],
            "scoringStrategy": {
                "type": RTCR,
                "resources": [{"name": "cpu", "weight": 3}],
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
                },
            },
        },
    )
    assert (fit.strategy, fit.resources, fit.ignored) == (RTCR, [("cpu", 3)], frozenset({"example.com/foo"}))
    assert fit._shape_fn(50) == 50  # the 0..10 shape scores are scaled to 0..100
    ipa = build("InterPodAffinity", {"hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": True})
    assert (ipa.hard_weight, ipa.ignore_preferred_of_existing) == (0, True)
    assert build("VolumeBinding", {"bindTimeoutSeconds": 30}).bind_timeout == 30.0
    spread = build(
        "PodTopologySpread",
        {
            "defaultingType": "List",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
        },
    )
    assert not spread.system_defaulted and [c.topology_key for c in spread.default_constraints] == ["z"]
    assert build("PodTopologySpread", None).system_defaulted


def test_queueing_hint_logs_its_verdict_at_v5(capsys: pytest.CaptureFixture[str]) -> None:
    hint = NodeUnschedulable.is_schedulable_after_node_change
    pod = make_pod("p")
    try:
        logs.configure(4, "text")
        assert hint(pod, None, make_node("n1")) == QueueingHint.QUEUE
        assert capsys.readouterr().err == ""
        logs.configure(5, "text")
        assert hint(pod, None, make_node("n2", unschedulable=True)) == QueueingHint.QUEUE_SKIP
        line = capsys.readouterr().err
    finally:
        with capsys.disabled():  # log to the session's stderr again: this test's capture is closed after it
            logs.configure(2, "text")
    assert '"queueing hint" hint="NodeUnschedulable.is_schedulable_after_node_change" pod="ns/p"' in line
    assert 'object="n2" verdict="QueueSkip"' in line


def test_cluster_event_with_hint_is_generic_over_the_event_object() -> None:
    ev = ClusterEventWithHint[Node](
        ClusterEvent("Node", ActionType.ADD), NodeUnschedulable.is_schedulable_after_node_change
    )
    assert ev.hint is not None and ev.hint(make_pod("p"), None, make_node("n")) == QueueingHint.QUEUE
