"""The informer table: what the scheduler lists and watches, and which handlers each feeds.

kube-scheduler's ``informerFactory`` (``cmd/kube-scheduler/app/server.go``) plus the PodGroup
CRD's informer. ``ome-scheduler snapshot`` lists the same table, so this module imports only
the API records (and the informer class where one is built), never the server stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.storage import CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment
from ome_scheduler.api.workloads import (
    LeaderWorkerSet,
    PodDisruptionBudget,
    ReplicaSet,
    ReplicationController,
    Service,
    StatefulSet,
)

if TYPE_CHECKING:
    from ome_scheduler.kube.client import KubeClient
    from ome_scheduler.kube.informer import Informer
    from ome_scheduler.scheduler import Scheduler


@dataclass(frozen=True)
class InformerSpec:
    """One informer: what it lists and watches, and which handlers it feeds.

    ``owner`` is the scheduler attribute holding the handlers (``handlers`` for the event
    handlers, ``volumes`` for the volume store, ``dra`` for the DRA manager, ``workloads`` for
    the workload selectors) and ``kind`` their name part: the informer calls ``on_{kind}_add``,
    ``on_{kind}_update``, ``on_{kind}_delete`` and, if present,
    ``on_{kind}_invalid`` (an object that cannot be decoded) and ``on_{kind}_error`` (a handler
    raised while handling it). An ``optional`` informer is waited for only as long as a plugin
    asks (``Plugin.informer_sync_waits``).
    """

    name: str
    path: str
    record: type[Any]
    owner: str
    kind: str
    params: dict[str, str] = field(default_factory=dict)
    keep_stale: bool = False
    optional: bool = False
    not_synced: str = ""
    """What the log says when an optional informer has not synced in time."""


INFORMERS: tuple[InformerSpec, ...] = (
    InformerSpec(
        "pods",
        "/api/v1/pods",
        Pod,
        "handlers",
        "pod",
        {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
        # A bound pod's last readable version keeps its requests counted on the node.
        keep_stale=True,
    ),
    InformerSpec("nodes", "/api/v1/nodes", Node, "handlers", "node"),
    InformerSpec("namespaces", "/api/v1/namespaces", Namespace, "handlers", "namespace"),
    InformerSpec("persistentvolumes", "/api/v1/persistentvolumes", PersistentVolume, "volumes", "pv"),
    InformerSpec("persistentvolumeclaims", "/api/v1/persistentvolumeclaims", PersistentVolumeClaim, "volumes", "pvc"),
    InformerSpec("storageclasses", "/apis/storage.k8s.io/v1/storageclasses", StorageClass, "volumes", "class"),
    InformerSpec("resourceclaims", "/apis/resource.k8s.io/v1/resourceclaims", ResourceClaim, "dra", "claim"),
    InformerSpec("resourceslices", "/apis/resource.k8s.io/v1/resourceslices", ResourceSlice, "dra", "slice"),
    InformerSpec("deviceclasses", "/apis/resource.k8s.io/v1/deviceclasses", DeviceClass, "dra", "class"),
    # NodeVolumeLimits: each driver's attach limit, and the volumes attached to a node whoever uses
    # them; VolumeBinding: the in-tree plugins a node's CSI drivers took over.
    InformerSpec("csinodes", "/apis/storage.k8s.io/v1/csinodes", CSINode, "volumes", "csinode"),
    InformerSpec(
        "volumeattachments", "/apis/storage.k8s.io/v1/volumeattachments", VolumeAttachment, "volumes", "attachment"
    ),
    # VolumeBinding: which CSI drivers ask for capacity-aware provisioning, and their capacities.
    InformerSpec("csidrivers", "/apis/storage.k8s.io/v1/csidrivers", CSIDriver, "volumes", "csidriver"),
    InformerSpec(
        "csistoragecapacities",
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        CSIStorageCapacity,
        "volumes",
        "capacity",
    ),
    # PodTopologySpread: the selector of its default constraints (helper.DefaultSelector).
    InformerSpec("services", "/api/v1/services", Service, "workloads", "service"),
    InformerSpec("replicationcontrollers", "/api/v1/replicationcontrollers", ReplicationController, "workloads", "rc"),
    InformerSpec("replicasets", "/apis/apps/v1/replicasets", ReplicaSet, "workloads", "replicaset"),
    InformerSpec("statefulsets", "/apis/apps/v1/statefulsets", StatefulSet, "workloads", "statefulset"),
    # DefaultPreemption: victims whose eviction a PodDisruptionBudget would not allow are reprieved first.
    InformerSpec(
        "poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets", PodDisruptionBudget, "workloads", "pdb"
    ),
    InformerSpec(
        "podgroups",
        "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
        PodGroup,
        "handlers",
        "pod_group",
        optional=True,
        not_synced="PodGroup informer not synced; continuing (is the PodGroup CRD installed?)",
    ),
    # OMEGangPack: an LWS group's startupPolicy (LeaderReady: the leader binds first, design §2.1).
    InformerSpec(
        "leaderworkersets",
        "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets",
        LeaderWorkerSet,
        "workloads",
        "lws",
        optional=True,
        not_synced="LeaderWorkerSet informer not synced; continuing (is the LeaderWorkerSet CRD installed?)",
    ),
)
"""The informer set (``informerFactory`` in kube-scheduler, with the DRA objects DynamicResources
reads, plus the PodGroup and LeaderWorkerSet CRDs)."""


def build_informer(client: KubeClient, spec: InformerSpec, scheduler: Scheduler) -> Informer[Any]:
    """An :class:`Informer` for ``spec`` wired to the scheduler's handlers (and its metrics)."""
    from ome_scheduler.kube.informer import Informer

    owner = getattr(scheduler, spec.owner)
    return Informer(
        client,
        spec.path,
        spec.record,
        name=spec.name,
        params=spec.params or None,
        on_add=getattr(owner, f"on_{spec.kind}_add"),
        on_update=getattr(owner, f"on_{spec.kind}_update"),
        on_delete=getattr(owner, f"on_{spec.kind}_delete"),
        on_invalid=getattr(owner, f"on_{spec.kind}_invalid", None),
        on_error=getattr(owner, f"on_{spec.kind}_error", None),
        keep_stale=spec.keep_stale,
        metrics=scheduler.metrics,
    )
