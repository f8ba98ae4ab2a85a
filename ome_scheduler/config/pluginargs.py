"""Typed arguments of the plugins that take them (``profiles[].pluginConfig[].args``).

Mirrors ``pkg/scheduler/apis/config/types_pluginargs.go``, with the defaults of
``pkg/scheduler/apis/config/v1/defaults.go`` as field defaults: one frozen struct per plugin,
decoded from the ``args`` mapping with camelCase names. As with kube-scheduler's strict
decoder, an unknown field is an error (``forbid_unknown_fields``); the exceptions are
RequestedToCapacityRatio's parameter and shape points (unknown fields there were always
ignored) and :class:`OMEGangPackArgs`, which decodes permissively like the upstream plugin
(``docs/design/gang-scheduling.md`` §12.1). Subclasses repeat ``frozen=True`` because mypy does not inherit
it. Decoding, defaulting and validation live in
:mod:`ome_scheduler.config.validation_pluginargs`; plugins receive these structs validated.
"""

from __future__ import annotations

import msgspec

from ome_scheduler.api.core import NodeAffinity, TopologySpreadConstraint
from ome_scheduler.util.durations import parse_go_duration

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"
MAX_CUSTOM_PRIORITY_SCORE = 10
DYNAMIC_RESOURCES_FILTER_TIMEOUT_DEFAULT = 10.0
"""``DynamicResourcesFilterTimeoutDefault`` (seconds), set while DRASchedulerFilterTimeout is on (1.35's default)."""
"""The top of a RequestedToCapacityRatio shape score (``config.MaxCustomPriorityScore``)."""


