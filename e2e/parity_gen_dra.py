"""The DRA family of generated parity cases: pods with ResourceClaims from templates (issue 24).

Each case has 2-6 kwok nodes labelled ``parity-case=<id>`` and, per phase (``k`` kube-scheduler,
``o`` ome-scheduler, ``v`` kube-scheduler pinned to ome's node; see ``parity_harness.py``), its
own copy of the devices: driver ``<id>-<phase>.parity.ome.io``, one ResourceSlice per node with
0-8 GPUs shaped like the NVIDIA driver's (``productName``, ``cliqueID``, ``index``,
``driverVersion`` attributes, ``memory`` capacity), DeviceClasses ``<id>-<phase>-<class>``, and a
namespace ``<id>-d<phase>`` holding the pod's ResourceClaimTemplates. The phases never share a
device, so one phase's allocations (released only when the resourceclaim controller gets to the
deleted pod's claim) cannot change what the next phase sees; the node set, and so the ``0/N
nodes`` count, is the same for all three.

The pod asks for 1-2 claims of 1-2 requests each: ``exactly`` (ExactCount 1-5 or All) of a
class selecting all GPUs, ``80Gi`` memory (``quantity``), a product, or a driver version
(``semver``), with optional request selectors; ``firstAvailable`` with two alternatives;
``matchAttribute`` over the claim's requests; now and then a class that never exists (its name
is the same in all phases). Every selector reads attributes every device has, so no CEL
evaluation fails at run time (such an error names the claim, whose namespace is per phase).

Not generated: claims allocated before the pod arrives. kube-scheduler 1.35.4 fails a pod with
one allocated and one unallocated claim when several nodes fit (kubernetes#139017, Score pairs
results with claims by index); that is an oracle defect to mark, not to copy.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from e2e.harness.waits import wait_for
from e2e.parity_gen import CASE_LABEL, HOSTNAME, Case
from e2e.parity_harness import PHASES, Outcome, ParityRunner

GROUP = "/apis/resource.k8s.io/v1"
PRODUCTS = ["NVIDIA B200", "NVIDIA H100", "NVIDIA A100"]
CLIQUES = ["c0", "c1"]
VERSIONS = ["1.2.3", "2.0.0", "2.1.0"]
MEMORY = ["40Gi", "80Gi", "80Gi"]
CLASSES = ["gpu", "big", "b200", "new"]
"""Every case's classes: all GPUs, memory >= 80Gi, product B200, driverVersion > 1.5.0."""


def class_selectors(name: str, drv: str) -> list[str]:
    """The CEL selectors of class ``name`` for driver ``drv`` (the driver test always first)."""
    base = f'device.driver == "{drv}"'
    extra = {
        "gpu": [],
        "big": [f'device.capacity["{drv}"].memory.compareTo(quantity("80Gi")) >= 0'],
        "b200": [f'device.attributes["{drv}"].productName == "NVIDIA B200"'],
        "new": [f'device.attributes["{drv}"].driverVersion.isGreaterThan(semver("1.5.0"))'],
    }[name]
    return [base, *extra]


def request_selectors(drv: str, rng: random.Random) -> list[str]:
    """0-1 request selectors over attributes every device has."""
    if rng.random() < 0.6:
        return []
    return [
        rng.choice(
            [
                f"device.attributes[{drv!r}].index < {rng.randrange(1, 8)}",
                f"device.attributes[{drv!r}].productName != {rng.choice(PRODUCTS)!r}",
                f"device.attributes[{drv!r}].cliqueID == {rng.choice(CLIQUES)!r}",
                f'device.attributes["{drv}"].driverVersion.isLessThan(semver("2.0.5"))',
            ]
        )
    ]


