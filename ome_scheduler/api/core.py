"""Core ``v1`` records (Pod, Node, Namespace, volumes) and ``storage.k8s.io/v1`` StorageClass.

Mirrors ``k8s.io/api/core/v1/types.go`` and ``k8s.io/api/storage/v1/types.go``, declaring only
the fields the scheduler reads. Quantities stay strings here (``ResourceList``); they are
parsed once into ``framework.types.Resource`` when a PodInfo or NodeInfo is built.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ome_scheduler.api.meta import LabelSelector, ObjectMeta, Record

ResourceList = dict[str, str]
"""Resource name -> quantity string as the API server stores it (``"500m"``, ``"10Gi"``)."""


class NodeSelectorRequirement(Record, gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(Record, gc=False):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(Record, gc=False):
    node_selector_terms: list[NodeSelectorTerm] = []


class PreferredSchedulingTerm(Record, gc=False):
    weight: int = 0
    preference: NodeSelectorTerm = msgspec.field(default_factory=NodeSelectorTerm)


class NodeAffinity(Record, gc=False):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class PodAffinityTerm(Record, gc=False):
    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    topology_key: str = ""
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []


class WeightedPodAffinityTerm(Record, gc=False):
    weight: int = 0
    pod_affinity_term: PodAffinityTerm = msgspec.field(default_factory=PodAffinityTerm)


class PodAffinity(Record, gc=False):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(Record, gc=False):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(Record, gc=False):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Taint(Record, gc=False):
    key: str = ""
    value: str = ""
    effect: str = ""


class ResourceRequirements(Record, gc=False):
    requests: ResourceList = {}
    limits: ResourceList = {}


class ContainerPort(Record, gc=False):
    container_port: int = 0
    host_port: int = 0
    protocol: str = "TCP"
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(Record, gc=False):
    name: str = ""
    image: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = []
    restart_policy: str | None = None


class TopologySpreadConstraint(Record, gc=False):
    max_skew: int = 0
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = []


class PodSchedulingGate(Record, gc=False):
    name: str = ""


class PersistentVolumeClaimVolumeSource(Record, gc=False):
    claim_name: str = ""
    read_only: bool = False


class EphemeralVolumeSource(Record, gc=False):
    volume_claim_template: dict[str, Any] | None = None


class Volume(Record, gc=False):
    name: str = ""
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    gce_persistent_disk: dict[str, Any] | None = None
    aws_elastic_block_store: dict[str, Any] | None = None
    iscsi: dict[str, Any] | None = None
    rbd: dict[str, Any] | None = None


class PodResourceClaim(Record, gc=False):
    """``v1.PodResourceClaim``: only its presence matters (DynamicResources)."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(Record):
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


class PodCondition(Record, gc=False):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class PodStatus(Record):
    phase: str = ""
    conditions: list[PodCondition] = []
    nominated_node_name: str = ""


class Pod(Record):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class NodeSpec(Record, gc=False):
    unschedulable: bool = False
    taints: list[Taint] = []


class ContainerImage(Record, gc=False):
    names: list[str] = []
    size_bytes: int = 0


class NodeCondition(Record, gc=False):
    type: str = ""
    status: str = ""


class NodeStatus(Record):
    capacity: ResourceList = {}
    allocatable: ResourceList = {}
    images: list[ContainerImage] = []
    conditions: list[NodeCondition] = []


class Node(Record):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class ObjectReference(Record, gc=False):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""


class VolumeNodeAffinity(Record, gc=False):
    required: NodeSelector | None = None


class PersistentVolumeSpec(Record, gc=False):
    capacity: ResourceList = {}
    access_modes: list[str] = []
    claim_ref: ObjectReference | None = None
    storage_class_name: str = ""
    volume_mode: str | None = None
    node_affinity: VolumeNodeAffinity | None = None
    volume_attributes_class_name: str | None = None
    csi: dict[str, Any] | None = None


class PersistentVolumeStatus(Record, gc=False):
    phase: str = ""


class PersistentVolume(Record):
    """``v1.PersistentVolume``: the fields VolumeBinding, VolumeZone and VolumeRestrictions read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = msgspec.field(default_factory=PersistentVolumeStatus)


class PersistentVolumeClaimSpec(Record, gc=False):
    access_modes: list[str] = []
    selector: LabelSelector | None = None
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    volume_name: str = ""
    storage_class_name: str | None = None
    volume_mode: str | None = None
    volume_attributes_class_name: str | None = None


class PersistentVolumeClaimStatus(Record, gc=False):
    phase: str = ""


class PersistentVolumeClaim(Record):
    """``v1.PersistentVolumeClaim``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = msgspec.field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = msgspec.field(default_factory=PersistentVolumeClaimStatus)


class TopologySelectorLabelRequirement(Record, gc=False):
    key: str = ""
    values: list[str] = []


class TopologySelectorTerm(Record, gc=False):
    match_label_expressions: list[TopologySelectorLabelRequirement] = []


class StorageClass(Record):
    """``storage.k8s.io/v1 StorageClass`` (top-level fields, not under ``spec``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: list[TopologySelectorTerm] = []


class Namespace(Record):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class PodSpecHead(Record):
    scheduler_name: str = ""
    node_name: str = ""


class PodHead(Record):
    """What is read of a pod that failed the typed decode: who it is and who schedules it."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpecHead = msgspec.field(default_factory=PodSpecHead)
