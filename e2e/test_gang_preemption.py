"""End-to-end: gang preemption (issue 26 item 2, design rule 13 and §16) on the real control plane.

One ome-scheduler with the chart's configuration and OMEGangPack's ``preemption: true``. Each
test makes two cliques of four one-GPU kwok nodes under a label key of its own; the pods it
preempts are bound by ``nodeName`` (this scheduler's ``schedulerName``, so they are eligible
victims) with priorities from this module's PriorityClasses.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import scheduled_condition, temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import chart_config, domain_key, domain_nodes, pod, pod_group

CLASSES: dict[str, tuple[int, str]] = {
    "e2e-gp-low": (10, ""),
    "e2e-gp-mid": (50, ""),
    "e2e-gp-high": (100, ""),
    "e2e-gp-never": (200, "Never"),
}


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    """The chart's configuration with gang preemption on."""
    return chart_config(gang_args={"gcIntervalSeconds": 2, "preemption": True})


@pytest.fixture(scope="module")
def classes(api: Api) -> None:
    api.ensure_priority_classes(CLASSES)


def with_class(p: dict[str, Any], cls: str) -> dict[str, Any]:
    p["spec"]["priorityClassName"] = cls
    return p


def run_on(api: Api, ns: str, name: str, node: str, cls: str, gang: str | None = None) -> None:
    api.create_pod(with_class(pod(name, ns, gang=gang, node_name=node), cls))


def gang(api: Api, ns: str, name: str, size: int, dk: str, cls: str) -> list[str]:
    api.create_pod_group(pod_group(name, ns, size, topology_key=dk))
    names = [f"{name}-{i}" for i in range(size)]
    for n in names:
        api.create_pod(with_class(pod(n, ns, gang=name), cls))
    return names


def present(api: Api, ns: str) -> set[str]:
    """Pods of the namespace neither gone nor being deleted."""
    return {p["metadata"]["name"] for p in api.pods(ns) if not p["metadata"].get("deletionTimestamp")}


def domains(api: Api, ns: str, names: list[str], dk: str) -> set[str]:
    labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(dk, "") for n in api.nodes()}
    return {labels[n] for n in wait_bound(api, ns, names, timeout=60.0).values()}


def test_the_cheaper_clique_is_freed_and_the_gang_binds_there(
    api: Api, scheduler: SchedulerProcess, ns: str, classes: None
) -> None:
    key, dk = domain_key("gp")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 4, "b": 4})):
        for i in range(4):
            run_on(api, ns, f"batch-{i}", f"{key}-a{i}", "e2e-gp-low")
            run_on(api, ns, f"eval-{i}", f"{key}-b{i}", "e2e-gp-mid")
        wait_bound(api, ns, [f"batch-{i}" for i in range(4)] + [f"eval-{i}" for i in range(4)])
        members = gang(api, ns, "hi", 4, dk, "e2e-gp-high")
        assert domains(api, ns, members, dk) == {"a"}
        left = present(api, ns)
        assert {f"eval-{i}" for i in range(4)} <= left  # the other clique untouched
        assert not {f"batch-{i}" for i in range(4)} & left
        notes = api.event_notes(ns, "hi", "Preempting")
        assert len(notes) == 1 and "in " + dk + "=a for gang " + ns + "/hi" in notes[0]
        assert "lowest highest victim priority (10 vs 50 in b)" in notes[0]
        assert api.event_notes(ns, "batch-0", "Preempted")
        assert_invariants(api, ns)


def test_a_lower_priority_gang_is_evicted_whole(api: Api, scheduler: SchedulerProcess, ns: str, classes: None) -> None:
    key, dk = domain_key("gp")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 4, "b": 4})):
        for i in range(4):
            run_on(api, ns, f"lo-{i}", f"{key}-a{i}", "e2e-gp-low", gang="lo")
            run_on(api, ns, f"serve-{i}", f"{key}-b{i}", "e2e-gp-never")  # priority 200: never a victim
        wait_bound(api, ns, [f"lo-{i}" for i in range(4)])
        members = gang(api, ns, "hi", 2, dk, "e2e-gp-high")  # two members: half of lo would do
        assert domains(api, ns, members, dk) == {"a"}
        wait_for("every member of lo evicted", lambda: not {f"lo-{i}" for i in range(4)} & present(api, ns))
        assert {f"serve-{i}" for i in range(4)} <= present(api, ns)


def test_no_eviction_when_no_domain_could_fit(api: Api, scheduler: SchedulerProcess, ns: str, classes: None) -> None:
    key, dk = domain_key("gp")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 4, "b": 4})):
        for i in range(4):
            run_on(api, ns, f"batch-{i}", f"{key}-a{i}", "e2e-gp-low")
        gang(api, ns, "big", 5, dk, "e2e-gp-high")
        wait_message(api, ns, "big-0", "preemption cannot make gang", timeout=60.0)
        time.sleep(2.0)
        assert {f"batch-{i}" for i in range(4)} <= present(api, ns)
        assert not api.event_notes(ns, "big", "Preempting")


