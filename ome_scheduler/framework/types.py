"""The scheduler's hot-path records: Resource, PodInfo, NodeInfo, QueuedPodInfo.

Mirrors ``pkg/scheduler/framework/types.go`` and ``k8s.io/kube-scheduler/framework/types.go``
(v1.35.4). Every record is slotted and computed once per object event, so Filter and Score
plugins read attributes and never walk API dicts. Units: cpu in millicores, memory and
ephemeral storage in bytes, every other resource as its integer ``Value()``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NewType

import msgspec

from ome_scheduler.api.core import (
    Container,
    ContainerStatus,
    Node,
    Pod,
    PodAffinityTerm,
    Taint,
    WeightedPodAffinityTerm,
)
from ome_scheduler.api.meta import ObjectMeta
from ome_scheduler.framework.gangsource import POD_GROUP_LABEL as POD_GROUP_LABEL  # defined there
from ome_scheduler.framework.gangsource import gang_name
from ome_scheduler.util.labels import NodeSelectorMatcher, Selector
from ome_scheduler.util.quantity import milli_value, value

DEFAULT_MILLI_CPU_REQUEST = 100
"""``pkg/scheduler/util/pod_resources.go``: cpu assumed for scoring when none is requested."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""Memory (bytes) assumed for scoring when none is requested."""

PodKey = NewType("PodKey", str)
"""How the cache, the queue and the waiting pods know a pod: its UID, or ``namespace/name``
for a pod that has none (objects built in unit tests)."""

GangKey = NewType("GangKey", str)
"""A gang: ``namespace/name`` of the PodGroup its members' label names, or of their LWS group's
gang name (``framework/gangsource.py``; design §0.2)."""


def pod_key(meta: ObjectMeta) -> PodKey:
    """The :data:`PodKey` of a pod's metadata."""
    return PodKey(meta.uid or f"{meta.namespace}/{meta.name}")


def gang_key(namespace: str, group: str) -> GangKey:
    """The :data:`GangKey` of PodGroup ``group`` in ``namespace``."""
    return GangKey(f"{namespace}/{group}")


