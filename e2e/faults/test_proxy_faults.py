"""End-to-end: stalled and broken connections between ome-scheduler and kube-apiserver (issue 12, item 3).

ome-scheduler reaches the API server only through Toxiproxy (``e2e/harness/toxiproxy.py``), with a
kubeconfig whose server is the proxy; the tests create and delete objects through the direct
admin API. Leader election is off: the scheduler under test is the only one serving its
scheduler name, and a lease renewal cut off by a blackhole would (rightly) end it.

* A blackhole (toxiproxy's ``timeout`` toxic with timeout 0: bytes are dropped, connections
  stay open) stalls every watch: each is found stalled and abandoned within 40 s of the last
  byte (``kube/informer.py``: 30 s of quiet, then a probe of the server that gets no answer
  in 10 s) and re-established as soon as the path works again.
* Bindings decided before and during a blackhole never land on a node deleted meanwhile
  (``kube/binding.py``): the pods end on the node created meanwhile.
* Connections reset at random, delayed and throttled: gangs still bind whole in one domain.

Every test ends with zero cache drift (``assert_no_drift``: the cache debugger's comparison
with a fresh LIST).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.invariants import assert_invariants
from e2e.harness.measurements import record_measurement
from e2e.harness.scheduler import SchedulerProcess, assert_no_drift
from e2e.harness.toxiproxy import Toxiproxy, proxied_kubeconfig
from e2e.harness.waits import temp_nodes, wait_bound, wait_for
from tests.support.manifests import HOSTNAME, chart_config, domain_key, node, pod, pod_group, unique

PROXY = "apiserver"
INFORMERS = (
    "pods",
    "nodes",
    "namespaces",
    "persistentvolumes",
    "persistentvolumeclaims",
    "storageclasses",
    "podgroups",
)
DETECTION_BOUND = 40.0
"""A stalled watch is abandoned at most this long after its last byte (WATCH_QUIET + PROBE_TIMEOUT)."""


@pytest.fixture(scope="module")
def toxiproxy(cluster: Cluster) -> Iterator[Toxiproxy]:
    """toxiproxy-server with proxy ``apiserver`` in front of the cluster's kube-apiserver."""
    tp = Toxiproxy(cluster.bin_dir, cluster.log_dir / "toxiproxy.log")
    try:
        yield tp
    finally:
        tp.stop()


@pytest.fixture(scope="module")
def name() -> str:
    """The scheduler name of this module's scheduler."""
    return unique("faults")


@pytest.fixture(scope="module")
def proxied(cluster: Cluster, toxiproxy: Toxiproxy, name: str) -> Iterator[SchedulerProcess]:
    """ome-scheduler (leader election off) whose only way to the API server is the proxy."""
    port = toxiproxy.proxy(PROXY, cluster.server.removeprefix("https://"))
    kubeconfig = proxied_kubeconfig(
        cluster.kubeconfig, cluster.state_dir / "proxied.kubeconfig", f"https://127.0.0.1:{port}"
    )
    with SchedulerProcess(cluster, chart_config(scheduler_name=name), name="proxied", kubeconfig=kubeconfig) as s:
        yield s


@pytest.fixture(autouse=True)
def no_toxics_left(toxiproxy: Toxiproxy) -> Iterator[None]:
    """Every test starts and ends with a clean proxy."""
    toxiproxy.reset()
    yield
    toxiproxy.reset()


def _first_times(sched: SchedulerProcess, since: int, message: str, t0: float, into: dict[str, float]) -> None:
    """Record, for each informer not yet in ``into``, the seconds since ``t0`` at which a log line
    ``message`` naming it first appeared after offset ``since``."""
    now = time.monotonic() - t0
    for m in re.finditer(rf'"{message}" informer="(\w+)"', sched.log()[since:]):
        into.setdefault(m.group(1), now)


def test_a_stalled_watch_is_reestablished_within_60_s(
    api: Api, ns: str, toxiproxy: Toxiproxy, proxied: SchedulerProcess, name: str
) -> None:
    since = len(proxied.log())
    t0 = time.monotonic()
    toxiproxy.blackhole(PROXY)
    detected: dict[str, float] = {}

    def all_detected() -> bool:
        proxied.alive_or_raise()
        _first_times(proxied, since, "watch abandoned", t0, detected)
        return detected.keys() >= set(INFORMERS)

    wait_for("every watch found stalled", all_detected, timeout=DETECTION_BOUND + 15, interval=0.1)
    toxiproxy.reset()  # the path works again: the watches must come back by themselves
    back: dict[str, float] = {}

    def all_back() -> bool:
        _first_times(proxied, since, "watch re-established", t0, back)
        return back.keys() >= set(INFORMERS)

    wait_for("every watch re-established", all_back, timeout=30, interval=0.1)
    text = proxied.log()[since:]
    assert "the API server does not answer" in text, "the watches were abandoned for the stall, not another reason"
    worst_detect, worst_back = max(detected.values()), max(back.values())
    record_measurement("blackhole: every stalled watch detected (from the blackhole)", worst_detect)
    record_measurement("blackhole: every watch re-established (from the blackhole)", worst_back)
    assert worst_detect <= DETECTION_BOUND + 2, detected
    assert worst_back <= 60.0, back
    # The re-established view schedules: a pod created now binds.
    api.create_pod(pod("after", ns, gpu=0, cpu="100m", scheduler=name))
    wait_bound(api, ns, ["after"], timeout=30)
    assert_no_drift(proxied)


