"""``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``) as pydantic models.

Mirrors ``k8s.io/kube-scheduler/config/v1/types.go`` and the defaults of
``pkg/scheduler/apis/config/v1/defaults.go``. Like kube-scheduler's strict decoder, unknown
fields are errors (``extra="forbid"``), so a typo such as ``schedulerNmae`` stops startup
with a message that names it. Types are strict as Go's JSON decoding is: a boolean is not a
number, a string is not a number or a boolean, a number with a fraction is not an integer, and
a number beyond its Go type (``int32``, ``int64``, ``float32``) is refused; a duration is a
string (``metav1.Duration``: ``"15s"``). Plugin ``args`` stay plain mappings here; the
framework decodes and validates them when it builds the plugin (``validation_pluginargs``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from ome_scheduler.util.durations import parse_go_duration

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38


def _float32(v: float) -> float:
    """A finite number a Go ``float32`` holds (``encoding/json`` refuses one beyond it)."""
    if math.isfinite(v) and abs(v) > FLOAT32_MAX:
        raise ValueError(f"out of range for a float32 (at most {FLOAT32_MAX:.7g})")
    return v


Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
"""A Go ``int32``."""
Int64 = Annotated[int, Field(ge=-(2**63), le=INT64_MAX)]
"""A Go ``int64``."""
Float32 = Annotated[float, AfterValidator(_float32)]
"""A Go ``float32`` (non-finite values are left to :func:`~ome_scheduler.config.load.validate`)."""


class _M(BaseModel):
    """Base model: camelCase keys (snake_case names accepted too), unknown fields rejected,
    values of the wrong JSON type refused (``strict``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True)


def _duration(v: Any) -> float:
    """Seconds from a Go duration string (``"15s"``), as ``metav1.Duration`` decodes it.

    Raises:
        ValueError: not a string (a number or a boolean), or not a duration.
    """
    if isinstance(v, float) and not isinstance(v, bool):
        return v  # already seconds (a model built in code, not from a file)
    if isinstance(v, str):
        return parse_go_duration(v)
    raise ValueError(f'a duration must be a string such as "15s", not {type(v).__name__} {v!r}')


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
    qps: Float32 = 50.0
    burst: Int32 = 100


class PluginRef(_M):
    """``Plugin``: a plugin name and, at ``score``/``multiPoint``, its score weight (None: default)."""

    name: str
    weight: Int32 | None = None


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
    percentage_of_nodes_to_score: Int32 | None = Field(default=None, ge=0, le=100)
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
    parallelism: Int32 = Field(default=16, gt=0)
    leader_election: LeaderElection = LeaderElection()
    client_connection: ClientConnection = ClientConnection()
    healthz_bind_address: str = ""
    metrics_bind_address: str = ""
    enable_profiling: bool = True
    enable_contention_profiling: bool = True
    percentage_of_nodes_to_score: Int32 | None = Field(default=None, ge=0, le=100)
    pod_initial_backoff_seconds: Int64 = Field(default=1, gt=0)
    pod_max_backoff_seconds: Int64 = Field(default=10, gt=0)
    profiles: list[Profile] = []
    extenders: list[Extender] = []
    delay_cache_until_active: bool = False
