"""End-to-end: the chart's Grafana dashboard against a real Prometheus (issue 16).

The chart is rendered with its ServiceMonitor, metrics reader and dashboard turned on. Its
metrics-reader ClusterRole and ClusterRoleBinding are applied as rendered, for the scraper's
ServiceAccount ``monitoring/prometheus``. Prometheus (built from the Go module proxy by
``e2e/build-binaries.sh``) scrapes one ome-scheduler process with the scrape configuration the
Prometheus Operator derives from the rendered ServiceMonitor endpoint: its scheme, path,
interval, timeout, TLS settings and bearer token file (the ServiceAccount's token, as the
projected token of a scraper pod), with the ``job`` label the Operator gives (the Service's
name). The target is the local scheduler process: kwok runs no pod a Service could select.

After a gang workload (gangs that bind, one that finds no domain, a Permit timeout), every
query of the dashboard, with Grafana's variables substituted, is evaluated through
Prometheus's HTTP API over the run: each returns data (a series with a number), and every
metric name the dashboard uses is among Prometheus's metric names.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.gangs import HELD_SCHEDULER
from e2e.harness.paths import REPO
from e2e.harness.processes import free_ports
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for
from tests.support.manifests import HOSTNAME, chart_config, domain_key, node, pod, pod_group

CHART = REPO / "helm" / "ome-scheduler"
NS = "ome"
SCRAPER = {"name": "prometheus", "namespace": "monitoring"}
VALUES = {
    "scheduler": {
        "metrics": {
            "reader": {"serviceAccounts": [SCRAPER]},
            # A short interval keeps the test short; everything else is the chart's default.
            "serviceMonitor": {"enabled": True, "interval": "5s", "scrapeTimeout": "4s"},
            "grafanaDashboard": {"enabled": True},
        }
    }
}
METRIC_NAME = re.compile(r"\b((?:ome_scheduler|scheduler|leader_election)_[a-z0-9_]+)\b")
SCHEDULER = "ome-dashboard"


def rendered(cluster: Cluster, tmp: Path) -> list[dict[str, Any]]:
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    argv = [str(cluster.bin_dir / "helm"), "template", "ome-scheduler", str(CHART), "-n", NS]
    out = subprocess.run([*argv, "--kube-version", "1.35.0", "-f", str(values)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (d,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return d


def scrape_config(sm: dict[str, Any], target: str, token_file: Path) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates for endpoint 0 of ``sm`` (static target)."""
    (ep,) = sm["spec"]["endpoints"]
    cfg: dict[str, Any] = {
        "job_name": f"serviceMonitor/{sm['metadata']['namespace']}/{sm['metadata']['name']}/0",
        "scrape_interval": ep["interval"],
        "scrape_timeout": ep["scrapeTimeout"],
        "metrics_path": ep["path"],
        "scheme": ep["scheme"],
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "tls_config": {"insecure_skip_verify": bool(ep["tlsConfig"].get("insecureSkipVerify"))},
        "static_configs": [
            {
                "targets": [target],
                # The Operator's target labels: the job is the Service's name.
                "labels": {"job": "ome-scheduler-metrics", "namespace": NS, "service": "ome-scheduler-metrics"},
            }
        ],
    }
    assert ep["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert ep["port"] == "https-metrics"
    return cfg


class Prometheus:
    """A Prometheus server process on loopback; ``query`` calls its HTTP API."""

    def __init__(self, binary: Path, config: dict[str, Any], workdir: Path) -> None:
        self.port = free_ports(1)[0]
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.log = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        wait_for("prometheus ready", self._ready, timeout=60)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def api(self, path: str, **params: Any) -> Any:
        r = self.http.get(f"/api/v1/{path}", params=params)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", f"{path} {params}: {r.status_code} {r.text[:500]}"
        return body["data"]

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@pytest.fixture(scope="module")
def setup(cluster: Cluster, api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("dashboard")
    docs = rendered(cluster, tmp)
    # The scraper's identity and the chart's grant to it, applied as rendered.
    # The namespace and ServiceAccount stay (test_helm.py uses the same ones); the chart-named
    # RBAC objects are removed at the end.
    if api.try_get(f"/api/v1/namespaces/{SCRAPER['namespace']}") is None:
        api.create_namespace(SCRAPER["namespace"])
    sa_path = f"/api/v1/namespaces/{SCRAPER['namespace']}/serviceaccounts"
    if api.try_get(f"{sa_path}/{SCRAPER['name']}") is None:
        api.post(sa_path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SCRAPER["name"]}})
    rbac = tmp / "rbac.yaml"
    rbac.write_text(
        yaml.safe_dump_all(
            [
                one(docs, "ClusterRole", "ome-scheduler-metrics-reader"),
                one(docs, "ClusterRoleBinding", "ome-scheduler-metrics-reader"),
            ]
        )
    )
    cluster.kubectl("apply", "-f", str(rbac))
    try:
        yield from _run(cluster, api, tmp, docs)
    finally:
        # Leave no chart-named object behind: a later helm install would refuse to adopt it.
        cluster.kubectl("delete", "-f", str(rbac), "--ignore-not-found")


