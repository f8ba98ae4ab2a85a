"""End-to-end: OME InferenceServices and LeaderWorkerSets, through the real clients (issue 25).

OME's controller-manager (the release of today, commit 17b77ed) turns a multi-node
InferenceService into a LeaderWorkerSet; the LeaderWorkerSet controller (v0.5.1) makes each
group's pods: a leader, then its workers. Neither creates a PodGroup. Both run as local
processes (``e2e/harness/serving.py``), and ome-scheduler runs as the chart configures it with
``scheduler.plugin.topologyKey: nvidia.com/gpu.clique``, the fallback domain of a gang whose
objects name none (``gcIntervalSeconds`` lowered to 2 s).

An LWS group is a gang (issue 25; design §2.1): its pods share ``leaderworkerset.sigs.k8s.io/name``
and ``group-index``, its size is the ``leaderworkerset.sigs.k8s.io/size`` annotation, and it is
bound whole in one domain. Each test sets its scene so that a placement pod by pod would be
wrong for certain, not by chance: standalone pods are packed into the fullest clique
(``standaloneDomainPacking``) and onto the most allocated node (``MostAllocated``), so a small
clique, or one of small nodes, would draw the first pods of a group that does not fit there.
The last test runs a second scheduler with ``lwsGangs: false`` and shows exactly that split.

Every test makes its own kwok nodes with four GPUs each, in cliques of its own; every serving
pod asks for four GPUs (a whole node). OME's pods select the nodes labelled
``models.ome.io/clusterbasemodel.<model>: Ready`` for the test's own model, hand-made
LeaderWorkerSets select ``e2e.ome.io/lws: <test key>``. kwok has no kubelets: a bound pod runs
and turns Ready at once, which is all the controllers wait for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.serving import LWS_API, OME_API, LWSController, OMEManager
from e2e.harness.waits import temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import (
    CLIQUE,
    LWS_GROUP_INDEX_LABEL,
    LWS_GROUP_KEY_LABEL,
    LWS_NAME_LABEL,
    LWS_SIZE_ANNOTATION,
    LWS_WORKER_INDEX_LABEL,
    POD_GROUP_LABEL,
    SCHEDULER_NAME,
    chart_config,
    cluster_base_model,
    cluster_serving_runtime,
    inference_service,
    leader_worker_set,
    model_ready_label,
    node,
    pod_group,
    unique,
)

SELECT = "e2e.ome.io/lws"
RACK = "e2e.ome.io/rack"
"""A second node label, the topology key of the PodGroup that wins over an LWS group."""
SMALL_CPU = "8"
BIG_CPU = "64"
"""Node CPU: a serving pod (1 CPU) makes an 8-CPU node more allocated than a 64-CPU one, so
MostAllocated places a standalone pod on the small nodes first."""


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    """The chart's configuration with ``scheduler.plugin.topologyKey: nvidia.com/gpu.clique``."""
    return chart_config(topology_key=CLIQUE, gang_args={"gcIntervalSeconds": 2})


@pytest.fixture
def lws(scheduler: SchedulerProcess, lws_controller: LWSController) -> LWSController:
    """The running LWS controller (started once per module), with ome-scheduler running."""
    return lws_controller


@pytest.fixture
def ome(scheduler: SchedulerProcess, ome_manager: OMEManager) -> OMEManager:
    """The running OME manager (and LWS controller, started once per module), with ome-scheduler running."""
    return ome_manager


def cliques(key: str, sizes: Mapping[str, int], labels: Mapping[str, str], cpu: Mapping[str, str]) -> list[Any]:
    """Four-GPU nodes ``<key>-<clique><i>`` in cliques ``<key>-<clique>``, with ``labels`` and
    ``cpu[clique]`` CPUs (default :data:`BIG_CPU`)."""
    return [
        node(f"{key}-{c}{i}", {CLIQUE: f"{key}-{c}", **labels}, gpu=4, cpu=cpu.get(c, BIG_CPU))
        for c, n in sizes.items()
        for i in range(n)
    ]


def clique_of(api: Api, placed: Mapping[str, str]) -> set[str]:
    """The cliques of the nodes in ``placed`` (pod -> node)."""
    labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in api.nodes()}
    return {labels[n] for n in placed.values()}


def lws_pods(api: Api, ns: str, group: int | None = None) -> list[dict[str, Any]]:
    """The namespace's LWS pods (of group ``group``), by name."""
    sel = LWS_NAME_LABEL if group is None else f"{LWS_NAME_LABEL},{LWS_GROUP_INDEX_LABEL}={group}"
    return sorted(api.pods(ns, sel), key=lambda p: str(p["metadata"]["name"]))


