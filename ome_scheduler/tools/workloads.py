"""The pods workload controllers would create, for ``simulate --add``.

A user planning capacity adds what they deploy: a Deployment, a StatefulSet, a Job, a
LeaderWorkerSet, not bare pods. Each is expanded here into the pods its controller creates, named
and labelled as that controller names and labels them, in the order it creates them:

* **Deployment** (``apps/v1``): ``spec.replicas`` (default 1) pods ``{name}-{hash}-{suffix}`` of
  one ReplicaSet (``pkg/controller/deployment``), labelled ``pod-template-hash``; a
  **ReplicaSet**: ``{name}-{suffix}``. All at once.
* **StatefulSet** (``apps/v1``): pods ``{name}-{ordinal}`` labelled
  ``statefulset.kubernetes.io/pod-name`` and ``apps.kubernetes.io/pod-index``. With
  ``podManagementPolicy: Parallel`` all at once; with ``OrderedReady`` (the default) pod *i+1*
  only once pod *i* runs (``pkg/controller/statefulset``) — in a simulation, once it is bound,
  so a gang of an OrderedReady StatefulSet never forms, as on a cluster.
* **Job** (``batch/v1``): ``min(parallelism, completions)`` pods (parallelism default 1)
  ``{name}-{suffix}``, or ``{name}-{index}-{suffix}`` with ``completionMode: Indexed``,
  labelled ``batch.kubernetes.io/job-name``, ``job-name`` and, when Indexed,
  ``batch.kubernetes.io/job-completion-index`` (``pkg/controller/job``).
* **LeaderWorkerSet** (``leaderworkerset.x-k8s.io/v1``): ``spec.replicas`` groups of
  ``leaderWorkerTemplate.size`` pods: the leader ``{name}-{group}`` from ``leaderTemplate`` (else
  ``workerTemplate``) and workers ``{name}-{group}-{index}``, labelled
  ``leaderworkerset.sigs.k8s.io/name``, ``/group-index``, ``/worker-index``, ``/group-key`` and
  annotated ``leaderworkerset.sigs.k8s.io/size`` (the LWS controller, v0.5). With
  ``startupPolicy: LeaderReady`` a group's workers come once its leader runs (is bound).

Names are deterministic (hashes of the workload's name), so a simulation is repeatable.
Affinities the LWS controller injects for ``exclusive-topology`` are not added (a warning says so).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "LeaderWorkerSet")
"""Kinds ``simulate --add`` expands into pods."""

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""``k8s.io/apimachinery/pkg/util/rand``'s alphabet for generated name suffixes."""

LWS = "leaderworkerset.sigs.k8s.io/"
EXCLUSIVE_TOPOLOGY = LWS + "exclusive-topology"


@dataclass
class Wave:
    """Pods a controller creates together, once every pod named in ``after`` is bound.

    ``pods`` are raw v1 Pod documents; ``after`` holds ``namespace/name`` keys (empty: created
    with the other added objects); ``source`` names the workload (``StatefulSet ns/name``)."""

    source: str
    pods: list[dict[str, Any]]
    after: tuple[str, ...] = ()


@dataclass
class Expansion:
    """What one workload expands into: its waves in creation order, and what the user should know."""

    waves: list[Wave] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


MAX_COUNT = 100_000
"""Replicas, parallelism or groups ``simulate --add`` expands per field: 200,000 pods take about
1 GB and 80 s here, so a typo such as ``replicas: 1000000000`` fails fast instead."""


class WorkloadError(ValueError):
    """A workload document that cannot be expanded (no template, a count that is not a number)."""


