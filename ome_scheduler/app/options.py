"""Options: kube-scheduler's flags, their validation, and how they apply to the configuration.

Mirrors ``cmd/kube-scheduler/app/options`` (``Options``, ``Validate``, ``ApplyTo``), parsed
with pydantic-settings.

The flags mirror ``cmd/kube-scheduler/app/options`` (``--config``, ``--kubeconfig``, ``--v``,
``--bind-address``, ``--secure-port``, ``--leader-elect*``, ``--kube-api-qps``...). As in
kube-scheduler, when ``--config`` is given only the leader-election flags override the
file. Every flag can also be set through an ``OME_SCHEDULER_*`` environment variable. A bad
flag or configuration prints one line naming it and exits with status 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import re
import urllib.parse
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field
from pydantic_settings import BaseSettings, CliApp, CliSettingsSource, SettingsConfigDict

from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.load import validate
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.util.durations import parse_go_duration


def _duration(v: Any) -> Any:
    """pydantic pre-validator: a Go duration string becomes seconds; other values pass through."""
    if isinstance(v, str):
        return parse_go_duration(v)
    return v


def _bool(v: Any) -> Any:
    """pydantic pre-validator: ``true``/``1``/``t``/``yes`` and their negatives become bools."""
    if isinstance(v, str):
        low = v.lower()
        if low in ("true", "1", "t", "yes"):
            return True
        if low in ("false", "0", "f", "no"):
            return False
    return v


Duration = Annotated[float | None, BeforeValidator(_duration)]
Bool = Annotated[bool | None, BeforeValidator(_bool)]


class Options(BaseSettings):
    """ome-scheduler schedules gangs of pods (kube-scheduler's flags); tools: snapshot, simulate, explain (--help)."""

    model_config = SettingsConfigDict(
        env_prefix="OME_SCHEDULER_",
        cli_kebab_case=True,
        cli_prog_name="ome-scheduler",
        cli_implicit_flags=False,
        cli_exit_on_error=False,
        extra="forbid",
    )

    config: str | None = Field(default=None, description="The path to the KubeSchedulerConfiguration file.")
    kubeconfig: str | None = Field(
        default=None, description="Path to kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster)."
    )
    master: str | None = Field(default=None, description="The address of the API server (overrides the kubeconfig).")
    v: int = Field(default=2, ge=0, description="Log verbosity, klog style (4: gang placement trace).")
    logging_format: str = Field(default="text", description='Log format: "text" or "json".')
    bind_address: str = Field(default="0.0.0.0", description="The IP address on which to serve HTTPS.")
    secure_port: int = Field(
        default=10259,
        ge=0,
        le=65535,
        description="HTTPS port for /healthz, /readyz, /livez, /metrics; 0 disables serving.",
    )
    tls_cert_file: str | None = Field(
        default=None, description="x509 certificate for HTTPS (default: self-signed, in memory)."
    )
    tls_private_key_file: str | None = Field(default=None, description="x509 private key matching --tls-cert-file.")
    tls_min_version: str | None = Field(
        default=None, description="Minimum TLS version served: VersionTLS12 (default) or VersionTLS13."
    )
    tls_cipher_suites: list[str] | None = Field(
        default=None,
        description="TLS 1.2 cipher suites served, comma-separated IANA names (default: the six ECDHE AEAD suites; "
        "only those are accepted). TLS 1.3 suites are always the three AEAD ones.",
    )
    authorization_always_allow_paths: list[str] = Field(
        default=["/healthz", "/readyz", "/livez"], description="Paths served without authorization."
    )
    leader_elect: Bool = Field(default=None, description="Start a leader election client and schedule only as leader.")
    leader_elect_lease_duration: Duration = Field(default=None, description="Lease duration (Go duration, e.g. 15s).")
    leader_elect_renew_deadline: Duration = Field(default=None, description="Renew deadline (e.g. 10s).")
    leader_elect_retry_period: Duration = Field(default=None, description="Retry period (e.g. 2s).")
    leader_elect_resource_lock: str | None = Field(default=None, description='Lock type; only "leases".')
    leader_elect_resource_name: str | None = Field(default=None, description="Lease name.")
    leader_elect_resource_namespace: str | None = Field(default=None, description="Lease namespace.")
    kube_api_qps: float | None = Field(default=None, ge=0, description="API client QPS (ignored with --config).")
    kube_api_burst: int | None = Field(default=None, ge=0, description="API client burst (ignored with --config).")
    pod_max_in_unschedulable_pods_duration: Duration = Field(
        default=None,
        validation_alias=AliasChoices("pod_max_in_unschedulable_pods_duration"),
        description="How long a pod may stay unschedulable before it is retried anyway (default 5m).",
    )
    pod_group_status: Bool = Field(
        default=True,
        description="The leader keeps PodGroup status (phase, running, succeeded, failed, scheduleStartTime) and "
        "the ome.io/placement and ome.io/waiting-reason annotations; false when another controller "
        "(scheduler-plugins') keeps PodGroup status.",
    )
    authentication_kubeconfig: str | None = Field(
        default=None, description="Accepted for compatibility; the main kubeconfig is used."
    )
    authorization_kubeconfig: str | None = Field(
        default=None, description="Accepted for compatibility; the main kubeconfig is used."
    )
    profiling: Bool = Field(default=None, description="Accepted for compatibility; profiling is not served.")


# ``-flag``, ``--flag`` or either with ``=value``: pflag accepts all four.
_GO_FLAG = re.compile(r"^-(-?)([a-z][a-z0-9-]*)(=.*)?$")


_BOOL_FLAGS = frozenset({"leader-elect", "profiling", "pod-group-status"})
"""Flags that, as pflag booleans, may be given without a value."""


def normalize_argv(argv: list[str]) -> list[str]:
    """Accept Go (pflag) spellings: ``--v=4``/``-v 4`` become pydantic-settings' ``-v=4`` (one
    letter), and a boolean flag without a value (``--leader-elect``) means ``=true``."""
    out: list[str] = []
    for a in argv:
        m = _GO_FLAG.match(a)
        if m and m.group(2) == "v":
            out.append("-v" + (m.group(3) or ""))
        elif m and m.group(2) in _BOOL_FLAGS and m.group(3) is None:
            out.append(f"--{m.group(2)}=true")
        else:
            out.append(a)
    return out


# Value names in --help, as pflag prints them (instead of pydantic's ``{float,null}``).
_METAVARS = {
    "v": "int",
    "leader_elect": "bool",
    "profiling": "bool",
    "leader_elect_lease_duration": "duration",
    "leader_elect_renew_deadline": "duration",
    "leader_elect_retry_period": "duration",
    "pod_max_in_unschedulable_pods_duration": "duration",
}


def _add_argument(parser: argparse.ArgumentParser, *names: str, **kwargs: Any) -> Any:
    """Present flags as kube-scheduler does: ``--v``, Go-style value names, no ``null`` defaults."""
    dest = kwargs.get("dest", "")
    if names == ("-v",):
        names = ("--v", "-v")
    if dest in _METAVARS:
        kwargs["metavar"] = _METAVARS[dest]
    elif isinstance(kwargs.get("metavar"), str):
        kwargs["metavar"] = kwargs["metavar"].replace("{", "").replace(",null}", "").replace("}", "")
    if isinstance(kwargs.get("help"), str):
        kwargs["help"] = kwargs["help"].replace(" (default: null)", "")
    return parser.add_argument(*names, **kwargs)


def parse(argv: list[str]) -> Options:
    """Parse flags.

    Raises:
        SettingsError: an unknown flag or a bad value; the message names the flag.
    """
    source = CliSettingsSource[Options](Options, add_argument_method=_add_argument, cli_hide_none_type=True)
    return CliApp.run(Options, cli_args=normalize_argv(argv), cli_settings_source=source)


def validate_flags(opts: Options) -> None:
    """The per-flag checks of ``Options.Validate`` that pydantic's types do not express.

    Raises:
        ConfigError: naming the flag.
    """
    for flag, value in (
        ("--leader-elect-lease-duration", opts.leader_elect_lease_duration),
        ("--leader-elect-renew-deadline", opts.leader_elect_renew_deadline),
        ("--leader-elect-retry-period", opts.leader_elect_retry_period),
        ("--pod-max-in-unschedulable-pods-duration", opts.pod_max_in_unschedulable_pods_duration),
    ):
        if value is not None and value <= 0:
            raise ConfigError(f'invalid argument "{value:g}s" for "{flag}" flag: must be greater than zero')
    lock = opts.leader_elect_resource_lock
    if lock is not None and lock != "leases":
        raise ConfigError(
            f'invalid argument "{lock}" for "--leader-elect-resource-lock" flag: supported values: "leases"'
        )


_LEADER_ELECT_FLAGS = (
    ("leader_elect", "leader_elect"),
    ("leader_elect_lease_duration", "lease_duration"),
    ("leader_elect_renew_deadline", "renew_deadline"),
    ("leader_elect_retry_period", "retry_period"),
    ("leader_elect_resource_lock", "resource_lock"),
    ("leader_elect_resource_name", "resource_name"),
    ("leader_elect_resource_namespace", "resource_namespace"),
)
"""(Options attribute, LeaderElection field) of every flag that overrides the file."""


def apply_flags(cfg: KubeSchedulerConfiguration, opts: Options) -> None:
    """Flags that override the file (``Options.ApplyTo``): only leader election with --config.

    Raises:
        ConfigError: a flag is invalid, or the merged leader election is (naming the flags).
    """
    validate_flags(opts)
    le = cfg.leader_election
    # Each --leader-elect* flag overrides its field of the file's leaderElection.
    for flag, field_name in _LEADER_ELECT_FLAGS:
        value = getattr(opts, flag)
        if value is not None:
            setattr(le, field_name, value)
    # With --config, kube-scheduler ignores the client flags (the file's clientConnection wins).
    if opts.config is None:
        if opts.kube_api_qps is not None:
            cfg.client_connection.qps = opts.kube_api_qps
        if opts.kube_api_burst is not None:
            cfg.client_connection.burst = opts.kube_api_burst
    validate(cfg, f"{opts.config or 'default configuration'} with the --leader-elect* flags")


def master_error(master: str) -> str | None:
    """Why ``--master`` is not an API server URL, or None when it is one."""
    u = urllib.parse.urlsplit(master)
    if u.scheme in ("http", "https") and u.netloc:
        return None
    return f'invalid argument "{master}" for "--master" flag: not an http(s) URL such as https://10.0.0.1:6443'
