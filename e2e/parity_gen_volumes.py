"""Parity families beyond ``e2e/parity_gen.py``: CSI attach limits, pods mid-resize, priorities.

A :class:`FamilyCase` is a case of ``e2e/parity_gen.py`` (same seed stream, same isolation
rules) with three more dimensions drawn from a second random stream:

* **CSI attach limits**: some nodes get a CSINode (named after the node) listing drivers
  :data:`DRIVERS` with an ``allocatable.count`` (or none: unlimited), VolumeAttachments on
  them (``spec.nodeName``) of PVs with a CSI source (the PVs exist, in a class nobody claims,
  or sometimes are missing: upstream then skips the attachment), and the new pod mounts claims
  pre-bound to CSI PVs (a fresh volume handle, or one already attached somewhere: a volume
  counts once per node) and in-tree AWS EBS volumes (translated to ``ebs.csi.aws.com`` on a
  node with a CSINode). Existing pods may mount EBS volumes too (counted, and in conflict with
  the same volume ID for VolumeRestrictions).
* **In-place resize**: an existing pod's cpu/memory requests are changed through the
  ``resize`` subresource, with the status a kubelet would report for one of :data:`RESIZE_STATES`
  (``containerStatuses[].resources``, ``allocatedResources``, the ``PodResizePending`` /
  ``PodResizeInProgress`` conditions), all of which a test may set through ``pods/status``.
* **Priorities**: the new pod and existing pods take one of :data:`PRIORITY_CLASSES`.

:class:`FamilyRunner` is :class:`e2e.parity_harness.ParityRunner` plus the creation and
deletion of those objects. The generator part is pure: ``generate(seed, n, run, first)`` always
returns the same cases.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from e2e.harness.waits import wait_for
from e2e.parity_gen import CASE_LABEL, Case, VolumeSpec, generate_case, storage_class
from e2e.parity_harness import ParityRunner

DRIVERS = ["parity.csi.a", "parity.csi.b", "ebs.csi.aws.com"]
EBS_DRIVER = "ebs.csi.aws.com"
CSI_CLASS = "csi"
PRIORITY_CLASSES = {"parity-low": 10, "parity-high": 1000}
RESIZE_STATES = ("deferred", "infeasible", "in-progress", "unreported", "done")
"""``deferred``/``infeasible``: ``PodResizePending`` with that reason, nothing allocated yet;
``in-progress``: allocated, not yet actuated, ``PodResizeInProgress``; ``unreported``: the
kubelet has not looked yet (no condition, old status); ``done``: actuated, no condition."""
CSI_SHARE = 0.6
RESIZE_SHARE = 0.45


@dataclass
class Resize:
    """A resize of existing pod ``namespace/name``'s container ``c``: ``old`` -> ``new``."""

    namespace: str
    name: str
    old: dict[str, str]
    new: dict[str, str]
    state: str


@dataclass
class FamilyCase(Case):
    """A case with CSI objects (cluster-scoped), resizes and priorities."""

    csinodes: list[dict[str, Any]] = field(default_factory=list)
    attachment_pvs: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)
    resizes: list[Resize] = field(default_factory=list)


def csi_node(name: str, counts: dict[str, int | None], case_id: str) -> dict[str, Any]:
    """A CSINode for node ``name``: each driver with its ``allocatable.count`` (None: unlimited)."""
    drivers = []
    for d, n in counts.items():
        entry: dict[str, Any] = {"name": d, "nodeID": name, "topologyKeys": None}
        if n is not None:
            entry["allocatable"] = {"count": n}
        drivers.append(entry)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name, "labels": {CASE_LABEL: case_id}},
        "spec": {"drivers": drivers},
    }


