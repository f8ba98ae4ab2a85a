"""End-to-end: leader election, failover and the secure metrics endpoint (issue 5).

Two ome-scheduler processes share one Lease (kube-scheduler's defaults: 15 s lease, 10 s
renew deadline, 2 s retry). Tokens come from the real API server (TokenRequest), and RBAC
decides who may read ``/metrics``.
"""

from __future__ import annotations

import signal
import time

import httpx

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for
from tests.support.manifests import chart_config, domain_key, node, pod, pod_group, unique


def lease_holder(api: Api, ns: str, name: str) -> str:
    lease = api.try_get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}")
    return str((lease or {}).get("spec", {}).get("holderIdentity") or "")


def holder_of(proc: SchedulerProcess) -> str:
    """The identity a process logged when it acquired the lease ('' if never)."""
    for line in proc.log().splitlines():
        if "successfully acquired lease" in line and 'identity="' in line:
            return line.split('identity="', 1)[1].split('"', 1)[0]
    return ""


def hand_over(
    api: Api,
    lease_ns: str,
    name: str,
    leader: SchedulerProcess,
    sig: signal.Signals,
    successor: SchedulerProcess,
    *,
    timeout: float,
    interval: float,
) -> float:
    """Send ``sig`` to the ``leader`` and return the seconds until ``successor`` holds Lease ``name``.

    Raises AssertionError if no new holder that is ``successor`` shows within ``timeout`` seconds.
    """
    old = lease_holder(api, lease_ns, name)
    leader.signal(sig)
    t0 = time.monotonic()
    wait_for(
        f"{successor.dir.name} holds the lease",
        lambda: (h := lease_holder(api, lease_ns, name)) and h != old and h == holder_of(successor),
        timeout=timeout,
        interval=interval,
    )
    return time.monotonic() - t0


def test_failover_during_a_burst_of_gangs(cluster: Cluster, api: Api) -> None:
    name = unique("ha")
    lease_ns = "kube-system"
    cfg = chart_config(scheduler_name=name, leader_elect=True, lease_namespace=lease_ns)
    key, dk = domain_key("hadom")
    ns = unique("ha")
    api.create_namespace(ns)
    nodes = [node(f"{key}-d{d:02d}-{i}", {dk: f"d{d:02d}"}, gpu=4) for d in range(15) for i in range(2)]
    a = SchedulerProcess(cluster, cfg, name="ha-a").start()
    b = SchedulerProcess(cluster, cfg, name="ha-b").start()
    try:
        with temp_nodes(api, nodes, ready_timeout=60):
            wait_for("a leader", lambda: lease_holder(api, lease_ns, name), timeout=30)
            time.sleep(3)
            leaders = [p for p in (a, b) if holder_of(p) == lease_holder(api, lease_ns, name)]
            assert len(leaders) == 1, "exactly one process holds the lease"
            leader = leaders[0]
            standby = b if leader is a else a
            token = api.metrics_token()
            assert leader.metric("leader_election_master_status", {"name": name}, token) == 1
            assert standby.metric("leader_election_master_status", {"name": name}, token) == 0
            names = []
            for g in range(30):
                api.create_pod_group(pod_group(f"g{g}", ns, 3, topology_key=dk, timeout=120))
                for i in range(3):
                    names.append(f"g{g}-{i}")
                    api.create_pod(pod(f"g{g}-{i}", ns, gang=f"g{g}", scheduler=name))
            wait_for(
                "some pods bound by the first leader",
                lambda: sum(1 for p in api.pods(ns) if p["spec"].get("nodeName")) >= 9,
                timeout=60,
                interval=0.1,
            )
            took = hand_over(api, lease_ns, name, leader, signal.SIGKILL, standby, timeout=30, interval=0.25)
            assert took <= 20.0, f"takeover took {took:.1f} s"
            placed = wait_bound(api, ns, names, timeout=120)
            assert len(placed) == 90
            for p in names:
                assert len(api.event_notes(ns, p, "Scheduled")) <= 1, f"{p} bound twice"
            assert_invariants(api, ns)
            # SIGTERM releases the lease: a fresh standby takes over within 5 s.
            c = SchedulerProcess(cluster, cfg, name="ha-c").start()
            assert hand_over(api, lease_ns, name, standby, signal.SIGTERM, c, timeout=20, interval=0.1) <= 5.0
            assert standby.proc is not None and standby.proc.wait(10) == 0
            c.stop()
    finally:
        for proc in (a, b):
            proc.stop()
        api.delete_namespace(ns)


def test_lost_lease_exits_non_zero(cluster: Cluster, api: Api) -> None:
    name = unique("lost")
    cfg = chart_config(scheduler_name=name, leader_elect=True)
    cfg["leaderElection"].update({"leaseDuration": "4s", "renewDeadline": "2s", "retryPeriod": "1s"})
    s = SchedulerProcess(cluster, cfg, name="lost").start()
    try:
        wait_for("leader", lambda: holder_of(s), timeout=20)
        # Another identity takes the lease behind the leader's back (as after a partition).
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}"
        lease = api.get(path)
        lease["spec"]["holderIdentity"] = "someone-else"
        api.http.put(path, json=lease).raise_for_status()

        def exited() -> int | None:
            assert s.proc is not None
            return s.proc.poll()

        code = wait_for("the old leader exits", exited, timeout=30)
        assert code == 1
        assert "leaderelection lost" in s.log()
    finally:
        s.stop()


def test_metrics_endpoint_authn_authz(cluster: Cluster, api: Api) -> None:
    with SchedulerProcess(cluster, chart_config(scheduler_name=unique("metrics"))) as s:
        for path in ("/healthz", "/readyz", "/livez"):
            r = s.get(path)
            assert r.status_code == 200 and r.text == "ok", (path, r.text)
        allowed = api.metrics_token("metrics-allowed")
        denied = api.metrics_token("metrics-denied", allowed=False)
        r = s.get("/metrics", token=allowed)
        assert r.status_code == 200
        for family in (
            "scheduler_schedule_attempts_total",
            "scheduler_pending_pods",
            "scheduler_queue_incoming_pods_total",
            "scheduler_framework_extension_point_duration_seconds",
            "ome_scheduler_gang_pin_total",
            "ome_scheduler_pinned_groups",
            "process_resident_memory_bytes",
        ):
            assert family in r.text, family
        assert s.get("/metrics", token=denied).status_code == 403
        assert s.get("/metrics").status_code == 403
        assert s.get("/metrics", token="garbage").status_code == 401
        assert s.get("/healthz", token="garbage").status_code == 401
        try:
            plain = httpx.get(f"http://127.0.0.1:{s.port}/healthz", timeout=5).status_code
        except httpx.HTTPError:
            plain = 0
        assert plain != 200, "nothing is served over plain HTTP"
