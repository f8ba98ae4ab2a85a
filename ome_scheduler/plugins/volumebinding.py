"""VolumeBinding: pods with PersistentVolumeClaims go where their volumes can be.

Mirrors ``pkg/scheduler/framework/plugins/volumebinding/{volume_binding,binder}.go``:

* PreFilter skips pods without PVCs (generic ephemeral volumes count, as ``<pod>-<volume>``);
  a missing claim (``persistentvolumeclaim "x" not found``), a claim being deleted, a Lost claim
  or an ephemeral claim the pod does not own is UnschedulableAndUnresolvable, and so is any
  unbound claim that is not WaitForFirstConsumer (``pod has unbound immediate
  PersistentVolumeClaims``).
* Filter, per node: bound claims' PVs must exist and their node affinity must match the node
  labels; unbound WaitForFirstConsumer claims need a matching available PV (smallest first)
  or a class that can provision there (a provisioner other than
  ``kubernetes.io/no-provisioner`` and matching ``allowedTopologies``, and, when the class's
  CSIDriver asks for capacity checks, a CSIStorageCapacity of the class on the node with room:
  ``hasEnoughCapacity``); a claim already
  annotated with another selected node rules the node out. Failures are
  UnschedulableAndUnresolvable with ``node(s) didn't match PersistentVolume's node affinity``,
  ``node(s) didn't find available persistent volumes to bind``, ``node(s) did not have enough
  free storage`` or ``node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)``.
* Reserve assumes the chosen PVs bound (claimRef) and claims to provision annotated with
  ``volume.kubernetes.io/selected-node``; Unreserve reverts. PreBind writes those changes to
  the API server and waits (1 s polls, ``bindTimeoutSeconds``, default 600) until every claim
  is bound by the PV controller.

* A bound in-tree PV (GCE PD, AWS EBS, Azure Disk, Cinder, Portworx) on a node whose CSINode lists
  its plugin in ``storage.alpha.kubernetes.io/migrated-plugins`` is checked as its CSI
  translation (``tryTranslatePVToCSI``: the zone key of its node affinity becomes the driver's,
  e.g. ``topology.gke.io/zone``); a PV that does not translate is an Error
  (``could not translate pv: ...``).

There is no volume score, as upstream with StorageCapacityScoring (alpha) off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from ome_scheduler.api.core import ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.api.storage import MIGRATED_PLUGINS_ANNOTATION, CSIDriver, CSINode, CSIStorageCapacity
from ome_scheduler.config.pluginargs import VolumeBindingArgs
from ome_scheduler.framework.events import (
    CSI_DRIVER,
    CSI_NODE,
    CSI_STORAGE_CAPACITY,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    ActionType,
    ClusterEventWithHint,
    QueueingHint,
    on,
    queueing_hint,
)
from ome_scheduler.framework.interface import (
    ApiWriter,
    CycleState,
    FilterPlugin,
    FrameworkOptions,
    Handle,
    PreBindPlugin,
    PreFilterPlugin,
    ReservePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import VOLUMES_SIGNER, volumes_signer
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.csitranslation import (
    TranslationError,
    migrated_on_node,
    migration_on,
    pv_plugin,
    translate_pv,
)
from ome_scheduler.plugins.volumestore import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    NOT_SUPPORTED_PROVISIONER,
    VolumeStore,
    claim_class,
    claim_request,
    find_matching_volume,
    is_pvc_fully_bound,
    is_volume_bound_to_claim,
    pv_node_affinity_matches,
)
from ome_scheduler.util.labels import Requirement, Selector
from ome_scheduler.util.quantity import value

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
_STATE = "VolumeBinding"


class VolumeHandle(Protocol):
    """The handle methods the volume plugins need besides :class:`Handle`."""

    def volume_store(self) -> VolumeStore:
        """The PV, PVC and StorageClass cache (``Scheduler.volume_store``)."""
        ...


def store_of(handle: Handle) -> VolumeStore:
    """The handle's VolumeStore, or an empty one when the handle has none (unit tests)."""
    fn = getattr(handle, "volume_store", None)
    if fn is None:
        return VolumeStore()
    vs: VolumeStore = fn()
    return vs