def csi_pv(name: str, driver: str, handle: str, case_id: str, cls: str = "") -> dict[str, Any]:
    """A 1 GiB PV with a CSI source (``cls`` empty: the case's unclaimed class)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {CASE_LABEL: case_id}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls or f"{case_id}-attached",
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": driver, "volumeHandle": handle},
        },
    }


def attachment(name: str, driver: str, node: str, pv: str, case_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name, "labels": {CASE_LABEL: case_id}},
        "spec": {"attacher": driver, "nodeName": node, "source": {"persistentVolumeName": pv}},
    }


def add_csi_claim(vs: VolumeSpec, pod: dict[str, Any], claim: str, driver: str, handle: str) -> None:
    """Mount claim ``claim`` pre-bound to a CSI PV (one per phase, same handle) in ``pod``."""
    if not any(c["metadata"]["name"] == CSI_CLASS for c in vs.classes):
        vs.classes.append(storage_class(CSI_CLASS, "Immediate"))
    pv = csi_pv(f"pv-{claim}", driver, handle, vs.case_id, CSI_CLASS)
    pv["spec"]["claimRef"] = {"name": claim, "namespace": "", "kind": "PersistentVolumeClaim"}
    vs.pvs.append(pv)
    vs.pvcs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": CSI_CLASS,
                "volumeName": f"pv-{claim}",
            },
        }
    )
    pod["spec"].setdefault("volumes", []).append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})


def ebs_volume(name: str, volume_id: str) -> dict[str, Any]:
    return {"name": name, "awsElasticBlockStore": {"volumeID": volume_id, "fsType": "ext4"}}


class _FamilyGen:
    def __init__(self, rng: random.Random, case: FamilyCase) -> None:
        self.r = rng
        self.c = case

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def csi(self) -> None:
        c, cid = self.c, self.c.id
        handles: list[tuple[str, str]] = []
        k = 0
        for node in c.nodes:
            if not self.chance(0.7):
                continue
            name = node["metadata"]["name"]
            counts: dict[str, int | None] = {}
            for d in self.r.sample(DRIVERS, self.r.randrange(1, 4)):
                counts[d] = None if self.chance(0.15) else self.r.choice([0, 1, 2, 2, 3])
            c.csinodes.append(csi_node(name, counts, cid))
            for _ in range(self.r.choice([0, 1, 2, 2, 3])):
                driver = self.r.choice(DRIVERS)
                handle = f"{cid}-h{k}"
                pv = f"{cid}-ap{k}"
                if not self.chance(0.1):  # else: the attachment's PV is missing
                    c.attachment_pvs.append(csi_pv(pv, driver, handle, cid))
                    handles.append((driver, handle))
                c.attachments.append(attachment(f"{cid}-va{k}", driver, name, pv, cid))
                k += 1
        ebs_ids = [f"vol-{cid}-{i}" for i in range(3)]
        for p in c.existing:
            if self.chance(0.25):
                p["spec"]["volumes"] = [ebs_volume("ebs", self.r.choice(ebs_ids))]
        if c.volumes is None:
            c.volumes = VolumeSpec(cid)
        for i in range(self.r.randrange(1, 4)):
            roll = self.r.random()
            if roll < 0.25:
                c.pod["spec"].setdefault("volumes", []).append(ebs_volume(f"ebs{i}", self.r.choice(ebs_ids)))
            elif roll < 0.45 and handles:
                driver, handle = self.r.choice(handles)
                add_csi_claim(c.volumes, c.pod, f"csi{i}", driver, handle)
            else:
                add_csi_claim(c.volumes, c.pod, f"csi{i}", self.r.choice(DRIVERS[:2]), f"{cid}-new{i}")

    def resizes(self) -> None:
        for p in self.c.existing:
            cont = p["spec"]["containers"][0]
            req = cont.get("resources", {}).get("requests", {})
            old = {k: v for k, v in req.items() if k in ("cpu", "memory")}
            if not old or not self.chance(RESIZE_SHARE):
                continue
            up = self.chance(0.6)
            new = {}
            for k in old:
                if k == "cpu":
                    new[k] = self.r.choice(["1500m", "2", "3"] if up else ["50m", "100m"])
                else:
                    new[k] = self.r.choice(["2Gi", "3Gi"] if up else ["32Mi", "48Mi"])
            self.c.resizes.append(
                Resize(p["metadata"]["namespace"], p["metadata"]["name"], old, new, self.r.choice(RESIZE_STATES))
            )

    def priorities(self) -> None:
        names = sorted(PRIORITY_CLASSES)
        for p in [self.c.pod, *self.c.existing]:
            if self.chance(0.4):
                p["spec"]["priorityClassName"] = self.r.choice(names)


def generate_family_case(seed: int, index: int, run: str) -> FamilyCase:
    """Case ``index`` of stream ``seed`` of ``e2e/parity_gen.py`` with the family dimensions."""
    base = generate_case(seed, index, f"f{run}")
    case = FamilyCase(**{f: getattr(base, f) for f in ("id", "index", "namespaces", "nodes", "existing", "pod")})
    case.volumes = base.volumes
    g = _FamilyGen(random.Random(f"family/{seed}/{index}"), case)
    if g.chance(CSI_SHARE):
        g.csi()
    g.resizes()
    g.priorities()
    return case


def generate(seed: int, count: int, run: str, first: int = 0) -> list[FamilyCase]:
    """Cases ``first`` .. ``first + count - 1`` of stream ``seed`` (each from its own two
    streams keyed by its index, so case ``i`` is the same whichever slice holds it)."""
    return [generate_family_case(seed, i, run) for i in range(first, first + count)]


# ---- running them -------------------------------------------------------------------------


def resize_status(r: Resize, phase: str) -> dict[str, Any]:
    """The ``pods/status`` strategic merge patch a kubelet would write: ``phase`` ``before`` (the
    container reports its old resources, so the API server accepts a resize) or ``after``."""
    actuated = r.new if (phase == "after" and r.state == "done") else r.old
    allocated = r.new if (phase == "after" and r.state in ("in-progress", "done")) else r.old
    status: dict[str, Any] = {
        "containerStatuses": [
            {"name": "c", "resources": {"requests": dict(actuated)}, "allocatedResources": dict(allocated)}
        ]
    }
    if phase == "after" and r.state in ("deferred", "infeasible"):
        status["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": r.state.capitalize(), "message": "parity"}
        ]
    elif phase == "after" and r.state == "in-progress":
        status["conditions"] = [{"type": "PodResizeInProgress", "status": "True"}]
    return {"status": status}


SMP = "application/strategic-merge-patch+json"


class FamilyRunner(ParityRunner):
    """:class:`ParityRunner` that also creates the cases' CSINodes, attachment PVs and
    VolumeAttachments (before the nodes) and applies their resizes (after the existing pods run)."""

    def ensure_priority_classes(self) -> None:
        for name, value in PRIORITY_CLASSES.items():
            if self.api.try_get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}") is None:
                self.api.post(
                    "/apis/scheduling.k8s.io/v1/priorityclasses",
                    {
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": name},
                        "value": value,
                    },
                )

    def setup(self, cases: Sequence[Case]) -> None:
        fam = [c for c in cases if isinstance(c, FamilyCase)]
        t = time.monotonic()
        self._parallel(
            lambda o: self.api.post("/apis/storage.k8s.io/v1/csinodes", o), [o for c in fam for o in c.csinodes]
        )
        self._parallel(
            lambda o: self.api.post("/api/v1/persistentvolumes", o), [o for c in fam for o in c.attachment_pvs]
        )
        self._parallel(
            lambda o: self.api.post("/apis/storage.k8s.io/v1/volumeattachments", o),
            [o for c in fam for o in c.attachments],
        )
        self._time("setup: csi objects", t)
        super().setup(cases)
        t = time.monotonic()
        self.apply_resizes([r for c in fam for r in c.resizes])
        self._time("setup: resizes", t)

    def apply_resizes(self, resizes: Sequence[Resize]) -> None:
        """Wait until the pods run (kwok writes their status once), then report the old
        resources, resize, and report the resize's state; wait until the API shows it."""

        def path(r: Resize) -> str:
            return f"/api/v1/namespaces/{r.namespace}/pods/{r.name}"

        def running(r: Resize) -> None:
            wait_for(f"{r.name} Running", lambda: self.api.get(path(r))["status"].get("phase") == "Running", 30, 0.1)

        def one(r: Resize) -> None:
            running(r)
            self.api.patch(path(r) + "/status", resize_status(r, "before"), SMP)
            self.api.patch(
                path(r) + "/resize", {"spec": {"containers": [{"name": "c", "resources": {"requests": r.new}}]}}, SMP
            )
            self.api.patch(path(r) + "/status", resize_status(r, "after"), SMP)

        self._parallel(one, resizes)

    def teardown(self, cases: Sequence[Case]) -> None:
        super().teardown(cases)
        fam = [c for c in cases if isinstance(c, FamilyCase) and (c.csinodes or c.attachments)]
        for c in fam:
            sel = f"{CASE_LABEL}={c.id}"
            self.api.delete(f"/apis/storage.k8s.io/v1/volumeattachments?labelSelector={sel}")
            self.api.delete(f"/apis/storage.k8s.io/v1/csinodes?labelSelector={sel}")
            self.api.delete(f"/api/v1/persistentvolumes?labelSelector={sel}")