def test_none_against_equal_priority_or_with_never(
    api: Api, scheduler: SchedulerProcess, ns: str, classes: None
) -> None:
    key, dk = domain_key("gp")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 4, "b": 4})):
        for i in range(4):
            run_on(api, ns, f"peer-{i}", f"{key}-a{i}", "e2e-gp-high")
            run_on(api, ns, f"batch-{i}", f"{key}-b{i}", "e2e-gp-low")
        gang(api, ns, "eq", 4, dk, "e2e-gp-low")  # batch's priority, below peer's
        wait_message(api, ns, "eq-0", "preemption cannot make gang", timeout=60.0)
        gang(api, ns, "nv", 4, dk, "e2e-gp-never")
        wait_message(api, ns, "nv-0", "preemptionPolicy=Never", timeout=60.0)
        time.sleep(2.0)
        assert {f"peer-{i}" for i in range(4)} | {f"batch-{i}" for i in range(4)} <= present(api, ns)


def test_pdbs_steer_the_domain(api: Api, scheduler: SchedulerProcess, ns: str, classes: None) -> None:
    """§16.4: PDB violations rank first: a's victims are the cheapest by priority (10 vs 50) but
    a PodDisruptionBudget allows none of them to go, so b is freed instead."""
    key, dk = domain_key("gp")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 4, "b": 4})):
        for i in range(4):
            api.create_pod(
                with_class(pod(f"guarded-{i}", ns, labels={"app": "guarded"}, node_name=f"{key}-a{i}"), "e2e-gp-low")
            )
            run_on(api, ns, f"eval-{i}", f"{key}-b{i}", "e2e-gp-mid")
        guarded = [f"guarded-{i}" for i in range(4)]
        wait_bound(api, ns, guarded + [f"eval-{i}" for i in range(4)])
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": ns},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "guarded"}}},
        }
        path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
        api.post(path, pdb)
        # the disruption controller's verdict: all four healthy, none may be disrupted
        wait_for(
            "the PDB counted by the disruption controller",
            lambda: (api.get(f"{path}/guarded").get("status") or {}).get("currentHealthy") == 4,
            timeout=60.0,
        )
        members = gang(api, ns, "hi", 4, dk, "e2e-gp-high")
        assert domains(api, ns, members, dk) == {"b"}
        assert set(guarded) <= present(api, ns)
        notes = api.event_notes(ns, "hi", "Preempting")
        assert len(notes) == 1 and f"in {dk}=b for gang {ns}/hi" in notes[0], notes
        assert "fewest PodDisruptionBudget violations (0 vs 4 in a)" in notes[0], notes[0]
        assert_invariants(api, ns)


STAY = "e2e.ome.io/stay-terminating"
"""A pod with this label is left terminating by kwok (e2e/kwok-stages.yaml) until it loses it."""


def test_while_victims_terminate_no_lower_priority_pod_or_gang_takes_the_held_clique(
    api: Api, scheduler: SchedulerProcess, ns: str, classes: None
) -> None:
    """§16.5: the freed clique is held while its victims terminate (a finalizer keeps them
    terminating): a lower-priority standalone pod and a lower-priority gang that would fit beside
    them are kept out; once the victims go, the gang binds there. kwok leaves a pod labelled
    :data:`STAY` terminating."""
    key, dk = domain_key("gp")
    victims = [f"batch-{i}" for i in range(4)]
    with temp_nodes(api, domain_nodes(key, dk, {"a": 4, "b": 4}, gpu=2)):
        try:
            for i, v in enumerate(victims):
                p = with_class(pod(v, ns, node_name=f"{key}-a{i}"), "e2e-gp-low")
                p["metadata"]["labels"][STAY] = "true"
                p["spec"]["terminationGracePeriodSeconds"] = 30  # 0 would make the delete immediate
                api.create_pod(p)
                api.create_pod(with_class(pod(f"eval-{i}", ns, gpu=2, node_name=f"{key}-b{i}"), "e2e-gp-mid"))
            wait_bound(api, ns, victims + [f"eval-{i}" for i in range(4)])
            api.create_pod_group(pod_group("hi", ns, 4, topology_key=dk))
            members = [f"hi-{i}" for i in range(4)]
            for m in members:
                api.create_pod(with_class(pod(m, ns, gang="hi", gpu=2), "e2e-gp-high"))
            wait_for(
                "the victims terminating",
                lambda: (
                    len([p for p in api.pods(ns) if p["metadata"]["name"] in victims]) == 4
                    and all(
                        p["metadata"].get("deletionTimestamp") for p in api.pods(ns) if p["metadata"]["name"] in victims
                    )
                ),
                timeout=60.0,
            )
            # one GPU is free on every node of a beside each terminating victim
            api.create_pod(with_class(pod("late", ns, node_selector={dk: "a"}), "e2e-gp-low"))
            gang(api, ns, "lo", 2, dk, "e2e-gp-low")
            cond = wait_for(
                "late found unschedulable",
                lambda: (c := scheduled_condition(api, ns, "late")) and c.get("status") == "False" and c,
                timeout=60.0,
            )
            assert "node is reserved for a forming gang" in cond["message"], cond
            time.sleep(3.0)
            pods = api.pods(ns)
            bound = {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}
            shown = sorted(
                (p["metadata"]["name"], p["spec"].get("nodeName"), bool(p["metadata"].get("deletionTimestamp")))
                for p in pods
            )
            assert not {"late", "lo-0", "lo-1", *members} & bound, shown
        finally:
            for v in victims:
                try:
                    api.patch(f"/api/v1/namespaces/{ns}/pods/{v}", {"metadata": {"labels": {STAY: None}}})
                except Exception:
                    pass
        assert domains(api, ns, members, dk) == {"a"}
        assert len(api.event_notes(ns, "hi", "Preempting")) == 1  # no second preemption while they terminated
        assert_invariants(api, ns)
