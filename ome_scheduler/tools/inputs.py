"""Reading what ``simulate`` and ``explain`` are given: snapshots and manifests, checked.

An added object is stored as the API server would store it (:func:`stored`), and Nodes and
Pods whose quantities do not parse are refused naming the file, the object and the field
(:func:`check_quantities`): the API server refuses such objects, a file written by hand may
hold one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import msgspec

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.snapshot import SnapshotError
from ome_scheduler.util.quantity import QuantityError, parse_quantity

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