def _hash(text: str, n: int) -> str:
    """``n`` characters of the generated-name alphabet, derived from ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:n])


def _count(spec: Mapping[str, Any], key: str, default: int, where: str) -> int:
    v = spec.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise WorkloadError(f"{where}: spec.{key}: Invalid value: {v!r}: must be a non-negative integer")
    if v > MAX_COUNT:
        raise WorkloadError(
            f"{where}: spec.{key}: Invalid value: {v}: simulate expands at most {MAX_COUNT} of one workload's "
            "pods (each is held in memory)"
        )
    return v


def _template(spec: Mapping[str, Any], where: str, key: str = "template") -> Mapping[str, Any]:
    t = spec.get(key)
    if not isinstance(t, Mapping) or not isinstance(t.get("spec"), Mapping):
        raise WorkloadError(f"{where}: spec.{key}: Required value: a pod template with a spec")
    return t


def _pod(
    template: Mapping[str, Any],
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    owner: tuple[str, str, str] | None = None,
) -> dict[str, Any]:
    """A v1 Pod document from a pod template, with the controller's name, labels and owner."""
    md = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**(md.get("labels") or {}), **labels},
        "annotations": {**(md.get("annotations") or {}), **(annotations or {})},
    }
    if owner is not None:
        api_version, kind, oname = owner
        meta["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": oname, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": dict(template["spec"])}


def expand(doc: Mapping[str, Any], where: str) -> Expansion | None:
    """The pods the controller of ``doc`` would create, or None when ``doc`` is no workload.

    Raises:
        WorkloadError: the workload cannot be expanded (naming ``where`` and the field).
    """
    kind = doc.get("kind", "")
    if kind not in WORKLOAD_KINDS:
        return None
    md = doc.get("metadata") or {}
    name = md.get("name") or ""
    if not name:
        raise WorkloadError(f"{where}: {kind}: metadata.name: Required value")
    ns = md.get("namespace") or "default"
    spec = doc.get("spec") or {}
    src = f"{kind} {ns}/{name}"
    at = f"{where}: {src}"
    out = Expansion()
    if kind in ("Deployment", "ReplicaSet"):
        t = _template(spec, at)
        n = _count(spec, "replicas", 1, at)
        if kind == "Deployment":
            pth = _hash(f"{ns}/{name}/template", 10)
            base, labels = f"{name}-{pth}", {"pod-template-hash": pth}
            owner = ("apps/v1", "ReplicaSet", base)
        else:
            base, labels, owner = name, {}, ("apps/v1", "ReplicaSet", name)
        pods = [_pod(t, ns, f"{base}-{_hash(f'{ns}/{base}/{i}', 5)}", labels, owner=owner) for i in range(n)]
        out.waves.append(Wave(src, pods))
    elif kind == "StatefulSet":
        t = _template(spec, at)
        n = _count(spec, "replicas", 1, at)
        pods = [
            _pod(
                t,
                ns,
                f"{name}-{i}",
                {"statefulset.kubernetes.io/pod-name": f"{name}-{i}", "apps.kubernetes.io/pod-index": str(i)},
                owner=("apps/v1", "StatefulSet", name),
            )
            for i in range(n)
        ]
        if spec.get("podManagementPolicy", "OrderedReady") == "Parallel":
            out.waves.append(Wave(src, pods))
        else:
            for i, p in enumerate(pods):
                out.waves.append(Wave(src, [p], (f"{ns}/{name}-{i - 1}",) if i else ()))
            if n > 1 and "scheduling.x-k8s.io/pod-group" in ((t.get("metadata") or {}).get("labels") or {}):
                out.warnings.append(
                    f"{src} is OrderedReady: its controller creates {name}-1 only once {name}-0 runs, so a gang "
                    "of its pods never forms (use podManagementPolicy: Parallel)"
                )
    elif kind == "Job":
        t = _template(spec, at)
        par = _count(spec, "parallelism", 1, at)
        comp = spec.get("completions")
        n = min(par, _count(spec, "completions", par, at)) if comp is not None else par
        indexed = spec.get("completionMode") == "Indexed"
        pods = []
        for i in range(n):
            labels = {"batch.kubernetes.io/job-name": name, "job-name": name}
            ann: dict[str, str] = {}
            pname = f"{name}-{_hash(f'{ns}/{name}/{i}', 5)}"
            if indexed:
                labels["batch.kubernetes.io/job-completion-index"] = str(i)
                ann["batch.kubernetes.io/job-completion-index"] = str(i)
                pname = f"{name}-{i}-{_hash(f'{ns}/{name}/{i}', 5)}"
            pods.append(_pod(t, ns, pname, labels, ann, owner=("batch/v1", "Job", name)))
        out.waves.append(Wave(src, pods))
    else:  # LeaderWorkerSet
        lwt = spec.get("leaderWorkerTemplate")
        if not isinstance(lwt, Mapping):
            raise WorkloadError(f"{at}: spec.leaderWorkerTemplate: Required value")
        worker = _template(lwt, at, "workerTemplate")
        leader = _template(lwt, at, "leaderTemplate") if lwt.get("leaderTemplate") is not None else worker
        groups = _count(spec, "replicas", 1, at)
        size = _count(lwt, "size", 1, at)
        ready = spec.get("startupPolicy", "LeaderCreated") == "LeaderReady"
        owner = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name)
        for g in range(groups):
            key = hashlib.sha1(f"{ns}/{name}-{g}".encode()).hexdigest()  # noqa: S324 - a name, not a secret
            common = {LWS + "name": name, LWS + "group-index": str(g), LWS + "group-key": key}
            ann = {LWS + "size": str(size)}
            lead = _pod(leader, ns, f"{name}-{g}", {**common, LWS + "worker-index": "0"}, ann, owner)
            workers = [
                _pod(
                    worker,
                    ns,
                    f"{name}-{g}-{w}",
                    {**common, LWS + "worker-index": str(w)},
                    {**ann, LWS + "leader-name": f"{name}-{g}"},
                    owner,
                )
                for w in range(1, size)
            ]
            if ready:
                out.waves.append(Wave(src, [lead]))
                if workers:
                    out.waves.append(Wave(src, workers, (f"{ns}/{name}-{g}",)))
            else:
                out.waves.append(Wave(src, [lead, *workers]))
        if EXCLUSIVE_TOPOLOGY in (md.get("annotations") or {}):
            out.warnings.append(
                f"{src}: the pod affinities the LWS controller adds for {EXCLUSIVE_TOPOLOGY} are not simulated"
            )
    return out
