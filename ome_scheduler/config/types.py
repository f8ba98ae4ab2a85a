"""``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``) as pydantic models.

Mirrors ``k8s.io/kube-scheduler/config/v1/types.go`` and the defaults of
``pkg/scheduler/apis/config/v1/defaults.go``. Like kube-scheduler's strict decoder, unknown
fields are errors (``extra="forbid"``), so a typo such as ``schedulerNmae`` stops startup
with a message that names it. Plugin ``args`` stay plain mappings here; the framework
decodes and validates them when it builds the plugin (``validation_pluginargs``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from ome_scheduler.util.durations import parse_go_duration


class _M(BaseModel):
    """Base model: camelCase keys (snake_case names accepted too), unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _duration(v: Any) -> float:
    """Seconds from a number or a Go duration string (``"15s"``); ValueError otherwise."""
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        return parse_go_duration(v)
    raise ValueError(f"invalid duration {v!r}")


class LeaderElection(_M):
    """``LeaderElectionConfiguration``; durations in seconds (Go duration strings accepted)."""

    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_lock: str = "leases"
    resource_name: str = "kube-scheduler"
    resource_namespace: str = "kube-system"

    _parse = field_validator("lease_duration", "renew_deadline", "retry_period", mode="before")(_duration)


class ClientConnection(_M):
    """``ClientConnectionConfiguration``: API client QPS (requests/s) and burst.

    ``acceptContentTypes`` and ``contentType`` are accepted for compatibility; the client
    always speaks JSON (records are decoded with msgspec).
    """

    kubeconfig: str = ""
    accept_content_types: str = ""
    content_type: str = "application/vnd.kubernetes.protobuf"
    qps: float = 50.0
    burst: int = 100


class PluginRef(_M):
    """``Plugin``: a plugin name and, at ``score``/``multiPoint``, its score weight (None: default)."""

    name: str
    weight: int | None = None


class PluginSet(_M):
    """``PluginSet``: plugins enabled and disabled at one extension point (``*`` disables all)."""

    enabled: list[PluginRef] = []
    disabled: list[PluginRef] = []


EXTENSION_POINTS = (  # camelCase names, in the order the framework runs them
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)


class Plugins(_M):
    """``Plugins``: one PluginSet per extension point (the runtime merges them over the defaults)."""

    multi_point: PluginSet = PluginSet()
    pre_enqueue: PluginSet = PluginSet()
    queue_sort: PluginSet = PluginSet()
    pre_filter: PluginSet = PluginSet()
    filter: PluginSet = PluginSet()
    post_filter: PluginSet = PluginSet()
    pre_score: PluginSet = PluginSet()
    score: PluginSet = PluginSet()
    reserve: PluginSet = PluginSet()
    permit: PluginSet = PluginSet()
    pre_bind: PluginSet = PluginSet()
    bind: PluginSet = PluginSet()
    post_bind: PluginSet = PluginSet()

    def point(self, camel: str) -> PluginSet:
        """The set of extension point ``camel`` (``"preFilter"``).

        Raises:
            AttributeError: not an extension point name.
        """
        ps: PluginSet = getattr(self, _snake(camel))
        return ps


def _snake(camel: str) -> str:
    """``"preFilter"`` -> ``"pre_filter"``."""
    return "".join("_" + c.lower() if c.isupper() else c for c in camel)


class PluginConfig(_M):
    """``PluginConfig``: raw ``args`` for one plugin, validated by the plugin when built."""

    name: str
    args: dict[str, Any] | None = None


class Profile(_M):
    """``KubeSchedulerProfile``."""

    scheduler_name: str = "default-scheduler"
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    plugins: Plugins | None = None
    plugin_config: list[PluginConfig] = []


class Extender(_M):
    """``Extender``: any fields accepted, so ``validate`` rejects extenders with a clear message."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")
    url_prefix: str = ""


class KubeSchedulerConfiguration(_M):
    """The whole configuration file with kube-scheduler's v1 defaults."""

    api_version: Literal["kubescheduler.config.k8s.io/v1"] = "kubescheduler.config.k8s.io/v1"
    kind: Literal["KubeSchedulerConfiguration"] = "KubeSchedulerConfiguration"
    parallelism: int = Field(default=16, gt=0)
    leader_election: LeaderElection = LeaderElection()
    client_connection: ClientConnection = ClientConnection()
    healthz_bind_address: str = ""
    metrics_bind_address: str = ""
    enable_profiling: bool = True
    enable_contention_profiling: bool = True
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    pod_initial_backoff_seconds: int = Field(default=1, gt=0)
    pod_max_backoff_seconds: int = Field(default=10, gt=0)
    profiles: list[Profile] = []
    extenders: list[Extender] = []
    delay_cache_until_active: bool = False
