"""Load, default and validate a ``KubeSchedulerConfiguration`` file.

Mirrors ``pkg/scheduler/apis/config/validation/validation.go`` for the checks that can be
made before plugins exist (plugin arguments are decoded and validated by
``validation_pluginargs`` when the framework builds each plugin). Every error names the
offending field path, for example ``profiles[0].schedulerName: Required value``.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pydantic
import yaml

from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.types import KubeSchedulerConfiguration, LeaderElection, Profile
from ome_scheduler.util.validation import is_dns1123_label, is_dns1123_subdomain

DEFAULT_SCHEDULER_NAME = "ome-scheduler"
"""``spec.schedulerName`` of the built-in profile: pods opt in with it."""

LEADER_JITTER_FACTOR = 1.2
"""client-go ``leaderelection.JitterFactor``."""

DEFAULT_CONFIG: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": True, "resourceName": "ome-scheduler", "resourceNamespace": "kube-system"},
    "profiles": [
        {
            "schedulerName": DEFAULT_SCHEDULER_NAME,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "OMEGangPack"}], "disabled": [{"name": "DefaultPreemption"}]},
                "score": {
                    "enabled": [{"name": "NodeResourcesFit", "weight": 10}, {"name": "OMEGangPack", "weight": 10}],
                    "disabled": [{"name": "PodTopologySpread"}],
                },
            },
            "pluginConfig": [
                {
                    "name": "OMEGangPack",
                    "args": {
                        "podGroupTopologyKeyAnnotation": "ome.io/topology-key",
                        "unsupportedPlacementGroupLabel": "ome.io/placement-group",
                        "defaultPermitTimeoutSeconds": 600,
                        "podGroupSyncTimeoutSeconds": 30,
                        "gcIntervalSeconds": 60,
                        "standaloneDomainPacking": True,
                    },
                },
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "MostAllocated",
                            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                        }
                    },
                },
            ],
        }
    ],
}
"""Used without ``--config``: the chart's default profile (docs/configuration.md)."""

MAX_LEASE_SECONDS = 2**31 - 1
"""The largest ``leaderElection.leaseDuration`` (seconds) a Lease can hold."""


