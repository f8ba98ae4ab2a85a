"""Listing the cluster as the scheduler's informers see it: the one tool that reads the API server.

Lists what the informers of :mod:`ome_scheduler.app.informers` list (nodes, pods that are not
finished, namespaces, PodGroups, PersistentVolumes, PersistentVolumeClaims, StorageClasses,
CSINodes, VolumeAttachments, CSIDrivers, CSIStorageCapacities, Services, ReplicationControllers,
ReplicaSets, StatefulSets, ResourceClaims, ResourceSlices and DeviceClasses;
never Secrets or ConfigMaps), decodes each object into the scheduler's typed record (so only
the fields the scheduler reads are kept) into one
:class:`~ome_scheduler.api.snapshot.ClusterSnapshot`. ``snapshot`` writes it, ``explain``
reasons over it.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec

from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotMeta
from ome_scheduler.app.informers import INFORMERS
from ome_scheduler.kube.client import TRANSPORT_ERRORS, ApiError, KubeClient
from ome_scheduler.kube.credentials import credentials_error
from ome_scheduler.util.timestamps import now_rfc3339

FIELD_OF_INFORMER = {
    "nodes": "nodes",
    "namespaces": "namespaces",
    "podgroups": "pod_groups",
    "pods": "pods",
    "persistentvolumes": "persistent_volumes",
    "persistentvolumeclaims": "persistent_volume_claims",
    "storageclasses": "storage_classes",
    "csinodes": "csi_nodes",
    "volumeattachments": "volume_attachments",
    "csidrivers": "csi_drivers",
    "csistoragecapacities": "csi_storage_capacities",
    "services": "services",
    "replicationcontrollers": "replication_controllers",
    "replicasets": "replica_sets",
    "statefulsets": "stateful_sets",
    "resourceclaims": "resource_claims",
    "resourceslices": "resource_slices",
    "deviceclasses": "device_classes",
}
"""Informer name (``app/informers.py``) -> the :class:`ClusterSnapshot` field it fills."""

PAGE = "500"


async def list_objects(client: KubeClient, path: str, record: type[Any], params: dict[str, str]) -> list[Any]:
    """Every object at ``path`` (paged LIST, 500 per page) as ``record``, sorted by namespace and name.

    An object that does not decode is left out with a warning on stderr, as the informer would.

    Raises:
        ApiError: the server refused the list (404 when the resource is not served).
    """
    decoder = msgspec.json.Decoder(record)
    raw_list = msgspec.json.Decoder(_RawList)
    out: list[Any] = []
    cont = ""
    while True:
        q = {"limit": PAGE, **params}
        if cont:
            q["continue"] = cont
        lst = raw_list.decode(await client.get(path, q))
        for raw in lst.items:
            try:
                out.append(decoder.decode(raw))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                sys.stderr.write(f"warning: {path}: skipping an object that cannot be read: {exc}\n")
        cont = lst.metadata.get("continue", "")
        if not cont:
            break
    out.sort(key=lambda o: (o.metadata.namespace, o.metadata.name))
    return out


class _RawList(msgspec.Struct):
    metadata: dict[str, Any] = {}
    items: list[msgspec.Raw] = []


async def take_snapshot(client: KubeClient) -> ClusterSnapshot:
    """List every informer's objects into a snapshot (PodGroups empty when the CRD is missing).

    Raises:
        ApiError / transport errors: a list other than PodGroups failed.
    """
    snap = ClusterSnapshot(metadata=SnapshotMeta(taken_at=now_rfc3339(), server=client.server))
    for spec in INFORMERS:
        field = FIELD_OF_INFORMER.get(spec.name)
        if field is None:
            continue
        try:
            objs = await list_objects(client, spec.path, spec.record, spec.params)
        except ApiError as exc:
            if exc.code == 404 and spec.optional:
                sys.stderr.write(f"warning: {spec.name} not served ({exc.message}); the snapshot has none\n")
                objs = []
            else:
                raise
        setattr(snap, field, objs)
    return snap


async def take(kubeconfig: str | None, master: str | None) -> ClusterSnapshot | str:
    """Connect with ``kubeconfig`` (``master`` overrides its server) and take a snapshot; a
    string is the error line to print (credentials, or the cluster could not be listed)."""
    try:
        client = await KubeClient.connect(kubeconfig, qps=50.0, burst=100, master=master)
    except Exception as exc:
        return credentials_error(kubeconfig, master, exc)
    try:
        return await take_snapshot(client)
    except (*TRANSPORT_ERRORS, ApiError) as exc:
        return f"cannot list the cluster at {client.server}: {exc}"
    finally:
        await client.close()