def wait_pods(api: Api, ns: str, count: int, group: int | None = None, timeout: float = 60.0) -> list[str]:
    """Wait until the controllers have made ``count`` LWS pods (of ``group``) in ``ns``; their names."""

    def made() -> list[str] | None:
        names = [str(p["metadata"]["name"]) for p in lws_pods(api, ns, group)]
        return names if len(names) == count else None

    what = f"{count} LWS pods" + (f" of group {group}" if group is not None else "") + f" in {ns}"
    return wait_for(what, made, timeout=timeout)


def groups_placed(api: Api, ns: str, names: list[str]) -> dict[str, set[str]]:
    """Group index -> the cliques its bound pods are on."""
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in api.nodes()}
    out: dict[str, set[str]] = {}
    for n in names:
        p = api.pod(ns, n)
        out.setdefault(p["metadata"]["labels"][LWS_GROUP_INDEX_LABEL], set()).add(nodes[p["spec"]["nodeName"]])
    return out


def remove_serving(api: Api, ns: str, timeout: float = 30.0) -> None:
    """Delete the namespace's InferenceServices and LeaderWorkerSets and wait until their pods are
    gone (force-deleting what is left after ``timeout`` s)."""
    for path in (f"{OME_API}/namespaces/{ns}/inferenceservices", f"{LWS_API}/namespaces/{ns}/leaderworkersets"):
        found = api.try_get(path)  # None: that CRD is not installed (a module that runs no OME manager)
        for obj in (found or {}).get("items", []):
            api.delete(f"{path}/{obj['metadata']['name']}")
    with contextlib.suppress(AssertionError):
        wait_for(f"the pods of {ns} gone", lambda: not api.pods(ns), timeout=timeout)
    for p in api.pods(ns):
        api.delete_pod(ns, p["metadata"]["name"], grace=0)


@contextlib.contextmanager
def serving_nodes(api: Api, ns: str, nodes: list[Any]) -> Iterator[list[str]]:
    """``temp_nodes``, with the namespace's serving objects and pods removed before the nodes go:
    a pod with a grace period needs its node's kwok to finish terminating, or it lingers until
    the pod garbage collector takes it, a minute later."""
    with temp_nodes(api, nodes) as names:
        try:
            yield names
        finally:
            remove_serving(api, ns)


@contextlib.contextmanager
def ome_model(api: Api, key: str, workers: int | None) -> Iterator[str]:
    """A ClusterBaseModel and a ClusterServingRuntime named ``key`` (cluster-scoped, deleted after):
    a leader and ``workers`` workers, or a single pod when None. Yields the model's name."""
    api.post(f"{OME_API}/clusterbasemodels", cluster_base_model(key))
    api.post(f"{OME_API}/clusterservingruntimes", cluster_serving_runtime(key, workers=workers))
    try:
        yield key
    finally:
        api.delete(f"{OME_API}/clusterservingruntimes/{key}")
        api.delete(f"{OME_API}/clusterbasemodels/{key}")


def isvc_ready(api: Api, ns: str, name: str) -> bool:
    """Whether InferenceService ``name`` has condition Ready True."""
    conds = (api.get(f"{OME_API}/namespaces/{ns}/inferenceservices/{name}").get("status") or {}).get("conditions")
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds or [])


