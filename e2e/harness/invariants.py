"""The invariants every e2e test ends with, checked on the objects the API server serves.

:func:`assert_invariants` LISTs a test's namespace, its PodGroups and every node and pod, and
fails naming the first broken rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e2e.harness.api import Api
from tests.support.manifests import POD_GROUP_LABEL, TOPOLOGY_ANNOTATION


def assert_invariants(api: Api, ns: str, domain_key: str | None = None) -> None:
    """Checks that hold after every e2e test (issue 4):

    * no gang has bound members in two domains (or on a node without the domain label);
    * no node is over-committed (sum of bound pods' requests within allocatable);
    * no gang has fewer than ``minMember`` members bound while some are bound, unless members
      of it are still pending (a newly started gang binds all together or not at all).
    """
    pods = [p for p in api.pods(ns) if p["status"].get("phase") not in ("Succeeded", "Failed")]
    pgs = {
        pg["metadata"]["name"]: pg
        for pg in api.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups")["items"]
    }
    nodes = {n["metadata"]["name"]: n for n in api.nodes()}
    by_gang: dict[str, list[Any]] = {}
    for p in pods:
        g = p["metadata"].get("labels", {}).get(POD_GROUP_LABEL)
        if g:
            by_gang.setdefault(g, []).append(p)
    for g, members in by_gang.items():
        pg = pgs.get(g)
        key = domain_key
        if pg is not None:
            key = pg["metadata"].get("annotations", {}).get(TOPOLOGY_ANNOTATION, key)
        bound = [m for m in members if m["spec"].get("nodeName")]
        if key:
            # Nodes a test already deleted cannot be judged; every check inside a test runs first.
            domains = {
                nodes[m["spec"]["nodeName"]]["metadata"].get("labels", {}).get(key, "<none>")
                for m in bound
                if m["spec"]["nodeName"] in nodes
            }
            assert len(domains) <= 1 and "<none>" not in domains, f"gang {ns}/{g} split across domains {domains}"
        if pg is not None and bound:
            mm = int(pg["spec"].get("minMember", 0))
            assert len(bound) >= mm or len(bound) == len(members), (
                f"gang {ns}/{g} has {len(bound)} of minMember {mm} bound"
            )
    _assert_no_overcommit(api, nodes)


def _assert_no_overcommit(api: Api, nodes: Mapping[str, Any]) -> None:
    from ome_scheduler.util.quantity import milli_value, value

    used: dict[str, dict[str, int]] = {}
    for p in api.get("/api/v1/pods")["items"]:
        n = p["spec"].get("nodeName")
        if not n or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        u = used.setdefault(n, {})
        for c in p["spec"]["containers"]:
            for r, q in (c.get("resources", {}).get("requests") or {}).items():
                u[r] = u.get(r, 0) + (milli_value(q) if r == "cpu" else value(q))
        u["pods"] = u.get("pods", 0) + 1
    for n, u in used.items():
        if n not in nodes:
            continue
        alloc = nodes[n]["status"].get("allocatable", {})
        for r, amount in u.items():
            if r not in alloc:
                continue
            cap = milli_value(alloc[r]) if r == "cpu" else value(alloc[r])
            assert amount <= cap, f"node {n} over-committed on {r}: {amount} > {cap}"
