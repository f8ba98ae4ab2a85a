"""Fencing (issue 12, item 1): a leader that stalls or is paused never binds after its
successor took over.

Two replicas with leader election (kube-scheduler's defaults: 15 s lease, 10 s renew deadline,
2 s retry), each with its own ServiceAccount, so the API server's audit log says which replica
sent each request. While gangs and standalone pods keep arriving, the leader is hit by one of
two faults:

* its event loop is blocked for 20 s through the test-only hook
  (``OME_SCHEDULER_TEST_STALL_SIGNAL``): its watchdog thread ends it after the stall bound
  (``(leaseDuration - renewDeadline) / 2``, 2.5 s);
* the whole process is frozen for 25 s (SIGSTOP, then SIGCONT): nothing of it runs, the
  watchdog included, and on resuming the fence keeps in whatever the loop had queued; the first
  renewal sees the new holder and ends it.

Either way the standby takes the Lease once it has seen it unrenewed for 15 s and binds
everything. From the audit log: no Binding by the old leader is later than the new leader's
``acquireTime``, nor any Lease write; Lease writes come from the electors' own client
(User-Agent ``.../leader-election``), Bindings from the main one. No pod is bound twice, no node
over-committed, no gang split.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.audit import audit_events
from e2e.harness.cluster import Cluster
from e2e.harness.invariants import assert_invariants
from e2e.harness.pki import write_token_kubeconfig
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for
from e2e.test_ha import holder_of, lease_holder
from ome_scheduler.util.timestamps import parse_rfc3339
from tests.support.manifests import chart_config, domain_key, node, pod, pod_group, unique

STALL_ENV = "OME_SCHEDULER_TEST_STALL_SIGNAL"
STALL_SECONDS = 20
PAUSE_SECONDS = 25
"""Long enough for the standby to take over while the leader is frozen: it must see the Lease
unrenewed for 15 s, polling every 2 to 2.4 s, on a loaded machine."""
WATCHDOG_BOUND = 2.5
"""``stall_bound(15 s, 10 s)``: the leader must be gone this long after the stall began (plus
the heartbeat's 0.25 s and the thread's 0.1 s, and process exit)."""
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def replica_identity(api: Api, cluster: Cluster, name: str, directory: Path) -> tuple[Path, str]:
    """A ServiceAccount ``kube-system/<name>`` bound to cluster-admin, and a kubeconfig with
    its token: (kubeconfig path, the username the audit log records)."""
    api.post(
        "/api/v1/namespaces/kube-system/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    api.post(
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}],
        },
    )
    tr = api.post(
        f"/api/v1/namespaces/kube-system/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    directory.mkdir(parents=True, exist_ok=True)
    kc = write_token_kubeconfig(
        directory / f"{name}.kubeconfig", cluster.server, cluster.ca_file, tr["status"]["token"]
    )
    return kc, f"system:serviceaccount:kube-system:{name}"


def forget_identity(api: Api, name: str) -> None:
    api.delete(f"{RBAC}/clusterrolebindings/{name}")
    api.delete(f"/api/v1/namespaces/kube-system/serviceaccounts/{name}")


def received(event: dict[str, Any]) -> float:
    return parse_rfc3339(str(event["requestReceivedTimestamp"]))


@dataclass
class Outcome:
    """What a fault did to the leader: its exit status and log, and the timings in seconds from
    the fault's start (``takeover``: to the new leader's ``acquireTime``)."""

    code: int
    log: str
    gone_after: float
    takeover: float
    old_user: str
    new_user: str


def leader_fault(
    cluster: Cluster,
    api: Api,
    capsys: pytest.CaptureFixture[str],
    fault: str,
    inject: Callable[[SchedulerProcess], None],
) -> Outcome:
    """Run two replicas, bind some gangs, keep pods arriving, ``inject`` the fault into the
    leader, wait for it to exit and for the standby to take over and bind everything; then
    check the audit log and the invariants, print the figures and return the outcome."""
    name = unique("fence")
    lease_ns = "kube-system"
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{lease_ns}/leases/{name}"
    cfg = chart_config(scheduler_name=name, leader_elect=True, lease_namespace=lease_ns)
    key, dk = domain_key("fencedom")
    ns = unique("fence")
    api.create_namespace(ns)
    nodes = [node(f"{key}-d{d}-{i}", {dk: f"d{d}"}, gpu=4, cpu="16") for d in range(6) for i in range(2)]
    ids = {r: f"{name}-{r}" for r in "ab"}
    creds = {r: replica_identity(api, cluster, ids[r], cluster.state_dir / "fencing") for r in "ab"}
    env = {STALL_ENV: str(STALL_SECONDS)}
    procs = {
        r: SchedulerProcess(cluster, cfg, name=f"fence-{r}", kubeconfig=creds[r][0], env=env, v=2).start() for r in "ab"
    }
    stop_arrivals = threading.Event()
    names: list[str] = []
    try:
        with temp_nodes(api, nodes, ready_timeout=60):
            wait_for("a leader", lambda: lease_holder(api, lease_ns, name), timeout=30)
            time.sleep(1)
            holder = lease_holder(api, lease_ns, name)
            leader_r = next(r for r in "ab" if holder_of(procs[r]) == holder)
            standby_r = "b" if leader_r == "a" else "a"
            leader, standby = procs[leader_r], procs[standby_r]
            old_user, new_user = creds[leader_r][1], creds[standby_r][1]

            def gang(g: str) -> None:
                api.create_pod_group(pod_group(g, ns, 3, topology_key=dk, timeout=120))
                for i in range(3):
                    api.create_pod(pod(f"{g}-{i}", ns, gang=g, scheduler=name))
                    names.append(f"{g}-{i}")

            for g in range(4):
                gang(f"before{g}")
            wait_bound(api, ns, list(names), timeout=60)

            def arrivals() -> None:  # standalone pods and gangs keep coming, fault or not
                i = 0
                while not stop_arrivals.is_set():
                    api.create_pod(pod(f"s{i}", ns, gpu=0, cpu="100m", scheduler=name))
                    names.append(f"s{i}")
                    if i % 16 == 8:
                        gang(f"during{i}")
                    i += 1
                    time.sleep(0.25)

            feeder = threading.Thread(target=arrivals, daemon=True)
            feeder.start()
            time.sleep(2)
            t0, t0_wall = time.monotonic(), time.time()
            injector = threading.Thread(target=inject, args=(leader,), daemon=True)
            injector.start()

            def exited() -> int | None:
                assert leader.proc is not None
                return leader.proc.poll()

            code = wait_for("the leader exits", exited, timeout=PAUSE_SECONDS + 15, interval=0.05)
            gone_after = time.monotonic() - t0
            wait_for(
                "the standby holds the lease",
                lambda: lease_holder(api, lease_ns, name) == holder_of(standby),
                timeout=40,
                interval=0.1,
            )
            injector.join(PAUSE_SECONDS + 5)
            time.sleep(2)
            stop_arrivals.set()
            feeder.join(10)
            wait_bound(api, ns, list(names), timeout=90)
            lease = api.get(lease_path)["spec"]
            acquired = parse_rfc3339(lease["acquireTime"])
            assert lease["holderIdentity"] == holder_of(standby)
            takeover = acquired - t0_wall  # one machine, one clock

            events = audit_events(cluster)
            bindings = [
                e
                for e in events
                if (e.get("objectRef") or {}).get("subresource") == "binding"
                and e["objectRef"].get("namespace") == ns
                and e["verb"] == "create"
            ]
            by_old = [e for e in bindings if e["user"]["username"] == old_user]
            by_new = [e for e in bindings if e["user"]["username"] == new_user]
            assert by_old, "the first leader bound pods before the fault (the audit log names it)"
            assert by_new, "the new leader bound the pods that arrived meanwhile"
            late = [(e["objectRef"]["name"], e["requestReceivedTimestamp"]) for e in by_old if received(e) >= acquired]
            assert late == [], f"Bindings by the old leader after the new one's acquireTime {lease['acquireTime']}"
            assert all(received(e) >= acquired for e in by_new), "only the leader binds"
            last_old = max(received(e) for e in by_old)

            # Lease writes come from the electors' own client, Bindings from the main one; the
            # old leader never wrote the Lease again once the new one held it.
            lease_writes = [
                e
                for e in events
                if (e.get("objectRef") or {}).get("resource") == "leases"
                and e["objectRef"].get("name") == name
                and e["verb"] in ("create", "update")
            ]
            assert {e["user"]["username"] for e in lease_writes} == {old_user, new_user}
            assert all(e["userAgent"].endswith("/leader-election") for e in lease_writes), {
                e["userAgent"] for e in lease_writes
            }
            assert not any(e["userAgent"].endswith("/leader-election") for e in bindings)
            assert not [e for e in lease_writes if e["user"]["username"] == old_user and received(e) >= acquired]

            for p in names:
                assert len(api.event_notes(ns, p, "Scheduled")) <= 1, f"{p} bound twice"
            assert_invariants(api, ns, dk)
            log = leader.log()
            lines = log.splitlines()
            refused_binds = sum(1 for ln in lines if '"Failed to bind pod"' in ln and "fenced: " in ln)
            refused_permits = sum(1 for ln in lines if "Permit allowed a pod on a fenced leader" in ln)
            with capsys.disabled():
                print(
                    f"\n  {fault}: the leader exited {gone_after:.2f} s after the fault began (status {code}); the"
                    f" standby held the lease after {takeover:.1f} s; last Binding by the old leader"
                    f" {acquired - last_old:.1f} s before the new acquireTime; {len(by_old)} Bindings by the"
                    f" old leader, {len(by_new)} by the new one, {len(names)} pods; the fence refused {refused_binds}"
                    f" Bindings and {refused_permits} Permit releases of the old leader"
                )
            return Outcome(code, log, gone_after, takeover, old_user, new_user)
    finally:
        stop_arrivals.set()
        for proc in procs.values():
            proc.stop()
        for r in "ab":
            forget_identity(api, ids[r])
        api.delete_namespace(ns)


def test_a_stalled_leader_is_ended_by_its_watchdog_and_binds_nothing_after_the_takeover(
    cluster: Cluster, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    """The event loop blocks for 20 s (the test hook's ``time.sleep``): the watchdog thread ends
    the process after the stall bound, while the loop is still blocked."""
    out = leader_fault(cluster, api, capsys, "loop stalled 20 s", lambda p: p.signal(signal.SIGUSR1))
    assert out.code == 1, f"exit status {out.code}"
    assert "test hook: stalling the event loop" in out.log
    assert "event loop stalled on the leader; exiting" in out.log, out.log[-2000:]
    assert "test hook: event loop resumed" not in out.log, "the watchdog ended it while the loop was stalled"
    assert out.gone_after < WATCHDOG_BOUND + 2.0, f"the watchdog took {out.gone_after:.1f} s"


def test_a_paused_leader_binds_nothing_when_it_resumes_after_the_takeover(
    cluster: Cluster, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole process is frozen for 25 s (SIGSTOP, as a paused VM or a stopped container):
    the watchdog thread is frozen too, and the standby takes over meanwhile. On SIGCONT the loop
    resumes before the watchdog can look (its heartbeat is the first thing to run): whatever it
    runs first (queued Bindings, a gate that opens) meets the closed fence, and the first
    renewal finds the new holder and ends the process."""

    def pause(p: SchedulerProcess) -> None:
        p.signal(signal.SIGSTOP)
        time.sleep(PAUSE_SECONDS)
        p.signal(signal.SIGCONT)

    out = leader_fault(cluster, api, capsys, f"leader paused {PAUSE_SECONDS} s", pause)
    assert out.code == 1, f"exit status {out.code}"
    assert out.gone_after >= PAUSE_SECONDS, "nothing ran while the process was stopped"
    assert out.gone_after < PAUSE_SECONDS + 5, f"it took {out.gone_after - PAUSE_SECONDS:.1f} s after SIGCONT"
    assert "leaderelection lost" in out.log or "event loop stalled on the leader; exiting" in out.log
    assert out.takeover < PAUSE_SECONDS, "the standby took over while the leader was frozen"