def split_gang_key(key: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of a gang key split at the first ``/``; None when malformed (design §2.1)."""
    i = key.find("/")
    if i <= 0 or i == len(key) - 1:
        return None
    return key[:i], key[i + 1 :]


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Where a gang is, as OMEGangPack reports it through ``Handle.report_gang_placement``.

    ``state`` is ``Holding`` (pinned to ``domain`` under ``topology_key`` and holding it while
    the gang forms), ``Pinned`` (pinned, its hold expired) or ``Bound`` (all ``minMember``
    members bound there): the values of the PodGroup's ``ome.io/placement`` annotation.
    """

    topology_key: str
    domain: str
    state: str


_generation = itertools.count(1)
_SHAPE_ENC = msgspec.json.Encoder()


def next_generation() -> int:
    """A process-wide increasing counter stamped on NodeInfos when they change."""
    return next(_generation)


def is_extended_resource_name(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: a domain-prefixed name outside ``kubernetes.io/``."""
    # Native names (no domain, or a kubernetes.io domain) are not extended; an extended name
    # must also be valid as the quota key ``requests.<name>``.
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    from ome_scheduler.util.validation import is_qualified_name

    return not is_qualified_name("requests." + name)


@lru_cache(maxsize=1024)
def is_scalar_resource_name(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended, hugepages, prefixed native or attachable volumes."""
    return (
        name.startswith("hugepages-")
        or "kubernetes.io/" in name
        or name.startswith("attachable-volumes-")
        or is_extended_resource_name(name)
    )


class Resource:
    """``framework.Resource``: a bag of resource amounts.

    Attributes are millicores (``milli_cpu``), bytes (``memory``, ``ephemeral_storage``), a pod
    count (``allowed_pod_number``) and integer values for scalar resources (``scalar``, keyed
    by resource name such as ``nvidia.com/gpu`` or ``hugepages-2Mi``).
    """

    __slots__ = ("milli_cpu", "memory", "ephemeral_storage", "allowed_pod_number", "scalar")

    def __init__(
        self,
        milli_cpu: int = 0,
        memory: int = 0,
        ephemeral_storage: int = 0,
        allowed_pod_number: int = 0,
        scalar: dict[str, int] | None = None,
    ) -> None:
        self.milli_cpu = milli_cpu
        self.memory = memory
        self.ephemeral_storage = ephemeral_storage
        self.allowed_pod_number = allowed_pod_number
        self.scalar: dict[str, int] = scalar if scalar is not None else {}

    @classmethod
    def from_list(cls, rl: Mapping[str, str]) -> Resource:
        """``NewResource``: parse a ResourceList (quantity strings).

        Raises:
            QuantityError: a value is not a quantity (the API server validates them, so only
                hand-built objects can trigger it).
        """
        r = cls()
        r.add_list(rl)
        return r

    def add_list(self, rl: Mapping[str, str]) -> None:
        """``Resource.Add``: add a ResourceList, ignoring names that are not resources."""
        for name, q in rl.items():
            if name == "cpu":
                self.milli_cpu += milli_value(q)
            elif name == "memory":
                self.memory += value(q)
            elif name == "pods":
                self.allowed_pod_number += value(q)
            elif name == "ephemeral-storage":
                self.ephemeral_storage += value(q)
            elif is_scalar_resource_name(name):
                self.scalar[name] = self.scalar.get(name, 0) + value(q)

    def add(self, other: Resource, sign: int = 1, *, pods: bool = True) -> None:
        """Add (or with ``sign=-1`` subtract) another Resource in place; ``pods=False`` leaves
        ``allowed_pod_number`` alone (a node's requested pod count is its number of pods)."""
        self.milli_cpu += sign * other.milli_cpu
        self.memory += sign * other.memory
        self.ephemeral_storage += sign * other.ephemeral_storage
        if pods:
            self.allowed_pod_number += sign * other.allowed_pod_number
        if other.scalar:
            s = self.scalar
            for k, v in other.scalar.items():
                s[k] = s.get(k, 0) + sign * v

    def clone(self) -> Resource:
        """A deep copy (the ``scalar`` dict is copied too)."""
        return Resource(self.milli_cpu, self.memory, self.ephemeral_storage, self.allowed_pod_number, dict(self.scalar))

    def get(self, name: str) -> int:
        """The amount of one resource by its API name."""
        if name == "cpu":
            return self.milli_cpu
        if name == "memory":
            return self.memory
        if name == "ephemeral-storage":
            return self.ephemeral_storage
        if name == "pods":
            return self.allowed_pod_number
        return self.scalar.get(name, 0)

    def __repr__(self) -> str:
        return (
            f"Resource(cpu={self.milli_cpu}m, memory={self.memory}, eph={self.ephemeral_storage}, "
            f"pods={self.allowed_pod_number}, scalar={self.scalar})"
        )


def _add_map(dst: dict[str, int], src: Mapping[str, int]) -> None:
    """``addResourceList``: add ``src`` into ``dst`` key by key."""
    for k, v in src.items():
        dst[k] = dst.get(k, 0) + v


def _max_map(dst: dict[str, int], src: Mapping[str, int]) -> None:
    """``maxResourceList``: per-key max into ``dst``; a key missing from ``dst`` is added even at 0."""
    for k, v in src.items():
        if v > dst.get(k, 0) or k not in dst:
            dst[k] = max(dst.get(k, 0), v)


_PARSED_LISTS: dict[tuple[tuple[str, str], ...], dict[str, int]] = {}
"""Parsed ResourceLists by their items: a cluster's pods repeat a handful of request lists, and
each pod's lists are parsed several times (its PodInfo, again when the bound pod comes back,
and by the resource plugins' PreScore). Failures are not cached; see :func:`_parse_list`."""
PARSED_LISTS_MAX = 4096
"""Entries :data:`_PARSED_LISTS` holds before it is emptied (bounds what varied input can pin)."""


def _parse_list(rl: Mapping[str, str]) -> dict[str, int]:
    """Parse a ResourceList to integers: cpu in millicores, everything else ``Value()``.

    Returns a new dict (callers add to it), parsed once per distinct list (a bounded cache).

    Raises:
        QuantityError: a value is not a quantity.
    """
    if not rl:
        return {}
    key = tuple(rl.items())
    parsed = _PARSED_LISTS.get(key)
    if parsed is None:
        parsed = {k: (milli_value(q) if k == "cpu" else value(q)) for k, q in key}
        if len(_PARSED_LISTS) >= PARSED_LISTS_MAX:
            _PARSED_LISTS.clear()
        _PARSED_LISTS[key] = parsed
    return dict(parsed)


POD_RESIZE_PENDING = "PodResizePending"
"""The pod condition the kubelet sets while a resize waits to be admitted (``v1.PodResizePending``);
its reason ``Deferred`` (may fit later) or ``Infeasible`` (never fits the node)."""
POD_RESIZE_IN_PROGRESS = "PodResizeInProgress"
"""The pod condition set while admitted resources are being actuated (``v1.PodResizeInProgress``)."""
REASON_INFEASIBLE = "Infeasible"


def is_resize_infeasible(pod: Pod) -> bool:
    """``IsPodResizeInfeasible``: the *first* ``PodResizePending`` condition has reason ``Infeasible``."""
    for c in pod.status.conditions:
        if c.type == POD_RESIZE_PENDING:
            return c.reason == REASON_INFEASIBLE
    return False


def _resized_statuses(pod: Pod) -> dict[str, ContainerStatus] | None:
    """Container (and init container) statuses by name, those that report ``resources``; None
    when none does (a pending pod, or a kubelet that reports no resources): the fast path."""
    st = pod.status
    if not st.container_statuses and not st.init_container_statuses:
        return None
    out = {cs.name: cs for cs in st.container_statuses if cs.resources is not None}
    for cs in st.init_container_statuses:
        if cs.resources is not None:
            out[cs.name] = cs
    return out or None


def _effective_requests(spec: Mapping[str, str], cs: ContainerStatus, infeasible: bool) -> dict[str, int]:
    """``determineEffectiveRequests``: per resource the max of the spec's request, the actuated
    request (``status.containerStatuses[].resources.requests``) and the allocated one
    (``allocatedResources``); with an Infeasible resize the spec is left out (the kubelet will
    never admit it). A new dict.

    Raises:
        QuantityError: a quantity is not one.
    """
    actuated = cs.resources.requests if cs.resources is not None else {}
    allocated = cs.allocated_resources
    # Fast path, every running pod that is not resizing: the three lists are the same text.
    if actuated == spec and (not allocated or allocated == spec):
        return _parse_list(spec)
    out = _parse_list(actuated) if infeasible else _parse_list(spec)
    if infeasible:
        _max_map(out, _parse_list(allocated))
    else:
        _max_map(out, _parse_list(actuated))
        _max_map(out, _parse_list(allocated))
    return out


def pod_requests(pod: Pod, non_missing: Mapping[str, int] | None = None, *, use_status: bool = True) -> dict[str, int]:
    """Effective pod requests by resource name (cpu in millicores, others ``Value()``: bytes for
    memory and ephemeral-storage, counts for extended resources).

    Mirrors ``k8s.io/component-helpers/resource/helpers.go`` ``PodRequests`` as kube-scheduler
    1.35 calls it (``UseStatusResources`` on: InPlacePodVerticalScaling is GA; pod-level resize
    off: InPlacePodLevelResourcesVerticalScaling is alpha): app containers are summed;
    restartable init containers (sidecars) are added to the sum and to every later init
    container; the pod takes the max of that sum and the largest init container; pod-level
    ``spec.resources.requests`` for cpu, memory and hugepages replace the container aggregate;
    ``spec.overhead`` is added last. ``non_missing`` gives the amounts to assume for a container
    that requests none (the scoring defaults).

    In-place resize (``use_status``, the default): for each app container and each sidecar whose
    ``status.containerStatuses[]``/``initContainerStatuses[]`` entry (matched by name) has
    ``resources``, the container counts the per-resource max of ``spec...resources.requests``,
    ``status...resources.requests`` (actuated) and ``status...allocatedResources``
    (admitted), so a resize pending (``PodResizePending``, reason ``Deferred``), in progress
    (``PodResizeInProgress``) or not yet reported counts the larger of old and new; when the
    first ``PodResizePending`` condition has reason ``Infeasible`` the spec is ignored and the
    max of actuated and allocated counts. Ordinary init containers always count their spec.
    A pending pod has no container statuses, so this changes nothing for it. ``use_status=False``
    is the spec alone (``computePodResourceRequest``: NodeResourcesFit's PreFilter).

    Raises:
        QuantityError: a request is not a quantity.
    """
    statuses = _resized_statuses(pod) if use_status else None
    return _requests(pod, non_missing, statuses, statuses is not None and is_resize_infeasible(pod))


def _requests(
    pod: Pod, non_missing: Mapping[str, int] | None, statuses: Mapping[str, ContainerStatus] | None, infeasible: bool
) -> dict[str, int]:
    """:func:`pod_requests` with the status lookup done (``statuses`` None: the spec alone).

    Raises:
        QuantityError: a request is not a quantity.
    """

    def container_reqs(c: Container, status_ok: bool) -> dict[str, int]:
        rl = c.resources.requests
        cs = statuses.get(c.name) if statuses is not None and status_ok else None
        r = _effective_requests(rl, cs, infeasible) if cs is not None else _parse_list(rl)
        if non_missing:
            for k, v in non_missing.items():
                if k not in r:
                    r[k] = v
        return r

    reqs: dict[str, int] = {}
    spec = pod.spec
    for c in spec.containers:
        _add_map(reqs, container_reqs(c, True))
    restartable: dict[str, int] = {}
    init_max: dict[str, int] = {}
    # Init containers run one at a time, each alongside the sidecars started before it; sidecars
    # keep running with the app containers, so they also join the app containers' sum.
    for c in spec.init_containers:
        sidecar = c.restart_policy == "Always"
        cr = container_reqs(c, sidecar)
        if sidecar:
            _add_map(reqs, cr)
            _add_map(restartable, cr)
            eff = dict(restartable)
        else:
            eff = dict(cr)
            _add_map(eff, restartable)
        _max_map(init_max, eff)
    for k, v in init_max.items():
        if v > reqs.get(k, 0) or k not in reqs:
            reqs[k] = max(reqs.get(k, 0), v)
    if spec.resources is not None and _pod_level_requests_set(pod):
        for k, q in spec.resources.requests.items():
            if k in ("cpu", "memory") or k.startswith("hugepages-"):
                reqs[k] = milli_value(q) if k == "cpu" else value(q)
    if spec.overhead:
        _add_map(reqs, _parse_list(spec.overhead))
    return reqs


def _pod_level_requests_set(pod: Pod) -> bool:
    """Whether ``spec.resources.requests`` sets cpu, memory or hugepages (PodLevelResources)."""
    res = pod.spec.resources
    if res is None:
        return False
    return any(k in ("cpu", "memory") or k.startswith("hugepages-") for k in res.requests)


def to_resource(reqs: Mapping[str, int]) -> Resource:
    """A Resource from parsed amounts (:func:`pod_requests`: millicores, bytes, counts); names
    that are neither native nor scalar resources are dropped."""
    r = Resource()
    for name, v in reqs.items():
        if name == "cpu":
            r.milli_cpu += v
        elif name == "memory":
            r.memory += v
        elif name == "ephemeral-storage":
            r.ephemeral_storage += v
        elif name == "pods":
            r.allowed_pod_number += v
        elif is_scalar_resource_name(name):
            r.scalar[name] = r.scalar.get(name, 0) + v
    return r


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """``fwk.AffinityTerm``: a parsed pod (anti-)affinity term.

    ``namespaces`` defaults to the owning pod's namespace when the term lists none and has no
    namespace selector; ``namespace_selector`` is ``Selector.nothing()`` when absent.
    """

    namespaces: frozenset[str]
    selector: Selector
    topology_key: str
    namespace_selector: Selector
    weight: int = 0

    def matches(self, pod: Pod, ns_labels: Mapping[str, str]) -> bool:
        """``AffinityTerm.Matches``: the pod's namespace is listed or its labels (``ns_labels``)
        are selected, and the pod's labels match. An empty namespace selector selects every
        namespace, even with no labels known."""
        md = pod.metadata
        if md.namespace in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(md.labels)
        return False

    def with_namespaces(self, extra: Iterable[str]) -> AffinityTerm:
        """``mergeAffinityTermNamespacesIfNotEmpty``: selected namespaces folded into the list.

        The namespace selector is kept: upstream resets it on a copy only, so an incoming
        pod's term still matches existing pods whose namespace the selector would select when
        given *no* labels (``NotIn``/``DoesNotExist`` selectors), in any namespace."""
        return AffinityTerm(
            namespaces=self.namespaces | frozenset(extra),
            selector=self.selector,
            topology_key=self.topology_key,
            namespace_selector=self.namespace_selector,
            weight=self.weight,
        )


def _affinity_term(pod: Pod, t: PodAffinityTerm, weight: int = 0) -> AffinityTerm:
    """``newAffinityTerm``: parse one term of ``pod``.

    Raises:
        ValueError: a selector upstream's ``LabelSelectorAsSelector`` rejects.
    """
    # Neither namespaces nor a selector means "the pod's own namespace"; an empty selector ({})
    # instead means every namespace, so only a missing one takes the default.
    if not t.namespaces and t.namespace_selector is None:
        namespaces = frozenset((pod.metadata.namespace,))
    else:
        namespaces = frozenset(t.namespaces)
    return AffinityTerm(
        namespaces=namespaces,
        selector=Selector.from_label_selector(t.label_selector),
        topology_key=t.topology_key,
        namespace_selector=Selector.from_label_selector(t.namespace_selector),
        weight=weight,
    )


def _weighted(pod: Pod, terms: Iterable[WeightedPodAffinityTerm]) -> tuple[AffinityTerm, ...]:
    """Parse preferred terms, keeping each weight."""
    return tuple(_affinity_term(pod, w.pod_affinity_term, w.weight) for w in terms)


class PodInfo:
    """``framework.PodInfo``: a pod plus everything derived from its spec, computed once.

    Attributes:
        pod: the decoded pod.
        key: ``namespace/name``.
        pod_key: the :data:`PodKey` (UID) the cache and the queue use.
        requests: effective requests (``Resource``): :func:`pod_requests` with the status, so a
            bound pod mid-resize counts the max of its old and new requests
            (``PodInfo.CalculateResource``, ``UseStatusResources``).
        non0_cpu: millicores used for scoring (100 when a container requests none).
        non0_mem: bytes used for scoring (200 MiB when a container requests none).
        status_resources: a container status reports ``resources``, so ``requests`` may differ
            from the spec's (NodeResourcesFit's PreFilter then recomputes the spec's).
        required_affinity_terms, required_anti_affinity_terms, preferred_affinity_terms,
        preferred_anti_affinity_terms: parsed inter-pod affinity terms.
        host_ports: ``(ip, protocol, port)`` of every host port, sidecars included.
        gang: the gang name (``framework.gangsource.gang_name``: the pod-group label, else the
            LWS group's ``lws:<set>:<index>``), or ``""`` for a standalone pod.
        gang_key: ``namespace/gang`` when ``gang`` is set, else ``""``.
        parse_error: a selector in the spec upstream would reject, or ``""``.
    """

    __slots__ = (
        "pod",
        "key",
        "uid",
        "pod_key",
        "namespace",
        "name",
        "requests",
        "non0_cpu",
        "non0_mem",
        "required_affinity_terms",
        "required_anti_affinity_terms",
        "preferred_affinity_terms",
        "preferred_anti_affinity_terms",
        "host_ports",
        "gang",
        "gang_key",
        "priority",
        "node_selector_matcher",
        "parse_error",
        "status_resources",
        "_shape",
    )

    def __init__(self, pod: Pod) -> None:
        md = pod.metadata
        spec = pod.spec
        self.pod = pod
        self.namespace = md.namespace
        self.name = md.name
        self.key = f"{md.namespace}/{md.name}"
        self.uid = md.uid
        self.pod_key = PodKey(md.uid or self.key)
        self.gang = gang_name(md)
        self.gang_key = gang_key(md.namespace, self.gang) if self.gang else GangKey("")
        self.priority = spec.priority or 0
        statuses = _resized_statuses(pod)
        infeasible = statuses is not None and is_resize_infeasible(pod)
        self.status_resources = statuses is not None
        reqs = _requests(pod, None, statuses, infeasible)
        self.requests = to_resource(reqs)
        # Scoring defaults (100m, 200 MiB) stand in for requests nobody set: with pod-level
        # requests only the resources the pod level leaves out get a default.
        if _pod_level_requests_set(pod):
            non_missing = {
                k: v
                for k, v in (("cpu", DEFAULT_MILLI_CPU_REQUEST), ("memory", DEFAULT_MEMORY_REQUEST))
                if k not in reqs
            }
        else:
            non_missing = {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}
        non0 = _requests(pod, non_missing, statuses, infeasible) if non_missing else reqs
        self.non0_cpu = non0.get("cpu", 0)
        self.non0_mem = non0.get("memory", 0)
        self.parse_error = ""
        aff = spec.affinity
        req_aff: tuple[AffinityTerm, ...] = ()
        req_anti: tuple[AffinityTerm, ...] = ()
        pref_aff: tuple[AffinityTerm, ...] = ()
        pref_anti: tuple[AffinityTerm, ...] = ()
        try:
            if aff is not None and aff.pod_affinity is not None:
                pa = aff.pod_affinity
                req_aff = tuple(_affinity_term(pod, t) for t in pa.required_during_scheduling_ignored_during_execution)
                pref_aff = _weighted(pod, pa.preferred_during_scheduling_ignored_during_execution)
            if aff is not None and aff.pod_anti_affinity is not None:
                pa = aff.pod_anti_affinity
                req_anti = tuple(_affinity_term(pod, t) for t in pa.required_during_scheduling_ignored_during_execution)
                pref_anti = _weighted(pod, pa.preferred_during_scheduling_ignored_during_execution)
        except ValueError as exc:
            # Kept, not raised: the cache must still account the pod, and InterPodAffinity's
            # PreFilter turns the error into an UnschedulableAndUnresolvable status.
            self.parse_error = str(exc)
        self.required_affinity_terms = req_aff
        self.required_anti_affinity_terms = req_anti
        self.preferred_affinity_terms = pref_aff
        self.preferred_anti_affinity_terms = pref_anti
        # Sidecars (restartable init containers) hold their host ports for the pod's lifetime;
        # ordinary init containers have exited before the app containers start.
        ports: list[tuple[str, str, int]] = []
        for c in spec.init_containers:
            if c.restart_policy == "Always":
                ports.extend(
                    (p.host_ip or "0.0.0.0", p.protocol or "TCP", p.host_port) for p in c.ports if p.host_port > 0
                )
        for c in spec.containers:
            ports.extend((p.host_ip or "0.0.0.0", p.protocol or "TCP", p.host_port) for p in c.ports if p.host_port > 0)
        self.host_ports = tuple(ports)
        na = aff.node_affinity if aff is not None else None
        required = na.required_during_scheduling_ignored_during_execution if na is not None else None
        self.node_selector_matcher = NodeSelectorMatcher.from_node_selector(required) if required is not None else None
        self._shape: bytes | None = None

    @property
    def shape(self) -> bytes:
        """A key equal for pods whose node-local Filter and Score results are equal: the spec
        minus its per-pod identity (name, node name), plus the namespace, plus the container
        statuses and conditions when they carry resources (the scoring requests read them).
        Computed once."""
        if self._shape is None:
            spec = self.pod.spec
            st = self.pod.status
            resized = (
                (st.container_statuses, st.init_container_statuses, st.conditions) if self.status_resources else ()
            )
            self._shape = _SHAPE_ENC.encode(
                (
                    resized,
                    self.namespace,
                    spec.scheduler_name,
                    spec.containers,
                    spec.init_containers,
                    spec.overhead,
                    spec.resources,
                    spec.tolerations,
                    spec.node_selector,
                    spec.affinity,
                    spec.volumes,
                    spec.topology_spread_constraints,
                    spec.host_network,
                    spec.scheduling_gates,
                    self.priority,
                )
            )
        return self._shape

    def with_node(self, node: str) -> PodInfo:
        """A copy whose pod has ``spec.nodeName = node`` (the assumed pod); derived data is shared."""
        # Nothing derived depends on nodeName, and this runs once per assumed pod on the hot path.
        spec = msgspec.structs.replace(self.pod.spec, node_name=node)
        return self._over(msgspec.structs.replace(self.pod, spec=spec))

    def _over(self, pod: Pod) -> PodInfo:
        """A copy of every slot, derived data shared, with ``pod`` in place of this one's
        (cheaper than re-running ``__init__``); the caller vouches that nothing derived differs."""
        clone = PodInfo.__new__(PodInfo)
        for slot in PodInfo.__slots__:
            setattr(clone, slot, getattr(self, slot))
        clone.pod = pod
        return clone

    def rebase(self, pod: Pod) -> PodInfo | None:
        """This PodInfo over ``pod``, a newer version of the same pod, when nothing derived
        here can differ: same namespace, name, uid and labels, an equal spec (compared at C speed
        by msgspec), and neither version reporting container resources (a status with them can
        change the requests, :func:`pod_requests`). None otherwise (build a new :class:`PodInfo`).

        An assumed pod coming back bound from the informer is the case it serves: the Binding
        changed nothing but ``spec.nodeName`` (already in the assumed copy), the status and the
        resourceVersion. Upstream builds a new ``PodInfo`` there (``framework.NewPodInfo`` in
        ``pkg/scheduler/eventhandlers.go`` ``updatePodInCache``); the result is the same.
        """
        old = self.pod
        md, omd = pod.metadata, old.metadata
        if (
            md.uid != omd.uid
            or md.name != omd.name
            or md.namespace != omd.namespace
            or md.labels != omd.labels
            or pod.spec != old.spec
            or self.status_resources
            or _resized_statuses(pod) is not None
        ):
            return None
        return self._over(pod)

    @property
    def has_affinity(self) -> bool:
        """``podWithAffinity``: any pod affinity or anti-affinity, required or preferred."""
        aff = self.pod.spec.affinity
        return aff is not None and (aff.pod_affinity is not None or aff.pod_anti_affinity is not None)

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


class HostPortInfo:
    """``fwk.HostPortInfo``: host ports in use on a node, by ip then ``(protocol, port)``.

    A set, as upstream's: adding a port twice and removing it once frees it (kube-scheduler
    keeps no reference count either).
    """

    __slots__ = ("by_ip",)

    def __init__(self) -> None:
        self.by_ip: dict[str, set[tuple[str, int]]] = {}

    def add(self, ip: str, protocol: str, port: int) -> None:
        """Mark ``protocol/port`` used on ``ip`` (empty: ``0.0.0.0``, protocol default TCP); port 0 is none."""
        if port <= 0:
            return
        self.by_ip.setdefault(ip or "0.0.0.0", set()).add((protocol or "TCP", port))

    def remove(self, ip: str, protocol: str, port: int) -> None:
        """Free ``protocol/port`` on ``ip`` (same defaults as :meth:`add`); no-op when unused."""
        if port <= 0:
            return
        ip = ip or "0.0.0.0"
        m = self.by_ip.get(ip)
        if m is None:
            return
        m.discard((protocol or "TCP", port))
        if not m:
            del self.by_ip[ip]

    def conflicts(self, ip: str, protocol: str, port: int) -> bool:
        """``CheckConflict``: 0.0.0.0 conflicts with every ip, a specific ip with itself and 0.0.0.0."""
        if port <= 0:
            return False
        ip = ip or "0.0.0.0"
        k = (protocol or "TCP", port)
        if ip == "0.0.0.0":
            return any(k in m for m in self.by_ip.values())
        return k in self.by_ip.get(ip, ()) or k in self.by_ip.get("0.0.0.0", ())

    def __len__(self) -> int:
        return sum(len(m) for m in self.by_ip.values())


@dataclass(slots=True)
class ImageState:
    """``fwk.ImageStateSummary``: an image's size (bytes) and the nodes that hold it.

    One object per image name is shared by every NodeInfo listing the image (the cache keeps
    it current), so ``num_nodes`` is always the cluster-wide count.
    """

    size: int
    nodes: set[str] = field(default_factory=set)

    @property
    def num_nodes(self) -> int:
        """Nodes in the cluster that hold the image."""
        return len(self.nodes)


class NodeInfo:
    """``framework.NodeInfo``: a node plus the aggregate of the pods on it.

    Pods include pods bound by any scheduler and pods this scheduler assumed. ``requested``
    sums their effective requests, ``non_zero_requested`` their scoring requests, and
    ``generation`` changes on every mutation so per-node caches can be invalidated.
    """

    __slots__ = (
        "name",
        "node",
        "labels",
        "taints",
        "unschedulable",
        "allocatable",
        "requested",
        "non_zero_requested",
        "pods",
        "used_ports",
        "image_states",
        "pvc_ref_counts",
        "generation",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.node: Node | None = None
        self.labels: dict[str, str] = {}
        self.taints: tuple[Taint, ...] = ()
        self.unschedulable = False
        self.allocatable = Resource()
        self.requested = Resource()
        self.non_zero_requested = Resource()
        self.pods: dict[str, PodInfo] = {}
        self.used_ports = HostPortInfo()
        self.image_states: dict[str, ImageState] = {}
        self.pvc_ref_counts: dict[str, int] = {}
        self.generation = next_generation()

    def set_node(self, node: Node, allocatable: Resource | None = None) -> None:
        """``SetNode``: record the node object and its allocatable resources (``allocatable``
        when the caller parsed them already).

        All or nothing: when ``allocatable`` cannot be parsed (only a hand-built node can hold
        a value that is not a quantity) the NodeInfo keeps its previous node.

        Raises:
            QuantityError: an allocatable value is not a quantity.
        """
        if allocatable is None:
            allocatable = Resource.from_list(node.status.allocatable)
        self.node = node
        self.labels = node.metadata.labels
        self.taints = tuple(node.spec.taints)
        self.unschedulable = node.spec.unschedulable
        self.allocatable = allocatable
        self.generation = next_generation()

    def snapshot(self) -> NodeInfo:
        """``NodeInfo.Snapshot``: a copy preemption and nominated pods may change without touching
        this one (the node object, labels, taints and images shared; pods, sums, ports and claim
        counts copied; a new ``generation``)."""
        out = NodeInfo(self.name)
        out.node = self.node
        out.labels = self.labels
        out.taints = self.taints
        out.unschedulable = self.unschedulable
        out.allocatable = self.allocatable
        out.requested = self.requested.clone()
        out.non_zero_requested = self.non_zero_requested.clone()
        out.pods = dict(self.pods)
        out.used_ports.by_ip = {ip: set(m) for ip, m in self.used_ports.by_ip.items()}
        out.image_states = self.image_states
        out.pvc_ref_counts = dict(self.pvc_ref_counts)
        return out

    def add_pod(self, pi: PodInfo) -> None:
        """``AddPodInfo``: account a bound or assumed pod."""
        key = pi.pod_key
        if key in self.pods:
            self.remove_pod(key)
        self.pods[key] = pi
        self._update(pi, 1)

    def remove_pod(self, key: str) -> PodInfo | None:
        """``RemovePod``: un-account a pod by its cache key (uid); ``None`` if absent."""
        pi = self.pods.pop(key, None)
        if pi is None:
            return None
        self._update(pi, -1)
        return pi

    def _update(self, pi: PodInfo, sign: int) -> None:
        """Add (``sign=1``) or subtract (``-1``) one pod's contribution and bump ``generation``.

        ``requested.allowed_pod_number`` stays 0: the pod count is ``len(self.pods)``.
        """
        self.requested.add(pi.requests, sign, pods=False)
        self.non_zero_requested.milli_cpu += sign * pi.non0_cpu
        self.non_zero_requested.memory += sign * pi.non0_mem
        for ip, proto, port in pi.host_ports:
            if sign > 0:
                self.used_ports.add(ip, proto, port)
            else:
                self.used_ports.remove(ip, proto, port)
        # ``PVCRefCounts``: pods per claim on this node; VolumeRestrictions asks whether a
        # ReadWriteOncePod claim is already in use anywhere.
        for vol in pi.pod.spec.volumes:
            if vol.persistent_volume_claim is None:
                continue
            k = f"{pi.namespace}/{vol.persistent_volume_claim.claim_name}"
            n = self.pvc_ref_counts.get(k, 0) + sign
            if n <= 0:
                self.pvc_ref_counts.pop(k, None)
            else:
                self.pvc_ref_counts[k] = n
        self.generation = next_generation()

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)})"


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """``framework.QueuedPodInfo``: a pod waiting in the scheduling queue.

    Times are ``time.monotonic()`` seconds except ``initial_attempt_wall`` (``time.time()``),
    which feeds the SLI histogram.
    """

    pod_info: PodInfo
    timestamp: float = field(default_factory=time.monotonic)
    attempts: int = 0
    backoff_expiration: float = 0.0
    unschedulable_count: int = 0
    consecutive_errors_count: int = 0
    initial_attempt_timestamp: float | None = None
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    gating_plugin: str = ""

    @property
    def pod(self) -> Pod:
        """The queued pod (``pod_info.pod``)."""
        return self.pod_info.pod

    @property
    def gated(self) -> bool:
        """Held back by a PreEnqueue plugin (``gating_plugin``) and never attempted while gated."""
        return self.gating_plugin != ""
