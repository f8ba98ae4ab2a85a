"""End-to-end: API server outages while gangs form (issue 12, item 2).

Two ome-scheduler replicas run as the chart runs them (leader election on, kube-scheduler's
15 s lease, 10 s renew deadline, 2 s retry) and are restarted whenever they exit, as the
kubelet would (``SupervisedScheduler``, counting exits). While 10 gangs of 8 and 10 standalone
pods are being created, the control plane breaks:

* kube-apiserver is stopped with SIGSTOP for 70 s (it keeps its sockets and answers nothing;
  the creating client waits), then continued;
* kube-apiserver is restarted (SIGTERM, SIGKILL after 5 s if it has not exited: it stops
  listening at once but can take 20 s and more to exit; then started again on the same port);
* etcd is restarted the same way.

The creating client retries connection failures and 5xx answers, as any client would.

Expected after each: every pod bound, every gang whole in one domain, no pod bound twice (at
most one ``Scheduled`` event), no node over-committed, at most one exit (the leader losing its
lease) and never another exit status than 1, and zero cache drift in both replicas. The time
from the end of the fault to the last bind is recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.invariants import assert_invariants
from e2e.harness.measurements import record_measurement
from e2e.harness.scheduler import SchedulerProcess, SupervisedScheduler, assert_no_drift
from e2e.harness.waits import temp_nodes, wait_for
from tests.support.manifests import chart_config, domain_key, node, pod, pod_group, unique

GANGS = 10
SIZE = 8
STANDALONE = 10
DOMAINS = GANGS + 1
SIGSTOP_SECONDS = 70.0


@dataclass
class Replicas:
    """The two supervised replicas, their scheduler name and the nodes' domain label key."""

    name: str
    domain_key: str
    replicas: list[SupervisedScheduler] = field(default_factory=list)

    def exits(self, since: float) -> list[tuple[float, int]]:
        """Exits of either replica at or after ``since`` (monotonic seconds)."""
        return sorted(e for r in self.replicas for e in r.exits if e[0] >= since)


@pytest.fixture(scope="module")
def replicas(cluster: Cluster, api: Api) -> Iterator[Replicas]:
    """11 domains of 2 nodes with 4 GPUs each, and two supervised replicas with leader election."""
    name = unique("outage")
    key, dk = domain_key("out")
    nodes = [node(f"{key}-d{d:02d}-{i}", {dk: f"d{d:02d}"}, gpu=4) for d in range(DOMAINS) for i in range(2)]
    cfg = chart_config(scheduler_name=name, leader_elect=True, lease_namespace="kube-system")
    with temp_nodes(api, nodes, ready_timeout=90):
        rs = Replicas(name, dk)
        try:
            for r in ("a", "b"):
                rs.replicas.append(SupervisedScheduler(SchedulerProcess(cluster, cfg, name=f"outage-{r}", v=2)).start())
            wait_for("a leader", lambda: _holder(api, name), timeout=30)
            yield rs
        finally:
            for s in rs.replicas:
                s.stop()


def _holder(api: Api, lease: str) -> str:
    got = api.try_get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}")
    return str((got or {}).get("spec", {}).get("holderIdentity") or "")


def _retrying(create: Callable[[dict[str, Any]], Any], obj: dict[str, Any], timeout: float = 120.0) -> None:
    """Create ``obj`` as a client would through an outage: retry connection failures and 5xx
    answers; a 409 (a retry of a create that did land) counts as created."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            create(obj)
            return
        except httpx.TransportError:
            pass
        except AssertionError as exc:  # Api's error: "<METHOD> <path>: <code> <body>"
            code = str(exc).split(": ", 1)[1][:3] if ": " in str(exc) else ""
            if code == "409":
                return
            if not code.startswith("5"):
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"could not create {obj['metadata']['name']} within {timeout:g} s")
        time.sleep(0.5)


def _workload_with_fault(cluster: Cluster, ns: str, rs: Replicas, fault: Callable[[], None], label: str) -> None:
    """Create the gangs and standalone pods, break the control plane after the third gang, and
    check the outcome (module docstring)."""
    slow = Api(cluster, timeout=SIGSTOP_SECONDS + 60)  # the creator waits out the outage
    names: list[str] = []
    third_gang = threading.Event()
    failed: list[BaseException] = []

    def create() -> None:
        try:
            for g in range(GANGS):
                _retrying(slow.create_pod_group, pod_group(f"g{g}", ns, SIZE, topology_key=rs.domain_key))
                for i in range(SIZE):
                    _retrying(slow.create_pod, pod(f"g{g}-{i}", ns, gang=f"g{g}", scheduler=rs.name))
                    names.append(f"g{g}-{i}")
                _retrying(slow.create_pod, pod(f"s{g}", ns, gpu=0, cpu="100m", scheduler=rs.name))
                names.append(f"s{g}")
                if g == 2:
                    third_gang.set()
                time.sleep(0.2)
        except BaseException as exc:
            failed.append(exc)
            third_gang.set()

    creator = threading.Thread(target=create, name="creator", daemon=True)
    t_start = time.monotonic()
    creator.start()
    try:
        assert third_gang.wait(60), "the first gangs were not created"
        fault()
        t_back = time.monotonic()
        creator.join(SIGSTOP_SECONDS + 90)
        assert not creator.is_alive() and not failed, f"creating the workload failed: {failed}"
        api = Api(cluster)  # connections of before the fault may be dead

        def all_bound() -> bool:
            pods = api.pods(ns)
            return len(pods) == len(names) and all(p["spec"].get("nodeName") for p in pods)

        wait_for("every pod bound", all_bound, timeout=180, interval=0.25)
        recovery = time.monotonic() - t_back
        record_measurement(f"{label}: from recovery to the last bind", recovery)
        for p in names:
            assert len(api.event_notes(ns, p, "Scheduled")) <= 1, f"{p} bound twice"
        assert_invariants(api, ns, rs.domain_key)
        exits = rs.exits(t_start)
        assert len(exits) <= 1 and all(code == 1 for _, code in exits), f"exits during {label}: {exits}"
        for s in rs.replicas:

            def running(proc: SchedulerProcess = s.process) -> bool:
                return proc.proc is not None and proc.proc.poll() is None

            wait_for(f"{s.process.dir.name} running", running)
            assert_no_drift(s.process)
        api.close()
    finally:
        slow.close()


def test_sigstop_kube_apiserver_for_70_s(cluster: Cluster, ns: str, replicas: Replicas) -> None:
    def pause() -> None:
        cluster.pause_component("kube-apiserver")
        try:
            time.sleep(SIGSTOP_SECONDS)
        finally:
            cluster.resume_component("kube-apiserver")

    _workload_with_fault(cluster, ns, replicas, pause, "kube-apiserver SIGSTOP 70 s")


def test_restart_kube_apiserver(cluster: Cluster, ns: str, replicas: Replicas) -> None:
    def restart() -> None:
        away = cluster.restart_component("kube-apiserver", stop_timeout=5.0)
        record_measurement("kube-apiserver restart: away", away)

    _workload_with_fault(cluster, ns, replicas, restart, "kube-apiserver restart")


def test_restart_etcd(cluster: Cluster, ns: str, replicas: Replicas) -> None:
    def restart() -> None:
        away = cluster.restart_component("etcd", stop_timeout=5.0)
        record_measurement("etcd restart: away", away)

    _workload_with_fault(cluster, ns, replicas, restart, "etcd restart")
