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
    """``v1.NodeSelectorRequirement``: ``key``, ``operator`` (In, NotIn, Exists, DoesNotExist, Gt, Lt), ``values``."""

    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(Record, gc=False):
    """``v1.NodeSelectorTerm``: requirements ANDed; compiled by ``util.labels.compile_term``."""

    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(Record, gc=False):
    """``v1.NodeSelector``: terms ORed (required node affinity, PersistentVolume node affinity)."""

    node_selector_terms: list[NodeSelectorTerm] = []


class PreferredSchedulingTerm(Record, gc=False):
    """``v1.PreferredSchedulingTerm``: a weighted node selector term, scored by NodeAffinity."""

    weight: int = 0
    preference: NodeSelectorTerm = msgspec.field(default_factory=NodeSelectorTerm)


class NodeAffinity(Record, gc=False):
    """``v1.NodeAffinity``: required terms (Filter) and preferred terms (Score) of NodeAffinity."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class PodAffinityTerm(Record, gc=False):
    """``v1.PodAffinityTerm``: selector, namespaces and topology key, parsed into ``framework.types.AffinityTerm``."""

    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    topology_key: str = ""
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []


class WeightedPodAffinityTerm(Record, gc=False):
    """``v1.WeightedPodAffinityTerm``: a preferred (anti-)affinity term and its weight (1-100)."""

    weight: int = 0
    pod_affinity_term: PodAffinityTerm = msgspec.field(default_factory=PodAffinityTerm)


class PodAffinity(Record, gc=False):
    """``v1.PodAffinity`` (also used for ``v1.PodAntiAffinity``, which has the same fields)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(Record, gc=False):
    """``v1.Affinity``: node affinity, pod affinity and pod anti-affinity, each optional."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(Record, gc=False):
    """``v1.Toleration``: matched against taints (TaintToleration, NodeUnschedulable, PodTopologySpread, gangs)."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Taint(Record, gc=False):
    """``v1.Taint``: ``key``, ``value`` and ``effect`` (NoSchedule, PreferNoSchedule, NoExecute)."""

    key: str = ""
    value: str = ""
    effect: str = ""


class ResourceRequirements(Record, gc=False):
    """``v1.ResourceRequirements``: quantity strings; only ``requests`` feed scheduling decisions."""

    requests: ResourceList = {}
    limits: ResourceList = {}


class ContainerPort(Record, gc=False):
    """``v1.ContainerPort``: only ports with a ``hostPort`` matter (NodePorts); protocol defaults to TCP."""

    container_port: int = 0
    host_port: int = 0
    protocol: str = "TCP"
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(Record, gc=False):
    """``v1.Container``: requests, host ports, image (ImageLocality) and ``restartPolicy`` (sidecar init containers)."""

    name: str = ""
    image: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = []
    restart_policy: str | None = None


class TopologySpreadConstraint(Record, gc=False):
    """``v1.TopologySpreadConstraint``: read by PodTopologySpread; ``maxSkew`` and ``minDomains`` are counts."""

    max_skew: int = 0
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = []


class PodSchedulingGate(Record, gc=False):
    """``v1.PodSchedulingGate``: any gate keeps the pod out of activeQ (SchedulingGates PreEnqueue)."""

    name: str = ""


class PersistentVolumeClaimVolumeSource(Record, gc=False):
    """``v1.PersistentVolumeClaimVolumeSource``: the claim a pod volume names (volume plugins)."""

    claim_name: str = ""
    read_only: bool = False


class EphemeralVolumeSource(Record, gc=False):
    """``v1.EphemeralVolumeSource``: the claim template is kept opaque; only its presence is read."""

    volume_claim_template: dict[str, Any] | None = None