def _path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as kube's field path: ``profiles[0].pluginConfig``."""
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def parse_config(data: Any, source: str = "config") -> KubeSchedulerConfiguration:
    """Validate a decoded YAML document.

    Raises:
        ConfigError: naming the first invalid field.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a KubeSchedulerConfiguration object is required")
    # The file is decoded by kind, as kube-scheduler's codec does: both fields are required.
    for field in ("apiVersion", "kind"):
        if not data.get(field):
            raise ConfigError(f"{source}: Object '{field[0].upper() + field[1:]}' is missing: set {field}")
    if data.get("kind") != "KubeSchedulerConfiguration":
        raise ConfigError(
            f'{source}: kind: Unsupported value: "{data.get("kind")}": supported values: "KubeSchedulerConfiguration"'
        )
    if data.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        raise ConfigError(
            f'{source}: apiVersion: Unsupported value: "{data.get("apiVersion")}": supported values: '
            '"kubescheduler.config.k8s.io/v1"'
        )
    if not data.get("profiles"):
        # kube-scheduler defaults an absent or empty list to one default profile; ours is the
        # built-in (chart default) profile.
        data = {**data, "profiles": copy.deepcopy(DEFAULT_CONFIG["profiles"])}
    try:
        cfg = KubeSchedulerConfiguration.model_validate(data)
    except pydantic.ValidationError as exc:
        e = exc.errors()[0]  # the first error only: the message is one line naming one field
        loc = _path(tuple(e["loc"]))
        if e["type"] == "extra_forbidden":
            raise ConfigError(f'{source}: strict decoding error: unknown field "{loc}"') from None
        raise ConfigError(f"{source}: {loc}: Invalid value: {e.get('input')!r}: {e['msg']}") from None
    validate(cfg, source)
    return cfg


def validate(cfg: KubeSchedulerConfiguration, source: str = "config") -> None:
    """The cross-field checks of ``ValidateKubeSchedulerConfiguration``."""
    if cfg.pod_max_backoff_seconds < cfg.pod_initial_backoff_seconds:
        raise ConfigError(
            f"{source}: podMaxBackoffSeconds: Invalid value: {cfg.pod_max_backoff_seconds}: "
            "must be greater than or equal to PodInitialBackoffSeconds"
        )
    if not cfg.profiles:
        raise ConfigError(f"{source}: profiles: Required value")
    seen: set[str] = set()
    for i, p in enumerate(cfg.profiles):
        if not p.scheduler_name:
            raise ConfigError(f"{source}: profiles[{i}].schedulerName: Required value")
        if p.scheduler_name in seen:
            raise ConfigError(f'{source}: profiles[{i}].schedulerName: Duplicate value: "{p.scheduler_name}"')
        seen.add(p.scheduler_name)
    if cfg.extenders:
        raise ConfigError(f"{source}: extenders: Forbidden: scheduler extenders are not supported by ome-scheduler")
    le: LeaderElection = cfg.leader_election
    # Upstream validates the timings only when leader election is on: with it off they are unused.
    if le.leader_elect:
        if le.lease_duration <= 0:
            raise ConfigError(f"{source}: leaderElection.leaseDuration: Invalid value: must be greater than zero")
        if le.renew_deadline <= 0:
            raise ConfigError(f"{source}: leaderElection.renewDeadline: Invalid value: must be greater than zero")
        if le.retry_period <= 0:
            raise ConfigError(f"{source}: leaderElection.retryPeriod: Invalid value: must be greater than zero")
        # A leader must give up (renewDeadline) before a standby may take the lease over
        # (leaseDuration), or both could act as leader at once.
        if le.lease_duration <= le.renew_deadline:
            raise ConfigError(
                f"{source}: leaderElection.leaseDuration: Invalid value: "
                "leaseDuration must be greater than renewDeadline"
            )
        if le.renew_deadline <= LEADER_JITTER_FACTOR * le.retry_period:
            # client-go's NewLeaderElector refuses this (tools/leaderelection/leaderelection.go):
            # a leader must get more than one renewal attempt before its deadline.
            raise ConfigError(
                f"{source}: leaderElection.renewDeadline: Invalid value: "
                "renewDeadline must be greater than retryPeriod*JitterFactor (1.2)"
            )
        if le.resource_lock not in ("leases",):
            raise ConfigError(
                f'{source}: leaderElection.resourceLock: Unsupported value: "{le.resource_lock}": '
                'supported values: "leases"'
            )
        if not le.resource_name:
            raise ConfigError(f"{source}: leaderElection.resourceName: Required value")
        if le.lease_duration > MAX_LEASE_SECONDS:
            # The Lease stores it in spec.leaseDurationSeconds, an int32: the API server would
            # refuse every Lease write and no replica would ever lead.
            raise ConfigError(
                f"{source}: leaderElection.leaseDuration: Invalid value: must be at most {MAX_LEASE_SECONDS}s "
                "(the Lease's leaseDurationSeconds is an int32)"
            )
        for field, value, check in (
            ("resourceName", le.resource_name, is_dns1123_subdomain),
            ("resourceNamespace", le.resource_namespace, is_dns1123_label),
        ):
            errs = check(value)
            if errs:
                raise ConfigError(f'{source}: leaderElection.{field}: Invalid value: "{value}": {"; ".join(errs)}')
    if not math.isfinite(cfg.client_connection.qps):
        raise ConfigError(f"{source}: clientConnection.qps: Invalid value: must be a finite number")
    if cfg.client_connection.qps < 0:
        raise ConfigError(f"{source}: clientConnection.qps: Invalid value: must not be negative")


def load_config(path: str | None) -> KubeSchedulerConfiguration:
    """Read ``--config`` (or the built-in default when ``None``).

    Raises:
        ConfigError: unreadable file, bad YAML or invalid content, naming the argument.
    """
    if path is None:
        return parse_config(DEFAULT_CONFIG, "default configuration")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config: {path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path} is not valid YAML: {exc}") from None
    except RecursionError:  # e.g. thousands of nested ``[[[...]]]``: the parser recurses per level
        raise ConfigError(f"--config: {path} is nested too deeply to be a configuration") from None
    try:
        return parse_config(data, path)
    except RecursionError:
        raise ConfigError(f"--config: {path} is nested too deeply to be a configuration") from None


def profile_percentage(cfg: KubeSchedulerConfiguration, p: Profile) -> int | None:
    """The profile's ``percentageOfNodesToScore``, else the global one (None: adaptive)."""
    return (
        p.percentage_of_nodes_to_score
        if p.percentage_of_nodes_to_score is not None
        else cfg.percentage_of_nodes_to_score
    )
