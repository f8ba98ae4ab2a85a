"""Helpers for end-to-end tests: a small API client, an ome-scheduler process, waits and checks.

Everything talks to the real local control plane (``e2e/cluster.py``); the objects tests create
come from ``e2e/manifests.py``. Tests isolate themselves with a namespace and nodes of their own:
node names and the domain label key carry a per-test suffix, so gangs of one test never see
another test's domains.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from e2e import tokens
from e2e.audit import AuditLog
from e2e.cluster import Cluster, node_not_ready
from e2e.manifests import HOSTNAME, POD_GROUP_LABEL, SCHEDULER_NAME, TOPOLOGY_ANNOTATION, pod, pod_group, unique
from e2e.manifests import chart_config as chart_config  # re-exported: tests/ and bench/ import it from here
from e2e.manifests import coscheduling_config as coscheduling_config  # re-exported for bench/run.py
from e2e.manifests import kube_counterpart_config as kube_counterpart_config  # re-exported for bench/run.py
from e2e.processes import free_ports

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "helm" / "ome-scheduler"
RELEASE = "ome-scheduler"
"""The release name of the chart's e2e installs (and so its ServiceAccount, Lease and objects)."""
RELEASE_NS = "ome"
"""The namespace of the chart's e2e installs, as in the user guide."""