class Volume(Record, gc=False):
    """``v1.Volume``: PVC and ephemeral claims, the in-tree disk sources VolumeRestrictions
    compares, and the in-tree sources csi-translation-lib migrates (NodeVolumeLimits counts
    them against their CSI driver: ``plugins/csitranslation.py``). In-tree sources stay the API
    server's JSON (``pdName``, ``volumeID``, ``diskURI``, ``kind``...)."""

    name: str = ""
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    gce_persistent_disk: dict[str, Any] | None = None
    aws_elastic_block_store: dict[str, Any] | None = None
    iscsi: dict[str, Any] | None = None
    rbd: dict[str, Any] | None = None
    azure_disk: dict[str, Any] | None = None
    azure_file: dict[str, Any] | None = None
    cinder: dict[str, Any] | None = None
    portworx_volume: dict[str, Any] | None = None
    vsphere_volume: dict[str, Any] | None = None
    csi: dict[str, Any] | None = None
    """An inline CSI volume (``driver``, ...): VolumeBinding's CSIDriver hint reads its driver."""


class PodResourceClaim(Record, gc=False):
    """``v1.PodResourceClaim``: a claim the pod uses by name, or one the resourceclaim controller
    creates from a template (DynamicResources)."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(Record):
    """``v1.PodSpec``: every field a plugin, the queue or the equivalence ``shape`` reads."""

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
    termination_grace_period_seconds: int | None = None
    """Seconds a deleted pod keeps running (None: the API's default, 30); ``simulate`` lets a
    preemption victim leave after it."""


class PodCondition(Record, gc=False):
    """``v1.PodCondition``: the recorder reads ``PodScheduled`` to skip patches that change nothing."""

    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class PodResourceClaimStatus(Record, gc=False):
    """``v1.PodResourceClaimStatus``: the claim the resourceclaim controller created for the pod's
    ``resourceClaims`` entry ``name`` (None: none was needed)."""

    name: str = ""
    resource_claim_name: str | None = None


class ContainerStatus(Record, gc=False):
    """``v1.ContainerStatus``: what the kubelet reports of one container's resources
    (InPlacePodVerticalScaling, GA in 1.35). ``resources`` is what the runtime actuated (None
    until the kubelet reports it), ``allocated_resources`` the requests the kubelet admitted;
    both are quantity strings, read by ``framework.types.pod_requests``."""

    name: str = ""
    resources: ResourceRequirements | None = None
    allocated_resources: ResourceList = {}


class PodStatus(Record):
    """``v1.PodStatus``: ``phase`` (finished pods are no live gang members), conditions (with
    1.35's ``PodResizePending``/``PodResizeInProgress``), ``nominatedNodeName``, and the
    container statuses whose resources count while a resize is not done, and the claims generated
    from templates (DynamicResources). The deprecated ``status.resize`` is not read: 1.35's
    kubelet reports resizes as the two conditions, and kube-scheduler reads only
    ``PodResizePending`` (reason ``Infeasible``)."""

    phase: str = ""
    conditions: list[PodCondition] = []
    nominated_node_name: str = ""
    start_time: str | None = None
    """RFC 3339; DefaultPreemption orders victims of equal priority by it (``GetPodStartTime``)."""
    resource_claim_statuses: list[PodResourceClaimStatus] = []
    container_statuses: list[ContainerStatus] = []
    init_container_statuses: list[ContainerStatus] = []


class Pod(Record):
    """``v1.Pod``: decoded once per informer event, then wrapped in a ``framework.types.PodInfo``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class NodeSpec(Record, gc=False):
    """``v1.NodeSpec``: ``unschedulable`` (cordon) and taints."""

    unschedulable: bool = False
    taints: list[Taint] = []


class ContainerImage(Record, gc=False):
    """``v1.ContainerImage``: image names and size in bytes, for ImageLocality's image spread."""

    names: list[str] = []
    size_bytes: int = 0


class NodeCondition(Record, gc=False):
    """``v1.NodeCondition``: type and status, compared to detect ``UpdateNodeCondition`` events."""

    type: str = ""
    status: str = ""


class NodeStatus(Record):
    """``v1.NodeStatus``: ``allocatable`` (what Fit checks against), images and conditions."""

    capacity: ResourceList = {}
    allocatable: ResourceList = {}
    images: list[ContainerImage] = []
    conditions: list[NodeCondition] = []


class Node(Record):
    """``v1.Node``: decoded once per informer event, then held by a ``framework.types.NodeInfo``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class ObjectReference(Record, gc=False):
    """``v1.ObjectReference``: a PersistentVolume's ``claimRef`` (VolumeBinding)."""

    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""


class VolumeNodeAffinity(Record, gc=False):
    """``v1.VolumeNodeAffinity``: the nodes a PersistentVolume can be reached from."""

    required: NodeSelector | None = None


class CSIPersistentVolumeSource(Record, gc=False):
    """``v1.CSIPersistentVolumeSource``: the CSI driver and its volume id (NodeVolumeLimits
    counts ``driver/volumeHandle`` once per node)."""

    driver: str = ""
    volume_handle: str = ""


class PersistentVolumeSpec(Record, gc=False):
    """``v1.PersistentVolumeSpec``: capacity, access modes, class, mode, claimRef, node affinity,
    the CSI source and the in-tree sources csi-translation-lib migrates (kept as JSON)."""

    capacity: ResourceList = {}
    access_modes: list[str] = []
    claim_ref: ObjectReference | None = None
    storage_class_name: str = ""
    volume_mode: str | None = None
    node_affinity: VolumeNodeAffinity | None = None
    volume_attributes_class_name: str | None = None
    csi: CSIPersistentVolumeSource | None = None
    gce_persistent_disk: dict[str, Any] | None = None
    aws_elastic_block_store: dict[str, Any] | None = None
    azure_disk: dict[str, Any] | None = None
    azure_file: dict[str, Any] | None = None
    cinder: dict[str, Any] | None = None
    portworx_volume: dict[str, Any] | None = None
    vsphere_volume: dict[str, Any] | None = None


class PersistentVolumeStatus(Record, gc=False):
    """``v1.PersistentVolumeStatus``: ``phase`` (an unbound volume must be ``Available`` to match a claim)."""

    phase: str = ""


class PersistentVolume(Record):
    """``v1.PersistentVolume``: the fields VolumeBinding, VolumeZone and VolumeRestrictions read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = msgspec.field(default_factory=PersistentVolumeStatus)


class PersistentVolumeClaimSpec(Record, gc=False):
    """``v1.PersistentVolumeClaimSpec``: what VolumeBinding matches against volumes."""

    access_modes: list[str] = []
    selector: LabelSelector | None = None
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    volume_name: str = ""
    storage_class_name: str | None = None
    volume_mode: str | None = None
    volume_attributes_class_name: str | None = None


class PersistentVolumeClaimStatus(Record, gc=False):
    """``v1.PersistentVolumeClaimStatus``: ``phase`` (a ``Lost`` claim makes its pods unresolvable)."""

    phase: str = ""


class PersistentVolumeClaim(Record):
    """``v1.PersistentVolumeClaim``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = msgspec.field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = msgspec.field(default_factory=PersistentVolumeClaimStatus)


class TopologySelectorLabelRequirement(Record, gc=False):
    """``v1.TopologySelectorLabelRequirement``: a label key and its allowed values."""

    key: str = ""
    values: list[str] = []


class TopologySelectorTerm(Record, gc=False):
    """``v1.TopologySelectorTerm``: one entry of a StorageClass's ``allowedTopologies``."""

    match_label_expressions: list[TopologySelectorLabelRequirement] = []


class StorageClass(Record):
    """``storage.k8s.io/v1 StorageClass`` (top-level fields, not under ``spec``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: list[TopologySelectorTerm] = []


class Namespace(Record):
    """``v1.Namespace``: only its labels are read (pod affinity ``namespaceSelector``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class PodSpecHead(Record):
    """The two ``v1.PodSpec`` fields read of a pod that failed the typed decode."""

    scheduler_name: str = ""
    node_name: str = ""


class PodHead(Record):
    """What is read of a pod that failed the typed decode: who it is and who schedules it."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpecHead = msgspec.field(default_factory=PodSpecHead)
