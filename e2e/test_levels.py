"""End-to-end: preferred topology levels inside the required key (design §3.9).

A fixture of two blocks of one-GPU kwok nodes: block b1 holds cliques a0 (1 node), c1 (3) and
c2 (3); block b2 holds c3 (4) and c4 (4). Every member asks for one GPU and keeps apart from
its siblings (one per node). PodGroups require the block and prefer the clique
(``ome.io/topology-preferred-keys``):

* a gang of 3 lands in one clique (best fit among cliques: c1 and c2 tie at room 3, c1 wins by
  name), and its ``Pinned`` event and ``ome.io/placement-domain`` carry the path;
* a gang of 5 fits no clique: it lands in the fewest cliques of one block (c1 and c2 of b1, the
  best-fitting block), never in a0 and never across blocks, and its event says the clique level
  was relaxed;
* a gang of 9 fits no block and pends with ``no domain has room for gang``;
* an invalid annotation gives its message;
* a gang of 8 in sub-gangs of 4 goes to the block that takes both sub-gangs whole (§3.10).
"""

from __future__ import annotations

from typing import Any

from e2e.harness.api import Api
from e2e.harness.invariants import assert_invariants
from e2e.harness.scheduler import SchedulerProcess, assert_no_drift
from e2e.harness.waits import temp_nodes, wait_bound, wait_for, wait_message
from tests.support.manifests import HOSTNAME, node, pod, pod_group, unique

PREFERRED = "ome.io/topology-preferred-keys"
FABRIC = {"b1": {"a0": 1, "c1": 3, "c2": 3}, "b2": {"c3": 4, "c4": 4}}


def _fabric(fabric: dict[str, dict[str, int]] = FABRIC) -> tuple[str, str, str, list[dict[str, Any]]]:
    """A unique prefix, its block and clique label keys, and the fixture's nodes."""
    key = unique("levels")
    bk, ck = f"e2e.ome.io/{key}-block", f"e2e.ome.io/{key}-clique"
    nodes = [
        node(f"{key}-{b}{c}-{i}", {bk: b, ck: c})
        for b, cliques in fabric.items()
        for c, n in cliques.items()
        for i in range(n)
    ]
    return key, bk, ck, nodes


def _gang(api: Api, ns: str, n: int, bk: str, preferred: str, **annotations: str) -> list[str]:
    pg = pod_group("g", ns, n, topology_key=bk, timeout=30)
    pg["metadata"]["annotations"] |= {PREFERRED: preferred} if preferred else {}
    pg["metadata"]["annotations"] |= annotations
    api.create_pod_group(pg)
    names = [f"g-{i}" for i in range(n)]
    for name in names:
        api.create_pod(pod(name, ns, gang="g", anti_affinity_on=HOSTNAME))
    return names


def _cliques(api: Api, bk: str, ck: str, placed: dict[str, str]) -> set[tuple[str, str]]:
    labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in api.nodes()}
    return {(labels[n][bk], labels[n][ck]) for n in placed.values()}


def _pinned(api: Api, ns: str) -> list[str]:
    return [str(e.get("note", "")) for e in api.events(ns, "g") if e.get("reason") == "Pinned"]


def test_a_gang_that_fits_a_clique_lands_in_one(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    _, bk, ck, nodes = _fabric()
    with temp_nodes(api, nodes):
        placed = wait_bound(api, ns, _gang(api, ns, 3, bk, ck), timeout=30)
        assert _cliques(api, bk, ck, placed) == {("b1", "c1")}, placed
        notes = wait_for("the Pinned event", lambda: _pinned(api, ns), timeout=10)
        assert notes == [f"pinned to {bk}=b1,{ck}=c1 (room for 3 members, the gang needs 3), holding it"], notes

        def annotations() -> dict[str, str] | None:
            ann = api.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/g")["metadata"]
            got = dict(ann.get("annotations", {}))
            return got if got.get("ome.io/placement") == "Bound" else None

        ann = wait_for("the Bound placement annotations", annotations, timeout=15)
        assert ann["ome.io/placement-domain"] == f"{bk}=b1,{ck}=c1", ann
        assert ann["ome.io/placement-topology-key"] == f"{bk}>{ck}", ann
        assert_invariants(api, ns)
        assert_no_drift(scheduler)
        api.delete_namespace(ns, wait=60.0)  # before the nodes go


def test_a_gang_too_big_for_a_clique_takes_the_fewest_cliques_of_one_block(
    api: Api, scheduler: SchedulerProcess, ns: str
) -> None:
    _, bk, ck, nodes = _fabric()
    with temp_nodes(api, nodes):
        placed = wait_bound(api, ns, _gang(api, ns, 5, bk, ck), timeout=30)
        assert _cliques(api, bk, ck, placed) == {("b1", "c1"), ("b1", "c2")}, placed
        (note,) = wait_for("the Pinned event", lambda: _pinned(api, ns), timeout=10)
        assert note.startswith(f"pinned to {bk}=b1 (room for 7 members, the gang needs 5)"), note
        assert note.endswith(f"preferred level {ck} relaxed: no domain of it had room for the gang"), note
        assert_invariants(api, ns)
        assert_no_drift(scheduler)
        api.delete_namespace(ns, wait=60.0)


def test_a_gang_that_fits_no_block_pends(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    _, bk, ck, nodes = _fabric()
    with temp_nodes(api, nodes):
        names = _gang(api, ns, 9, bk, ck)
        wait_message(api, ns, names[0], "no domain has room for gang", timeout=30)
        assert not any(api.pod(ns, n)["spec"].get("nodeName") for n in names)
        api.delete_namespace(ns, wait=60.0)


def test_an_invalid_annotation_names_itself(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    _, bk, _, nodes = _fabric()
    with temp_nodes(api, nodes):
        names = _gang(api, ns, 2, bk, bk)
        msg = f"PodGroup {ns}/g has an invalid {PREFERRED} annotation: {bk} is the required topology key itself"
        wait_message(api, ns, names[0], msg, timeout=30)
        api.delete_namespace(ns, wait=60.0)


def test_sub_gangs_go_to_the_block_that_takes_them_whole(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    """§3.10: a gang of 8 in sub-gangs of 4. Block b1 has room for 8 members but no clique of it
    takes 4; b2 takes one sub-gang in c3 and one in c4 (its clique a6 none)."""
    _, bk, ck, nodes = _fabric({"b1": {"c1": 3, "c2": 3, "c5": 2}, "b2": {"a6": 2, "c3": 4, "c4": 4}})
    with temp_nodes(api, nodes):
        sub = {"ome.io/subgroup-size": "4", "ome.io/subgroup-topology-key": ck}
        placed = wait_bound(api, ns, _gang(api, ns, 8, bk, "", **sub), timeout=40)
        labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in api.nodes()}
        per_clique: dict[tuple[str, str], int] = {}
        for n in placed.values():
            k = (labels[n][bk], labels[n][ck])
            per_clique[k] = per_clique.get(k, 0) + 1
        assert per_clique == {("b2", "c3"): 4, ("b2", "c4"): 4}, per_clique
        assert_invariants(api, ns)
        assert_no_drift(scheduler)
        api.delete_namespace(ns, wait=60.0)