def pod_claim_names(pod: Pod) -> list[tuple[str, bool]]:
    """(claim name, is generic ephemeral) for every PVC-backed volume, in volume order."""
    out = []
    for v in pod.spec.volumes:
        if v.persistent_volume_claim is not None:
            out.append((v.persistent_volume_claim.claim_name, False))
        elif v.ephemeral is not None:
            out.append((f"{pod.metadata.name}-{v.name}", True))
    return out


def ephemeral_owned_by(pod: Pod, pvc: PersistentVolumeClaim) -> str:
    """``ephemeral.VolumeIsForPod``: "" when the pod controls the claim, else the error."""
    for ref in pvc.metadata.owner_references:
        if ref.controller and ref.uid == pod.metadata.uid:
            return ""
    md, pmd = pvc.metadata, pod.metadata
    return f"PVC {md.namespace}/{md.name} was not created for pod {pmd.namespace}/{pmd.name} (pod is not owner)"


@dataclass
class PodVolumes:
    """``PodVolumes``: what binding the pod to one node would take."""

    static_bindings: list[tuple[PersistentVolume, PersistentVolumeClaim]] = field(default_factory=list)
    provisions: list[PersistentVolumeClaim] = field(default_factory=list)


@dataclass
class _State:
    bound: list[PersistentVolumeClaim] = field(default_factory=list)
    delay: list[PersistentVolumeClaim] = field(default_factory=list)
    pvs_by_class: dict[str, list[PersistentVolume]] = field(default_factory=dict)
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = True


def _topology_matches(sc_terms: Sequence[Any], labels: dict[str, str]) -> bool:
    """``MatchTopologySelectorTerms``: no terms match all; an empty term matches nothing."""
    if not sc_terms:
        return True
    for term in sc_terms:
        if not term.match_label_expressions:
            continue
        sel = Selector([Requirement(e.key, "In", frozenset(e.values)) for e in term.match_label_expressions])
        if sel.matches(labels):
            return True
    return False


