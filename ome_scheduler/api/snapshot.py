"""The cluster snapshot file of ``ome-scheduler snapshot`` and ``ome-scheduler simulate``.

One document, JSON or YAML (chosen by the file name: ``.yaml``/``.yml`` is YAML, anything
else JSON), holding the objects the scheduler's informers list, as the typed records of
:mod:`ome_scheduler.api.core` and :mod:`ome_scheduler.api.scheduling` keep them: only the
fields the scheduler reads, so the file is small and carries no container environment,
command line or status message. Secrets are never listed. Shape::

    apiVersion: snapshot.ome.io/v1alpha1
    kind: ClusterSnapshot
    metadata: {takenAt: "2026-12-01T10:00:00Z", server: "https://...", anonymized: false}
    nodes: [...]            # v1 Node
    namespaces: [...]       # v1 Namespace
    podGroups: [...]        # scheduling.x-k8s.io/v1alpha1 PodGroup
    pods: [...]             # v1 Pod (not Succeeded or Failed), bound and pending
    persistentVolumes: [...]; persistentVolumeClaims: [...]; storageClasses: [...]
    csiNodes: [...]; volumeAttachments: [...]; csiDrivers: [...]; csiStorageCapacities: [...]
    services: [...]; replicationControllers: [...]; replicaSets: [...]; statefulSets: [...]
    resourceClaims: [...]; resourceSlices: [...]; deviceClasses: [...]   # resource.k8s.io/v1

The manifests ``simulate --add`` takes are read here too (:func:`decode_manifests`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml

from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.api.meta import Record
from ome_scheduler.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.storage import CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment
from ome_scheduler.api.workloads import ReplicaSet, ReplicationController, Service, StatefulSet

API_VERSION = "snapshot.ome.io/v1alpha1"
KIND = "ClusterSnapshot"


class SnapshotMeta(Record):
    """When and from which API server the snapshot was taken; whether names were anonymised."""

    taken_at: str = ""
    server: str = ""
    anonymized: bool = False


class ClusterSnapshot(Record):
    """What the scheduler's informers list, in one document (see the module docstring)."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: SnapshotMeta = msgspec.field(default_factory=SnapshotMeta)
    nodes: list[Node] = []
    namespaces: list[Namespace] = []
    pod_groups: list[PodGroup] = []
    pods: list[Pod] = []
    persistent_volumes: list[PersistentVolume] = []
    persistent_volume_claims: list[PersistentVolumeClaim] = []
    storage_classes: list[StorageClass] = []
    csi_nodes: list[CSINode] = []
    volume_attachments: list[VolumeAttachment] = []
    csi_drivers: list[CSIDriver] = []
    csi_storage_capacities: list[CSIStorageCapacity] = []
    services: list[Service] = []
    replication_controllers: list[ReplicationController] = []
    replica_sets: list[ReplicaSet] = []
    stateful_sets: list[StatefulSet] = []
    resource_claims: list[ResourceClaim] = []
    resource_slices: list[ResourceSlice] = []
    device_classes: list[DeviceClass] = []


class SnapshotError(ValueError):
    """A snapshot or manifest file that cannot be read; the message names the file and the field."""


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def encode_snapshot(snap: ClusterSnapshot, path: Path) -> bytes:
    """The file's bytes: YAML when ``path`` ends in ``.yaml``/``.yml``, else compact JSON."""
    if _is_yaml(path):
        return msgspec.yaml.encode(snap)
    return msgspec.json.encode(snap) + b"\n"


def write_snapshot(snap: ClusterSnapshot, path: Path) -> None:
    """Write ``snap`` to ``path`` (format by extension; ``-`` is not accepted here)."""
    path.write_bytes(encode_snapshot(snap, path))


