"""Gangs the tests build on the cluster: held gangs, and the user guide's demo gang.

A held gang (:func:`create_held_gang`) cannot complete until its last member, created for
:data:`HELD_SCHEDULER` (a scheduler name nobody serves), is handed to ome-scheduler with
:func:`release_held`: meanwhile its other members wait at Permit, holding their domain.
:func:`run_demo_gang` applies ``examples/demo/`` unchanged and checks where it landed.
"""

from __future__ import annotations

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.paths import DEMO_DIR
from e2e.harness.waits import wait_for
from tests.support.manifests import HOSTNAME, SCHEDULER_NAME, pod, pod_group

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


def run_demo_gang(cluster: Cluster, api: Api, timeout: float = 60.0) -> list[dict[str, str]]:
    """Apply the user guide's demo gang (``examples/demo/``, unchanged) in the existing namespace
    ``gang-demo``; wait until both pods run on two nodes of one clique and each has its
    ``Scheduled`` event (written after the Binding). Returns ``[{"name", "node"}]``."""
    cluster.kubectl("apply", "-f", str(DEMO_DIR / "podgroup.yaml"))
    cluster.kubectl("apply", "-f", str(DEMO_DIR / "gang.yaml"))

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

        def scheduled_notes(name: str = p["name"]) -> list[str]:
            return api.event_notes("gang-demo", name, "Scheduled")

        notes = wait_for(f"{p['name']}'s Scheduled event", scheduled_notes, timeout=15)
        assert f"Successfully assigned gang-demo/{p['name']} to {p['node']}" in notes, notes
    return placed
