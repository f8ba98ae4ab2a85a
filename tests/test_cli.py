"""The command line and configuration errors: bad input exits non-zero with a message naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from e2e.helpers import chart_config
from ome_scheduler.cli import normalize_argv, parse
from ome_scheduler.config.load import DEFAULT_CONFIG, parse_config
from ome_scheduler.framework.runtime import ConfigError
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler


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
        (lambda c: c.__setitem__("profiles", []), "profiles: Required value"),
        (lambda c: c.__setitem__("podInitialBackoffSeconds", 20), "podMaxBackoffSeconds"),
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


def test_missing_credentials_is_a_clear_error(tmp_path: Path) -> None:
    r = run(f"--config={write(tmp_path, chart_config())}", f"--kubeconfig={tmp_path / 'none'}")
    assert r.returncode == 1 and "--kubeconfig" in r.stderr


def test_builtin_default_config_builds() -> None:
    class _Binder:
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            return None

    cfg = parse_config(DEFAULT_CONFIG)
    s = Scheduler(cfg, metrics=Metrics(), binder=_Binder(), recorder=None)
    assert list(s.frameworks) == ["ome-scheduler"]
    with pytest.raises(ConfigError):
        parse_config({"kind": "KubeSchedulerConfiguration", "profiles": [{"schedulerName": ""}]})