T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2) -> T:
    """Poll ``fn`` until it returns something truthy; raise AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Api:
    """Synchronous JSON access to the API server as cluster admin; safe to share between threads.

    Each thread gets its own ``httpx.Client`` and SSL context: httpcore sets the ALPN protocols
    on the context for every new connection, and two threads doing so on one shared context
    can send a malformed ClientHello (the API server answers with a TLS decode_error alert).
    """

    def __init__(self, cluster: Cluster, timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.timeout = timeout
        """Seconds each request may take (a test that pauses the API server waits longer)."""
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()

    @property
    def http(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(
                base_url=self.cluster.server, verify=self.cluster._ssl_context(), timeout=self.timeout
            )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            c.close()

    def _check(self, r: httpx.Response) -> Any:
        if r.status_code >= 400:
            raise AssertionError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def get(self, path: str, **params: str) -> Any:
        return self._check(self.http.get(path, params=params))

    def try_get(self, path: str) -> Any | None:
        r = self.http.get(path)
        return None if r.status_code == 404 else self._check(r)

    def post(self, path: str, body: Any) -> Any:
        return self._check(self.http.post(path, json=body))

    def delete(self, path: str) -> None:
        r = self.http.delete(path)
        if r.status_code not in (200, 202, 404):
            self._check(r)

    def patch(self, path: str, body: Any, ctype: str = "application/merge-patch+json") -> Any:
        return self._check(self.http.patch(path, content=_json(body), headers={"Content-Type": ctype}))

    # ---- objects ----------------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        self.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def delete_namespace(self, name: str, wait: float = 0.0) -> None:
        """Delete a namespace; with ``wait`` > 0, wait up to that many seconds until it is gone
        (its pods deleted), so its clean-up does not bleed into the next test's events."""
        self.delete(f"/api/v1/namespaces/{name}")
        deadline = time.monotonic() + wait
        while wait and time.monotonic() < deadline:
            if self.try_get(f"/api/v1/namespaces/{name}") is None:
                return
            time.sleep(0.2)

    def create_pod(self, pod: Mapping[str, Any]) -> Any:
        ns = pod["metadata"]["namespace"]
        return self.post(f"/api/v1/namespaces/{ns}/pods", pod)

    def delete_pod(self, ns: str, name: str, grace: int = 0) -> None:
        self.delete(f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds={grace}")

    def ungate(self, ns: str, name: str) -> Any:
        """Remove every scheduling gate of a pod (the only change the API allows on gates)."""
        return self.patch(
            f"/api/v1/namespaces/{ns}/pods/{name}",
            [{"op": "remove", "path": "/spec/schedulingGates"}],
            ctype="application/json-patch+json",
        )

    def metrics_token(self, name: str = "metrics-reader", namespace: str = "default", allowed: bool = True) -> str:
        """A real token of a ServiceAccount that may (or may not) ``get`` the ``/metrics`` path."""
        if self.try_get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}") is None:
            self.post(
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
        if allowed:
            rbac = "/apis/rbac.authorization.k8s.io/v1"
            if self.try_get(f"{rbac}/clusterroles/e2e-metrics-reader") is None:
                self.post(
                    f"{rbac}/clusterroles",
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRole",
                        "metadata": {"name": "e2e-metrics-reader"},
                        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
                    },
                )
            crb = f"e2e-metrics-reader-{namespace}-{name}"
            if self.try_get(f"{rbac}/clusterrolebindings/{crb}") is None:
                self.post(
                    f"{rbac}/clusterrolebindings",
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRoleBinding",
                        "metadata": {"name": crb},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": "e2e-metrics-reader",
                        },
                        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                    },
                )
        return self.request_token(name, namespace)

    def request_token(self, name: str, namespace: str = "default", seconds: int = 3600) -> str:
        """A token of ServiceAccount ``namespace/name`` valid ``seconds`` (a TokenRequest), recorded
        in ``e2e.tokens`` (no log may hold it)."""
        tr = self.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        return tokens.remember(str(tr["status"]["token"]))

    def pod(self, ns: str, name: str) -> Any:
        return self.get(f"/api/v1/namespaces/{ns}/pods/{name}")

    def pods(self, ns: str, selector: str | None = None) -> list[Any]:
        params = {"labelSelector": selector} if selector else {}
        return list(self.get(f"/api/v1/namespaces/{ns}/pods", **params)["items"])

    def create_pod_group(self, pg: Mapping[str, Any]) -> Any:
        ns = pg["metadata"]["namespace"]
        return self.post(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups", pg)

    def create_gang(self, ns: str, size: int, topology_key: str, *, name: str = "g") -> list[str]:
        """Create PodGroup ``name`` (minMember ``size``, domain label key ``topology_key``), then its
        members ``m0`` .. ``m<size-1>``, each needing a node of its own (required pod anti-affinity
        on the hostname). Returns the member names."""
        self.create_pod_group(pod_group(name, ns, size, topology_key=topology_key))
        members = [f"m{i}" for i in range(size)]
        for m in members:
            self.create_pod(pod(m, ns, gang=name, anti_affinity_on=HOSTNAME))
        return members

    def delete_pod_group(self, ns: str, name: str) -> None:
        self.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}")

    def patch_pod_group(self, ns: str, name: str, body: Any) -> Any:
        return self.patch(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}", body)

    def create_node(self, node: Mapping[str, Any]) -> Any:
        return self.post("/api/v1/nodes", node)

    def delete_node(self, name: str) -> None:
        self.delete(f"/api/v1/nodes/{name}")

    def patch_node(self, name: str, body: Any) -> Any:
        return self.patch(f"/api/v1/nodes/{name}", body)

    def nodes(self, selector: str | None = None) -> list[Any]:
        params = {"labelSelector": selector} if selector else {}
        return list(self.get("/api/v1/nodes", **params)["items"])

    def events(self, ns: str, pod: str | None = None) -> list[Any]:
        items = self.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
        if pod is not None:
            items = [e for e in items if e.get("regarding", {}).get("name") == pod]
        return list(items)

    def event_notes(self, ns: str, pod: str, reason: str) -> list[str]:
        return [str(e.get("note", "")) for e in self.events(ns, pod) if e.get("reason") == reason]


