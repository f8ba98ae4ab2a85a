"""The invariants the e2e tests and the soak end with, checked on the objects the API server serves.

One checker for both. The rules are pure functions of Pods, Nodes, PodGroups and
``events.k8s.io/v1`` Events (JSON dicts, as the API server returns them) and return their
violations as messages: the soak records each with the time it first saw it, an e2e test
asserts there is none (:func:`assert_invariants`, which LISTs what the rules read). The rules:

* **no node over-committed** (:func:`overcommitted`): per node, the effective requests of its
  bound pods that are neither Succeeded nor Failed (:func:`effective_requests`: init containers,
  restartable sidecars, pod-level resources and pod overhead, as kube-scheduler counts them)
  stay within allocatable, for every resource the node lists, ``pods`` included;
* **no gang in two domains** (:func:`split_gangs`): the bound members of a gang are all on nodes
  with one value of the gang's domain label (its PodGroup's ``ome.io/topology-key`` annotation,
  else the caller's key), none on a node without that label;
* **no gang partly bound** (:func:`partial_gangs`): a gang with bound members has at least
  ``minMember`` of them bound, unless every member it still has is bound (members were
  deleted). A gang's Bindings are separate writes, so a cluster still scheduling may show one
  half bound for a moment: this rule is for a cluster that has settled (``settled``);
* **no pod bound twice**: no pod has more than one ``Scheduled`` event (:func:`scheduled_twice`,
  by pod UID), and no pod was seen on two nodes (:func:`bound_twice`, for a caller that
  watched the pods, as the soak does).

Pods on a node that is not in the node list (deleted meanwhile) cannot be judged against it and
are skipped, unless the caller remembers the node's labels (``node_labels``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from typing import Any

from e2e.harness.api import Api
from ome_scheduler.util.quantity import milli_value, value
from tests.support.manifests import POD_GROUP_LABEL, TOPOLOGY_ANNOTATION

Obj = Mapping[str, Any]
"""An API object as JSON."""


def _parse(rl: Obj | None) -> dict[str, int]:
    """A ResourceList as integers: cpu in millicores, everything else ``Value()``."""
    return {k: (milli_value(str(q)) if k == "cpu" else value(str(q))) for k, q in (rl or {}).items()}


def _add(dst: dict[str, int], src: Mapping[str, int]) -> None:
    for k, v in src.items():
        dst[k] = dst.get(k, 0) + v


def effective_requests(pod_obj: Obj) -> dict[str, int]:
    """The effective requests of a pod (a Pod as the API server returns it), by resource name.

    Written independently of the scheduler (which it checks), after
    ``k8s.io/component-helpers/resource/helpers.go`` ``PodRequests``: app containers are summed;
    each restartable init container (``restartPolicy: Always``, a sidecar) adds to that sum and
    runs alongside every later init container; the pod needs the larger of the sum and the
    largest init-container step; pod-level ``spec.resources.requests`` (cpu, memory, hugepages)
    replace the container aggregate; ``spec.overhead`` is added. cpu in millicores, the rest in
    units (bytes, devices). A pod counts one towards ``pods``.
    """
    spec = pod_obj.get("spec", {})
    reqs: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(reqs, _parse((c.get("resources") or {}).get("requests")))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        r = _parse((c.get("resources") or {}).get("requests"))
        if c.get("restartPolicy") == "Always":
            _add(reqs, r)
            _add(sidecars, r)
            step = dict(sidecars)
        else:
            step = dict(r)
            _add(step, sidecars)
        for k, v in step.items():
            init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        reqs[k] = max(reqs.get(k, 0), v)
    pod_level = {
        k: q
        for k, q in ((spec.get("resources") or {}).get("requests") or {}).items()
        if k in ("cpu", "memory") or k.startswith("hugepages-")
    }
    reqs.update(_parse(pod_level))
    _add(reqs, _parse(spec.get("overhead")))
    reqs["pods"] = reqs.get("pods", 0) + 1
    return reqs


def _live(p: Obj) -> bool:
    """Neither Succeeded nor Failed: the pod still holds (or waits for) its place."""
    return p.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def _bound(p: Obj) -> bool:
    """Whether a pod holds capacity on its node: bound and neither Succeeded nor Failed."""
    return bool(p.get("spec", {}).get("nodeName")) and _live(p)


def overcommitted(pods: Iterable[Obj], nodes: Iterable[Obj]) -> list[str]:
    """Nodes whose bound pods' effective requests exceed allocatable, one message per node and resource.

    ``pods``: Pod objects (any namespaces); ``nodes``: Node objects. Pods on nodes not in
    ``nodes`` (deleted meanwhile) cannot be judged and are skipped; a resource the node does not
    list as allocatable is not checked (the API server would not have admitted such a pod's
    extended resource elsewhere either).
    """
    alloc = {n["metadata"]["name"]: _parse(n.get("status", {}).get("allocatable")) for n in nodes}
    used: dict[str, dict[str, int]] = {}
    for p in pods:
        n = p["spec"].get("nodeName")
        if n in alloc and _bound(p):
            _add(used.setdefault(n, {}), effective_requests(p))
    out = []
    for n, u in sorted(used.items()):
        for r, amount in sorted(u.items()):
            if r in alloc[n] and amount > alloc[n][r]:
                out.append(f"node {n} over-committed on {r}: {amount} > {alloc[n][r]}")
    return out


def _gangs(pods: Iterable[Obj]) -> dict[tuple[str, str], list[Obj]]:
    """(namespace, PodGroup name) -> its member pods that are neither Succeeded nor Failed."""
    out: dict[tuple[str, str], list[Obj]] = {}
    for p in pods:
        md = p["metadata"]
        g = (md.get("labels") or {}).get(POD_GROUP_LABEL)
        if g and _live(p):
            out.setdefault((str(md["namespace"]), str(g)), []).append(p)
    return out


def _by_key(pod_groups: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    return {(str(pg["metadata"]["namespace"]), str(pg["metadata"]["name"])): pg for pg in pod_groups}


def split_gangs(
    pods: Iterable[Obj],
    pod_groups: Iterable[Obj],
    node_labels: Mapping[str, Mapping[str, str]],
    domain_key: str | None = None,
) -> list[str]:
    """Gangs whose bound members are in more than one domain or outside any, one message per gang.

    ``pods``: Pod objects, a gang is ``<namespace>/<pod-group label>``; ``pod_groups``: their
    PodGroups (for the domain label key of each, its ``ome.io/topology-key`` annotation);
    ``domain_key``: the key of a gang whose PodGroup names none (a gang with neither is not
    judged); ``node_labels``: node name -> labels. A member on a node without the key is in
    domain ``<none>``; a member on a node missing from ``node_labels`` is skipped.
    """
    pgs = _by_key(pod_groups)
    out = []
    for (ns, g), members in sorted(_gangs(pods).items()):
        pg = pgs.get((ns, g))
        key = ((pg["metadata"].get("annotations") or {}) if pg is not None else {}).get(TOPOLOGY_ANNOTATION, domain_key)
        if not key:
            continue
        domains = {
            node_labels[n].get(key, "<none>")
            for n in (m["spec"].get("nodeName") for m in members)
            if n and n in node_labels
        }
        if len(domains) > 1 or "<none>" in domains:
            out.append(f"gang {ns}/{g} split across domains {sorted(domains)}")
    return out


def partial_gangs(pods: Iterable[Obj], pod_groups: Iterable[Obj]) -> list[str]:
    """Gangs with some members bound, fewer than ``minMember``, and others not bound, one message each.

    ``pods``: Pod objects; ``pod_groups``: their PodGroups (a gang without one is not judged).
    A gang all of whose remaining members are bound passes even below ``minMember``: members
    that were deleted after binding leave a smaller gang, not a partly bound one.
    """
    pgs = _by_key(pod_groups)
    out = []
    for (ns, g), members in sorted(_gangs(pods).items()):
        pg = pgs.get((ns, g))
        bound = sum(1 for m in members if m["spec"].get("nodeName"))
        if pg is None or not bound:
            continue
        mm = int(pg["spec"].get("minMember", 0))
        if bound < mm and bound != len(members):
            out.append(f"gang {ns}/{g} has {bound} of minMember {mm} bound ({len(members)} members)")
    return out


def bound_twice(seen: Mapping[str, Set[str]]) -> list[str]:
    """Pods seen bound to more than one node: ``seen`` maps pod UID (or name) -> every nodeName seen."""
    return [f"pod {uid} bound to {sorted(ns)}" for uid, ns in sorted(seen.items()) if len(ns) > 1]


def scheduled_twice(events: Iterable[Obj]) -> list[str]:
    """Pods with more than one ``Scheduled`` event (events.k8s.io/v1 Event objects), by pod UID.

    An event with a ``series`` counts ``series.count`` times (a repeated identical event is
    folded into one object with a count).
    """
    n: dict[tuple[str, str], int] = {}
    for e in events:
        if e.get("reason") != "Scheduled":
            continue
        reg = e.get("regarding") or {}
        key = (str(reg.get("uid") or ""), f"{reg.get('namespace')}/{reg.get('name')}")
        n[key] = n.get(key, 0) + int((e.get("series") or {}).get("count") or 1)
    return [f"pod {name} (uid {uid}) has {c} Scheduled events" for (uid, name), c in sorted(n.items()) if c > 1]


def violations(
    pods: Iterable[Obj],
    nodes: Iterable[Obj],
    pod_groups: Iterable[Obj] = (),
    *,
    events: Iterable[Obj] = (),
    namespace: str | None = None,
    domain_key: str | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    seen_nodes: Mapping[str, Set[str]] | None = None,
    settled: bool = True,
) -> list[str]:
    """Every rule of the module docstring on one view of the cluster; the messages, sorted by rule.

    ``pods``: every pod (capacity counts them all, whatever their namespace); ``nodes``: the
    nodes to judge; ``pod_groups`` and ``events``: those of the gangs and pods to judge.
    ``namespace`` limits the gang and event rules to one namespace (a test's own); ``domain_key``
    is the domain label key of a gang whose PodGroup names none; ``node_labels`` adds the labels
    of nodes missing from ``nodes`` (deleted meanwhile) that the caller remembers; ``seen_nodes``
    (pod UID -> nodes it was seen on) comes from a watch; ``settled`` says whether the partial
    gang rule applies (False while pods are still being scheduled).
    """
    pods, nodes, pod_groups = list(pods), list(nodes), list(pod_groups)
    labels = {**(node_labels or {}), **{n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}}
    mine = [p for p in pods if namespace is None or p["metadata"].get("namespace") == namespace]
    out = overcommitted(pods, nodes)
    out += split_gangs(mine, pod_groups, labels, domain_key)
    if settled:
        out += partial_gangs(mine, pod_groups)
    out += scheduled_twice(
        e for e in events if namespace is None or (e.get("regarding") or {}).get("namespace") == namespace
    )
    out += bound_twice(seen_nodes or {})
    return out


def assert_invariants(api: Api, ns: str, domain_key: str | None = None) -> None:
    """Check every rule on namespace ``ns`` of a settled cluster (fresh LISTs): its gangs and
    their pods' ``Scheduled`` events, and every node's capacity against every pod. Fails
    (AssertionError) listing the violations. ``domain_key``: the domain label key of a gang
    whose PodGroup names none."""
    found = violations(
        api.get("/api/v1/pods")["items"],
        api.nodes(),
        api.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups")["items"],
        events=api.events(ns),
        namespace=ns,
        domain_key=domain_key,
    )
    assert not found, f"invariants broken in namespace {ns}:\n" + "\n".join(found)
