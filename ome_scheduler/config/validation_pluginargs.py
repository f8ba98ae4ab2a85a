"""Decode, default and validate plugin arguments, in one place.

Mirrors ``pkg/scheduler/apis/config/validation/validation_pluginargs.go`` (the ``Validate*Args``
functions) and the strict decoding kube-scheduler applies to ``pluginConfig[].args``.
:func:`decode_plugin_args` is the entry point: it turns a plugin's raw ``args`` mapping into the
plugin's struct from :mod:`ome_scheduler.config.pluginargs`, applies the defaults that depend
on what was given (an empty ``scoringStrategy.type`` is LeastAllocated, a zero balanced
weight is 1, ...) and validates it, raising :class:`ConfigError` with the message
kube-scheduler gives, for example ``scoringStrategy.type: Unsupported value: "Packed": ...``
or ``strict decoding error: unknown field "scoringStrategy.foo"``. The framework prefixes
``profiles[i].pluginConfig[Name].args: ``.

A null decodes as absent where Go's decoder leaves the field at its default (per plugin,
``nullable`` below). Decoding faults (an unknown field, a value of the wrong type) are
reported before validation faults, each in document order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from msgspec.structs import replace

from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.pluginargs import (
    DEFAULT_RESOURCES,
    LEAST_ALLOCATED,
    LIST_DEFAULTING,
    MAX_CUSTOM_PRIORITY_SCORE,
    MOST_ALLOCATED,
    REQUESTED_TO_CAPACITY_RATIO,
    SYSTEM_DEFAULTING,
    DefaultPreemptionArgs,
    DynamicResourcesArgs,
    InterPodAffinityArgs,
    NodeAffinityArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    OMEGangPackArgs,
    OMEGangPackArgsV1,
    PluginArgs,
    PodTopologySpreadArgs,
    VolumeBindingArgs,
)
from ome_scheduler.util.durations import format_go_duration, parse_go_duration
from ome_scheduler.util.validation import is_qualified_name

T = TypeVar("T")
INT32_MAX = 2**31 - 1

MAX_SECONDS = 9223372036
"""The largest int64 divided by 10^9: longer would overflow a Go time.Duration."""
_SCORING_TYPES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)
_DO_NOT_SCHEDULE = "DoNotSchedule"
_SCHEDULE_ANYWAY = "ScheduleAnyway"


# ---- validation -------------------------------------------------------------------------


def validate_node_resources_fit_args(args: NodeResourcesFitArgs) -> NodeResourcesFitArgs:
    """``ValidateNodeResourcesFitArgs``; returns ``args`` with an empty strategy type defaulted.

    Raises:
        ConfigError: an unsupported strategy, a resource without name or with a weight outside
            ``[1, 100]``, a repeated resource, a bad RequestedToCapacityRatio shape, or an
            ignored resource group containing ``/``.
    """
    ss = args.scoring_strategy
    strategy = ss.type or LEAST_ALLOCATED
    if strategy not in _SCORING_TYPES:
        raise ConfigError(
            f'scoringStrategy.type: Unsupported value: "{strategy}": supported values: '
            '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"'
        )
    path = "scoringStrategy.resources"
    seen: set[str] = set()
    for i, r in enumerate(ss.resources):
        if not r.name:
            raise ConfigError(f"{path}[{i}].name: Required value")
        if not 0 < r.weight <= 100:
            raise ConfigError(
                f"{path}[{i}].weight: Invalid value: {r.weight}: "
                f"resource weight of {r.name} should be in range [1, 100]"
            )
        if r.name in seen:
            raise ConfigError(f'{path}[{i}].name: Duplicate value: "{r.name}"')
        seen.add(r.name)
    if strategy == REQUESTED_TO_CAPACITY_RATIO:
        shape = ss.requested_to_capacity_ratio.shape
        if not shape:
            raise ConfigError(
                "scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified"
            )
        prev = -1
        for i, p in enumerate(shape):
            at = f"scoringStrategy.requestedToCapacityRatio.shape[{i}]"
            if not 0 <= p.utilization <= 100:
                raise ConfigError(f"{at}.utilization: Invalid value: {p.utilization}: not in valid range [0, 100]")
            if p.utilization <= prev:
                raise ConfigError(
                    f"{at}.utilization: Invalid value: {p.utilization}: "
                    "utilization values must be sorted in increasing order"
                )
            if not 0 <= p.score <= MAX_CUSTOM_PRIORITY_SCORE:
                raise ConfigError(f"{at}.score: Invalid value: {p.score}: not in valid range [0, 10]")
            prev = p.utilization
    for i, name in enumerate(args.ignored_resource_groups):
        if "/" in name:
            raise ConfigError(
                f"ignoredResourceGroups[{i}]: Invalid value: \"{name}\": resource group name can't contain '/'"
            )
    return args if strategy == ss.type else replace(args, scoring_strategy=replace(ss, type=strategy))


def validate_node_resources_balanced_allocation_args(
    args: NodeResourcesBalancedAllocationArgs,
) -> NodeResourcesBalancedAllocationArgs:
    """``ValidateNodeResourcesBalancedAllocationArgs``; no resources mean cpu and memory, weight 0 means 1.

    Raises:
        ConfigError: a repeated resource or a weight other than 1.
    """
    resources = tuple(replace(r, weight=r.weight or 1) for r in args.resources) or DEFAULT_RESOURCES
    seen: set[str] = set()
    for i, r in enumerate(resources):
        if r.name in seen:
            raise ConfigError(f'resources[{i}].name: Duplicate value: "{r.name}"')
        seen.add(r.name)
        if r.weight != 1:
            raise ConfigError(f"resources[{i}].weight: Invalid value: {r.weight}: must be 1")
    return replace(args, resources=resources)


def validate_default_preemption_args(args: DefaultPreemptionArgs) -> DefaultPreemptionArgs:
    """``ValidateDefaultPreemptionArgs``: the percentage in ``[0, 100]``, the absolute number not
    negative, and not both zero.

    Raises:
        ConfigError: upstream's aggregate text: one fault alone
            (``minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]``),
            several as ``[first, second]``.
    """
    pct, ab = args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute
    errs: list[str] = []
    if pct < 0 or pct > 100:
        errs.append(f"minCandidateNodesPercentage: Invalid value: {pct}: not in valid range [0, 100]")
    if ab < 0:
        errs.append(f"minCandidateNodesAbsolute: Invalid value: {ab}: not in valid range [0, inf)")
    if pct == 0 and ab == 0:
        both = "cannot be zero at the same time as"
        errs.append(f"minCandidateNodesPercentage: Invalid value: 0: {both} minCandidateNodesAbsolute")
        errs.append(f"minCandidateNodesAbsolute: Invalid value: 0: {both} minCandidateNodesPercentage")
    if len(errs) == 1:
        raise ConfigError(errs[0])
    if errs:
        raise ConfigError("[" + ", ".join(errs) + "]")
    return args


def validate_inter_pod_affinity_args(args: InterPodAffinityArgs) -> InterPodAffinityArgs:
    """``ValidateInterPodAffinityArgs``.

    Raises:
        ConfigError: ``hardPodAffinityWeight`` outside ``[0, 100]``.
    """
    hw = args.hard_pod_affinity_weight
    if not 0 <= hw <= 100:
        raise ConfigError(f"hardPodAffinityWeight: Invalid value: {hw}: not in valid range [0, 100]")
    return args


def validate_node_affinity_args(args: NodeAffinityArgs) -> NodeAffinityArgs:
    """``ValidateNodeAffinityArgs`` (the part about required terms).

    Raises:
        ConfigError: a required node selector without terms.
    """
    req = args.added_affinity.required_during_scheduling_ignored_during_execution
    if req is not None and not req.node_selector_terms:
        raise ConfigError(
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
            "Required value: must have at least one node selector term"
        )
    return args


def validate_pod_topology_spread_args(args: PodTopologySpreadArgs) -> PodTopologySpreadArgs:
    """``ValidatePodTopologySpreadArgs``; an empty ``defaultingType`` is System.

    Raises:
        ConfigError: an unsupported defaulting type, System with constraints, or a constraint
            with a non-positive maxSkew, no topologyKey, an unsupported whenUnsatisfiable, a
            labelSelector, or the same (topologyKey, whenUnsatisfiable) as an earlier one.
    """
    dtype = args.defaulting_type or SYSTEM_DEFAULTING
    if dtype not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        raise ConfigError(f'defaultingType: Unsupported value: "{dtype}": supported values: "System", "List"')
    if dtype == SYSTEM_DEFAULTING and args.default_constraints:
        raise ConfigError('defaultingType: Invalid value: "System": when .defaultConstraints are not empty')
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(args.default_constraints):
        at = f"defaultConstraints[{i}]"
        if c.max_skew <= 0:
            raise ConfigError(f"{at}.maxSkew: Invalid value: {c.max_skew}: not in valid range (0, inf)")
        if c.max_skew > INT32_MAX:
            raise ConfigError(f"{at}.maxSkew: Invalid value: {c.max_skew}: out of range for an int32")
        if c.min_domains is not None and abs(c.min_domains) > INT32_MAX:
            raise ConfigError(f"{at}.minDomains: Invalid value: {c.min_domains}: out of range for an int32")
        if not c.topology_key:
            raise ConfigError(f"{at}.topologyKey: Required value: can not be empty")
        if c.when_unsatisfiable not in (_DO_NOT_SCHEDULE, _SCHEDULE_ANYWAY):
            raise ConfigError(
                f'{at}.whenUnsatisfiable: Unsupported value: "{c.when_unsatisfiable}": supported values: '
                '"DoNotSchedule", "ScheduleAnyway"'
            )
        if c.label_selector is not None:
            raise ConfigError(
                f"{at}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
            )
        key = (c.topology_key, c.when_unsatisfiable)
        if key in seen:
            raise ConfigError(f"{at}: Duplicate value: {{{c.topology_key}, {c.when_unsatisfiable}}}")
        seen.add(key)
    return args if dtype == args.defaulting_type else replace(args, defaulting_type=dtype)


def validate_volume_binding_args(args: VolumeBindingArgs) -> VolumeBindingArgs:
    """``ValidateVolumeBindingArgs`` (``shape`` is not checked: it is unused).

    Raises:
        ConfigError: a negative ``bindTimeoutSeconds``.
    """
    if args.bind_timeout_seconds < 0:
        raise ConfigError(
            f"bindTimeoutSeconds: Invalid value: {args.bind_timeout_seconds}: "
            "invalid BindTimeoutSeconds, should not be a negative value"
        )
    return args


def validate_dynamic_resources_args(args: DynamicResourcesArgs) -> DynamicResourcesArgs:
    """``ValidateDynamicResourcesArgs`` with 1.35's
    default gates (DRASchedulerFilterTimeout on, DRADeviceBindingConditions off).

    Raises:
        ConfigError: ``filterTimeout: Invalid value: "-1s": must be zero or positive``, a
            filterTimeout that is no duration, or
            ``bindingTimeout: Forbidden: DRADeviceBindingConditions or DRAResourceClaimDeviceStatus
            feature gate is disabled`` (one line).
    """
    if args.filter_timeout is not None:
        try:
            seconds = parse_go_duration(args.filter_timeout)
        except ValueError as exc:
            raise ConfigError(f"filterTimeout: Invalid value: {args.filter_timeout!r}: {exc}") from None
        if seconds < 0:
            shown = format_go_duration(seconds)
            raise ConfigError(f'filterTimeout: Invalid value: "{shown}": must be zero or positive')
    if args.binding_timeout is not None:
        raise ConfigError(
            "bindingTimeout: Forbidden: DRADeviceBindingConditions or DRAResourceClaimDeviceStatus "
            "feature gate is disabled"
        )
    return args


def validate_ome_gang_pack_args(args: OMEGangPackArgsV1) -> OMEGangPackArgs:
    """OMEGangPack's checks in the order of ``docs/design/gang-scheduling.md`` §12.2; unset packing
    is True, unset preemption False.

    Raises:
        ConfigError: ``topologyKey "gpu clique" is not a valid node label key: ...``,
            ``{name} "{value}" is not a valid metadata key: ...``, ``{name} must be positive``,
            ``{name} is too large`` or ``gcIntervalSeconds must be configured``.
    """
    if args.topology_key:
        errs = is_qualified_name(args.topology_key)
        if errs:
            raise ConfigError(f'topologyKey "{args.topology_key}" is not a valid node label key: {errs[0]}')
    for name, value in (
        ("podGroupTopologyKeyAnnotation", args.pod_group_topology_key_annotation),
        ("unsupportedPlacementGroupLabel", args.unsupported_placement_group_label),
    ):
        if value:
            errs = is_qualified_name(value)
            if errs:
                raise ConfigError(f'{name} "{value}" is not a valid metadata key: {errs[0]}')
    gc = args.gc_interval_seconds
    for name, seconds in (
        ("defaultPermitTimeoutSeconds", args.default_permit_timeout_seconds),
        ("podGroupSyncTimeoutSeconds", args.pod_group_sync_timeout_seconds),
        ("gcIntervalSeconds", gc),
        ("maxPermitTimeoutSeconds", args.max_permit_timeout_seconds),
    ):
        if seconds is None:
            continue
        if seconds <= 0:
            raise ConfigError(f"{name} must be positive")
        if seconds > MAX_SECONDS:
            raise ConfigError(f"{name} is too large")
    if gc is None:
        raise ConfigError("gcIntervalSeconds must be configured")
    # The v1 shape's fields, with the three whose None meant "default" resolved.
    fields = msgspec.structs.asdict(args)
    fields.update(
        gc_interval_seconds=gc,
        standalone_domain_packing=args.standalone_domain_packing is not False,
        lws_gangs=args.lws_gangs is not False,
        preemption=args.preemption is True,
    )
    return OMEGangPackArgs(**fields)


# ---- decoding ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Decoding:
    """How one plugin's args decode.

    ``nullable``: field paths (``[*]`` for any index) where a null means absent.
    ``messages``: field path -> message for a value of the wrong type there (``{path}``,
    ``{value}``, and ``{name}``, the ``name`` beside it), the ones kube-scheduler's decoder
    and validation give. ``embedded``: top-level fields holding API objects (or lists of
    them), whose decoding errors read ``{field}: {error relative to the object}``.
    """

    kind: type[msgspec.Struct]
    validate: Callable[[Any], PluginArgs]
    nullable: frozenset[str] = frozenset()
    messages: Mapping[str, str] = field(default_factory=dict)
    embedded: tuple[str, ...] = ()


_RESOURCE_WEIGHT = "{path}: Invalid value: {value}: resource weight of {name} should be in range [1, 100]"

_DECODINGS: dict[str, _Decoding] = {
    "NodeResourcesFit": _Decoding(
        NodeResourcesFitArgs,
        validate_node_resources_fit_args,
        nullable=frozenset(
            {
                "ignoredResources",
                "ignoredResourceGroups",
                "scoringStrategy",
                "scoringStrategy.type",
                "scoringStrategy.resources",
                "scoringStrategy.requestedToCapacityRatio",
                "scoringStrategy.requestedToCapacityRatio.shape",
            }
        ),
        messages={
            "scoringStrategy": "{path}: Invalid value: must be an object",
            "scoringStrategy.type": '{path}: Unsupported value: "{value}": supported values: '
            '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"',
            "scoringStrategy.resources": "{path}: Invalid value: must be a list",
            "scoringStrategy.resources[*]": "{path}: Invalid value: must be an object with name and weight",
            "scoringStrategy.resources[*].name": "{path}: Required value",
            "scoringStrategy.resources[*].weight": _RESOURCE_WEIGHT,
        },
    ),
    "NodeResourcesBalancedAllocation": _Decoding(
        NodeResourcesBalancedAllocationArgs,
        validate_node_resources_balanced_allocation_args,
        nullable=frozenset({"resources", "resources[*].weight"}),
        messages={
            "resources": "{path}: Invalid value: must be a list",
            "resources[*]": "{path}.name: Required value",
            "resources[*].name": "{path}: Required value",
            "resources[*].weight": "{path}: Invalid value: {value}: must be 1",
        },
    ),
    "DefaultPreemption": _Decoding(
        DefaultPreemptionArgs,
        validate_default_preemption_args,
        nullable=frozenset({"minCandidateNodesPercentage", "minCandidateNodesAbsolute"}),
    ),
    "InterPodAffinity": _Decoding(
        InterPodAffinityArgs,
        validate_inter_pod_affinity_args,
        nullable=frozenset({"ignorePreferredTermsOfExistingPods"}),
        messages={"hardPodAffinityWeight": "{path}: Invalid value: {value}: not in valid range [0, 100]"},
    ),
    "NodeAffinity": _Decoding(
        NodeAffinityArgs,
        validate_node_affinity_args,
        nullable=frozenset({"addedAffinity"}),
        embedded=("addedAffinity",),
    ),
    "PodTopologySpread": _Decoding(
        PodTopologySpreadArgs,
        validate_pod_topology_spread_args,
        nullable=frozenset({"defaultConstraints", "defaultingType"}),
        messages={"defaultingType": '{path}: Unsupported value: "{value}": supported values: "System", "List"'},
        embedded=("defaultConstraints",),
    ),
    "DynamicResources": _Decoding(
        DynamicResourcesArgs, validate_dynamic_resources_args, nullable=frozenset({"filterTimeout", "bindingTimeout"})
    ),
    "VolumeBinding": _Decoding(
        VolumeBindingArgs,
        validate_volume_binding_args,
        nullable=frozenset({"shape"}),
        messages={
            "bindTimeoutSeconds": "{path}: Invalid value: {value}: "
            "invalid BindTimeoutSeconds, should not be a negative value"
        },
    ),
}


def decode_plugin_args(name: str, raw: Mapping[str, Any] | None) -> PluginArgs | None:
    """Decode, default and validate ``pluginConfig[name=name].args`` (``None``: no args given).

    Returns None for a plugin without an argument type: like kube-scheduler, such a plugin
    ignores its args. OMEGangPack's args decode permissively; a decoding fault there reads
    ``decode OMEGangPack args: {msgspec's error}`` (``docs/design/gang-scheduling.md`` §12.2).

    Raises:
        ConfigError: the first fault, for example
            ``strict decoding error: unknown field "scoringStrategy.foo"``.
    """
    if name == "OMEGangPack":
        try:
            gang = _decode(raw or {}, OMEGangPackArgsV1)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"decode OMEGangPack args: {exc}") from None
        return validate_ome_gang_pack_args(gang)
    d = _DECODINGS.get(name)
    if d is None:
        return None
    data = _without_nulls(dict(raw or {}), d.nullable)
    try:
        args = _decode(data, d.kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(_decoding_error(str(exc), data, d)) from None
    return d.validate(args)


def _decode(data: Mapping[str, Any], kind: type[T]) -> T:
    """``data`` decoded as its JSON would be, as Go's decoder reads it: ``true`` is no number
    (``msgspec.convert`` takes a Python bool for an int) and a number beyond 64 bits is refused.

    Raises:
        msgspec.ValidationError: the first fault, with its path (``- at `$.a.b```).
        ConfigError: a number too large for any integer type, naming its path.
    """
    big = _too_big(data)
    if big is not None:
        raise ConfigError(f"{big[0]}: Invalid value: {big[1]}: out of range for a 64-bit integer")
    return msgspec.json.decode(msgspec.json.encode(data), type=kind, strict=True)


def _too_big(value: Any, at: str = "") -> tuple[str, int] | None:
    """The path and value of the first integer in ``value`` outside int64, if any."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (at or "args", value) if not -(2**63) <= value < 2**63 else None
    items: Any = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _too_big(v, f"{at}[{k}]" if isinstance(k, int) else f"{at}.{k}" if at else str(k))
        if found is not None:
            return found
    return None


def _without_nulls(value: Any, nullable: frozenset[str], at: str = "") -> Any:
    """``value`` without the nulls at ``nullable`` paths, descending only towards those paths."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            p = f"{at}.{k}" if at else str(k)
            if v is None and p in nullable:
                continue
            out[k] = _without_nulls(v, nullable, p) if _below(p, nullable) else v
        return out
    if isinstance(value, list):
        p = f"{at}[*]"
        return [_without_nulls(v, nullable, p) for v in value] if _below(p, nullable) else value
    return value


def _below(path: str, nullable: frozenset[str]) -> bool:
    return any(n.startswith(path + ".") or n.startswith(path + "[") for n in nullable)


_ERROR = re.compile(r"(?P<msg>.*?)(?: - at `\$(?P<at>[^`]*)`)?", re.DOTALL)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _decoding_error(text: str, data: Mapping[str, Any], d: _Decoding) -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.a[0].b``` as the message kube-scheduler gives."""
    m = _ERROR.fullmatch(text)
    assert m is not None  # the pattern matches any text
    msg, at = m["msg"], m["at"] or ""
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", msg)
    if unknown:
        return f'strict decoding error: unknown field "{_kube_path(at + "." + unknown[1])}"'
    missing = re.fullmatch(r"Object missing required field `(.*)`", msg)
    if missing:
        at += "." + missing[1]
    for f in d.embedded:
        rest = re.fullmatch(rf"\.{f}(?:\[\d+\])?((?:[.\[].*)?)", at)
        if rest:
            return f"{f}: {msg}" + (f" - at `${rest[1]}`" if rest[1] else "")
    keys: list[str | int] = [k if k else int(i) for k, i in _SEGMENT.findall(at)]
    parent: Any = data
    for k in keys[:-1]:
        parent = _child(parent, k)
    value = _child(parent, keys[-1]) if keys else None
    path = _kube_path(at)
    template = d.messages.get(re.sub(r"\[\d+\]", "[*]", path))
    if template is None:
        return f"{path}: Invalid value: {value!r}: {msg}"
    name = parent.get("name") if isinstance(parent, Mapping) else None
    return template.format(path=path, value=value, name=name)


def _child(value: Any, key: str | int) -> Any:
    if isinstance(key, int):
        return value[key] if isinstance(value, list) and key < len(value) else None
    return value.get(key) if isinstance(value, Mapping) else None


def _kube_path(at: str) -> str:
    """msgspec's ``.a[0].b`` as kube's field path ``a[0].b``."""
    return at[1:] if at.startswith(".") else at
