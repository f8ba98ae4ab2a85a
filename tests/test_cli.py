"""The command line and configuration errors: bad input exits non-zero with a message naming it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ome_scheduler.app.options import normalize_argv, parse
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.load import DEFAULT_CONFIG, parse_config
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import DiscardRecorder, Scheduler
from tests.support.manifests import chart_config


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ome_scheduler", *args], capture_output=True, text=True, timeout=60, check=False
    )


def write(tmp_path: Path, cfg: object) -> str:
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(cfg) if not isinstance(cfg, str) else cfg)
    return str(p)


def test_flags_parse_like_kube_scheduler() -> None:
    o = parse(
        [
            "--config",
            "/x",
            "--v=4",
            "--leader-elect=false",
            "--secure-port=10260",
            "--leader-elect-lease-duration=20s",
            "--authorization-always-allow-paths=/healthz,/metrics",
        ]
    )
    assert o.v == 4 and o.leader_elect is False and o.secure_port == 10260
    assert o.leader_elect_lease_duration == 20.0
    assert o.authorization_always_allow_paths == ["/healthz", "/metrics"]
    assert normalize_argv(["-v=3", "--v", "5"]) == ["-v=3", "-v", "5"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus=1"], "unrecognized arguments: --bogus=1"),
        (["--secure-port=abc"], '"--secure-port"'),
        (["--leader-elect-lease-duration=15x"], '"--leader-elect-lease-duration"'),
        (["--leader-elect=maybe"], '"--leader-elect"'),
        (["--logging-format=yaml"], "--logging-format"),
    ],
)
def test_bad_flags_exit_with_a_message(args: list[str], needle: str) -> None:
    r = run(*args)
    assert r.returncode != 0
    assert needle in r.stderr


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda c: c["profiles"][0].__setitem__("schedulerNmae", "x"), 'unknown field "profiles[0].schedulerNmae"'),
        (lambda c: c.__setitem__("apiVersion", "kubescheduler.config.k8s.io/v1beta3"), "apiVersion: Unsupported value"),
        (
            lambda c: c["profiles"][0]["plugins"]["multiPoint"]["enabled"].append({"name": "NoSuchPlugin"}),
            'plugin "NoSuchPlugin" does not exist',
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"][0]["args"].__setitem__("topologyKey", "gpu clique"),
            'topologyKey "gpu clique" is not a valid node label key',
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"][0]["args"].pop("gcIntervalSeconds"),
            "gcIntervalSeconds must be configured",
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"][1]["args"]["scoringStrategy"]["resources"][0].__setitem__(
                "weight", 101
            ),
            "resource weight of cpu should be in range [1, 100]",
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"][1]["args"]["scoringStrategy"].__setitem__("type", "Packed"),
            'scoringStrategy.type: Unsupported value: "Packed"',
        ),
        (lambda c: c["profiles"][0].__setitem__("percentageOfNodesToScore", 101), "percentageOfNodesToScore"),
        (
            lambda c: c["leaderElection"].update({"leaderElect": True, "leaseDuration": "5s"}),
            "leaseDuration must be greater than renewDeadline",
        ),
        (lambda c: c["profiles"].append({"schedulerName": ""}), "profiles[1].schedulerName: Required value"),
        (lambda c: c.pop("apiVersion"), "Object 'ApiVersion' is missing"),
        (lambda c: c.pop("kind"), "Object 'Kind' is missing"),
        (
            lambda c: c.__setitem__("kind", "KubeProxyConfiguration"),
            'kind: Unsupported value: "KubeProxyConfiguration"',
        ),
        (
            lambda c: c["leaderElection"].update({"leaderElect": True, "retryPeriod": "9s"}),
            "renewDeadline must be greater than retryPeriod*JitterFactor",
        ),
        (lambda c: c.__setitem__("podInitialBackoffSeconds", 20), "podMaxBackoffSeconds"),
        (
            lambda c: c["leaderElection"].update({"leaderElect": True, "leaseDuration": "99999999999h"}),
            "leaderElection.leaseDuration: Invalid value: must be at most 2147483647s",
        ),
        (
            lambda c: c["leaderElection"].update({"leaderElect": True, "resourceNamespace": "Bad_NS!"}),
            'leaderElection.resourceNamespace: Invalid value: "Bad_NS!"',
        ),
        (lambda c: c.__setitem__("clientConnection", {"qps": float("nan")}), "clientConnection.qps: Invalid value"),
    ],
)
def test_invalid_configuration_names_the_argument(tmp_path: Path, mutate: object, needle: str) -> None:
    cfg = chart_config()
    mutate(cfg)  # type: ignore[operator]
    r = run(f"--config={write(tmp_path, cfg)}", "--kubeconfig=/nonexistent")
    assert r.returncode == 1, r.stderr
    assert "invalid configuration" in r.stderr and needle in r.stderr, r.stderr


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    r = run("--config=/nonexistent/config.yaml")
    assert r.returncode == 1 and "--config: cannot read /nonexistent/config.yaml" in r.stderr
    r = run(f"--config={write(tmp_path, 'a: [unclosed')}")
    assert r.returncode == 1 and "is not valid YAML" in r.stderr
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"a:\xff\xfe\n")
    r = run(f"--config={binary}")
    assert r.returncode == 1 and "is not UTF-8 text" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run(f"--config={write(tmp_path, 'a: ' + '[' * 5000 + ']' * 5000)}")
    assert r.returncode == 1 and "nested too deeply" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_file_without_profiles_gets_the_builtin_profile(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"qps": 100},
        },
        "f",
    )
    assert [p.scheduler_name for p in cfg.profiles] == ["ome-scheduler"]
    assert cfg.client_connection.qps == 100


def test_missing_credentials_is_a_clear_error(tmp_path: Path) -> None:
    r = run(f"--config={write(tmp_path, chart_config())}", f"--kubeconfig={tmp_path / 'none'}", "--secure-port=0")
    assert r.returncode == 1 and f"cannot read kubeconfig {tmp_path / 'none'} (--kubeconfig): no such file" in r.stderr
    garbage = tmp_path / "kubeconfig"
    garbage.write_text("just a string")
    r = run(f"--kubeconfig={garbage}", "--secure-port=0")
    assert r.returncode == 1 and "is not a kubeconfig" in r.stderr, r.stderr
    r = run("--master=not-a-url", "--secure-port=0")
    assert r.returncode == 1 and '"--master" flag: not an http(s) URL' in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bind-address=not-an-address"], "cannot listen on not-an-address:"),
        (["--tls-cert-file=/nonexistent.pem", "--tls-private-key-file=/nonexistent.key"], "/nonexistent.pem"),
        (["--tls-cert-file=/etc/hostname"], "must be given together"),
        (["--tls-cert-file=/etc/hostname", "--tls-private-key-file=/etc/hostname"], "not a PEM certificate"),
        (["--tls-min-version=VersionTLS10"], '"--tls-min-version" flag: TLS 1.0 and 1.1 are not served'),
        (
            ["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"],
            'invalid argument "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA" for "--tls-cipher-suites" flag',
        ),
        (["--leader-elect-lease-duration=-5s"], '"--leader-elect-lease-duration" flag: must be greater than zero'),
        (["--leader-elect-renew-deadline=20s"], "leaseDuration must be greater than renewDeadline"),
        (["--leader-elect-resource-lock=endpoints"], '"--leader-elect-resource-lock" flag: supported values'),
        (["--leader-elect-retry-period=1h"], "renewDeadline must be greater than retryPeriod*JitterFactor"),
        (["--pod-max-in-unschedulable-pods-duration=-1s"], "must be greater than zero"),
        (["--leader-elect-lease-duration=99999999999999h"], "leaderElection.leaseDuration: Invalid value"),
        (["--leader-elect-resource-namespace=Bad NS"], 'leaderElection.resourceNamespace: Invalid value: "Bad NS"'),
    ],
)
def test_bad_serving_and_leader_election_flags_fail_before_connecting(args: list[str], needle: str) -> None:
    r = run("--kubeconfig=/nonexistent", *args)
    assert r.returncode == 1 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_bare_boolean_flags_mean_true() -> None:
    assert normalize_argv(["--leader-elect", "--profiling", "--v", "4"]) == [
        "--leader-elect=true",
        "--profiling=true",
        "-v",
        "4",
    ]
    assert parse(["--leader-elect"]).leader_elect is True
    assert parse(["--leader-elect=false"]).leader_elect is False


def test_pod_group_status_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse([]).pod_group_status is True
    assert parse(["--pod-group-status"]).pod_group_status is True
    assert parse(["--pod-group-status=false"]).pod_group_status is False
    monkeypatch.setenv("OME_SCHEDULER_POD_GROUP_STATUS", "false")
    assert parse([]).pod_group_status is False


def test_a_busy_secure_port_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run("--bind-address=127.0.0.1", f"--secure-port={port}", "--kubeconfig=/nonexistent")
    assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "Address already in use" in r.stderr


def test_builtin_default_config_builds() -> None:
    cfg = parse_config(DEFAULT_CONFIG)
    s = Scheduler(cfg, metrics=Metrics(), binder=None, recorder=DiscardRecorder())
    assert list(s.frameworks) == ["ome-scheduler"]
    with pytest.raises(ConfigError):
        parse_config(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": ""}],
            }
        )


def test_tls_flags_take_kube_style_values() -> None:
    o = parse(
        [
            "--tls-min-version=VersionTLS13",
            "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
        ]
    )
    assert o.tls_min_version == "VersionTLS13"
    assert o.tls_cipher_suites == ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]


# ---- issue 30: strict configuration types, errors that name the environment variable ----------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            {"podInitialBackoffSeconds": True},
            "podInitialBackoffSeconds: Invalid value: True: Input should be a valid integer",
        ),
        ({"podInitialBackoffSeconds": 10**40}, "podInitialBackoffSeconds: Invalid value: 1000"),
        ({"podMaxBackoffSeconds": 1.5}, "podMaxBackoffSeconds: Invalid value: 1.5: Input should be a valid integer"),
        ({"parallelism": "16"}, "parallelism: Invalid value: '16': Input should be a valid integer"),
        (
            {"parallelism": 2**31},
            "parallelism: Invalid value: 2147483648: Input should be less than or equal to 2147483647",
        ),
        (
            {"clientConnection": {"qps": 1e39}},
            "clientConnection.qps: Invalid value: 1e+39: Value error, out of range for a float32",
        ),
        (
            {"clientConnection": {"qps": False}},
            "clientConnection.qps: Invalid value: False: Input should be a valid number",
        ),
        ({"clientConnection": {"burst": 10**12}}, "clientConnection.burst: Invalid value: 1000000000000"),
        (
            {"leaderElection": {"leaseDuration": 15}},
            'leaderElection.leaseDuration: Invalid value: 15: Value error, a duration must be a string such as "15s"',
        ),
        (
            {"leaderElection": {"leaderElect": "true"}},
            "leaderElection.leaderElect: Invalid value: 'true': Input should be a valid boolean",
        ),
        (
            {"profiles": [{"schedulerName": 7}]},
            "profiles[0].schedulerName: Invalid value: 7: Input should be a valid string",
        ),
    ],
)
def test_configuration_types_are_strict_as_gos_decoder(extra: dict[str, object], needle: str) -> None:
    """A boolean is no number, a string no number or boolean, a fraction no integer, and a number
    beyond its Go type (int32, int64, float32) is refused; durations are strings (metav1.Duration)."""
    base = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
    with pytest.raises(ConfigError) as err:
        parse_config({**base, **extra})
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("name", "args", "needle"),
    [
        ("OMEGangPack", {"gcIntervalSeconds": True}, "decode OMEGangPack args: Expected `int | null`, got `bool`"),
        ("InterPodAffinity", {"hardPodAffinityWeight": True}, "hardPodAffinityWeight"),
        ("InterPodAffinity", {"hardPodAffinityWeight": 10**40}, "hardPodAffinityWeight: Invalid value: 1000"),
        (
            "PodTopologySpread",
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 2**40, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}],
            },
            "defaultConstraints[0].maxSkew: Invalid value: 1099511627776: out of range for an int32",
        ),
    ],
)
def test_plugin_arguments_are_decoded_as_their_json(name: str, args: dict[str, object], needle: str) -> None:
    cfg = yaml.safe_load(yaml.safe_dump(DEFAULT_CONFIG))
    pcs = cfg["profiles"][0]["pluginConfig"]
    if name == "OMEGangPack":
        args = {**next(p for p in pcs if p["name"] == name)["args"], **args}
    pcs[:] = [p for p in pcs if p["name"] != name] + [{"name": name, "args": args}]
    with pytest.raises(ConfigError) as err:
        Scheduler(parse_config(cfg), metrics=Metrics(), binder=None, recorder=DiscardRecorder())
    assert needle in str(err.value)


def run_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "ome_scheduler", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize(
    ("env", "args", "needle"),
    [
        (
            {"OME_SCHEDULER_SECURE_PORT": "abc"},
            (),
            'invalid argument "abc" for environment variable OME_SCHEDULER_SECURE_PORT (--secure-port)',
        ),
        ({"OME_SCHEDULER_V": "-1"}, (), "environment variable OME_SCHEDULER_V (--v)"),
        (
            {"OME_SCHEDULER_LEADER_ELECT_LEASE_DURATION": "-1s"},
            ("--secure-port=0", "--kubeconfig=/nonexistent"),
            'invalid argument "-1s" for environment variable OME_SCHEDULER_LEADER_ELECT_LEASE_DURATION (--leader-elect-lease-duration)',
        ),
        (
            {"OME_SCHEDULER_KUBECONFIG": "/nonexistent"},
            ("--secure-port=0",),
            "cannot read kubeconfig /nonexistent (OME_SCHEDULER_KUBECONFIG)",
        ),
        (
            {"OME_SCHEDULER_MASTER": "ftp://x"},
            ("--secure-port=0",),
            'invalid argument "ftp://x" for environment variable OME_SCHEDULER_MASTER',
        ),
        (
            {"OME_SCHEDULER_TLS_CIPHER_SUITES": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,bogus"},
            ("--bind-address=127.0.0.1", "--secure-port=0", "--kubeconfig=/nonexistent"),
            "cannot read kubeconfig /nonexistent (--kubeconfig)",  # port 0: TLS unused; the flag is named as a flag
        ),
        # A flag on the command line wins over the variable, and its error names the flag.
        (
            {"OME_SCHEDULER_SECURE_PORT": "abc"},
            ("--secure-port=xyz",),
            'invalid argument "xyz" for "--secure-port" flag',
        ),
    ],
)
def test_errors_name_the_environment_variable_that_set_the_value(
    env: dict[str, str], args: tuple[str, ...], needle: str
) -> None:
    r = run_env(env, *args)
    assert r.returncode != 0 and needle in r.stderr, r.stderr


def test_list_flags_from_the_environment_take_comma_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OME_SCHEDULER_AUTHORIZATION_ALWAYS_ALLOW_PATHS", "/healthz,/metrics")
    assert parse([]).authorization_always_allow_paths == ["/healthz", "/metrics"]
    assert parse(["--authorization-always-allow-paths=/livez"]).authorization_always_allow_paths == ["/livez"]
