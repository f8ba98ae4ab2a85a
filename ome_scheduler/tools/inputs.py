"""Reading what ``simulate`` and ``explain`` are given: snapshots and manifests, checked.

A file written by hand may hold what the API server would never have served or accepted; such
input is refused with a message naming the file, the object and the field, rather than run:

* a snapshot whose ``metadata.takenAt`` is not an RFC 3339 time, or that lists one node,
  namespace, PodGroup or pod twice (:func:`check_snapshot`);
* a Node or Pod whose quantities do not parse (:func:`check_quantities`);
* a timestamp of an object (``creationTimestamp``, ``deletionTimestamp``) that is not a time.

Manifests may name workloads — Deployments, ReplicaSets, StatefulSets, Jobs, LeaderWorkerSets —
which become the pods their controllers would create (:mod:`ome_scheduler.tools.workloads`),
in the order the controllers create them (:func:`read_manifests`). An added object is stored as
the API server would store it (:func:`stored`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotError, decode_manifests, decode_object
from ome_scheduler.tools.workloads import WorkloadError, expand
from ome_scheduler.util.quantity import QuantityError, parse_quantity
from ome_scheduler.util.timestamps import parse_rfc3339

CLUSTER_SCOPED = frozenset(
    {"Node", "Namespace", "PersistentVolume", "StorageClass", "CSINode", "VolumeAttachment", "CSIDriver"}
)


def stored(obj: Any, created: str, index: int) -> Any:
    """An added object as the API server would store it: a UID, a creation time, a
    resourceVersion, the ``default`` namespace for a namespaced kind without one, and for a
    pod the defaulted ``schedulerName`` (``default-scheduler``) and ``phase`` (``Pending``)."""
    kind = type(obj).__name__
    md = obj.metadata
    changes: dict[str, Any] = {}
    if kind not in CLUSTER_SCOPED and not md.namespace:
        changes["namespace"] = "default"
    ns = changes.get("namespace", md.namespace)
    if not md.uid:
        changes["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ome-scheduler-simulate/{kind}/{ns}/{md.name}"))
    if not md.creation_timestamp:
        changes["creation_timestamp"] = created
    if not md.resource_version:
        changes["resource_version"] = str(index + 1)
    if changes:
        obj = msgspec.structs.replace(obj, metadata=msgspec.structs.replace(md, **changes))
    if isinstance(obj, Pod):
        spec, st = obj.spec, obj.status
        if not spec.scheduler_name:
            spec = msgspec.structs.replace(spec, scheduler_name="default-scheduler")
        if not st.phase:
            st = msgspec.structs.replace(st, phase="Pending")
        obj = msgspec.structs.replace(obj, spec=spec, status=st)
    return obj


def bad_quantity(obj: Any) -> str | None:
    """The first resource quantity of a Node or Pod that is not a Kubernetes quantity, as
    ``field "name": why`` (None: every one parses). The API server refuses such objects; a
    snapshot or manifest file written by hand may hold one. Checked: a node's ``capacity`` and
    ``allocatable``; a pod's container and init container requests and limits, pod-level
    resources and overhead, and its container statuses' resources and allocated resources."""
    lists: list[tuple[str, dict[str, str]]] = []
    if isinstance(obj, Node):
        lists = [("status.capacity", obj.status.capacity), ("status.allocatable", obj.status.allocatable)]
    elif isinstance(obj, Pod):
        spec = obj.spec
        for field_name, containers in (("containers", spec.containers), ("initContainers", spec.init_containers)):
            for c in containers:
                lists.append((f"spec.{field_name}[{c.name}].resources.requests", c.resources.requests))
                lists.append((f"spec.{field_name}[{c.name}].resources.limits", c.resources.limits))
        lists.append(("spec.overhead", spec.overhead))
        st = obj.status
        for field_name, statuses in (
            ("containerStatuses", st.container_statuses),
            ("initContainerStatuses", st.init_container_statuses),
        ):
            for cs in statuses:
                if cs.resources is not None:
                    lists.append((f"status.{field_name}[{cs.name}].resources.requests", cs.resources.requests))
                lists.append((f"status.{field_name}[{cs.name}].allocatedResources", cs.allocated_resources))
        if spec.resources is not None:
            lists += [
                ("spec.resources.requests", spec.resources.requests),
                ("spec.resources.limits", spec.resources.limits),
            ]
    for where, rl in lists:
        for name, q in rl.items():
            try:
                parse_quantity(q)
            except QuantityError as exc:
                return f'{where} "{name}": {exc}'
    return None