def test_a_blackhole_never_binds_to_a_node_deleted_meanwhile(
    api: Api, ns: str, toxiproxy: Toxiproxy, proxied: SchedulerProcess, name: str
) -> None:
    key, dk = domain_key("bh")
    target = {f"e2e.ome.io/{key}-target": "yes"}
    x1, x2, x3 = f"{key}-x1", f"{key}-x2", f"{key}-x3"
    nodes = [node(x1, {dk: "a", **target}, gpu=4), node(x2, {dk: "a"}, gpu=1)]
    with temp_nodes(api, nodes):
        api.create_pod_group(pod_group("g", ns, 2, topology_key=dk, timeout=120))
        time.sleep(1.0)  # the scheduler's watches deliver the nodes and the PodGroup
        since = len(proxied.log())
        # Requests from the scheduler go nowhere; what the API server sends still arrives, so
        # the scheduler sees the pods below and decides on the view it has.
        toxiproxy.blackhole(PROXY, "upstream")
        standalone = [f"s{i}" for i in range(3)]
        for s in standalone:
            api.create_pod(pod(s, ns, gpu=0, cpu="100m", scheduler=name, node_selector=target))
        members = ["m0", "m1"]
        for m in members:
            api.create_pod(pod(m, ns, gang="g", scheduler=name, anti_affinity_on=HOSTNAME))

        def attempted_on_x1() -> bool:
            text = proxied.log()[since:]
            return all(f'"Attempting to bind pod to node" pod="{ns}/{s}" node="{x1}"' in text for s in standalone)

        wait_for("the standalone pods' Bindings to x1 sent into the blackhole", attempted_on_x1, timeout=20)
        # Now nothing gets through either way; meanwhile x1 goes and x3 (also a target) comes.
        toxiproxy.blackhole(PROXY, "downstream")
        api.delete_node(x1)
        api.create_node(node(x3, {dk: "a", **target}, gpu=4))
        try:
            wait_for(
                f"{x3} Ready",
                lambda: any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (api.try_get(f"/api/v1/nodes/{x3}") or {}).get("status", {}).get("conditions", [])
                ),
                timeout=30,
            )
            t_lift = time.monotonic()
            toxiproxy.reset()
            placed = wait_bound(api, ns, standalone + members, timeout=90)
            record_measurement(
                "blackhole with a node deleted: all pods bound (from the lift)", time.monotonic() - t_lift
            )
            assert x1 not in placed.values(), f"bound to the deleted node: {placed}"
            assert all(placed[s] == x3 for s in standalone), placed
            assert {placed[m] for m in members} == {x2, x3}, placed
            for p in standalone + members:
                assert len(api.event_notes(ns, p, "Scheduled")) <= 1, f"{p} bound twice"
            assert_invariants(api, ns, dk)
            assert_no_drift(proxied)
        finally:
            api.delete_node(x3)


def test_reset_latency_and_bandwidth_keep_gangs_whole(
    api: Api, ns: str, toxiproxy: Toxiproxy, proxied: SchedulerProcess, name: str
) -> None:
    key, dk = domain_key("tox")
    nodes = [node(f"{key}-d{d}-{i}", {dk: f"d{d}"}, gpu=2) for d in range(3) for i in range(2)]
    names: list[str] = []

    def gang(g: str) -> None:
        api.create_pod_group(pod_group(g, ns, 4, topology_key=dk, timeout=120))
        for i in range(4):
            names.append(f"{g}-{i}")
            api.create_pod(pod(f"{g}-{i}", ns, gang=g, scheduler=name))

    def standalone(prefix: str) -> None:
        for i in range(2):
            names.append(f"{prefix}-{i}")
            api.create_pod(pod(f"{prefix}-{i}", ns, gpu=0, cpu="100m", scheduler=name))

    with temp_nodes(api, nodes):
        # Slow and narrow: every byte from the API server 300 ± 100 ms late, at most 64 KB/s.
        toxiproxy.add_toxic(PROXY, "latency", "latency", {"latency": 300, "jitter": 100})
        toxiproxy.add_toxic(PROXY, "bandwidth", "bandwidth", {"rate": 64})
        gang("slow-a")
        gang("slow-b")
        standalone("slow-s")
        wait_bound(api, ns, names, timeout=90)
        # Half the connections are reset 500 ms after the API server first answers on them.
        toxiproxy.reset()
        toxiproxy.add_toxic(PROXY, "reset", "reset_peer", {"timeout": 500}, toxicity=0.5)
        gang("reset-a")
        standalone("reset-s")
        placed = wait_bound(api, ns, names, timeout=120)
        toxiproxy.reset()
        assert len(placed) == len(names) == 16
        for p in names:
            assert len(api.event_notes(ns, p, "Scheduled")) <= 1, f"{p} bound twice"
        assert_invariants(api, ns, dk)
        assert_no_drift(proxied)
