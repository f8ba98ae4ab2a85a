"""End-to-end: the nastiest objects the API server accepts, next to a forming gang (issue 13).

Two ome-scheduler replicas with leader election share a Lease. While a gang forms (its
PodGroup and first member exist, the second member comes last), a tenant creates in its own
namespace, in any order:

* the pod of the issue: ``cpu: 1e1000000`` (stored as ``10e999999``) with ``schedulerName:
  nobody``, and the same with our scheduler's name (also as memory, a sidecar's request, a
  pod-level request and an extended resource);
* ``1e4294967296`` (kept verbatim by the API server, worth 1) and ``1e-1000000`` (a cpu request
  is stored as ``1e-3``: rounded up to a millicore);
* a pod with 3,000 tolerations, a node affinity ``Gt 9223372036854775807``;
* PodGroups with ``minMember`` 2147483647 and 9223372036854775807, timeouts of -2^31 and
  10^11 seconds and a 2,000-character topology-key annotation, each with a member;
* a node whose allocatable cpu and memory are ``1e1000000`` (tainted, so no other test's pod
  lands there).

Then: neither replica exits, no object even needs containment (no ``Unhandled Error`` in
either log), the gang binds, every bad pod of ours gets a ``FailedScheduling`` event saying
why (``Insufficient cpu`` for the huge requests) while the harmless ones bind, the pod of
``nobody`` is left alone, and a third replica started afterwards meets all of it in its first
LIST (the relist that crash-looped every replica before the fix) and stays up.

Not created here: ``1e2147483647`` and other inputs whose exponent ends near the int32 bounds
with a non-zero remainder; kube-apiserver 1.35 itself spins on those (``ParseQuantity`` and the
canonical form materialise the number), so they never reach a scheduler.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for
from tests.support.manifests import HOSTNAME, chart_config, domain_key, node, pod, pod_group, unique

HUGE = "1e1000000"


def requests(p: dict[str, Any], res: dict[str, str], *, limits: bool = False) -> dict[str, Any]:
    c = p["spec"]["containers"][0]
    c["resources"] = {"requests": dict(res), **({"limits": dict(res)} if limits else {})}
    return p


def hostile_pods(ns: str, ours: str) -> tuple[list[dict[str, Any]], dict[str, str], list[str]]:
    """(pods, our unschedulable pods -> expected FailedScheduling substring, our pods that bind)."""
    p: list[dict[str, Any]] = []
    p.append(requests(pod("huge-nobody", ns, gpu=0, scheduler="nobody"), {"cpu": HUGE}))
    p.append(requests(pod("huge-cpu", ns, gpu=0, scheduler=ours), {"cpu": HUGE}))
    p.append(requests(pod("huge-memory", ns, gpu=0, scheduler=ours), {"memory": HUGE}))
    p.append(requests(pod("huge-gpu", ns, gpu=0, scheduler=ours), {"nvidia.com/gpu": HUGE}, limits=True))
    side = pod("huge-sidecar", ns, gpu=0, scheduler=ours)
    side["spec"]["initContainers"] = [
        {"name": "side", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": HUGE}}}
    ]
    p.append(side)
    level = pod("huge-pod-level", ns, gpu=0, scheduler=ours)
    level["spec"]["resources"] = {"requests": {"cpu": HUGE}}
    p.append(level)
    p.append(requests(pod("wrapped-exponent", ns, gpu=0, scheduler=ours), {"cpu": "1e4294967296", "memory": "1Mi"}))
    p.append(requests(pod("tiny", ns, gpu=0, scheduler=ours), {"cpu": "1e-1000000", "memory": "1e-1000000"}))
    tols = pod("tolerations", ns, gpu=0, scheduler=ours)
    tols["spec"]["tolerations"] = [{"key": f"example.com/t{i}", "operator": "Exists"} for i in range(3000)]
    p.append(tols)
    gt = pod("gt-int64-max", ns, gpu=0, scheduler=ours)
    gt["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "example.com/n", "operator": "Gt", "values": ["9223372036854775807"]}
                        ]
                    }
                ]
            }
        }
    }
    p.append(gt)
    p.append(pod("absurd-0", ns, gpu=0, scheduler=ours, gang="absurd"))
    p.append(pod("absurder-0", ns, gpu=0, scheduler=ours, gang="absurder"))
    failing = {
        "huge-cpu": "Insufficient cpu",
        "huge-memory": "Insufficient memory",
        "huge-gpu": "Insufficient nvidia.com/gpu",
        "huge-sidecar": "Insufficient cpu",
        "huge-pod-level": "Insufficient cpu",
        "gt-int64-max": "didn't match Pod's node affinity/selector",
        "absurd-0": "",
        "absurder-0": "",
    }
    return p, failing, ["wrapped-exponent", "tiny", "tolerations"]


def failed_scheduling(api: Api, ns: str, name: str, why: str) -> Callable[[], str | None]:
    """A probe for ``wait_for``: the first FailedScheduling note on pod ``name`` containing ``why``."""
    return lambda: next((n for n in api.event_notes(ns, name, "FailedScheduling") if why in n), None)


def absurd_pod_groups(ns: str) -> list[dict[str, Any]]:
    a = pod_group("absurd", ns, 2147483647, topology_key="x" * 2000, timeout=None)
    a["spec"]["scheduleTimeoutSeconds"] = -(2**31)
    b = pod_group("absurder", ns, 2**63 - 1, timeout=None)
    b["spec"]["scheduleTimeoutSeconds"] = 10**11
    return [a, b]


def test_hostile_objects_next_to_a_forming_gang(cluster: Cluster, api: Api, ns: str) -> None:
    name = unique("hostile")
    cfg = chart_config(scheduler_name=name, leader_elect=True, lease_namespace="kube-system")
    key, dk = domain_key("hostile")
    bad_node = node(
        f"{key}-huge",
        {dk: "huge"},
        cpu=HUGE,
        memory=HUGE,
        taints=[{"key": "example.com/hostile", "effect": "NoSchedule"}],
    )
    replicas = [
        SchedulerProcess(cluster, cfg, name=f"{name}-a").start(),
        SchedulerProcess(cluster, cfg, name=f"{name}-b").start(),
    ]
    try:
        with temp_nodes(api, [node(f"{key}-{i}", {dk: "d1"}, gpu=2) for i in range(2)] + [bad_node], ready_timeout=60):
            api.create_pod_group(pod_group("gang", ns, 2, topology_key=dk))
            api.create_pod(pod("gang-0", ns, gang="gang", scheduler=name, anti_affinity_on=HOSTNAME))
            pods, failing, binding = hostile_pods(ns, name)
            for pg in absurd_pod_groups(ns):
                api.create_pod_group(pg)
            for p in pods:
                api.create_pod(p)
            api.create_pod(pod("gang-1", ns, gang="gang", scheduler=name, anti_affinity_on=HOSTNAME))

            placed = wait_bound(api, ns, ["gang-0", "gang-1"], timeout=60)
            assert set(placed.values()) == {f"{key}-0", f"{key}-1"}
            wait_bound(api, ns, binding, timeout=30)
            for bad, why in failing.items():
                note = wait_for(f"FailedScheduling on {bad}", failed_scheduling(api, ns, bad, why), timeout=30)
                assert not api.pod(ns, bad)["spec"].get("nodeName"), note
            assert api.event_notes(ns, "huge-nobody", "FailedScheduling") == []
            assert not api.pod(ns, "huge-nobody")["spec"].get("nodeName")

            # A replica started now meets every hostile object in its first LIST.
            replicas.append(SchedulerProcess(cluster, cfg, name=f"{name}-c").start())
            time.sleep(3)
            for r in replicas:
                r.alive_or_raise()
                assert "Unhandled Error" not in r.log(), r.log()[-3000:]
    finally:
        for r in replicas:
            r.stop()
