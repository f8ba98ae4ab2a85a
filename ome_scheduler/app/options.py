"""Options: kube-scheduler's flags, their validation, and how they apply to the configuration.

Mirrors ``cmd/kube-scheduler/app/options`` (``Options``, ``Validate``, ``ApplyTo``), parsed
with pydantic-settings.

The flags mirror ``cmd/kube-scheduler/app/options`` (``--config``, ``--kubeconfig``, ``--v``,
``--bind-address``, ``--secure-port``, ``--leader-elect*``, ``--kube-api-qps``...). As in
kube-scheduler, when ``--config`` is given only the leader-election flags override the
file. Every flag can also be set through an ``OME_SCHEDULER_*`` environment variable (a flag
on the command line wins; list flags take the same comma-separated values as the flag). A bad
flag or configuration prints one line naming it — the flag, or the environment variable when
that is where the value came from — and exits with status 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import os
import re
import urllib.parse
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, PrivateAttr
from pydantic_settings import BaseSettings, CliApp, CliSettingsSource, NoDecode, SettingsConfigDict

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


def _comma_list(v: Any) -> Any:
    """pydantic pre-validator: ``a,b`` (an environment variable's value) becomes ``["a", "b"]``."""
    if isinstance(v, str):
        return [x.strip() for x in v.split(",") if x.strip()]
    return v


Duration = Annotated[float | None, BeforeValidator(_duration)]
Bool = Annotated[bool | None, BeforeValidator(_bool)]
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_comma_list)]
ENV_PREFIX = "OME_SCHEDULER_"


class Options(BaseSettings):
    """ome-scheduler schedules gangs of pods (kube-scheduler's flags); tools: snapshot, simulate, explain (--help)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
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
    tls_cipher_suites: CommaList | None = Field(
        default=None,
        description="TLS 1.2 cipher suites served, comma-separated IANA names (default: the six ECDHE AEAD suites; "
        "only those are accepted). TLS 1.3 suites are always the three AEAD ones.",
    )
    authorization_always_allow_paths: CommaList = Field(
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

    _given: frozenset[str] = PrivateAttr(default=frozenset())
    """The fields named on the command line (the others came from the environment or defaults)."""

    def origin(self, field: str) -> str:
        """Where ``field``'s value came from, as an error names it: ``"--secure-port" flag``, or
        ``environment variable OME_SCHEDULER_SECURE_PORT`` when the command line did not set it."""
        return origin_of(field, self._given)


def flag_name(field: str) -> str:
    """``secure_port`` -> ``--secure-port`` (``v`` -> ``--v``)."""
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    """``secure_port`` -> ``OME_SCHEDULER_SECURE_PORT``."""
    return ENV_PREFIX + field.upper()


def given_on_command_line(argv: list[str]) -> frozenset[str]:
    """The fields a command line names (``--secure-port=1``, ``--secure-port 1``, ``-v 4``...)."""
    out = set()
    for a in normalize_argv(argv):
        m = re.match(r"^--?([a-z][a-z0-9-]*)", a)
        if m:
            out.add(m.group(1).replace("-", "_"))
    return frozenset(out)


def from_environment(field: str, given: frozenset[str]) -> bool:
    """Whether ``field``'s value came from its environment variable (set, and no flag given)."""
    return field not in given and any(k.upper() == env_name(field) for k in os.environ)


_FLAG_IN_MESSAGE = re.compile(r'"--([a-z][a-z0-9-]*)" flag|--([a-z][a-z0-9-]*)')


def name_origins(message: str, opts: Options) -> str:
    """``message`` with every flag it names whose value came from the environment named as that
    variable instead (``"--tls-cipher-suites" flag`` -> ``environment variable
    OME_SCHEDULER_TLS_CIPHER_SUITES``; ``(--bind-address, --secure-port)`` likewise)."""

    def sub(m: re.Match[str]) -> str:
        field = (m.group(1) or m.group(2)).replace("-", "_")
        if field not in Options.model_fields or not from_environment(field, opts._given):
            return m.group(0)
        return f"environment variable {env_name(field)}" if m.group(1) else env_name(field)

    return _FLAG_IN_MESSAGE.sub(sub, message)


def origin_of(field: str, given: frozenset[str]) -> str:
    """``"--flag" flag``, or the environment variable that set ``field`` when the flag was not given."""
    if from_environment(field, given):
        return f"environment variable {env_name(field)} ({flag_name(field)})"
    return f'"{flag_name(field)}" flag'


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
    opts = CliApp.run(Options, cli_args=normalize_argv(argv), cli_settings_source=source)
    opts._given = given_on_command_line(argv)
    return opts


def validate_flags(opts: Options) -> None:
    """The per-flag checks of ``Options.Validate`` that pydantic's types do not express.

    Raises:
        ConfigError: naming the flag.
    """
    for field in (
        "leader_elect_lease_duration",
        "leader_elect_renew_deadline",
        "leader_elect_retry_period",
        "pod_max_in_unschedulable_pods_duration",
    ):
        value = getattr(opts, field)
        if value is not None and value <= 0:
            raise ConfigError(f'invalid argument "{value:g}s" for {opts.origin(field)}: must be greater than zero')
    lock = opts.leader_elect_resource_lock
    if lock is not None and lock != "leases":
        raise ConfigError(
            f'invalid argument "{lock}" for {opts.origin("leader_elect_resource_lock")}: supported values: "leases"'
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
