"""OMEGangPack arguments: decoding and validation with the exact messages of spec §12.2.

Decoding is permissive, as upstream's: unknown fields are ignored, so a misspelt
``gcIntervlSeconds`` fails only because ``gcIntervalSeconds`` is then missing. Checks run
in the documented order and the first failure stops scheduler startup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ome_scheduler.util.validation import is_qualified_name

MAX_SECONDS = 9223372036
"""The largest int64 divided by 10^9: longer would overflow a Go time.Duration."""


class ArgsError(ValueError):
    """Invalid OMEGangPack arguments; the message is the user-facing one."""


class _RawArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=False):
    topology_key: str = ""
    pod_group_topology_key_annotation: str = ""
    unsupported_placement_group_label: str = ""
    default_permit_timeout_seconds: int | None = None
    pod_group_sync_timeout_seconds: int | None = None
    gc_interval_seconds: int | None = None
    standalone_domain_packing: bool | None = None


@dataclass(frozen=True, slots=True)
class GangPackArgs:
    """Validated arguments; times in seconds."""

    topology_key: str = ""
    pod_group_topology_key_annotation: str = ""
    unsupported_placement_group_label: str = ""
    default_permit_timeout_seconds: int | None = None
    pod_group_sync_timeout_seconds: int | None = None
    gc_interval_seconds: int = 60
    standalone_domain_packing: bool = True


def parse_args(raw: dict[str, Any] | None) -> GangPackArgs:
    """Decode and validate ``pluginConfig[name=OMEGangPack].args``.

    Raises:
        ArgsError: with messages such as ``topologyKey "gpu clique" is not a valid node label
            key: ...`` or ``gcIntervalSeconds must be configured``.
    """
    try:
        a = msgspec.convert(raw or {}, _RawArgs, strict=True)
    except msgspec.ValidationError as exc:
        raise ArgsError(f"decode OMEGangPack args: {exc}") from exc
    if a.topology_key:
        errs = is_qualified_name(a.topology_key)
        if errs:
            raise ArgsError(f'topologyKey "{a.topology_key}" is not a valid node label key: {errs[0]}')
    for name, value in (
        ("podGroupTopologyKeyAnnotation", a.pod_group_topology_key_annotation),
        ("unsupportedPlacementGroupLabel", a.unsupported_placement_group_label),
    ):
        if value:
            errs = is_qualified_name(value)
            if errs:
                raise ArgsError(f'{name} "{value}" is not a valid metadata key: {errs[0]}')
    for name, v in (
        ("defaultPermitTimeoutSeconds", a.default_permit_timeout_seconds),
        ("podGroupSyncTimeoutSeconds", a.pod_group_sync_timeout_seconds),
    ):
        if v is not None:
            if v <= 0:
                raise ArgsError(f"{name} must be positive")
            if v > MAX_SECONDS:
                raise ArgsError(f"{name} is too large")
    gc = a.gc_interval_seconds
    if gc is None:
        raise ArgsError("gcIntervalSeconds must be configured")
    if gc <= 0:
        raise ArgsError("gcIntervalSeconds must be positive")
    if gc > MAX_SECONDS:
        raise ArgsError("gcIntervalSeconds is too large")
    return GangPackArgs(
        topology_key=a.topology_key,
        pod_group_topology_key_annotation=a.pod_group_topology_key_annotation,
        unsupported_placement_group_label=a.unsupported_placement_group_label,
        default_permit_timeout_seconds=a.default_permit_timeout_seconds,
        pod_group_sync_timeout_seconds=a.pod_group_sync_timeout_seconds,
        gc_interval_seconds=gc,
        standalone_domain_packing=True if a.standalone_domain_packing is None else a.standalone_domain_packing,
    )