@dataclass
class DraSpec:
    """The DRA objects of one case, abstract over the phase (``materialise`` makes one phase's).

    ``devices``: per node, a list of (productName, cliqueID, driverVersion, memory);
    ``claims``: per pod claim, (requests, matchAttribute name or None) where a request is a dict
    with ``kind`` ``exactly`` (class, count or None for All, selector placeholders) or ``first``
    (list of (subrequest name, class, count))."""

    case_id: str
    nodes: list[str]
    devices: list[list[tuple[str, str, str, str]]] = field(default_factory=list)
    claims: list[tuple[list[dict[str, Any]], str | None]] = field(default_factory=list)
    selector_seed: int = 0

    def driver(self, phase: str) -> str:
        return f"{self.case_id}-{phase}.parity.ome.io"

    def namespace(self, phase: str) -> str:
        return f"{self.case_id}-d{phase}"

    def cls(self, name: str, phase: str) -> str:
        """A class's name in one phase; ``missing`` never exists and is the same in every phase."""
        return f"{self.case_id}-missing" if name == "missing" else f"{self.case_id}-{phase}-{name}"

    def materialise(self, phase: str) -> dict[str, list[dict[str, Any]]]:
        """The phase's ``classes``, ``slices`` and ``templates`` (API dicts)."""
        drv = self.driver(phase)
        labels = {CASE_LABEL: self.case_id}
        classes = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": self.cls(c, phase), "labels": labels},
                "spec": {"selectors": [{"cel": {"expression": e}} for e in class_selectors(c, drv)]},
            }
            for c in CLASSES
        ]
        slices = []
        for node, devs in zip(self.nodes, self.devices, strict=True):
            slices.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{phase}", "labels": labels},
                    "spec": {
                        "driver": drv,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": [
                            {
                                "name": f"gpu-{i}",
                                "attributes": {
                                    "index": {"int": i},
                                    "productName": {"string": product},
                                    "cliqueID": {"string": clique},
                                    "driverVersion": {"version": version},
                                },
                                "capacity": {"memory": {"value": memory}},
                            }
                            for i, (product, clique, version, memory) in enumerate(devs)
                        ],
                    },
                }
            )
        rng = random.Random(self.selector_seed)  # the same selectors in every phase
        templates = []
        for k, (requests, match) in enumerate(self.claims):
            reqs: list[dict[str, Any]] = []
            for r in requests:
                if r["kind"] == "first":
                    reqs.append(
                        {
                            "name": r["name"],
                            "firstAvailable": [
                                {
                                    "name": s,
                                    "deviceClassName": self.cls(c, phase),
                                    "allocationMode": "ExactCount",
                                    "count": n,
                                }
                                for s, c, n in r["subs"]
                            ],
                        }
                    )
                    continue
                ex: dict[str, Any] = {"deviceClassName": self.cls(r["class"], phase)}
                if r["count"] is None:
                    ex["allocationMode"] = "All"
                else:
                    ex["allocationMode"] = "ExactCount"
                    ex["count"] = r["count"]
                sels = request_selectors(drv, rng) if r["selectors"] else []
                if sels:
                    ex["selectors"] = [{"cel": {"expression": e}} for e in sels]
                reqs.append({"name": r["name"], "exactly": ex})
            devices: dict[str, Any] = {"requests": reqs}
            if match:
                devices["constraints"] = [{"matchAttribute": f"{drv}/{match}"}]
            templates.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": f"t{k}", "namespace": self.namespace(phase)},
                    "spec": {"spec": {"devices": devices}},
                }
            )
        return {"classes": classes, "slices": slices, "templates": templates}


@dataclass
class DraCase(Case):
    """A parity case whose pod uses ResourceClaims; its pod lives in the phase's namespace."""

    dra: DraSpec | None = None

    def pod_for(self, name: str, scheduler: str, phase: str = "") -> dict[str, Any]:
        p = copy.deepcopy(self.pod)
        p["metadata"]["name"] = name
        p["spec"]["schedulerName"] = scheduler
        if self.dra is not None and phase:
            p["metadata"]["namespace"] = self.dra.namespace(phase)
        return p


def _request(rng: random.Random, name: str) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.15:
        subs = rng.sample(CLASSES, 2)
        return {"kind": "first", "name": name, "subs": [("a", subs[0], rng.randrange(1, 4)), ("b", subs[1], 1)]}
    cls = "missing" if roll < 0.17 else rng.choice(CLASSES)
    count = None if rng.random() < 0.08 else rng.choice([1, 1, 1, 2, 2, 3, 4, 5])
    return {"kind": "exactly", "name": name, "class": cls, "count": count, "selectors": rng.random() < 0.5}


def generate_dra_case(seed: int, index: int, run: str) -> DraCase:
    """DRA case ``index`` of stream ``seed``; ``run`` keeps names unique between runs."""
    rng = random.Random(f"dra/{seed}/{index}")
    cid = f"pd{run}{index:03d}"
    case = DraCase(id=cid, index=index)
    n = rng.randrange(2, 7)
    names = [f"{cid}-n{j}" for j in range(n)]
    res = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    case.nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {HOSTNAME: name, "kubernetes.io/os": "linux", "type": "kwok", CASE_LABEL: cid},
            },
            "spec": {"taints": []},
            "status": {"capacity": dict(res), "allocatable": dict(res)},
        }
        for name in names
    ]
    spec = DraSpec(cid, names, selector_seed=rng.randrange(1 << 30))
    for _ in names:
        product = rng.choice(PRODUCTS)
        mixed = rng.random() < 0.3
        spec.devices.append(
            [
                (
                    rng.choice(PRODUCTS) if mixed else product,
                    rng.choice(CLIQUES),
                    rng.choice(VERSIONS),
                    rng.choice(MEMORY),
                )
                for _ in range(rng.choice([0, 1, 2, 4, 4, 8, 8]))
            ]
        )
    for _ in range(rng.choice([1, 1, 1, 2])):
        requests = [_request(rng, f"r{i}") for i in range(rng.choice([1, 1, 2]))]
        match = rng.choice(["cliqueID", "productName"]) if rng.random() < 0.3 else None
        spec.claims.append((requests, match))
    case.dra = spec
    case.namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.namespace(p), "labels": {CASE_LABEL: cid}}}
        for p in PHASES
    ]
    rcs = [{"name": f"c{k}", "resourceClaimTemplateName": f"t{k}"} for k in range(len(spec.claims))]
    case.pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": spec.namespace("k"), "labels": {"app": "dra"}},
        "spec": {
            "nodeSelector": {CASE_LABEL: cid},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": rcs,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": r["name"]} for r in rcs]},
                }
            ],
        },
    }
    return case