def read_snapshot(path: Path) -> ClusterSnapshot:
    """Read a snapshot file.

    Raises:
        SnapshotError: unreadable file, wrong ``apiVersion``/``kind``, or a field of the wrong type
            (the message names the path inside the document, e.g. ``$.pods[3].spec``).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc.strerror or exc}") from None
    try:
        if _is_yaml(path):
            snap = msgspec.yaml.decode(data, type=ClusterSnapshot)
        else:
            snap = msgspec.json.decode(data, type=ClusterSnapshot)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotError(f"snapshot {path}: {exc}") from None
    if snap.api_version != API_VERSION or snap.kind != KIND:
        raise SnapshotError(
            f"snapshot {path}: apiVersion/kind {snap.api_version}/{snap.kind} is not {API_VERSION}/{KIND}"
        )
    return snap


MANIFEST_KINDS: dict[str, type[Any]] = {
    "Pod": Pod,
    "PodGroup": PodGroup,
    "Node": Node,
    "Namespace": Namespace,
    "PersistentVolume": PersistentVolume,
    "PersistentVolumeClaim": PersistentVolumeClaim,
    "StorageClass": StorageClass,
    "CSINode": CSINode,
    "VolumeAttachment": VolumeAttachment,
    "CSIDriver": CSIDriver,
    "CSIStorageCapacity": CSIStorageCapacity,
    "Service": Service,
    "ReplicationController": ReplicationController,
    "ReplicaSet": ReplicaSet,
    "StatefulSet": StatefulSet,
}
"""Object kinds ``simulate --add`` accepts (a ``List`` of them too)."""


QUANTITY_MAPS = frozenset({"requests", "limits", "capacity", "allocatable", "overhead"})
"""Resource lists, whose quantities YAML may give as numbers (the API server takes ``8`` for ``"8"``)."""


def _quantities_as_strings(doc: Any) -> Any:
    """``doc`` with every number inside a resource list turned into its quantity string."""
    if isinstance(doc, list):
        return [_quantities_as_strings(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for k, v in doc.items():
        if k in QUANTITY_MAPS and isinstance(v, dict):
            v = {r: str(q) if isinstance(q, int | float) and not isinstance(q, bool) else q for r, q in v.items()}
        out[k] = _quantities_as_strings(v)
    return out


def _documents(path: Path) -> Iterator[Any]:
    text = path.read_text(encoding="utf-8")
    if _is_yaml(path) or not text.lstrip().startswith(("{", "[")):
        yield from yaml.safe_load_all(text)
    else:
        yield msgspec.json.decode(text.encode())


def decode_object(doc: Mapping[str, Any], where: str) -> Any:
    """One manifest object as its typed record (``kind`` one of :data:`MANIFEST_KINDS`).

    Raises:
        SnapshotError: an unsupported ``kind``, or a field of the wrong type (naming ``where``
            and the object's kind and name).
    """
    kind = doc.get("kind", "")
    typ = MANIFEST_KINDS.get(kind)
    name = (doc.get("metadata") or {}).get("name", "")
    if typ is None:
        kinds = ", ".join(sorted(MANIFEST_KINDS))
        raise SnapshotError(f"{where}: kind {kind or '(none)'} {name} is not one of {kinds}")
    try:
        return msgspec.convert(_quantities_as_strings(doc), typ, strict=False)
    except msgspec.ValidationError as exc:
        raise SnapshotError(f"{where}: {kind} {name}: {exc}") from None


def decode_manifests(
    path: Path, others: Callable[[Mapping[str, Any], str], Sequence[Any] | None] | None = None
) -> list[Any]:
    """The objects of a manifest file (YAML, several documents, or JSON; ``kind: List`` is
    flattened), each as its typed record, in file order. A document of a kind not in
    :data:`MANIFEST_KINDS` is handed to ``others(doc, where)`` first, and so is every other
    document: the objects it returns follow the document (which is kept when it is of a kind in
    :data:`MANIFEST_KINDS`) or take its place; None: a kind ``others`` does not know.

    Raises:
        SnapshotError: unreadable file, an unsupported ``kind``, or a field of the wrong type
            (naming the document's position and the object's kind and name).
    """
    out: list[Any] = []

    def add(doc: Any, where: str) -> None:
        if doc is None:
            return
        if not isinstance(doc, dict):
            raise SnapshotError(f"{path} {where}: not an object")
        kind = doc.get("kind", "")
        if kind == "List" or (kind.endswith("List") and isinstance(doc.get("items"), list)):
            for i, item in enumerate(doc.get("items") or []):
                add(item, f"{where}.items[{i}]")
            return
        extra = others(doc, f"{path} {where}") if others is not None else None
        if extra is None or kind in MANIFEST_KINDS:
            out.append(decode_object(doc, f"{path} {where}"))  # a workload the scheduler reads is kept too
        if extra is not None:
            out.extend(extra)

    try:
        docs = list(_documents(path))
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, msgspec.DecodeError) as exc:
        raise SnapshotError(f"cannot parse {path}: {exc}") from None
    for i, doc in enumerate(docs):
        if isinstance(doc, list):
            for j, item in enumerate(doc):
                add(item, f"document {i + 1}[{j}]")
        else:
            add(doc, f"document {i + 1}")
    return out
