"""End-to-end: gangs made by the job operators users run (issue 17), on the real control plane.

ome-scheduler runs as the chart configures it with ``scheduler.plugin.topologyKey:
nvidia.com/gpu.clique``: neither operator sets ``ome.io/topology-key``, so that fallback is
what keeps a job in one clique (``gcIntervalSeconds`` is lowered to 2 s). mpi-operator v0.6.0
(MPIJob: one launcher, N workers) and the training-operator v1.9.4 (PyTorchJob: one master, N
workers) run as local processes with gang scheduling pointed at ome-scheduler; each creates the
PodGroup of its job (``scheduling.x-k8s.io/v1alpha1``, named after the job, owned by it).

Every test runs once per operator (``op``) and makes its own one-GPU kwok nodes in cliques of
its own, labelled ``e2e.ome.io/operators: <test key>``, which the jobs' pod templates select,
so no test sees another test's (or the demo's) cliques. kwok has no kubelets: a bound pod
"runs", and nothing a launcher would do once its workers run happens; the tests check what the
scheduler does: placement and binding.

To hold a gang mid-formation, a test asks the operator for one member more than it makes
(``minAvailable`` = pods + 1) and adds that member itself, labelled for the job's PodGroup, for
a scheduler nobody serves (``e2e.harness.gangs.HELD_SCHEDULER``): the operator's pods pin a clique and
wait at Permit until :func:`e2e.harness.gangs.release_held` hands the extra member to ome-scheduler.
(Scheduling gates would not do: a gang holds nothing while a member it needs is gated, product
rule 8, which one test checks.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.gangs import HELD_SCHEDULER, release_held
from e2e.harness.invariants import assert_invariants
from e2e.harness.operators import OperatorProcess
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import CLIQUE, POD_GROUP_LABEL, SCHEDULER_NAME, chart_config, node, pod, unique

SELECT = "e2e.ome.io/operators"
PG_API = "/apis/scheduling.x-k8s.io/v1alpha1"


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    """The chart's configuration with ``scheduler.plugin.topologyKey: nvidia.com/gpu.clique``."""
    return chart_config(topology_key=CLIQUE, gang_args={"gcIntervalSeconds": 2})


@pytest.fixture(params=["MPIJob", "PyTorchJob"])
def op(request: pytest.FixtureRequest, scheduler: SchedulerProcess) -> OperatorProcess:
    """The running operator of one job kind (started once per module, on first use)."""
    fixture = {"MPIJob": "mpi_operator", "PyTorchJob": "training_operator"}[request.param]
    operator: OperatorProcess = request.getfixturevalue(fixture)
    return operator


def cliques(key: str, sizes: dict[str, int]) -> list[dict[str, Any]]:
    """One-GPU, 8-CPU nodes ``<key>-<clique><i>`` in cliques ``<key>-<clique>``, selectable by ``SELECT``."""
    return [
        node(f"{key}-{c}{i}", {CLIQUE: f"{key}-{c}", SELECT: key}, gpu=1, cpu="8")
        for c, n in sizes.items()
        for i in range(n)
    ]


def create_job(api: Api, op: OperatorProcess, ns: str, name: str, workers: int, key: str, **kw: Any) -> None:
    """Create a job of the operator's kind with ``workers`` workers and a leader, on ``key``'s nodes."""
    api.post(op.job.path(ns), op.job.manifest(name, ns, workers, node_selector={SELECT: key}, **kw))


def job_pods(api: Api, op: OperatorProcess, ns: str, job: str, count: int, timeout: float = 60.0) -> list[str]:
    """Wait until the operator has made ``count`` pods labelled for PodGroup ``job``; their names.

    On timeout the AssertionError carries the end of the operator's log.
    """

    seen: list[str] = []

    def made() -> list[str] | None:
        seen[:] = sorted(p["metadata"]["name"] for p in api.pods(ns, f"{POD_GROUP_LABEL}={job}"))
        return list(seen) if len(seen) == count else None

    try:
        return wait_for(f"{count} pods of {ns}/{job}", made, timeout=timeout)
    except AssertionError as e:
        state = "running" if op.alive() else "exited"
        raise AssertionError(f"{e}; pods {seen}\n{op.name} ({state}) log:\n{op.log()[-4000:]}") from None


def leader_of(op: OperatorProcess, job: str, names: Iterable[str]) -> str:
    """The job's launcher (MPIJob, a Job's pod ``<job>-launcher-<hash>``) or master (``<job>-master-0``)."""
    (leader,) = [n for n in names if n.startswith(f"{job}-{op.job.leader}")]
    return leader


