"""Compact typed records decoded straight from API JSON.

Only the fields the scheduler reads are declared; msgspec skips the rest while decoding,
which keeps a 10k-pod cache small and decoding about four times cheaper than building
dicts (see ``docs/python-stack.md`` §2). Field names follow the Kubernetes JSON names
(``rename="camel"``), so a record is also the documentation of which fields matter.

The structs mirror ``k8s.io/api/core/v1/types.go`` and, for PodGroups,
``sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1/types.go``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

ResourceList = dict[str, str]


class _S(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=False):
    """Base: camelCase JSON names, unknown fields ignored, defaults omitted on encode."""


class OwnerReference(_S, gc=False):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_S):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    owner_references: list[OwnerReference] = []


class LabelSelectorRequirement(_S, gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class LabelSelector(_S, gc=False):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class NodeSelectorRequirement(_S, gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(_S, gc=False):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(_S, gc=False):
    node_selector_terms: list[NodeSelectorTerm] = []


class PreferredSchedulingTerm(_S, gc=False):
    weight: int = 0
    preference: NodeSelectorTerm = msgspec.field(default_factory=NodeSelectorTerm)


class NodeAffinity(_S, gc=False):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class PodAffinityTerm(_S, gc=False):
    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    topology_key: str = ""
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []


class WeightedPodAffinityTerm(_S, gc=False):
    weight: int = 0
    pod_affinity_term: PodAffinityTerm = msgspec.field(default_factory=PodAffinityTerm)


class PodAffinity(_S, gc=False):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(_S, gc=False):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(_S, gc=False):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Taint(_S, gc=False):
    key: str = ""
    value: str = ""
    effect: str = ""


class ResourceRequirements(_S, gc=False):
    requests: ResourceList = {}
    limits: ResourceList = {}


class ContainerPort(_S, gc=False):
    container_port: int = 0
    host_port: int = 0
    protocol: str = "TCP"
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(_S, gc=False):
    name: str = ""
    image: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = []
    restart_policy: str | None = None


class TopologySpreadConstraint(_S, gc=False):
    max_skew: int = 0
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = []


class PodSchedulingGate(_S, gc=False):
    name: str = ""


class PersistentVolumeClaimVolumeSource(_S, gc=False):
    claim_name: str = ""
    read_only: bool = False


class EphemeralVolumeSource(_S, gc=False):
    volume_claim_template: dict[str, Any] | None = None


class Volume(_S, gc=False):
    name: str = ""
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    gce_persistent_disk: dict[str, Any] | None = None
    aws_elastic_block_store: dict[str, Any] | None = None
    iscsi: dict[str, Any] | None = None
    rbd: dict[str, Any] | None = None


class PodResourceClaim(_S, gc=False):
    """``v1.PodResourceClaim``: only its presence matters (DynamicResources)."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(_S):
    containers: list[Container] = []
    init_containers: list[Container] = []
    node_name: str = ""
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    scheduler_name: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    preemption_policy: str | None = None
    scheduling_gates: list[PodSchedulingGate] = []
    topology_spread_constraints: list[TopologySpreadConstraint] = []
    overhead: ResourceList = {}
    resources: ResourceRequirements | None = None
    volumes: list[Volume] = []
    host_network: bool = False
    resource_claims: list[PodResourceClaim] = []


class PodCondition(_S, gc=False):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class PodStatus(_S):
    phase: str = ""
    conditions: list[PodCondition] = []
    nominated_node_name: str = ""


class Pod(_S):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class NodeSpec(_S, gc=False):
    unschedulable: bool = False
    taints: list[Taint] = []


class ContainerImage(_S, gc=False):
    names: list[str] = []
    size_bytes: int = 0


class NodeCondition(_S, gc=False):
    type: str = ""
    status: str = ""


class NodeStatus(_S):
    capacity: ResourceList = {}
    allocatable: ResourceList = {}
    images: list[ContainerImage] = []
    conditions: list[NodeCondition] = []


class Node(_S):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class ObjectReference(_S, gc=False):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""


class VolumeNodeAffinity(_S, gc=False):
    required: NodeSelector | None = None


class PersistentVolumeSpec(_S, gc=False):
    capacity: ResourceList = {}
    access_modes: list[str] = []
    claim_ref: ObjectReference | None = None
    storage_class_name: str = ""
    volume_mode: str | None = None
    node_affinity: VolumeNodeAffinity | None = None
    volume_attributes_class_name: str | None = None
    csi: dict[str, Any] | None = None


class PersistentVolumeStatus(_S, gc=False):
    phase: str = ""


class PersistentVolume(_S):
    """``v1.PersistentVolume``: the fields VolumeBinding, VolumeZone and VolumeRestrictions read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = msgspec.field(default_factory=PersistentVolumeStatus)


class PersistentVolumeClaimSpec(_S, gc=False):
    access_modes: list[str] = []
    selector: LabelSelector | None = None
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    volume_name: str = ""
    storage_class_name: str | None = None
    volume_mode: str | None = None
    volume_attributes_class_name: str | None = None


class PersistentVolumeClaimStatus(_S, gc=False):
    phase: str = ""


class PersistentVolumeClaim(_S):
    """``v1.PersistentVolumeClaim``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = msgspec.field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = msgspec.field(default_factory=PersistentVolumeClaimStatus)


class TopologySelectorLabelRequirement(_S, gc=False):
    key: str = ""
    values: list[str] = []


class TopologySelectorTerm(_S, gc=False):
    match_label_expressions: list[TopologySelectorLabelRequirement] = []


class StorageClass(_S):
    """``storage.k8s.io/v1 StorageClass`` (top-level fields, not under ``spec``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: list[TopologySelectorTerm] = []


class PodGroupSpec(_S, gc=False):
    min_member: int | None = None
    schedule_timeout_seconds: int | None = None


class PodGroup(_S):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)


class Namespace(_S):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class ListMeta(_S, gc=False):
    resource_version: str = ""
    # msgspec renames "continue_" to "continue" via the explicit name below.
    continue_: str = msgspec.field(default="", name="continue")


T = TypeVar("T")


class ObjectList(_S, Generic[T]):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] = []


class RawWatchEvent(_S):
    """One line of a watch stream; ``object`` is decoded once its type is known."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"{}")


class Status(_S, gc=False):
    """``metav1.Status``: the body of API errors and of watch ``ERROR`` events."""

    code: int = 0
    reason: str = ""
    message: str = ""


class MetaOnly(_S):
    """Decodes just ``metadata``: bookmarks, and objects that failed a typed decode."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class PodSpecHead(_S):
    scheduler_name: str = ""
    node_name: str = ""


class PodHead(_S):
    """What is read of a pod that failed the typed decode: who it is and who schedules it."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpecHead = msgspec.field(default_factory=PodSpecHead)