class VolumeBinding(PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin, SignPlugin):
    """Arguments: :class:`VolumeBindingArgs` (validated)."""

    name = "VolumeBinding"

    def __init__(self, handle: Handle, args: VolumeBindingArgs, client: ApiWriter | None = None) -> None:
        self.handle = handle
        self.client = client
        self.bind_timeout = float(args.bind_timeout_seconds)

    @classmethod
    def new(cls, args: VolumeBindingArgs, handle: Handle, options: FrameworkOptions) -> VolumeBinding:
        """``New``: the plugin for validated arguments, patching through ``options.api_writer``."""
        return cls(handle, args, options.api_writer)

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's volume sources (``VolumesSigner``)."""
        return [(VOLUMES_SIGNER, volumes_signer(pod.pod))]

    @property
    def store(self) -> VolumeStore:
        """The VolumeStore of the handle."""
        return store_of(self.handle)

    # ---- PreFilter ----------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``PreFilter``: look the claims up and sort them into bound and delayed ones."""
        names = pod_claim_names(pod.pod)
        if not names:
            state.write(_STATE, _State())
            return None, Status(Code.SKIP)
        vs = self.store
        s = _State()
        immediate = False
        claims: list[PersistentVolumeClaim] = []
        for claim_name, ephemeral in names:
            pvc = vs.pvc(pod.namespace, claim_name)
            if pvc is None:
                if ephemeral:
                    return None, Status.unresolvable(
                        f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{claim_name}"'
                    )
                return None, Status.unresolvable(f'persistentvolumeclaim "{claim_name}" not found')
            if pvc.status.phase == "Lost":
                return None, Status.unresolvable(
                    f'persistentvolumeclaim "{pvc.metadata.name}" bound to non-existent persistentvolume '
                    f'"{pvc.spec.volume_name}"'
                )
            if pvc.metadata.deletion_timestamp is not None:
                return None, Status.unresolvable(f'persistentvolumeclaim "{pvc.metadata.name}" is being deleted')
            if ephemeral:
                err = ephemeral_owned_by(pod.pod, pvc)
                if err:
                    return None, Status.unresolvable(err)
            claims.append(pvc)
        for pvc in claims:
            if is_pvc_fully_bound(pvc):
                s.bound.append(pvc)
                continue
            try:
                delay = vs.is_delay_binding(pvc)
            except ValueError as exc:
                return None, Status.as_error(exc)
            if delay and not pvc.spec.volume_name:
                s.delay.append(pvc)
            else:
                immediate = True
        if immediate:
            return None, Status.unresolvable(ERR_UNBOUND_IMMEDIATE)
        for pvc in s.delay:
            cls = claim_class(pvc)
            s.pvs_by_class[cls] = vs.pvs_of_class(cls)
        state.write(_STATE, s)
        return None, None

    # ---- Filter -------------------------------------------------------------------------

    def find_pod_volumes(self, s: _State, node: NodeInfo) -> tuple[PodVolumes, list[str]]:
        """``FindPodVolumes``: (bindings for this node, conflict reasons).

        Raises:
            ValueError: a claim without a class or with an unknown class must be provisioned,
                or a bound in-tree PV that does not translate to CSI (``could not translate pv: ...``).
        """
        pv_out = PodVolumes()
        bound_ok = unbound_ok = storage_ok = pvs_found = True
        vs = self.store
        labels = node.labels
        csi_node = vs.csi_node(node.name) if s.bound else None
        for pvc in s.bound:
            pv = vs.pv(pvc.spec.volume_name)
            if pv is None:
                pvs_found = False
                break
            pv = translated_for_node(pv, csi_node)
            if not pv_node_affinity_matches(pv, labels):
                bound_ok = False
                break
        if s.delay:
            to_match: list[PersistentVolumeClaim] = []
            to_provision: list[PersistentVolumeClaim] = []
            fast_fail = False
            for pvc in s.delay:
                sel = pvc.metadata.annotations.get(ANN_SELECTED_NODE)
                if sel is not None:
                    if sel != node.name:
                        unbound_ok = False
                        fast_fail = True
                        break
                    to_provision.append(pvc)
                else:
                    to_match.append(pvc)
            if not fast_fail:
                if to_match:
                    chosen: dict[str, PersistentVolume] = {}
                    for pvc in sorted(to_match, key=claim_request):
                        pv = find_matching_volume(pvc, s.pvs_by_class.get(claim_class(pvc), []), labels, chosen, True)
                        if pv is None:
                            unbound_ok = False
                            to_provision.append(pvc)
                            continue
                        chosen[pv.metadata.name] = pv
                        pv_out.static_bindings.append((pv, pvc))
                if to_provision:
                    unbound_ok, storage_ok, provisions = self._check_provisions(to_provision, labels)
                    pv_out.provisions = provisions
        reasons = []
        if not bound_ok:
            reasons.append(ERR_REASON_NODE_CONFLICT)
        if not unbound_ok:
            reasons.append(ERR_REASON_BIND_CONFLICT)
        if not storage_ok:
            reasons.append(ERR_REASON_NOT_ENOUGH_SPACE)
        if not pvs_found:
            reasons.append(ERR_REASON_PV_NOT_EXIST)
        return pv_out, reasons

    def _check_provisions(
        self, claims: Sequence[PersistentVolumeClaim], labels: dict[str, str]
    ) -> tuple[bool, bool, list[PersistentVolumeClaim]]:
        """``checkVolumeProvisions``: (provisionable, enough storage, claims to provision).

        Raises:
            ValueError: a claim without a class, or whose class does not exist.
        """
        vs = self.store
        out: list[PersistentVolumeClaim] = []
        for pvc in claims:
            cls_name = claim_class(pvc)
            if not cls_name:
                raise ValueError(f'no class for claim "{pvc.metadata.namespace}/{pvc.metadata.name}"')
            sc = vs.storage_class(cls_name)
            if sc is None:
                raise ValueError(f'failed to find storage class "{cls_name}"')
            if not sc.provisioner or sc.provisioner == NOT_SUPPORTED_PROVISIONER:
                return False, True, []
            if not _topology_matches(sc.allowed_topologies, labels):
                return False, True, []
            if not self._has_enough_capacity(pvc, sc, labels):
                return True, False, []
            out.append(pvc)
        return True, True, out

    def _has_enough_capacity(self, pvc: PersistentVolumeClaim, sc: StorageClass, labels: dict[str, str]) -> bool:
        """``hasEnoughCapacity``: a claim with a storage request, of a class whose provisioner is a
        CSIDriver with ``storageCapacity: true``, needs a CSIStorageCapacity of the class that
        selects the node (``nodeTopology``) and whose ``maximumVolumeSize`` (else ``capacity``)
        is at least the request (bytes). Any other claim has room."""
        q = pvc.spec.resources.requests.get("storage")
        if q is None:
            return True
        vs = self.store
        driver = vs.csi_driver(sc.provisioner)
        if driver is None or not driver.spec.storage_capacity:
            return True
        size = value(q)
        for cap in vs.capacities():
            if cap.storage_class_name != sc.metadata.name:
                continue
            limit = volume_limit(cap)
            if limit is None or limit < size or cap.node_topology is None:
                continue
            try:
                topology = Selector.from_label_selector(cap.node_topology)
            except ValueError:
                continue  # upstream logs it and treats the node as without access
            if topology.matches(labels):
                return True
        return False

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Filter``: ``FindPodVolumes`` for this node; remember the bindings it would take."""
        s: _State = state.read(_STATE)
        try:
            pv_out, reasons = self.find_pod_volumes(s, node)
        except ValueError as exc:
            return Status.as_error(exc)
        if reasons:
            return Status.unresolvable(*reasons)
        s.by_node[node.name] = pv_out
        return None

    # ---- Reserve / Unreserve ------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``Reserve``: assume PVs bound and claims annotated for provisioning on ``node``."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return None
        pv_out = s.by_node.get(node)
        if pv_out is None:
            s.all_bound = True
            return None
        vs = self.store
        if all(
            (pvc := vs.pvc(pod.namespace, name)) is not None and is_pvc_fully_bound(pvc)
            for name, _ in pod_claim_names(pod.pod)
        ):
            s.all_bound = True
            return None
        s.all_bound = False
        assumed_bindings = []
        for pv, pvc in pv_out.static_bindings:
            if is_volume_bound_to_claim(pv, pvc) and pv.spec.claim_ref is not None and pv.spec.claim_ref.uid:
                new_pv = pv
            else:
                ref = ObjectReference(
                    kind="PersistentVolumeClaim",
                    namespace=pvc.metadata.namespace,
                    name=pvc.metadata.name,
                    uid=pvc.metadata.uid,
                    api_version="v1",
                    resource_version=pvc.metadata.resource_version,
                )
                ann = dict(pv.metadata.annotations)
                if not is_volume_bound_to_claim(pv, pvc):
                    ann.setdefault(ANN_BOUND_BY_CONTROLLER, "yes")
                new_pv = msgspec.structs.replace(
                    pv,
                    metadata=msgspec.structs.replace(pv.metadata, annotations=ann),
                    spec=msgspec.structs.replace(pv.spec, claim_ref=ref),
                )
                vs.assume_pv(new_pv)
            assumed_bindings.append((new_pv, pvc))
        provisions = []
        for pvc in pv_out.provisions:
            ann = {**pvc.metadata.annotations, ANN_SELECTED_NODE: node}
            clone = msgspec.structs.replace(pvc, metadata=msgspec.structs.replace(pvc.metadata, annotations=ann))
            vs.assume_pvc(clone)
            provisions.append(clone)
        pv_out.static_bindings = assumed_bindings
        pv_out.provisions = provisions
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """``Unreserve``: restore what Reserve assumed."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return
        pv_out = s.by_node.get(node)
        if pv_out is None:
            return
        vs = self.store
        for pv, _ in pv_out.static_bindings:
            vs.restore_pv(pv.metadata.name)
        for pvc in pv_out.provisions:
            vs.restore_pvc(f"{pvc.metadata.namespace}/{pvc.metadata.name}")

    # ---- PreBind ------------------------------------------------------------------------

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``PreBindPreFlight``: Skip when every claim is bound already (or the pod has none),
        Success when PreBind has bindings to write on ``node``, Error when the cycle found no
        volumes for that node (``no pod volume found for node "X"``)."""
        s: _State | None = state.get(_STATE)
        if s is None or s.all_bound:
            return Status(Code.SKIP)
        if node not in s.by_node:
            return Status.as_error(RuntimeError(f'no pod volume found for node "{node}"'))
        return None

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``PreBind``: write the bindings and provisioning requests, then wait until all claims are bound."""
        s: _State | None = state.get(_STATE)
        if s is None or s.all_bound:
            return None
        pv_out = s.by_node.get(node)
        if pv_out is None:
            return Status.as_error(RuntimeError(f'no pod volume found for node "{node}"'))
        if self.client is None:
            return Status.as_error(RuntimeError("VolumeBinding has no API client"))
        try:
            for pv, _ in pv_out.static_bindings:
                ref = pv.spec.claim_ref
                assert ref is not None
                body = {
                    "metadata": {
                        "resourceVersion": pv.metadata.resource_version,
                        "annotations": {ANN_BOUND_BY_CONTROLLER: pv.metadata.annotations.get(ANN_BOUND_BY_CONTROLLER)},
                    },
                    "spec": {"claimRef": msgspec.to_builtins(ref)},
                }
                await self.client.patch(f"/api/v1/persistentvolumes/{pv.metadata.name}", body)
            for pvc in pv_out.provisions:
                body = {
                    "metadata": {
                        "resourceVersion": pvc.metadata.resource_version,
                        "annotations": {ANN_SELECTED_NODE: node},
                    }
                }
                md = pvc.metadata
                await self.client.patch(f"/api/v1/namespaces/{md.namespace}/persistentvolumeclaims/{md.name}", body)
        except Exception as exc:
            self.unreserve(state, pod, node)
            return Status.as_error(exc)
        deadline = time.monotonic() + self.bind_timeout
        while True:
            try:
                if self._bindings_done(pod, node, pv_out):
                    return None
            except ValueError as exc:
                return Status.as_error(RuntimeError(f"binding volumes: {exc}"))
            if time.monotonic() >= deadline:
                return Status.as_error(RuntimeError("binding volumes: context deadline exceeded"))
            await asyncio.sleep(1.0)

    def _bindings_done(self, pod: PodInfo, node: str, pv_out: PodVolumes) -> bool:
        """``checkBindings``: True once every claim is bound; ValueError on a lost binding."""
        vs = self.store
        ni = self.handle.get_node_info(node)
        labels = ni.labels if ni is not None else {}
        csi_node = vs.csi_node(node)
        for pv, pvc in pv_out.static_bindings:
            cur_pv = vs.pv_api_object(pv.metadata.name)
            cur_pvc = vs.pvc_api_object(pvc.metadata.namespace, pvc.metadata.name)
            if cur_pv is None or cur_pvc is None:
                raise ValueError("failed to check binding: object not found")
            try:
                cur_pv = translated_for_node(cur_pv, csi_node)
            except ValueError as exc:
                raise ValueError(f"failed to translate pv to csi: {exc}") from None
            if not pv_node_affinity_matches(cur_pv, labels):
                raise ValueError(f'pv "{cur_pv.metadata.name}" node affinity doesn\'t match node "{node}"')
            if cur_pv.spec.claim_ref is None or not cur_pv.spec.claim_ref.uid:
                return False
            if not is_pvc_fully_bound(cur_pvc):
                return False
        for pvc in pv_out.provisions:
            cur = vs.pvc_api_object(pvc.metadata.namespace, pvc.metadata.name)
            if cur is None:
                raise ValueError("failed to check provisioning pvc: not found")
            if cur.metadata.annotations.get(ANN_SELECTED_NODE, node) != node:
                raise ValueError(f'provisioning failed for PVC "{cur.metadata.name}"')
            if cur.spec.volume_name:
                cur_pv = vs.pv_api_object(cur.spec.volume_name)
                if cur_pv is None:
                    return False
                cur_pv = translated_for_node(cur_pv, csi_node)
                if not pv_node_affinity_matches(cur_pv, labels):
                    raise ValueError(f'pv "{cur_pv.metadata.name}" node affinity doesn\'t match node "{node}"')
            if not is_pvc_fully_bound(cur):
                return False
        return True

    # ---- queueing -----------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """``EventsToRegister``: StorageClass add/update (a new class, or changed
        ``allowedTopologies``), PVC add/update (one of the pod's claims), PV add/update, Node
        add/label changes, CSINode add/update (a new one, or a changed migrated-plugins
        annotation), CSIDriver update (capacity checks turned off for a driver of the pod's
        inline CSI volumes), CSIStorageCapacity add/update (a new one, or a larger limit)."""
        return [
            on(STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE, is_schedulable_after_storage_class_change),
            on(PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE, is_schedulable_after_claim_change),
            on(PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
            on("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
            on(CSI_NODE, ActionType.ADD | ActionType.UPDATE, is_schedulable_after_csinode_change),
            on(CSI_DRIVER, ActionType.UPDATE, is_schedulable_after_csidriver_change),
            on(CSI_STORAGE_CAPACITY, ActionType.ADD | ActionType.UPDATE, is_schedulable_after_capacity_change),
        ]


def volume_limit(cap: CSIStorageCapacity) -> int | None:
    """``volumeLimit``: ``maximumVolumeSize`` when reported (more precise), else ``capacity``, in
    bytes; None when neither is.

    Raises:
        QuantityError: the reported value is not a quantity.
    """
    q = cap.maximum_volume_size if cap.maximum_volume_size is not None else cap.capacity
    return value(q) if q is not None else None


@queueing_hint
def is_schedulable_after_csidriver_change(pod: Pod, old: CSIDriver | None, new: CSIDriver | None) -> QueueingHint:
    """``isSchedulableAfterCSIDriverChange``: the driver of one of the pod's inline CSI volumes
    stopped asking for capacity checks."""
    if old is None or new is None:
        return QueueingHint.QUEUE
    for v in pod.spec.volumes:
        if v.csi is None or v.csi.get("driver") != new.metadata.name:
            continue
        if old.spec.storage_capacity and not new.spec.storage_capacity:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_capacity_change(
    pod: Pod, old: CSIStorageCapacity | None, new: CSIStorageCapacity | None
) -> QueueingHint:
    """``isSchedulableAfterCSIStorageCapacityChange``: a new capacity, or a larger volume limit."""
    if old is None or new is None:
        return QueueingHint.QUEUE
    before, after = volume_limit(old), volume_limit(new)
    if after is not None and (before is None or after > before):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_csinode_change(pod: Pod, old: CSINode | None, new: CSINode | None) -> QueueingHint:
    """``isSchedulableAfterCSINodeChange``: a new CSINode, or its migrated-plugins annotation changed."""
    if old is None or new is None:
        return QueueingHint.QUEUE
    key = MIGRATED_PLUGINS_ANNOTATION
    if old.metadata.annotations.get(key) != new.metadata.annotations.get(key):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_claim_change(
    pod: Pod, old: PersistentVolumeClaim | None, new: PersistentVolumeClaim | None
) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeClaimChange``: the claim is one of the pod's (its
    namespace; a claim volume, or ``<pod>-<volume>`` of an ephemeral one)."""
    if new is None:
        return QueueingHint.QUEUE
    if new.metadata.namespace != pod.metadata.namespace:
        return QueueingHint.QUEUE_SKIP
    names = {name for name, _ in pod_claim_names(pod)}
    return QueueingHint.QUEUE if new.metadata.name in names else QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_storage_class_change(
    pod: Pod, old: StorageClass | None, new: StorageClass | None
) -> QueueingHint:
    """``isSchedulableAfterStorageClassChange``: a new class, or changed ``allowedTopologies``."""
    if old is None or new is None:
        return QueueingHint.QUEUE
    if old.allowed_topologies != new.allowed_topologies:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def translated_for_node(pv: PersistentVolume, csi_node: CSINode | None) -> PersistentVolume:
    """``tryTranslatePVToCSI``: an in-tree PV of a plugin kube-scheduler migrates (GCE PD, AWS EBS,
    Azure Disk, Cinder, Portworx) whose node's CSINode lists the plugin in its migrated-plugins
    annotation, translated to CSI (its node affinity's zone key becomes the driver's); any other
    PV unchanged.

    Raises:
        ValueError: the PV does not translate (``could not translate pv: ...``).
    """
    plugin = pv_plugin(pv) if pv.spec.csi is None else ""
    if not plugin or not migration_on(plugin) or not migrated_on_node(plugin, csi_node):
        return pv
    try:
        return translate_pv(pv)
    except TranslationError as exc:
        raise ValueError(f"could not translate pv: {exc}") from None


def uses_claim(pod: Pod, pvc: PersistentVolumeClaim) -> bool:
    """Whether ``pod`` mounts ``pvc`` through a persistentVolumeClaim volume (the volume plugins' hints)."""
    if pvc.metadata.namespace != pod.metadata.namespace:
        return False
    name = pvc.metadata.name
    return any(
        v.persistent_volume_claim is not None and v.persistent_volume_claim.claim_name == name for v in pod.spec.volumes
    )
