"""The in-tree registry and kube-scheduler 1.35's default plugin set.

Mirrors ``pkg/scheduler/framework/plugins/registry.go`` and
``pkg/scheduler/apis/config/v1/default_plugins.go``: the default profile enables, through
multiPoint and in this order, SchedulingGates, PrioritySort, NodeUnschedulable, NodeName,
TaintToleration (weight 3), NodeAffinity (2), NodePorts, NodeResourcesFit (1),
VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone, PodTopologySpread (2),
InterPodAffinity (2), DefaultPreemption, NodeResourcesBalancedAllocation (1),
ImageLocality (1) and DefaultBinder. Plugins this project does not implement are left out
of the defaults (README, "Supported plugins").
"""

from __future__ import annotations

from ome_scheduler.config.types import PluginRef, Plugins, PluginSet
from ome_scheduler.framework.runtime import PluginFactory
from ome_scheduler.plugins.defaultbinder import DefaultBinder
from ome_scheduler.plugins.defaultpreemption import DefaultPreemption
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from ome_scheduler.plugins.interpodaffinity import InterPodAffinity
from ome_scheduler.plugins.nodeaffinity import NodeAffinity
from ome_scheduler.plugins.nodename import NodeName
from ome_scheduler.plugins.nodeports import NodePorts
from ome_scheduler.plugins.noderesources.fit import NodeResourcesFit
from ome_scheduler.plugins.nodeunschedulable import NodeUnschedulable
from ome_scheduler.plugins.queuesort import PrioritySort
from ome_scheduler.plugins.schedulinggates import SchedulingGates
from ome_scheduler.plugins.tainttoleration import TaintToleration

_PLUGINS = [
    SchedulingGates,
    PrioritySort,
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    InterPodAffinity,
    DefaultPreemption,
    DefaultBinder,
    OMEGangPack,
]

DEFAULT_MULTI_POINT: list[tuple[str, int | None]] = [
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", None),
    ("DefaultBinder", None),
]


def in_tree_registry() -> dict[str, PluginFactory]:
    """Plugin name -> constructor ``(args, handle, options) -> Plugin``."""
    return {p.name: p.new for p in _PLUGINS}  # type: ignore[attr-defined]


def default_plugins() -> Plugins:
    """The v1 default profile's plugin sets (all through multiPoint)."""
    return Plugins(multi_point=PluginSet(enabled=[PluginRef(name=n, weight=w) for n, w in DEFAULT_MULTI_POINT]))