def check_quantities(objs: Iterable[Any], source: str) -> None:
    """Refuse input whose Nodes or Pods carry a quantity that does not parse (see
    :func:`bad_quantity`).

    Raises:
        SnapshotError: naming ``source`` (the file), the object and the field.
    """
    for o in objs:
        why = bad_quantity(o)
        if why is not None:
            kind = "node" if isinstance(o, Node) else "pod"
            name = f"{o.metadata.namespace}/{o.metadata.name}" if kind == "pod" else o.metadata.name
            raise SnapshotError(f"{source}: {kind} {name}: {why}")


def _bad_time(text: str) -> bool:
    if not text:
        return False
    try:
        parse_rfc3339(text)
    except ValueError:
        return True
    return False


def check_times(objs: Iterable[Any], source: str) -> None:
    """Refuse objects whose ``creationTimestamp`` or ``deletionTimestamp`` is not a time.

    Raises:
        SnapshotError: naming ``source``, the object and the field.
    """
    for o in objs:
        md = o.metadata
        times = (("creationTimestamp", md.creation_timestamp), ("deletionTimestamp", md.deletion_timestamp))
        for fname, value in times:
            if isinstance(value, str) and _bad_time(value):
                who = f"{md.namespace}/{md.name}" if md.namespace else md.name
                raise SnapshotError(
                    f'{source}: {type(o).__name__} {who}: metadata.{fname}: "{value}" is not an RFC 3339 time'
                )


def check_snapshot(snap: ClusterSnapshot, source: str) -> None:
    """Refuse a snapshot the scheduler's informers could never have listed: a ``takenAt`` that
    is not a time, an object listed twice, a quantity or timestamp that does not parse.

    Raises:
        SnapshotError: naming ``source`` and what is wrong.
    """
    if _bad_time(snap.metadata.taken_at):
        raise SnapshotError(f'{source}: metadata.takenAt: "{snap.metadata.taken_at}" is not an RFC 3339 time')
    for what, objs, namespaced in (
        ("node", snap.nodes, False),
        ("namespace", snap.namespaces, False),
        ("PodGroup", snap.pod_groups, True),
        ("pod", snap.pods, True),
        ("PersistentVolume", snap.persistent_volumes, False),
        ("PersistentVolumeClaim", snap.persistent_volume_claims, True),
        ("StorageClass", snap.storage_classes, False),
    ):
        seen: set[str] = set()
        for o in objs:
            key = f"{o.metadata.namespace}/{o.metadata.name}" if namespaced else o.metadata.name
            if key in seen:
                raise SnapshotError(f"{source}: {what} {key} is listed twice")
            seen.add(key)
    check_quantities([*snap.nodes, *snap.pods], source)
    check_times([*snap.nodes, *snap.pods, *snap.pod_groups, *snap.namespaces], source)


@dataclass
class Manifests:
    """What ``--add`` files hold: objects to add at once (workloads' first pods among them), the
    pods controllers create later (:class:`~ome_scheduler.tools.workloads.Wave`, raw pods
    decoded), and warnings for the user."""

    objects: list[Any] = field(default_factory=list)
    later: list[tuple[tuple[str, ...], list[Pod], str]] = field(default_factory=list)
    """(pods that must be bound first, the pods then created, the workload), in creation order."""
    warnings: list[str] = field(default_factory=list)


def read_manifests(paths: Iterable[str]) -> Manifests:
    """Read ``--add`` files in order, expanding workloads into their controllers' pods (the
    first pods where the workload stands in the file, later ones in :attr:`Manifests.later`).

    Raises:
        SnapshotError: an unreadable file or object, naming the file and the object.
    """
    out = Manifests()

    def workload(doc: Mapping[str, Any], where: str) -> list[Any] | None:
        try:
            ex = expand(doc, where)
        except WorkloadError as exc:
            raise SnapshotError(str(exc)) from None
        if ex is None:
            return None
        out.warnings.extend(ex.warnings)
        now: list[Any] = []
        for wave in ex.waves:
            pods = [decode_object(p, f"{where}: {wave.source}") for p in wave.pods]
            if wave.after:
                out.later.append((wave.after, pods, wave.source))
            else:
                now.extend(pods)
        return now

    for f in paths:
        objs = decode_manifests(Path(f), workload)
        check_quantities(objs, f)
        check_times(objs, f)
        out.objects.extend(objs)
    check_quantities([p for _, pods, _ in out.later for p in pods], "added workloads")
    return out