def hand_case(prefix: str, cpu: str = "4", requests: dict[str, str] | None = None) -> FamilyCase:
    """A hand-written case ``<prefix><6 hex>`` for the e2e tests: namespace ``<id>-a``, one
    untainted node ``<id>-n0`` (``cpu`` CPUs, 8 GiB, 10 pods) and a pause pod selecting it with
    ``requests``; tests add CSI objects, existing pods and resizes."""
    import uuid

    cid = f"{prefix}{uuid.uuid4().hex[:6]}"
    case = FamilyCase(id=cid, index=0)
    case.namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{cid}-a", "labels": {CASE_LABEL: cid}}}
    ]
    res = {"cpu": cpu, "memory": "8Gi", "pods": "10"}
    name = f"{cid}-n0"
    case.nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {CASE_LABEL: cid, "kubernetes.io/hostname": name, "type": "kwok"},
            },
            "spec": {"taints": []},
            "status": {"capacity": res, "allocatable": res},
        }
    ]
    container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
    if requests:
        container["resources"] = {"requests": dict(requests)}
    case.pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": f"{cid}-a", "labels": {"app": "new"}},
        "spec": {"nodeSelector": {CASE_LABEL: cid}, "terminationGracePeriodSeconds": 0, "containers": [container]},
    }
    return case


def running_pod(case: FamilyCase, name: str, requests: dict[str, str]) -> dict[str, Any]:
    """An existing pod ``name`` (container ``c``) bound to the case's first node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": case.ns, "labels": {"app": "old"}},
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeName": case.nodes[0]["metadata"]["name"],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}],
        },
    }