def wait_isvc_ready(api: Api, ome: OMEManager, ns: str, name: str, timeout: float = 60.0) -> None:
    """Wait until the InferenceService is Ready; on timeout the error carries the manager's log."""
    try:
        wait_for(f"InferenceService {ns}/{name} Ready", lambda: isvc_ready(api, ns, name), timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{ome.name} log:\n{ome.log()[-4000:]}") from None


def the_lws(api: Api, ns: str) -> dict[str, Any]:
    """The one LeaderWorkerSet of the namespace (OME's, once it has made it)."""
    found = wait_for(
        f"a LeaderWorkerSet in {ns}", lambda: api.get(f"{LWS_API}/namespaces/{ns}/leaderworkersets")["items"]
    )
    (one,) = found
    return dict(one)


def test_the_lws_controller_labels_every_group(api: Api, lws: LWSController, ns: str) -> None:
    """The setup itself: the LWS webhooks, served on loopback, label and annotate every pod of
    every group, and its controller makes them (one clique with room for all: placement is not
    the question here)."""
    key = unique("lws")
    with serving_nodes(api, ns, cliques(key, {"a": 4}, {SELECT: key}, {})):
        api.post(
            f"{LWS_API}/namespaces/{ns}/leaderworkersets",
            leader_worker_set("web", ns, 2, replicas=2, node_selector={SELECT: key}),
        )
        names = wait_pods(api, ns, 4)
        assert names == ["web-0", "web-0-1", "web-1", "web-1-1"]
        keys = set()
        for p in lws_pods(api, ns):
            labels, name = p["metadata"]["labels"], p["metadata"]["name"]
            assert labels[LWS_NAME_LABEL] == "web"
            assert labels[LWS_GROUP_INDEX_LABEL] == name.split("-")[1]
            assert labels[LWS_WORKER_INDEX_LABEL] == ("1" if name.count("-") == 2 else "0")
            assert p["metadata"]["annotations"][LWS_SIZE_ANNOTATION] == "2"
            assert p["spec"]["schedulerName"] == SCHEDULER_NAME
            assert POD_GROUP_LABEL not in labels
            keys.add((labels[LWS_GROUP_INDEX_LABEL], labels[LWS_GROUP_KEY_LABEL]))
        assert len(keys) == 2, keys  # one group-key per group, shared by its leader and worker
        placed = wait_bound(api, ns, names, timeout=60)
        assert clique_of(api, placed) == {f"{key}-a"}
        wait_for(
            "the LeaderWorkerSet Available",
            lambda: any(
                c["type"] == "Available" and c["status"] == "True"
                for c in api.get(f"{LWS_API}/namespaces/{ns}/leaderworkersets/web")
                .get("status", {})
                .get("conditions", [])
            ),
        )
        assert_invariants(api, ns, CLIQUE)


def test_multi_node_inference_service_lands_in_one_clique(api: Api, ome: OMEManager, ns: str) -> None:
    """(a) Leader + 3 workers of 4 GPUs each: only clique b (4 nodes) holds the group; clique a
    (2 small nodes) draws standalone pods first. Today: 2 pods in a, 2 in b, and Ready."""
    key = unique("ome")
    with ome_model(api, key, workers=3) as model:
        nodes = cliques(key, {"a": 2, "b": 4}, {model_ready_label(model): "Ready"}, {"a": SMALL_CPU})
        with serving_nodes(api, ns, nodes):
            api.post(f"{OME_API}/namespaces/{ns}/inferenceservices", inference_service("llm", ns, model, key))
            names = wait_pods(api, ns, 4)
            made = the_lws(api, ns)
            assert made["spec"]["leaderWorkerTemplate"]["size"] == 4
            assert made["spec"]["startupPolicy"] == "LeaderCreated"
            for p in lws_pods(api, ns):
                assert p["spec"]["schedulerName"] == SCHEDULER_NAME
                assert p["spec"]["nodeSelector"][model_ready_label(model)] == "Ready"
            placed = wait_bound(api, ns, names, timeout=60)
            assert clique_of(api, placed) == {f"{key}-b"}, placed
            wait_isvc_ready(api, ome, ns, "llm")
            assert_invariants(api, ns, CLIQUE)


def test_replicas_take_a_clique_each_and_the_next_waits(api: Api, ome: OMEManager, ns: str) -> None:
    """(b) Three replicas of leader + 3 workers on three cliques of 4 nodes: one clique each. A
    fourth replica waits, as a gang with no room. Today its pods fail as standalone pods."""
    key = unique("ome")
    with ome_model(api, key, workers=3) as model:
        nodes = cliques(key, {"a": 4, "b": 4, "c": 4}, {model_ready_label(model): "Ready"}, {})
        with serving_nodes(api, ns, nodes):
            path = f"{OME_API}/namespaces/{ns}/inferenceservices"
            api.post(path, inference_service("llm", ns, model, key, replicas=3))
            names = wait_pods(api, ns, 12)
            wait_bound(api, ns, names, timeout=90)
            by_group = groups_placed(api, ns, names)
            assert all(len(c) == 1 for c in by_group.values()), by_group
            assert set().union(*by_group.values()) == {f"{key}-a", f"{key}-b", f"{key}-c"}, by_group
            wait_isvc_ready(api, ome, ns, "llm")

            api.patch(f"{path}/llm", {"spec": {"engine": {"minReplicas": 4, "maxReplicas": 4}}})
            fourth = wait_pods(api, ns, 4, group=3)
            for n in fourth:
                wait_message(api, ns, n, f"no domain has room for gang {ns}/", timeout=30)
            assert not any(api.pod(ns, n)["spec"].get("nodeName") for n in fourth)
            assert_invariants(api, ns, CLIQUE)


def test_leader_ready_group_lands_in_one_domain(api: Api, lws: LWSController, ns: str) -> None:
    """(c) LeaderReady with exclusive-topology: the leader binds where the whole group fits (b,
    4 nodes), not in the small clique a (2 nodes) that draws it today; its workers, created once
    it is Ready, follow it there (the controller pins them to the leader's clique)."""
    key = unique("lws")
    with serving_nodes(api, ns, cliques(key, {"a": 2, "b": 4}, {SELECT: key}, {"a": SMALL_CPU})):
        body = leader_worker_set(
            "ready", ns, 4, startup_policy="LeaderReady", exclusive_topology=CLIQUE, node_selector={SELECT: key}
        )
        api.post(f"{LWS_API}/namespaces/{ns}/leaderworkersets", body)
        wait_for("the leader ready-0", lambda: api.try_get(f"/api/v1/namespaces/{ns}/pods/ready-0"))
        leader = wait_bound(api, ns, ["ready-0"], timeout=30)  # alone: workers come once it is Ready
        assert clique_of(api, leader) == {f"{key}-b"}, leader  # the only clique with room for the group
        names = wait_pods(api, ns, 4)
        placed = wait_bound(api, ns, names, timeout=30)
        assert clique_of(api, placed) == {f"{key}-b"}, placed
        assert_invariants(api, ns, CLIQUE)


def bound_group(api: Api, ns: str, key: str, restart_policy: str) -> dict[str, str]:
    """A hand-made LWS ``grp`` of one leader and 3 workers on clique b (4 nodes), bound; pod -> node."""
    body = leader_worker_set("grp", ns, 4, restart_policy=restart_policy, node_selector={SELECT: key})
    api.post(f"{LWS_API}/namespaces/{ns}/leaderworkersets", body)
    placed = wait_bound(api, ns, wait_pods(api, ns, 4), timeout=60)
    assert clique_of(api, placed) == {f"{key}-b"}, placed  # the only clique there is
    return placed


def test_a_deleted_worker_comes_back_into_its_group_clique(api: Api, lws: LWSController, ns: str) -> None:
    """(d) restartPolicy None: the worker StatefulSet recreates a deleted worker, alone. It
    belongs in its group's clique b (where its node is free again), not in clique a, which a
    node of small CPU joined meanwhile and where a standalone pod goes today."""
    key = unique("lws")
    with serving_nodes(api, ns, cliques(key, {"b": 4}, {SELECT: key}, {})):
        bound_group(api, ns, key, "None")
        with serving_nodes(api, ns, cliques(key, {"a": 1}, {SELECT: key}, {"a": "2"})):
            old = api.pod(ns, "grp-0-2")["metadata"]["uid"]
            api.delete(f"/api/v1/namespaces/{ns}/pods/grp-0-2")
            wait_for(
                "grp-0-2 recreated",
                lambda: (p := api.try_get(f"/api/v1/namespaces/{ns}/pods/grp-0-2")) and p["metadata"]["uid"] != old,
            )
            assert api.pod(ns, "grp-0").get("status", {}).get("phase") == "Running"  # the group was kept
            placed = wait_bound(api, ns, ["grp-0-2"], timeout=30)
            assert clique_of(api, placed) == {f"{key}-b"}, placed
            assert_invariants(api, ns, CLIQUE)


def test_a_recreated_group_lands_whole_in_one_domain(api: Api, lws: LWSController, ns: str) -> None:
    """(d) RecreateGroupOnPodRestart (the default): deleting a worker makes the controller delete
    the leader, and the group comes back as new pods. Clique a (2 small nodes) joined meanwhile:
    the new group fits only in b, while today its first pods go to a."""
    key = unique("lws")
    with serving_nodes(api, ns, cliques(key, {"b": 4}, {SELECT: key}, {})):
        first = bound_group(api, ns, key, "RecreateGroupOnPodRestart")
        old = {p["metadata"]["uid"] for p in lws_pods(api, ns)}
        with serving_nodes(api, ns, cliques(key, {"a": 2}, {SELECT: key}, {"a": SMALL_CPU})):
            api.delete(f"/api/v1/namespaces/{ns}/pods/grp-0-2")

            def recreated() -> list[str] | None:
                pods = lws_pods(api, ns)
                new = [str(p["metadata"]["name"]) for p in pods if p["metadata"]["uid"] not in old]
                return new if len(new) == len(pods) == 4 else None

            names = wait_for("the group recreated (4 new pods)", recreated, timeout=60)
            assert sorted(names) == sorted(first)

            def all_bound() -> dict[str, str] | None:
                # The controller may re-create the group once more (an old worker that finishes
                # terminating after the new leader exists makes it delete that leader): poll the
                # group as it stands, not the pods of one incarnation by name.
                pods = [p for p in lws_pods(api, ns) if p["metadata"]["uid"] not in old]
                placed = {str(p["metadata"]["name"]): str(p["spec"].get("nodeName") or "") for p in pods}
                return placed if len(placed) == 4 and all(placed.values()) else None

            placed = wait_for("the recreated group bound", all_bound, timeout=60)
            assert clique_of(api, placed) == {f"{key}-b"}, placed
            assert_invariants(api, ns, CLIQUE)


def test_single_pod_inference_service_binds_standalone(api: Api, ome: OMEManager, ns: str) -> None:
    """(e) A runtime without workers: OME makes a Deployment, whose one pod is a standalone pod of
    ome-scheduler (no LWS labels, no PodGroup), bound; the InferenceService becomes Ready."""
    key = unique("ome")
    with ome_model(api, key, workers=None) as model:
        nodes = cliques(key, {"a": 1, "b": 2}, {model_ready_label(model): "Ready"}, {})
        with serving_nodes(api, ns, nodes):
            api.post(f"{OME_API}/namespaces/{ns}/inferenceservices", inference_service("small", ns, model, key))
            sel = f"!{LWS_NAME_LABEL}"
            (name,) = wait_for(
                "the engine's pod", lambda: [p["metadata"]["name"] for p in api.pods(ns, sel)] or None, timeout=60
            )
            p = api.pod(ns, name)
            assert p["spec"]["schedulerName"] == SCHEDULER_NAME
            assert POD_GROUP_LABEL not in p["metadata"]["labels"]
            assert not api.get(f"{LWS_API}/namespaces/{ns}/leaderworkersets")["items"]
            placed = wait_bound(api, ns, [name], timeout=30)
            assert clique_of(api, placed) <= {f"{key}-a", f"{key}-b"}
            wait_isvc_ready(api, ome, ns, "small")
            assert_invariants(api, ns, CLIQUE)


def test_a_pod_group_label_wins_over_the_lws_group(api: Api, lws: LWSController, ns: str) -> None:
    """A group whose pods also carry ``scheduling.x-k8s.io/pod-group`` is scheduled by that
    PodGroup: its ``ome.io/topology-key`` names racks of 2 nodes, so its 4 members fit no
    domain and wait, although the one clique (4 nodes) would hold the LWS group."""
    key = unique("lws")
    nodes = [
        node(f"{key}-b{i}", {CLIQUE: f"{key}-b", RACK: f"{key}-r{i // 2}", SELECT: key}, gpu=4, cpu=BIG_CPU)
        for i in range(4)
    ]
    with serving_nodes(api, ns, nodes):
        api.create_pod_group(pod_group("pg", ns, 4, topology_key=RACK))
        body = leader_worker_set("both", ns, 4, node_selector={SELECT: key})
        body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {"labels": {POD_GROUP_LABEL: "pg"}}
        api.post(f"{LWS_API}/namespaces/{ns}/leaderworkersets", body)
        names = wait_pods(api, ns, 4)
        for n in names:
            assert api.pod(ns, n)["metadata"]["labels"][POD_GROUP_LABEL] == "pg"
            wait_message(api, ns, n, f"no domain has room for gang {ns}/pg", timeout=30)
        assert not any(api.pod(ns, n)["spec"].get("nodeName") for n in names)
        assert_invariants(api, ns, CLIQUE)


NO_LWS_GANGS = "ome-scheduler-nolws"


def test_with_lws_gangs_off_lws_pods_are_standalone(cluster: Cluster, api: Api, lws: LWSController, ns: str) -> None:
    """``scheduler.plugin.lwsGangs: false``: a scheduler so configured places each pod of a group
    on its own, as before issue 25: packing draws the first pods into the small clique a, so
    the group of 4 is split between a (2 nodes) and b."""
    key = unique("lws")
    config = chart_config(
        scheduler_name=NO_LWS_GANGS, topology_key=CLIQUE, gang_args={"gcIntervalSeconds": 2, "lwsGangs": False}
    )
    with (
        SchedulerProcess(cluster, config, name=NO_LWS_GANGS),
        serving_nodes(api, ns, cliques(key, {"a": 2, "b": 4}, {SELECT: key}, {"a": SMALL_CPU})),
    ):
        body = leader_worker_set("solo", ns, 4, node_selector={SELECT: key}, scheduler=NO_LWS_GANGS)
        api.post(f"{LWS_API}/namespaces/{ns}/leaderworkersets", body)
        placed = wait_bound(api, ns, wait_pods(api, ns, 4), timeout=60)
        assert clique_of(api, placed) == {f"{key}-a", f"{key}-b"}, placed