class _Args(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Base of the argument structs: immutable, camelCase, unknown fields rejected."""


class ResourceSpec(_Args, frozen=True):
    """``ResourceSpec``: a resource name and its weight (``1..100``) in a score."""

    name: str
    weight: int = 0


DEFAULT_RESOURCES = (ResourceSpec(name="cpu", weight=1), ResourceSpec(name="memory", weight=1))
"""``defaultResourceSpec``: cpu and memory, weight 1 each."""


class UtilizationShapePoint(_Args, frozen=True, forbid_unknown_fields=False):
    """``UtilizationShapePoint``: ``utilization`` (percent, 0..100) -> ``score`` (0..MAX_CUSTOM_PRIORITY_SCORE)."""

    utilization: int = 0
    score: int = 0


class RequestedToCapacityRatioParam(_Args, frozen=True, forbid_unknown_fields=False):
    """``RequestedToCapacityRatioParam``: the points of a broken linear scoring function."""

    shape: tuple[UtilizationShapePoint, ...] = ()


class ScoringStrategy(_Args, frozen=True):
    """``ScoringStrategy``: ``type`` is LeastAllocated, MostAllocated or RequestedToCapacityRatio."""

    type: str = LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    requested_to_capacity_ratio: RequestedToCapacityRatioParam = RequestedToCapacityRatioParam()


class NodeResourcesFitArgs(_Args, frozen=True):
    """``NodeResourcesFitArgs``: what Filter ignores and how Score scores.

    ``ignored_resources`` are resource names, ``ignored_resource_groups`` the prefixes before
    ``/`` of extended resource names.
    """

    ignored_resources: tuple[str, ...] = ()
    ignored_resource_groups: tuple[str, ...] = ()
    scoring_strategy: ScoringStrategy = ScoringStrategy()


class NodeResourcesBalancedAllocationArgs(_Args, frozen=True):
    """``NodeResourcesBalancedAllocationArgs``: the resources to balance (each weight must be 1)."""

    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES


class DefaultPreemptionArgs(_Args, frozen=True):
    """``DefaultPreemptionArgs``: how many nodes a preemption dry-runs before it stops looking.

    At least ``min_candidate_nodes_percentage`` percent (0..100, default 10) of the nodes that
    failed Filter as Unschedulable, and at least ``min_candidate_nodes_absolute`` (default 100)
    of them (``pkg/scheduler/apis/config/v1/defaults.go``).
    """

    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


class InterPodAffinityArgs(_Args, frozen=True):
    """``InterPodAffinityArgs``: score weight (0..100) of existing pods' required affinity terms."""

    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


class NodeAffinityArgs(_Args, frozen=True):
    """``NodeAffinityArgs``: node affinity every pod of the profile must also satisfy (empty: none)."""

    added_affinity: NodeAffinity = msgspec.field(default_factory=NodeAffinity)


class PodTopologySpreadArgs(_Args, frozen=True):
    """``PodTopologySpreadArgs``: the constraints of pods without their own.

    ``defaulting_type`` System uses the system constraints (``default_constraints`` must be
    empty); List uses ``default_constraints``.
    """

    default_constraints: tuple[TopologySpreadConstraint, ...] = ()
    defaulting_type: str = SYSTEM_DEFAULTING


class VolumeBindingArgs(_Args, frozen=True):
    """``VolumeBindingArgs``: how long PreBind waits for claims to bind (seconds); ``shape`` is accepted and unused."""

    bind_timeout_seconds: int = 600
    shape: tuple[UtilizationShapePoint, ...] = ()


class DynamicResourcesArgs(_Args, frozen=True):
    """``DynamicResourcesArgs``: ``filterTimeout`` is a Go duration (default ``10s``; ``0s`` turns the
    per-node Filter timeout off); ``bindingTimeout`` belongs to DRADeviceBindingConditions, which is
    off in 1.35, and is refused when set."""

    filter_timeout: str | None = None
    binding_timeout: str | None = None

    def filter_timeout_seconds(self) -> float:
        """The Filter timeout in seconds (0: none); call only on validated arguments."""
        if self.filter_timeout is None:
            return DYNAMIC_RESOURCES_FILTER_TIMEOUT_DEFAULT
        return parse_go_duration(self.filter_timeout)


class OMEGangPackArgs(msgspec.Struct, frozen=True, kw_only=True):
    """OMEGangPack's arguments (``docs/design/gang-scheduling.md`` §12.1), validated; times in seconds.

    The timeouts are None when unset (no Permit fallback, no start-up wait);
    ``gc_interval_seconds`` is required. Decoded through :class:`OMEGangPackArgsV1`.
    """

    topology_key: str = ""
    pod_group_topology_key_annotation: str = ""
    unsupported_placement_group_label: str = ""
    default_permit_timeout_seconds: int | None = None
    pod_group_sync_timeout_seconds: int | None = None
    gc_interval_seconds: int
    standalone_domain_packing: bool = True
    lws_gangs: bool = True
    """Whether a LeaderWorkerSet group without a PodGroup label is a gang (design §2.1;
    ``framework/gangsource.py``)."""
    max_permit_timeout_seconds: int | None = None
    """The operator's cap on any gang's Permit wait, and so on its hold (None: no cap): a
    PodGroup's ``scheduleTimeoutSeconds`` above it counts as this many seconds."""
    preemption: bool = False
    """Gang preemption (product rule 13, design §16): a gang that fits no domain frees one by
    evicting lower-priority pods. Off unless set."""


class OMEGangPackArgsV1(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=False):
    """OMEGangPack's ``args`` as decoded: permissive, and every optional field ``| None`` as the
    upstream plugin's pointers are, so decoding errors read as design §12.2 documents
    (``decode OMEGangPack args: Expected `int | null`, got `str` - at `$.gcIntervalSeconds```).

    The one argument struct with an external (v1) shape of its own: the others decode as they are.
    """

    topology_key: str = ""
    pod_group_topology_key_annotation: str = ""
    unsupported_placement_group_label: str = ""
    default_permit_timeout_seconds: int | None = None
    pod_group_sync_timeout_seconds: int | None = None
    gc_interval_seconds: int | None = None
    standalone_domain_packing: bool | None = None
    lws_gangs: bool | None = None
    max_permit_timeout_seconds: int | None = None
    preemption: bool | None = None


PluginArgs = (
    NodeResourcesFitArgs
    | NodeResourcesBalancedAllocationArgs
    | DefaultPreemptionArgs
    | InterPodAffinityArgs
    | NodeAffinityArgs
    | PodTopologySpreadArgs
    | VolumeBindingArgs
    | DynamicResourcesArgs
    | OMEGangPackArgs
)
"""The arguments of any plugin that takes some."""
