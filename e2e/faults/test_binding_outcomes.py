"""End-to-end: what a Binding's outcome does to the pod and its gang (issue 12, item 4).

ome-scheduler reaches the API server through :class:`e2e.harness.interposer.Interposer`, an HTTP front
that forwards everything unchanged except the answers it is told to lose: a chosen pod's
Binding is applied by the real API server and its answer then replaced by a 504 (the client
retries and the real API server answers ``409 Conflict``, already assigned) or cut off (a
transport error: the scheduler re-reads the cluster before it would retry).

* A Binding retried after a lost answer that meets the pod already bound to the node we chose
  is a success: the pod is bound once, and neither the pod nor its gang shows a failure (no
  ``FailedScheduling``, no unwind, no ``PodScheduled=False``).
* A gang member whose Binding the API server refuses every time (a ValidatingAdmissionPolicy
  denying ``CREATE`` of ``pods/binding`` for it; no webhook server needed) does not keep its
  domain: the PodGroup gets a Warning ``FailedBinding`` event with the API server's answer, its
  holds end within its ``scheduleTimeoutSeconds``, and another gang and a standalone pod bind
  in the domain afterwards.

Each test ends with the invariants and zero cache drift.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.interposer import Interposer
from e2e.harness.invariants import assert_invariants
from e2e.harness.measurements import record_measurement
from e2e.harness.scheduler import SchedulerProcess, assert_no_drift
from e2e.harness.waits import scheduled_condition, temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import HOSTNAME, chart_config, domain_key, node, pod, pod_group, unique

TIMEOUT_S = 20
"""The refused gang's ``scheduleTimeoutSeconds``."""
REFUSAL = "the e2e policy refuses this pod's Binding"


@pytest.fixture(scope="module")
def name() -> str:
    """The scheduler name of this module's scheduler."""
    return unique("bindings")


@pytest.fixture(scope="module")
def interposer(cluster: Cluster) -> Iterator[Interposer]:
    with Interposer(cluster) as ip:
        yield ip


@pytest.fixture(scope="module")
def sched(cluster: Cluster, interposer: Interposer, name: str) -> Iterator[SchedulerProcess]:
    """ome-scheduler (leader election off) whose only way to the API server is the interposer."""
    cfg = chart_config(scheduler_name=name)
    with SchedulerProcess(cluster, cfg, name="interposed", extra_args=[f"--master={interposer.url}"]) as s:
        yield s


def test_a_binding_whose_answer_was_lost_is_a_success(
    api: Api, ns: str, interposer: Interposer, sched: SchedulerProcess, name: str
) -> None:
    key, dk = domain_key("lost")
    with temp_nodes(api, [node(f"{key}-{i}", {dk: "a"}, gpu=1) for i in range(3)]):
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk, timeout=60))
        time.sleep(1.0)  # the scheduler has the nodes and the PodGroup
        members = [f"g-{i}" for i in range(3)]
        # g-0's answer becomes a 504 (its retry meets 409 from the API server), g-1's is cut off.
        interposer.lose_answer(ns, "g-0", "504")
        interposer.lose_answer(ns, "g-1", "cut")
        interposer.lose_answer(ns, "solo", "504")
        for m in members:
            api.create_pod(pod(m, ns, gang="g", scheduler=name, anti_affinity_on=HOSTNAME))
        api.create_pod(pod("solo", ns, gpu=0, cpu="100m", scheduler=name))
        placed = wait_bound(api, ns, [*members, "solo"], timeout=60)
        # The API server shows them bound as soon as the first Bindings land; the scheduler
        # learns it only from the retry's 409 or from the re-read view.
        wait_for(
            "the scheduler's binding cycles to end",
            lambda: all(f'"Successfully bound pod to node" pod="{ns}/{p}"' in sched.log() for p in [*members, "solo"]),
            timeout=30,
        )
        assert len({placed[m] for m in members}) == 3
        # What the interposer saw: the API server applied each first Binding (201), the 504's
        # retry got 409 (already assigned), and the cut one was not sent again (the re-read view
        # showed it bound).
        for p in ("g-0", "solo"):
            seen = [(b.status, b.lost) for b in interposer.seen(ns, p)]
            assert seen == [(201, "504"), (409, "")], (p, seen)
        assert [(b.status, b.lost) for b in interposer.seen(ns, "g-1")] == [(201, "cut")]
        assert [(b.status, b.lost) for b in interposer.seen(ns, "g-2")] == [(201, "")]
        time.sleep(2.0)  # any late failure report would land by now
        for p in [*members, "solo"]:
            # The members created before the last one wait for it ("waiting for all PodGroup
            # member templates"); nothing else may fail them.
            failures = api.event_notes(ns, p, "FailedScheduling")
            assert all("waiting for all PodGroup member templates" in n for n in failures), (p, failures)
            assert len(api.event_notes(ns, p, "Scheduled")) == 1, p
            cond = scheduled_condition(api, ns, p)
            assert cond is not None and cond["status"] == "True", (p, cond)
            for line in sched.log().splitlines():
                if f'pod="{ns}/{p}"' in line:
                    assert "Failed to bind pod" not in line and "Error scheduling pod" not in line, line
        pg_events = [(e["type"], e["reason"]) for e in api.events(ns, "g")]
        assert ("Normal", "Bound") in pg_events and all(t == "Normal" for t, _ in pg_events), pg_events
        assert not [r for _, r in pg_events if r == "HoldReleased"], pg_events  # no unwind
        assert_invariants(api, ns, dk)
        assert_no_drift(sched)