def _run(cluster: Cluster, api: Api, tmp: Path, docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    token_file = tmp / "token"
    token_file.write_text(api.request_token(SCRAPER["name"], SCRAPER["namespace"]))
    cfg = chart_config(scheduler_name=SCHEDULER, leader_elect=True, gang_args={"gcIntervalSeconds": 2})
    with SchedulerProcess(cluster, cfg, v=2) as sched:
        sm = one(docs, "ServiceMonitor", "ome-scheduler")
        job = scrape_config(sm, f"127.0.0.1:{sched.port}", token_file)
        prom = Prometheus(cluster.bin_dir / "prometheus", {"scrape_configs": [job]}, tmp)
        try:
            dash = json.loads(one(docs, "ConfigMap", "ome-scheduler-grafana-dashboard")["data"]["ome-scheduler.json"])
            yield {"prometheus": prom, "scheduler": sched, "dashboard": dash, "interval": job["scrape_interval"]}
        finally:
            prom.stop()


def gang_workload(api: Api, sched: SchedulerProcess, ns: str, interval: float) -> None:
    """Gangs that bind, one for which no domain has room, more gangs binding once the scraper
    has seen the first ones (a rate needs two samples of a series, and a labelled histogram's
    series appears only with its first observation), and one that times out at Permit."""
    key, dk = domain_key("dash")
    nodes = [node(f"{key}-{d}{i}", {dk: d}) for d, n in {"a": 2, "b": 2, "c": 3, "d": 3}.items() for i in range(n)]

    def gang(name: str, size: int, *, timeout: int = 300, held_last: bool = False) -> None:
        api.create_pod_group(pod_group(name, ns, size, topology_key=dk, timeout=timeout))
        order = [size - 1, *range(size - 1)] if held_last else list(range(size))  # the held member first
        for i in order:
            sched = HELD_SCHEDULER if held_last and i == size - 1 else SCHEDULER
            api.create_pod(pod(f"{name}-{i}", ns, gang=name, anti_affinity_on=HOSTNAME, scheduler=sched))

    with temp_nodes(api, nodes):
        gang("g1", 2)
        gang("g2", 2)
        gang("big", 4)
        wait_bound(api, ns, ["g1-0", "g1-1", "g2-0", "g2-1"])
        wait_for(
            "big-0 found no domain", lambda: f"no domain has room for gang {ns}/big" in sched.last_failure(ns, "big-0")
        )
        time.sleep(3 * interval)
        gang("g3", 2)
        wait_bound(api, ns, ["g3-0", "g3-1"])
        # A gang whose last member nobody schedules waits at Permit and is unwound after 2 s.
        gang("slow", 3, timeout=2, held_last=True)
        # Whichever member reached Permit first times out; the other is unwound with it.
        wait_for(
            "a slow member timed out",
            lambda: any(
                "rejected due to timeout after waiting 2s" in sched.last_failure(ns, m) for m in ("slow-0", "slow-1")
            ),
        )
        # The domain gauges refresh every 10 s; leave the scraper a few intervals after them.
        time.sleep(max(15.0, 3 * interval))


def substitute(expr: str, job: str, rate_interval: str) -> str:
    """Grafana's variables as Grafana would expand them for this Prometheus."""
    return (
        expr.replace("$__rate_interval", rate_interval)
        .replace('"$job"', json.dumps(re.escape(job)))
        .replace('"$topology_key"', '".*"')
    )


def test_every_dashboard_query_returns_data_from_a_real_prometheus(setup: dict[str, Any], api: Api, ns: str) -> None:
    prom: Prometheus = setup["prometheus"]

    def target_up() -> bool:
        targets = prom.api("targets")["activeTargets"]
        if not targets:
            return False  # the static target is not loaded yet
        (t,) = targets
        if t["health"] == "down" and t.get("lastError"):
            # A 401/403 here means the chart's RBAC or the token file did not authorise the scrape.
            raise AssertionError(f"scrape failed: {t['lastError']}")
        return bool(t["health"] == "up")

    wait_for("the scheduler's /metrics scraped with the bearer token", target_up, timeout=60)
    start = time.time()
    gang_workload(api, setup["scheduler"], ns, float(setup["interval"].rstrip("s")))
    end = time.time()

    dash = setup["dashboard"]
    # The job picker: label_values(ome_scheduler_pinned_groups, job).
    jobs = prom.api("label/job/values", **{"match[]": "ome_scheduler_pinned_groups"})
    assert jobs == ["ome-scheduler-metrics"]
    keys = prom.api("label/topology_key/values", **{"match[]": 'ome_scheduler_domain_free_nodes{job=~".*"}'})
    assert keys, "no topology_key values for the domain picker"
    # Grafana's $__rate_interval: max(4 x scrape interval, interval + scrape interval).
    interval_s = int(setup["interval"].rstrip("s"))
    rate_interval = f"{4 * interval_s}s"
    names = set(prom.api("label/__name__/values"))
    failures = []
    checked = 0
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            expr = substitute(t["expr"], jobs[0], rate_interval)
            used = set(METRIC_NAME.findall(expr))
            missing = used - names
            if missing:
                failures.append(f"{panel['title']}: metrics not in Prometheus: {sorted(missing)}")
            data = prom.api("query_range", query=expr, start=start - 10, end=end + 1, step=interval_s)
            values = [float(v) for series in data["result"] for _, v in series["values"]]
            if not any(v == v for v in values):  # NaN != NaN
                failures.append(f"{panel['title']}: no data for {expr}")
            checked += 1
    assert checked >= 15
    assert not failures, "\n".join(failures)
    # And the leader panel says this single replica leads.
    leader = prom.api("query", query=f'max(leader_election_master_status{{job="{jobs[0]}"}})')["result"]
    assert leader and float(leader[0]["value"][1]) == 1.0