def helm(cluster: Cluster, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run the cached helm with the admin kubeconfig; the caller checks ``returncode``."""
    cmd = [str(cluster.bin_dir / "helm"), f"--kubeconfig={cluster.kubeconfig}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def remove_release(cluster: Cluster) -> None:
    """Uninstall the chart's e2e release (if any) and delete its namespace, waiting for both."""
    helm(cluster, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--ignore-not-found", "--wait", "--timeout", "120s")
    cluster.kubectl("delete", "namespace", RELEASE_NS, "--ignore-not-found", "--wait=true", timeout=120)


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


# ---- the scheduler under test ----------------------------------------------------------


_FAILURE_LINE = re.compile(
    r'"(?:Unable to schedule pod; no fit; waiting|Error scheduling pod; retrying)" pod="([^"]+)"(?: gang="[^"]*")? '
    r'err=(".*")$'
)


class SchedulerProcess:
    """An ``ome-scheduler`` subprocess with a given configuration and its log file."""

    def __init__(
        self,
        cluster: Cluster,
        config: Mapping[str, Any],
        *,
        name: str = "ome-scheduler",
        v: int = 4,
        extra_args: Sequence[str] = (),
        kubeconfig: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.env = dict(env or {})
        """Extra environment variables (test hooks such as ``OME_SCHEDULER_TEST_STALL_SIGNAL``)."""
        self.dir = cluster.state_dir / "schedulers" / unique(name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.log_path = self.dir / "scheduler.log"
        self.port = free_ports(1)[0]
        self.argv = [
            sys.executable,
            "-m",
            "ome_scheduler",
            f"--config={self.config_path}",
            f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
            f"--v={v}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            *extra_args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> SchedulerProcess:
        """Start the process (its output appended to the log file) without waiting for anything
        (``start`` waits until it has synced)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,
            )
        return self

    def start(self) -> SchedulerProcess:
        self.launch()
        wait_for(
            "ome-scheduler informers synced",
            lambda: self.alive_or_raise() and "informers synced" in self.log(),
            timeout=45,
        )
        return self

    def alive_or_raise(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"ome-scheduler exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, token: str | None = None, scheme: str = "https") -> httpx.Response:
        """GET ``path`` from the scheduler's secure port (certificate not verified: self-signed)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{scheme}://127.0.0.1:{self.port}{path}", headers=headers, verify=False, timeout=10.0)

    def metric(self, name: str, labels: Mapping[str, str] | None = None, token: str | None = None) -> float:
        """A sample's value from ``/metrics`` (admin client certificate is not used: pass a token)."""
        from prometheus_client.parser import text_string_to_metric_families

        r = self.get("/metrics", token=token)
        r.raise_for_status()
        total = 0.0
        for fam in text_string_to_metric_families(r.text):
            for smp in fam.samples:
                if smp.name == name and all(smp.labels.get(k) == v for k, v in (labels or {}).items()):
                    total += smp.value
        return total

    def last_failure(self, ns: str, name: str) -> str:
        """The last FailedScheduling message this scheduler logged for a pod ("" if none).

        Read from the V(2) log lines rather than the pod's PodScheduled condition: two status
        patches of one pod in flight at once may land out of order, leaving an older message in
        the condition."""
        msg = ""
        for line in self.log().splitlines():
            m = _FAILURE_LINE.search(line)
            if m and m.group(1) == f"{ns}/{name}":
                msg = json.loads(m.group(2))
        return str(msg)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> SchedulerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SupervisedScheduler:
    """An ome-scheduler restarted whenever it exits, as the kubelet restarts a container
    (``restartPolicy: Always``; here after ``restart_delay`` seconds, with no crash-loop
    backoff). ``exits`` lists every exit as (monotonic time, exit status); ``process`` is the
    :class:`SchedulerProcess` (one log file for all incarnations)."""

    def __init__(self, process: SchedulerProcess, restart_delay: float = 1.0) -> None:
        self.process = process
        self.restart_delay = restart_delay
        self.exits: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=f"supervise-{process.dir.name}", daemon=True)

    def start(self) -> SupervisedScheduler:
        """Start the scheduler (waiting until its informers synced) and its supervisor."""
        self.process.start()
        self._thread.start()
        return self

    def _supervise(self) -> None:
        while not self._stop.wait(0.1):
            proc = self.process.proc
            if proc is None or proc.poll() is None:
                continue
            self.exits.append((time.monotonic(), proc.returncode))
            if self._stop.wait(self.restart_delay):
                return
            self.process.launch()

    def stop(self) -> None:
        """Stop supervising, then stop the process (SIGTERM, then SIGKILL)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.process.stop()


_DRIFT_DONE = re.compile(r'"Cache comparer (finished|failed)"(?: differences=(\d+))?')


def assert_no_drift(sched: SchedulerProcess, timeout: float = 60.0) -> None:
    """Send SIGUSR2 to ``sched`` and assert that its cache comparer (``ome_scheduler/app/debugger.py``)
    found no difference between its cache, queue and gang state and a fresh LIST.

    Waits up to ``timeout`` seconds for the comparer's summary line; fails listing every
    ``"Cache mismatch"`` line, or when the comparison itself failed.
    """
    start = len(sched.log())
    sched.signal(signal.SIGUSR2)

    def summary() -> re.Match[str] | None:
        sched.alive_or_raise()
        return _DRIFT_DONE.search(sched.log()[start:])

    m = wait_for("the cache comparer's summary", summary, timeout=timeout, interval=0.25)
    text = sched.log()[start:]
    mismatches = [line for line in text.splitlines() if '"Cache mismatch"' in line]
    assert m.group(1) == "finished", f"the cache comparer failed:\n{text[-2000:]}"
    assert int(m.group(2)) == 0 and not mismatches, "cache drift:\n" + "\n".join(mismatches)


MEASUREMENTS: list[tuple[str, float]] = []
"""(what, seconds) recorded by the fault tests; printed at the end of the pytest session."""


def record_measurement(what: str, seconds: float) -> None:
    """Record a measured time (seconds) for the end-of-session summary."""
    MEASUREMENTS.append((what, round(seconds, 2)))


def run_demo_gang(cluster: Cluster, api: Api, timeout: float = 60.0) -> list[dict[str, str]]:
    """Apply the user guide's demo gang (``examples/demo/``, unchanged) in the existing namespace
    ``gang-demo``; wait until both pods run on two nodes of one clique and each has its
    ``Scheduled`` event (written after the Binding). Returns ``[{"name", "node"}]``."""
    cluster.kubectl("apply", "-f", str(REPO / "examples/demo/podgroup.yaml"))
    cluster.kubectl("apply", "-f", str(REPO / "examples/demo/gang.yaml"))

    def running() -> list[dict[str, str]] | None:
        pods = api.pods("gang-demo", "app=gang-demo")
        ok = len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)
        return [{"name": p["metadata"]["name"], "node": p["spec"]["nodeName"]} for p in pods] if ok else None

    placed = wait_for("both demo pods Running", running, timeout=timeout)
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in api.nodes()}
    assert placed[0]["node"] != placed[1]["node"], placed
    cliques = {labels[p["node"]].get("nvidia.com/gpu.clique") for p in placed}
    assert len(cliques) == 1 and None not in cliques, placed
    for p in placed:
        notes = wait_for(
            f"{p['name']}'s Scheduled event",
            lambda p=p: api.event_notes("gang-demo", p["name"], "Scheduled"),
            timeout=15,
        )
        assert f"Successfully assigned gang-demo/{p['name']} to {p['node']}" in notes, notes
    return placed


@contextlib.contextmanager
def temp_nodes(api: Api, nodes: Sequence[Mapping[str, Any]], ready_timeout: float = 30.0) -> Iterator[list[str]]:
    """Create nodes for one test, wait until Ready and untainted, delete them afterwards."""
    names = [n["metadata"]["name"] for n in nodes]
    for n in nodes:
        api.create_node(n)

    def ready() -> bool:
        got = {n["metadata"]["name"]: n for n in api.nodes()}
        return all(name in got and node_not_ready(got[name]) is None for name in names)

    wait_for(f"nodes {names} Ready", ready, timeout=ready_timeout)
    try:
        yield names
    finally:
        for name in names:
            api.delete_node(name)


def audit_events(cluster: Cluster) -> list[dict[str, Any]]:
    """Every event of the apiserver's audit log (``Cluster.audit_log`` and its rotated files),
    in the order written (``audit.k8s.io/v1`` Event objects at Metadata level: ``verb``,
    ``user.username``, ``userAgent``, ``objectRef``, ``responseStatus``,
    ``requestReceivedTimestamp``...; read by ``e2e/audit.py``).

    Raises AssertionError when the cluster writes no audit log (benchmark mode, or a cluster
    started before audit logging was added: ``python -m e2e.cluster down`` and start afresh).
    """
    log = cluster.audit_log
    assert log.exists(), f"no audit log at {log}: restart the cluster (python -m e2e.cluster down)"
    return list(AuditLog(log.parent, dt.datetime.min.replace(tzinfo=dt.UTC)).events())


# ---- assertions ------------------------------------------------------------------------


def node_of(api: Api, ns: str, name: str) -> str:
    return str(api.pod(ns, name)["spec"].get("nodeName") or "")


def wait_bound(api: Api, ns: str, names: Sequence[str], timeout: float = 30.0) -> dict[str, str]:
    """Wait until every named pod has a node; return pod -> node."""

    def bound() -> dict[str, str] | None:
        out = {n: node_of(api, ns, n) for n in names}
        return out if all(out.values()) else None

    return wait_for(f"pods {list(names)} bound", bound, timeout=timeout)


def scheduled_condition(api: Api, ns: str, name: str) -> dict[str, Any] | None:
    for c in api.pod(ns, name).get("status", {}).get("conditions", []) or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


def wait_message(api: Api, ns: str, name: str, substring: str, timeout: float = 30.0) -> str:
    """Wait until the pod's PodScheduled condition or a FailedScheduling event contains ``substring``."""

    def found() -> str | None:
        c = scheduled_condition(api, ns, name)
        if c and substring in c.get("message", ""):
            return str(c["message"])
        for note in api.event_notes(ns, name, "FailedScheduling"):
            if substring in note:
                return note
        return None

    return wait_for(f"message {substring!r} on {ns}/{name}", found, timeout=timeout)


def assert_invariants(api: Api, ns: str, domain_key: str | None = None) -> None:
    """Checks that hold after every e2e test (issue 4):

    * no gang has bound members in two domains (or on a node without the domain label);
    * no node is over-committed (sum of bound pods' requests within allocatable);
    * no gang has fewer than ``minMember`` members bound while some are bound, unless members
      of it are still pending (a newly started gang binds all together or not at all).
    """
    pods = [p for p in api.pods(ns) if p["status"].get("phase") not in ("Succeeded", "Failed")]
    pgs = {
        pg["metadata"]["name"]: pg
        for pg in api.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups")["items"]
    }
    nodes = {n["metadata"]["name"]: n for n in api.nodes()}
    by_gang: dict[str, list[Any]] = {}
    for p in pods:
        g = p["metadata"].get("labels", {}).get(POD_GROUP_LABEL)
        if g:
            by_gang.setdefault(g, []).append(p)
    for g, members in by_gang.items():
        pg = pgs.get(g)
        key = domain_key
        if pg is not None:
            key = pg["metadata"].get("annotations", {}).get(TOPOLOGY_ANNOTATION, key)
        bound = [m for m in members if m["spec"].get("nodeName")]
        if key:
            # Nodes a test already deleted cannot be judged; every check inside a test runs first.
            domains = {
                nodes[m["spec"]["nodeName"]]["metadata"].get("labels", {}).get(key, "<none>")
                for m in bound
                if m["spec"]["nodeName"] in nodes
            }
            assert len(domains) <= 1 and "<none>" not in domains, f"gang {ns}/{g} split across domains {domains}"
        if pg is not None and bound:
            mm = int(pg["spec"].get("minMember", 0))
            assert len(bound) >= mm or len(bound) == len(members), (
                f"gang {ns}/{g} has {len(bound)} of minMember {mm} bound"
            )
    _assert_no_overcommit(api, nodes)


def _assert_no_overcommit(api: Api, nodes: Mapping[str, Any]) -> None:
    from ome_scheduler.util.quantity import milli_value, value

    used: dict[str, dict[str, int]] = {}
    for p in api.get("/api/v1/pods")["items"]:
        n = p["spec"].get("nodeName")
        if not n or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        u = used.setdefault(n, {})
        for c in p["spec"]["containers"]:
            for r, q in (c.get("resources", {}).get("requests") or {}).items():
                u[r] = u.get(r, 0) + (milli_value(q) if r == "cpu" else value(q))
        u["pods"] = u.get("pods", 0) + 1
    for n, u in used.items():
        if n not in nodes:
            continue
        alloc = nodes[n]["status"].get("allocatable", {})
        for r, amount in u.items():
            if r not in alloc:
                continue
            cap = milli_value(alloc[r]) if r == "cpu" else value(alloc[r])
            assert amount <= cap, f"node {n} over-committed on {r}: {amount} > {cap}"


# ---- held gangs and livelock checks ----------------------------------------------------------

HELD_SCHEDULER = "e2e-held"
"""A scheduler name nobody serves: a gang member created with it is a live template that never
reaches Reserve, so its siblings hold their domain at Permit until it is released."""


def create_held_gang(
    api: Api, ns: str, size: int, topology_key: str, *, gang: str = "g", member: str = "m", permit_timeout: int = 600
) -> None:
    """Create a gang that cannot complete until its last member is released with :func:`release_held`.

    PodGroup ``gang`` (minMember ``size``, ``scheduleTimeoutSeconds`` ``permit_timeout``), its
    last member ``<member><size-1>`` for :data:`HELD_SCHEDULER` first (it counts as a template,
    spec §3.3, but nobody schedules it), then ``<member>0`` and the rest for ome-scheduler. (A
    scheduling gate would not do: a gang holds nothing while a member it needs is gated, rule 8.)
    """
    api.create_pod_group(pod_group(gang, ns, size, topology_key=topology_key, timeout=permit_timeout))
    api.create_pod(pod(f"{member}{size - 1}", ns, gang=gang, anti_affinity_on=HOSTNAME, scheduler=HELD_SCHEDULER))
    for i in range(size - 1):
        api.create_pod(pod(f"{member}{i}", ns, gang=gang, anti_affinity_on=HOSTNAME))


def release_held(api: Api, ns: str, name: str, scheduler: str = SCHEDULER_NAME) -> None:
    """Hand a held member to ``scheduler``: delete it and create it again with that scheduler name."""
    held = api.pod(ns, name)
    api.delete_pod(ns, name)
    wait_for(f"{name} deleted", lambda: api.try_get(f"/api/v1/namespaces/{ns}/pods/{name}") is None or None)
    spec = dict(held["spec"])
    spec["schedulerName"] = scheduler
    for k in ("nodeName", "serviceAccountName", "serviceAccount", "volumes", "tolerations", "securityContext"):
        spec.pop(k, None)
    # The API server's own additions (the service account token volume) go with its volumes.
    spec["containers"] = [{k: v for k, v in c.items() if k != "volumeMounts"} for c in spec["containers"]]
    md = {"name": name, "namespace": ns, "labels": held["metadata"].get("labels", {})}
    api.create_pod({"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec})


def wait_at_permit(api: Api, ns: str, name: str, timeout: float = 20.0) -> str:
    """Wait until pod ``name`` waits at Permit (it is nominated); return the nominated node."""
    return str(
        wait_for(
            f"{name} waiting at Permit", lambda: api.pod(ns, name)["status"].get("nominatedNodeName"), timeout=timeout
        )
    )


_KLOG_TIME = re.compile(r"^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) ")
_FAILED = re.compile(r'"(?:Unable to schedule pod; no fit; waiting|Error scheduling pod; retrying)" .*?gang="([^"]+)"')


def failed_attempts_by_gang(log_text: str) -> dict[str, list[float]]:
    """Times (seconds, from the klog header) of every failed scheduling attempt, by gang key."""
    out: dict[str, list[float]] = {}
    for line in log_text.splitlines():
        m = _FAILED.search(line)
        t = _KLOG_TIME.match(line)
        if m is None or t is None:
            continue
        stamp = dt.datetime.strptime(t.group(1), "%m%d %H:%M:%S.%f")
        out.setdefault(m.group(1), []).append(stamp.timestamp())
    return out


def worst_attempt_window(times: Sequence[float], window: float) -> int:
    """The largest number of ``times`` within any ``window`` seconds."""
    best, lo = 0, 0
    ts = sorted(times)
    for hi, t in enumerate(ts):
        while t - ts[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (from ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