def operator_pod_group(api: Api, ns: str, job: str) -> dict[str, Any]:
    """Wait ≤ 30 s for the PodGroup the operator makes for ``job``."""
    return wait_for(f"PodGroup {ns}/{job}", lambda: api.try_get(f"{PG_API}/namespaces/{ns}/podgroups/{job}"))


def clique_of(api: Api, placed: dict[str, str]) -> set[str]:
    """The cliques of the nodes in ``placed`` (pod -> node)."""
    labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in api.nodes()}
    return {labels[n] for n in placed.values()}


def release(api: Api, ns: str, names: Iterable[str]) -> None:
    """Remove the scheduling gates of the named pods."""
    for n in names:
        api.ungate(ns, n)


def waiting_at_permit(api: Api, ns: str, names: Iterable[str]) -> bool:
    """Every named pod is nominated (it waits at Permit) and none is bound."""
    pods = [api.pod(ns, n) for n in names]
    return all(p["status"].get("nominatedNodeName") and not p["spec"].get("nodeName") for p in pods)


def test_job_lands_whole_in_one_clique_and_the_next_waits(api: Api, op: OperatorProcess, ns: str) -> None:
    key = unique("ops")
    with temp_nodes(api, cliques(key, {"a": 4, "b": 3})):
        create_job(api, op, ns, "first", 3, key)
        first = job_pods(api, op, ns, "first", 4)
        for name in first:
            p = api.pod(ns, name)
            assert p["spec"]["schedulerName"] == SCHEDULER_NAME
            assert p["metadata"]["labels"][POD_GROUP_LABEL] == "first"
        pg = operator_pod_group(api, ns, "first")
        assert pg["spec"]["minMember"] == 4
        (owner,) = pg["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == (op.job.kind, "first", True)
        placed = wait_bound(api, ns, first, timeout=60)
        assert clique_of(api, placed) == {f"{key}-a"}, placed  # the only clique with room for 4
        assert len(set(placed.values())) == 4
        # The leader keeps the operator's PodGroup status (kubectl get podgroup: PHASE, RUNNING).
        path = f"{PG_API}/namespaces/{ns}/podgroups/first"
        st = wait_for(
            "the job's PodGroup Running", lambda: (x := api.get(path).get("status", {})).get("phase") == "Running" and x
        )
        assert st["running"] == 4

        # Clique b has 3 free nodes: enough for 3 of the 4 pods, not for the gang.
        create_job(api, op, ns, "second", 3, key)
        second = job_pods(api, op, ns, "second", 4)
        for name in second:
            wait_message(api, ns, name, f"no domain has room for gang {ns}/second", timeout=30)
        assert not any(api.pod(ns, n)["spec"].get("nodeName") for n in second)

        api.delete(op.job.path(ns, "first"))  # the garbage collector deletes its pods and PodGroup
        placed = wait_bound(api, ns, second, timeout=90)
        assert clique_of(api, placed) == {f"{key}-a"}, placed
        assert_invariants(api, ns, CLIQUE)


def test_min_member_counts_the_leader_and_a_gated_leader_holds_nothing(api: Api, op: OperatorProcess, ns: str) -> None:
    key = unique("ops")
    with temp_nodes(api, cliques(key, {"a": 3, "b": 2})):
        create_job(api, op, ns, "held", 2, key, gated=True)
        pods = job_pods(api, op, ns, "held", 3)
        leader = leader_of(op, "held", pods)
        workers = [n for n in pods if n != leader]
        pg = operator_pod_group(api, ns, "held")
        assert pg["spec"]["minMember"] == 3
        release(api, ns, workers)
        for w in workers:
            wait_message(api, ns, w, f"waiting for scheduling-gated members of gang {ns}/held: {leader}", timeout=30)
        assert not any(api.pod(ns, n)["status"].get("nominatedNodeName") for n in workers)  # nothing held
        # mpi-operator writes scheduleTimeoutSeconds 0, the training-operator leaves it out: both
        # mean "the scheduler's defaultPermitTimeoutSeconds" (600 s in the chart), not "reject at
        # once"; a literal 0 s would reject every first member and the gang could never bind.
        assert pg["spec"].get("scheduleTimeoutSeconds") in (0, None)
        api.ungate(ns, leader)
        placed = wait_bound(api, ns, pods, timeout=30)
        assert clique_of(api, placed) == {f"{key}-a"}, placed
        assert not any("rejected due to timeout" in m for m in api.event_notes(ns, workers[0], "FailedScheduling"))
        assert_invariants(api, ns, CLIQUE)


def create_held_job(api: Api, op: OperatorProcess, ns: str, name: str, workers: int, key: str, **kw: Any) -> str:
    """A job whose PodGroup needs one member more than the operator makes; that member, made here
    for an unserved scheduler, holds the gang at Permit until released. Returns its name."""
    create_job(api, op, ns, name, workers, key, min_available=workers + 2, **kw)
    extra = pod(f"{name}-extra", ns, gang=name, gpu=1, scheduler=HELD_SCHEDULER, node_selector={SELECT: key})
    api.create_pod(extra)
    return str(extra["metadata"]["name"])


def test_min_available_lowers_min_member(api: Api, op: OperatorProcess, ns: str) -> None:
    key = unique("ops")
    with temp_nodes(api, cliques(key, {"a": 3, "b": 1})):
        create_job(api, op, ns, "quorum", 2, key, gated=True, min_available=2)
        pods = job_pods(api, op, ns, "quorum", 3)
        leader = leader_of(op, "quorum", pods)
        workers = [n for n in pods if n != leader]
        assert operator_pod_group(api, ns, "quorum")["spec"]["minMember"] == 2
        release(api, ns, workers)
        placed = wait_bound(api, ns, workers, timeout=30)  # the gang is complete without the gated leader
        assert clique_of(api, placed) == {f"{key}-a"}, placed
        api.ungate(ns, leader)
        placed = wait_bound(api, ns, pods, timeout=30)
        assert clique_of(api, placed) == {f"{key}-a"}, placed
        assert_invariants(api, ns, CLIQUE)


def test_schedule_timeout_from_the_operator(api: Api, op: OperatorProcess, ns: str) -> None:
    key = unique("ops")
    with temp_nodes(api, cliques(key, {"a": 4})):
        extra = create_held_job(api, op, ns, "impatient", 2, key, timeout=3)
        pods = job_pods(api, op, ns, "impatient", 4)
        mine = [n for n in pods if n != extra]
        assert operator_pod_group(api, ns, "impatient")["spec"]["scheduleTimeoutSeconds"] == 3

        # The first member to wait times out; its release rejects the other waiters of the attempt.
        def timed_out() -> str | None:
            notes = [m for n in mine for m in api.event_notes(ns, n, "FailedScheduling")]
            return next(
                (m for m in notes if "rejected due to timeout after waiting 3s at plugin OMEGangPack" in m), None
            )

        wait_for("a member rejected after its 3 s Permit wait", timed_out, timeout=30)
        assert not any(api.pod(ns, n)["spec"].get("nodeName") for n in pods)
        release_held(api, ns, extra)
        placed = wait_bound(api, ns, pods, timeout=40)
        assert clique_of(api, placed) == {f"{key}-a"}, placed
        assert_invariants(api, ns, CLIQUE)


def test_deleting_the_job_mid_formation_releases_the_hold(
    api: Api, scheduler: SchedulerProcess, op: OperatorProcess, ns: str
) -> None:
    key = unique("ops")
    token = api.metrics_token()

    def pinned() -> float:
        return scheduler.metric("ome_scheduler_pinned_groups", token=token)

    # Gangs of earlier tests are collected once their namespaces are gone.
    wait_for("no pinned gangs", lambda: pinned() == 0 or None, timeout=90)
    with temp_nodes(api, cliques(key, {"a": 4})):
        extra = create_held_job(api, op, ns, "forming", 2, key)
        mine = [n for n in job_pods(api, op, ns, "forming", 4) if n != extra]
        wait_for("the job's pods waiting at Permit", lambda: waiting_at_permit(api, ns, mine), timeout=30)
        assert pinned() == 1
        api.create_pod(pod("solo", ns, cpu="6", node_selector={CLIQUE: f"{key}-a"}))
        wait_message(api, ns, "solo", "node is reserved for a forming gang")

        api.delete(op.job.path(ns, "forming"))
        api.delete_pod(ns, extra)  # made by the test, not owned by the job
        wait_for("the job's pods deleted", lambda: not api.pods(ns, f"{POD_GROUP_LABEL}=forming"), timeout=60)
        wait_for("the pin released", lambda: pinned() == 0 or None, timeout=30)
        wait_bound(api, ns, ["solo"], timeout=30)
        create_job(api, op, ns, "next", 1, key)  # the two nodes solo left
        placed = wait_bound(api, ns, job_pods(api, op, ns, "next", 2), timeout=60)
        assert clique_of(api, placed) == {f"{key}-a"}, placed
        assert_invariants(api, ns, CLIQUE)
