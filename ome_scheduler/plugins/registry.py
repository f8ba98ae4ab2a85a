"""The in-tree registry and kube-scheduler 1.35's default plugin set.

Mirrors ``pkg/scheduler/framework/plugins/registry.go`` and
``pkg/scheduler/apis/config/v1/default_plugins.go`` (with the 1.35 feature gates at their
defaults, so DynamicResources is in and NodeDeclaredFeatures and GangScheduling are out):
the default profile enables, through multiPoint and in this order, SchedulingGates,
PrioritySort, NodeUnschedulable, NodeName, TaintToleration (weight 3), NodeAffinity (2),
NodePorts, NodeResourcesFit (1), VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
VolumeZone, PodTopologySpread (2), InterPodAffinity (2), DynamicResources (2),
DefaultPreemption, NodeResourcesBalancedAllocation (1), ImageLocality (1) and DefaultBinder.
Plugins this project does not implement are left out of the defaults (docs/plugins.md,
"Supported plugins and deviations").

Every factory decodes and validates the plugin's ``args`` first
(:func:`~ome_scheduler.config.validation_pluginargs.decode_plugin_args`). A plugin class with
a ``new(args, handle, options)`` classmethod gets its typed arguments there (None when it has
no argument type); every other plugin is built by :func:`default_factory` from its
constructor.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

from ome_scheduler.config.types import PluginRef, Plugins, PluginSet
from ome_scheduler.config.validation_pluginargs import decode_plugin_args
from ome_scheduler.framework.interface import FrameworkOptions, Handle, Plugin, PluginFactory
from ome_scheduler.plugins.defaultbinder import DefaultBinder
from ome_scheduler.plugins.defaultpreemption import DefaultPreemption
from ome_scheduler.plugins.dynamicresources import DynamicResources
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from ome_scheduler.plugins.imagelocality import ImageLocality
from ome_scheduler.plugins.interpodaffinity import InterPodAffinity
from ome_scheduler.plugins.nodeaffinity import NodeAffinity
from ome_scheduler.plugins.nodename import NodeName
from ome_scheduler.plugins.nodeports import NodePorts
from ome_scheduler.plugins.noderesources.balanced_allocation import NodeResourcesBalancedAllocation
from ome_scheduler.plugins.noderesources.fit import NodeResourcesFit
from ome_scheduler.plugins.nodeunschedulable import NodeUnschedulable
from ome_scheduler.plugins.nodevolumelimits import NodeVolumeLimits
from ome_scheduler.plugins.podtopologyspread import PodTopologySpread
from ome_scheduler.plugins.queuesort import PrioritySort
from ome_scheduler.plugins.schedulinggates import SchedulingGates
from ome_scheduler.plugins.tainttoleration import TaintToleration
from ome_scheduler.plugins.volumebinding import VolumeBinding
from ome_scheduler.plugins.volumerestrictions import VolumeRestrictions
from ome_scheduler.plugins.volumezone import VolumeZone

_PLUGINS: list[type[Plugin]] = [
    SchedulingGates,
    PrioritySort,
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    VolumeRestrictions,
    NodeVolumeLimits,
    VolumeBinding,
    VolumeZone,
    PodTopologySpread,
    InterPodAffinity,
    DynamicResources,
    DefaultPreemption,
    NodeResourcesBalancedAllocation,
    ImageLocality,
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
"""``getDefaultPlugins``' multiPoint list: (plugin name, score weight or None)."""


def default_factory(plugin: type[Plugin]) -> PluginFactory:
    """The factory of a plugin without a ``new`` classmethod.

    The plugin's constructor gets, by parameter name, its typed and validated ``args``, the
    ``handle``, the process ``metrics`` and the profile's ``scheduler_name``, when it declares
    them; a plugin without an argument type ignores its args, as upstream does.

    Raises (from the factory):
        ConfigError: invalid arguments (``decode_plugin_args``).
    """
    params = inspect.signature(plugin).parameters
    wants_args, wants_handle, wants_metrics = "args" in params, "handle" in params, "metrics" in params
    wants_name = "scheduler_name" in params
    build = cast(Callable[..., Plugin], plugin)

    def factory(args: Any, handle: Handle, options: FrameworkOptions) -> Plugin:
        kwargs: dict[str, Any] = {}
        if wants_args:
            kwargs["args"] = decode_plugin_args(plugin.name, args)
        if wants_handle:
            kwargs["handle"] = handle
        if wants_metrics:
            kwargs["metrics"] = options.metrics
        if wants_name:
            kwargs["scheduler_name"] = options.scheduler_name
        return build(**kwargs)

    return factory


def plugin_factory(plugin: type[Plugin]) -> PluginFactory:
    """``(raw args or None, handle, options) -> plugin``: ``plugin.new(typed args, handle, options)``
    for a plugin that needs more than its args and the Handle, else :func:`default_factory`.

    Raises (from the factory):
        ConfigError: invalid arguments (``decode_plugin_args``).
    """
    new = getattr(plugin, "new", None)
    if new is None:
        return default_factory(plugin)

    def factory(args: Any, handle: Handle, options: FrameworkOptions) -> Plugin:
        built: Plugin = new(decode_plugin_args(plugin.name, args), handle, options)
        return built

    return factory


def in_tree_registry() -> dict[str, PluginFactory]:
    """Plugin name -> factory ``(raw args or None, handle, options) -> Plugin``."""
    return {p.name: plugin_factory(p) for p in _PLUGINS}


def default_plugins() -> Plugins:
    """The v1 default profile's plugin sets (all through multiPoint)."""
    return Plugins(multi_point=PluginSet(enabled=[PluginRef(name=n, weight=w) for n, w in DEFAULT_MULTI_POINT]))