def generate_dra(seed: int, count: int, run: str, first: int = 0) -> list[DraCase]:
    """DRA cases ``first`` .. ``first + count - 1`` of stream ``seed`` (each from its own
    ``Random(f"dra/{seed}/{index}")``, so case ``i`` is the same whichever slice holds it)."""
    return [generate_dra_case(seed, i, run) for i in range(first, first + count)]


class DraParityRunner(ParityRunner):
    """:class:`ParityRunner` that also creates and deletes the cases' DRA objects: classes and
    slices before the nodes, templates once the namespaces exist."""

    def setup(self, cases: Sequence[Case]) -> None:
        dra = [c.dra for c in cases if isinstance(c, DraCase) and c.dra is not None]
        objs = [o for s in dra for p in PHASES for o in _flat(s.materialise(p), ("classes", "slices"))]
        self._parallel(lambda o: self.api.post(_path(o), o), objs)
        super().setup(cases)
        # the ServiceAccount admission refuses pods until the namespace's default ServiceAccount exists
        for ns in [n["metadata"]["name"] for c in cases for n in c.namespaces]:
            path = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
            wait_for(f"ServiceAccount {ns}/default", partial(self.api.try_get, path), timeout=30, interval=0.05)
        templates = [o for s in dra for p in PHASES for o in s.materialise(p)["templates"]]
        self._parallel(lambda o: self.api.post(_path(o), o), templates)

    def run_phase(self, name: str, pods: Mapping[str, dict[str, Any]]) -> dict[str, Outcome]:
        """The base phase, with each message and event note made phase-neutral
        (:func:`neutral`): an error names the phase's claim, namespace, driver and classes."""
        out = super().run_phase(name, pods)
        for o in out.values():
            o.message = neutral(o.message)
            o.events = [neutral(e) for e in o.events]
        return out

    def teardown(self, cases: Sequence[Case]) -> None:
        """The base teardown, then the cases' slices and classes, in the background (their
        nodes are gone, so neither scheduler can use them any more); a timed-out delete is
        sent again, and one still timing out is left to the API server (a delete collection goes on
        after its client gave up)."""
        super().teardown(cases)
        ids = ",".join(sorted(c.id for c in cases))

        def rest() -> None:
            for kind in ("resourceslices", "deviceclasses"):
                path = f"{GROUP}/{kind}?labelSelector={CASE_LABEL}+in+({ids})"
                for _ in range(2):
                    try:
                        self.api.delete(path)
                        break
                    except httpx.TimeoutException:
                        continue

        self._background.append(self.pool.submit(rest))


_PHASE_NAMES = (
    (re.compile(r"\b(pd[0-9a-z]+)-d[kov]\b"), r"\1-d<phase>"),
    (re.compile(r"\bt-(?:kube|ome|verify)-(c[0-9]+)-[a-z0-9]{5}\b"), r"t-<pod>-\1-<generated>"),
    (re.compile(r"\b(pd[0-9a-z]+)-[kov](\.parity\.ome\.io|-(?:gpu|big|b200|new)\b)"), r"\1-<phase>\2"),
)


def neutral(text: str) -> str:
    """``text`` with the per-phase names (namespace ``<id>-d<phase>``, generated claim
    ``t-<pod>-c<i>-<5 chars>``, driver ``<id>-<phase>.parity.ome.io``, class ``<id>-<phase>-<class>``)
    replaced by placeholders, so two phases' messages compare byte for byte otherwise."""
    for pattern, repl in _PHASE_NAMES:
        text = pattern.sub(repl, text)
    return text


def _flat(objs: dict[str, list[dict[str, Any]]], kinds: Sequence[str]) -> list[dict[str, Any]]:
    return [o for k in kinds for o in objs[k]]


def _path(o: dict[str, Any]) -> str:
    kind = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices", "ResourceClaimTemplate": ""}[o["kind"]]
    if kind:
        return f"{GROUP}/{kind}"
    return f"{GROUP}/namespaces/{o['metadata']['namespace']}/resourceclaimtemplates"