def refuse_bindings_policy(api: Api, ns: str, names: list[str]) -> tuple[str, str]:
    """Create a ValidatingAdmissionPolicy and its binding that deny ``CREATE pods/binding`` for
    pods ``names`` (and ``canary*``) of ``ns``; return their paths for deletion, once the API
    server enforces them (a canary pod's Binding is refused)."""
    policy = unique("refuse-binding")
    listed = ", ".join(f"'{n}'" for n in names)
    api.post(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": (
                            f"request.namespace != '{ns}' || "
                            f"!(request.name in [{listed}] || request.name.startsWith('canary'))"
                        ),
                        "message": REFUSAL,
                        "reason": "Forbidden",
                    }
                ],
            },
        },
    )
    api.post(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"]},
        },
    )
    attempt = [0]

    def enforced() -> bool:
        canary = f"canary-{attempt[0]}"
        attempt[0] += 1
        api.create_pod(pod(canary, ns, gpu=0, scheduler="nobody"))
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": canary, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "no-such-node"},
        }
        try:
            api.post(f"/api/v1/namespaces/{ns}/pods/{canary}/binding", binding)
        except AssertionError as exc:  # Api raises it for an error answer, with the status and the text
            return ": 403 " in str(exc) and REFUSAL in str(exc)
        finally:
            api.delete_pod(ns, canary)
        return False

    wait_for("the policy enforced", enforced, timeout=30, interval=0.5)
    return (
        f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{policy}",
        f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy}",
    )


def pod_group_events(api: Api, ns: str, group: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.events(ns, group) if e.get("reason") == reason]


def test_a_member_whose_binding_is_always_refused_keeps_no_hold(
    api: Api, ns: str, interposer: Interposer, sched: SchedulerProcess, name: str
) -> None:
    key, dk = domain_key("refused")
    paths = refuse_bindings_policy(api, ns, ["g-1"])
    try:
        with temp_nodes(api, [node(f"{key}-{i}", {dk: "a"}, gpu=1) for i in range(3)]):
            api.create_pod_group(pod_group("g", ns, 2, topology_key=dk, timeout=TIMEOUT_S))
            time.sleep(1.0)
            t0 = time.monotonic()
            for i in range(2):
                api.create_pod(pod(f"g-{i}", ns, gang="g", scheduler=name, anti_affinity_on=HOSTNAME))
            wait_bound(api, ns, ["g-0"], timeout=30)
            wait_message(api, ns, "g-1", REFUSAL, timeout=30)
            why = wait_for(
                "the PodGroup's FailedBinding event",
                lambda: pod_group_events(api, ns, "g", "FailedBinding"),
                timeout=30,
            )
            assert why[0]["type"] == "Warning"
            assert why[0]["note"].startswith(f"member {ns}/g-1 could not be bound to node {key}-"), why[0]["note"]
            assert REFUSAL in why[0]["note"], why[0]["note"]
            # Past the gang's scheduleTimeoutSeconds its pins hold nothing: another gang and a
            # standalone pod take the rest of the domain, while g-1 keeps being retried.
            time.sleep(max(0.0, t0 + TIMEOUT_S + 1 - time.monotonic()))
            t_free = time.monotonic()
            api.create_pod_group(pod_group("h", ns, 1, topology_key=dk, timeout=60))
            api.create_pod(pod("h-0", ns, gang="h", scheduler=name))
            api.create_pod(pod("solo", ns, scheduler=name, node_selector={dk: "a"}))
            placed = wait_bound(api, ns, ["h-0", "solo"], timeout=30)
            record_measurement(
                "refused Binding: another gang and a standalone pod bound (from the gang's timeout)",
                time.monotonic() - t_free,
            )
            assert len({placed["h-0"], placed["solo"], api.pod(ns, "g-0")["spec"]["nodeName"]}) == 3
            assert not api.pod(ns, "g-1")["spec"].get("nodeName")
            cond = scheduled_condition(api, ns, "g-1")
            assert cond is not None and cond["status"] == "False"
            # g-1's next try (within the 10 s backoff cap) adopts the domain without a hold.
            wait_for(
                "an adopted pin without a hold",
                lambda: [
                    e
                    for e in pod_group_events(api, ns, "g", "Adopted")
                    if e["note"].endswith("without a hold (its holds expired)")
                ],
                timeout=20,
            )
            ann = api.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/g")["metadata"].get(
                "annotations", {}
            )
            assert ann.get("ome.io/placement") != "Holding", ann  # what kubectl and explain show
            # g-1 is retried with backoff (1 s doubling to 10 s), not in a loop; each try refused.
            tries = interposer.seen(ns, "g-1")
            elapsed = time.monotonic() - t0
            assert tries and all(b.status == 403 for b in tries), tries
            assert len(tries) <= 4 + elapsed / 10 + 2, f"{len(tries)} Bindings of g-1 in {elapsed:.0f} s"
            # A Binding refused after the gate opened leaves the gang short of minMember (its other
            # members were bound meanwhile): that is the outcome to report, not a split. Without
            # g-1, the invariants (no pod bound twice, no over-commitment, no split) must hold.
            api.delete_pod(ns, "g-1")
            for p in ("g-0", "h-0", "solo"):
                assert len(api.event_notes(ns, p, "Scheduled")) == 1, f"{p} bound twice"
            assert_invariants(api, ns, dk)
            assert_no_drift(sched)
    finally:
        for path in paths:
            api.delete(path)
