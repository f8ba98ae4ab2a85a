"""Plugin interfaces, CycleState, NodeToStatus and the Handle plugins get.

Mirrors ``k8s.io/kube-scheduler/framework/interface.go`` and ``cycle_state.go``. A plugin is
an object deriving from :class:`Plugin` and from one base class per extension point it
implements (PreFilterPlugin, FilterPlugin, ...), exactly as a Go plugin implements one
interface per extension point. Two deliberate differences keep the Python hot path lean:
Score and NormalizeScore work on the whole node list in one call, and Success is ``None``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ome_scheduler.framework.events import ClusterEventWithHint
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import AffinityTerm, GangKey, GangPlacement, NodeInfo, PodInfo, PodKey, QueuedPodInfo

if TYPE_CHECKING:
    from ome_scheduler.api.core import Namespace, Node, Pod
    from ome_scheduler.api.scheduling import PodGroup
    from ome_scheduler.api.workloads import LeaderWorkerSet, PodDisruptionBudget
    from ome_scheduler.framework.waiting_pods import WaitingPod
    from ome_scheduler.metrics import Metrics
    from ome_scheduler.util.labels import Selector

SignFragment = tuple[str, Any]
"""``fwk.SignFragment``: (signer name, value encodable by ``msgspec.json``; ``signers.py``)."""

MAX_NODE_SCORE = 100
"""``fwk.MaxNodeScore``: the top of every plugin's normalised score range."""


class CycleState:
    """Per-cycle scratch space shared by the plugins of one scheduling attempt.

    ``data`` holds plugin state keyed by plugin-chosen strings; ``skip_filter_plugins`` and
    ``skip_score_plugins`` record plugins whose PreFilter/PreScore returned Skip,
    ``skip_pre_bind_plugins`` those whose PreBindPreFlight did.
    """

    __slots__ = ("data", "skip_filter_plugins", "skip_score_plugins", "skip_pre_bind_plugins", "record_plugin_metrics")

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        self.skip_pre_bind_plugins: set[str] = set()
        self.record_plugin_metrics = False

    def write(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` for later extension points of this cycle."""
        self.data[key] = value

    def read(self, key: str) -> Any:
        """Raises KeyError when the key was never written (upstream ``ErrNotFound``)."""
        return self.data[key]

    def get(self, key: str) -> Any:
        """The value under ``key``, or None when never written."""
        return self.data.get(key)

    def clone(self) -> CycleState:
        """``CycleState.Clone``: a copy whose plugin states are each value's own ``clone()``
        (plugins whose PreFilterExtensions change their state give it one), or the same object
        for states nothing mutates after PreFilter. The skip sets are copied."""
        out = CycleState()
        out.data = {k: (v.clone() if hasattr(v, "clone") else v) for k, v in self.data.items()}
        out.skip_filter_plugins = set(self.skip_filter_plugins)
        out.skip_score_plugins = set(self.skip_score_plugins)
        out.skip_pre_bind_plugins = set(self.skip_pre_bind_plugins)
        out.record_plugin_metrics = self.record_plugin_metrics
        return out


POST_FILTER_NOMINATION_KEY = "PostFilterResult/nominatedNodeName"
"""Where a PostFilter plugin leaves its ``PostFilterResult``'s nominating info in the CycleState:
a node name (``ModeOverride`` to it), ``""`` (``ModeOverride`` clearing the nomination), or absent
(``ModeNoop``). ``schedule_one`` reads it after a successful or failed PostFilter."""


class NodeToStatus:
    """``framework.NodeToStatus``: why each rejected node failed, plus a status for absent nodes."""

    __slots__ = ("statuses", "absent")

    def __init__(self) -> None:
        self.statuses: dict[str, Status] = {}
        self.absent = Status.unresolvable()

    def set(self, node: str, status: Status) -> None:
        """Record why ``node`` was rejected."""
        self.statuses[node] = status

    def get(self, node: str) -> Status:
        """The node's status, or the status of nodes that were never evaluated (``absent``)."""
        return self.statuses.get(node, self.absent)

    def __len__(self) -> int:
        return len(self.statuses)


class PodGroupLister(Protocol):
    """What plugins may read of the pod-group state (``backend.podgroups.PodGroupState``)."""

    def get(self, namespace: str, name: str) -> PodGroup | None:
        """The PodGroup from the informer cache, or None (missing, or the CRD is absent)."""
        ...

    def error(self, namespace: str, name: str) -> str | None:
        """Why an existing PodGroup could not be read (its decode error), or None."""
        ...

    def members(self, gang: GangKey) -> list[PodInfo]:
        """Every pod the informer holds whose pod-group label names ``gang`` (any phase)."""
        ...

    def placed_members(self, gang: GangKey) -> list[tuple[PodInfo, NodeInfo | None]]:
        """Bound and assumed members with their NodeInfo (None when the Node object is gone)."""
        ...

    def live_gang_keys(self) -> set[GangKey]:
        """Gangs with at least one member that is not being deleted."""
        ...

    def subscribe(self, listener: Callable[[PodGroup | None, PodGroup | None], None]) -> None:
        """Call ``listener(old, new)`` after every PodGroup add, update and delete."""
        ...

    def subscribe_unresolvable(self, listener: Callable[[PodInfo, str, str], None]) -> None:
        """Call ``listener(member, plugin, message)`` when a gang member's attempt failed because
        ``plugin``'s PreFilter found it UnschedulableAndUnresolvable (no node can take it)."""
        ...

    def subscribe_member_left(self, listener: Callable[[PodInfo], None]) -> None:
        """Call ``listener(member)`` after a bound member of a gang was deleted (the cache no
        longer counts it): OMEGangPack's rule 11."""
        ...


class Handle(Protocol):
    """What plugins may ask of the scheduler (``framework.Handle``), without any I/O."""

    def node_infos(self) -> Sequence[NodeInfo]:
        """All NodeInfos of the current snapshot (bound and assumed pods included)."""
        ...

    def get_node_info(self, name: str) -> NodeInfo | None:
        """One node's NodeInfo, or None when the Node object is gone."""
        ...

    def anti_affinity_terms_for(self, labels: Mapping[str, str]) -> Iterable[tuple[AffinityTerm, NodeInfo]]:
        """Required anti-affinity terms of existing pods on real nodes that may match a pod
        with ``labels`` (a superset: callers check each term), with the node of their pod."""
        ...

    def pods_with_affinity_score_terms(self) -> Iterable[tuple[PodInfo, NodeInfo]]:
        """Existing pods on real nodes with required affinity or preferred (anti-)affinity
        terms: all that can add to the InterPodAffinity score of a pod without terms."""
        ...

    def pods_for_selector(self, selector: Selector) -> Iterable[tuple[PodInfo, NodeInfo]]:
        """Existing pods on real nodes that may match ``selector`` (a superset: callers check
        each pod; every pod when the selector requires no ``key=value``), with their node."""
        ...

    def node_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        """Node names changed since ``cursor`` (None: rebuild from all nodes) and the new cursor."""
        ...

    def subscribe_node_changes(self, listener: Callable[[Node | None, Node | None], None]) -> None:
        """Call ``listener(old, new)`` after every Node add (old None), update and delete (new
        None), once the cache has it: for plugin state that must follow nodes at once (members
        waiting at Permit are in no queue, so queueing hints never see them)."""
        ...

    def pod_groups(self) -> PodGroupLister:
        """PodGroups, their members and where those sit (``backend/podgroups.py``)."""
        ...

    def leader_worker_set(self, namespace: str, name: str) -> LeaderWorkerSet | None:
        """A LeaderWorkerSet from the informer cache, or None (missing, or the CRD is absent)."""
        ...

    def lws_leader_uid(self, pod: Pod) -> str:
        """The UID of the leader of the LWS group incarnation ``pod`` belongs to (``""``: unknown)."""
        ...

    def event_recorder(self) -> EventRecorder:
        """Where plugins record events (``framework.Handle.EventRecorder``)."""
        ...

    def report_gang_placement(self, gang: GangKey, placement: GangPlacement | None) -> None:
        """Tell users where ``gang`` is now: pinned (holding or not) or bound in a domain, or
        nowhere (None: its pin was released). Kept in the pod-group state; the leader writes it
        to the PodGroup in the background (``ome.io/placement*`` annotations), never in the cycle."""
        ...

    def namespace(self, name: str) -> Namespace | None:
        """A namespace from the informer cache (its labels feed namespace selectors), or None."""
        ...

    def namespace_names(self) -> Iterable[str]:
        """Every namespace name the informer holds."""
        ...

    def activate(self, pods: Iterable[Pod]) -> None:
        """Move these pods from backoffQ / unschedulable pods straight to activeQ."""
        ...

    def unresolvable_at_prefilter(self, pod: PodInfo, *, skip: str) -> tuple[str, str] | None:
        """(plugin, message) of the first PreFilter plugin of ``pod``'s profile, other than
        ``skip``, that finds it UnschedulableAndUnresolvable now (no node can take it), or None.
        A dry run: the cycle state it fills is thrown away."""
        ...

    def retry_after_backoff(self, pod: Pod) -> None:
        """When the in-flight ``pod``'s attempt fails, send it to backoffQ even if no cluster event
        came (not to the unschedulable pods): its next try comes within its backoff."""
        ...

    def waiting_pods(self) -> Iterable[WaitingPod]:
        """Every pod waiting at Permit, across profiles."""
        ...

    def get_waiting_pod(self, key: PodKey) -> WaitingPod | None:
        """The pod's Permit wait, or None."""
        ...

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The informer's latest PodInfo of the pod (``PodLister``), or None."""
        ...

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """``NominatedPodsForNode``: unbound, unassumed pods of this scheduler nominated to ``node``."""
        ...

    def has_nominated_pods(self) -> bool:
        """Whether any pod is nominated to any node."""
        ...

    def pod_disruption_budgets(self) -> Sequence[PodDisruptionBudget]:
        """Every PodDisruptionBudget the informer holds."""
        ...

    def run_filter_with_nominated_pods(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``RunFilterPluginsWithNominatedPods`` of ``pod``'s profile on ``node``."""
        ...

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo
    ) -> Status | None:
        """``RunPreFilterExtensionAddPod`` of ``pod``'s profile."""
        ...

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo
    ) -> Status | None:
        """``RunPreFilterExtensionRemovePod`` of ``pod``'s profile."""
        ...

    def nominate(self, pod: PodInfo, node: str) -> None:
        """``AddNominatedPod`` (``node``) or ``DeleteNominatedPodIfExists`` (``""``) in memory."""
        ...


@dataclass(frozen=True)
class ClusterTruth:
    """What the API server holds, from a fresh LIST, as the cache debugger
    (``ome_scheduler/app/debugger.py``) hands it to :meth:`Plugin.check_state`.

    ``pod_groups``: gang -> its PodGroup's UID; ``bound_members``: gang -> bound member
    ``namespace/name`` -> node name (finished pods excluded); ``node_labels``: node name -> labels.
    """

    pod_groups: Mapping[GangKey, str]
    bound_members: Mapping[GangKey, Mapping[str, str]]
    node_labels: Mapping[str, Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class BackgroundTask:
    """A periodic job a plugin runs while this replica leads (for example a GC pass).

    ``run`` is called on the event loop every ``interval_seconds`` (first right away when
    ``run_at_start``); an exception is logged and the task goes on at its next tick.
    """

    name: str
    interval_seconds: float
    run: Callable[[], None]
    run_at_start: bool = False


class Plugin:
    """Base of every plugin; ``name`` is the name used in the profile.

    A plugin also derives from one base class per extension point it implements, as a Go
    plugin implements one interface per point. Status conventions throughout: ``None`` is
    Success; plugins return :class:`Status` objects with the codes each point allows.
    """

    name: ClassVar[str] = ""
    node_local_filter: ClassVar[bool] = False
    """Filter depends only on the pod's shape and the one NodeInfo (and ``cache_token``)."""
    node_local_score: ClassVar[bool] = False
    """Score depends only on the pod's shape and the one NodeInfo (and ``cache_token``)."""

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """``EnqueueExtensions``: the cluster events that may make a rejected pod schedulable."""
        return []

    def cache_token(self, state: CycleState, pod: PodInfo) -> Hashable:
        """For node-local plugins with state outside the NodeInfo: a value that changes whenever
        that state changes, so equivalence-cache entries computed before are not reused
        (``framework/equivalence.py``). The default, None, means no such state."""
        return None

    def background_tasks(self) -> Sequence[BackgroundTask]:
        """Periodic jobs the scheduler runs for this plugin while it leads (default: none)."""
        return ()

    def informer_sync_waits(self) -> Mapping[str, float]:
        """Informers (by name, e.g. ``"podgroups"``) this plugin wants synced before the first
        scheduling cycle, each with the longest wait in seconds; after it, scheduling starts
        anyway (the resource's API may not be installed yet)."""
        return {}

    def check_state(self, truth: ClusterTruth) -> list[tuple[str, str, str]]:
        """Where this plugin's own state disagrees with the API server's ``truth``, as
        ``(object, what, detail)`` triples (``what`` a short stable label); the cache
        debugger logs them as drift. Default: no state of its own, nothing to report."""
        return []


class SignPlugin(Plugin):
    """``fwk.SignPlugin``: signs pods for OpportunisticBatching (``batch.py``).

    Every PreFilter, Filter, PreScore and Score plugin of a profile must derive from it for the
    profile to batch at all (``FrameworkProfile``'s ``sign_plugins``).
    """

    refuses_some: ClassVar[bool] = False
    """True when :meth:`sign_pod` may refuse a pod. The framework asks those plugins first, so
    a refused pod costs no other plugin's fragments (the signature does not depend on the
    order: fragments of one signer name are equal whichever plugin gives them)."""

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the fragments of ``pod`` this plugin's answers depend on (``signers.py``),
        or a Status (Unschedulable: this pod cannot be signed, so it is not batched; Error)."""
        raise NotImplementedError


class PreEnqueuePlugin(Plugin):
    """``PreEnqueuePlugin``: may keep a pod out of activeQ (gated) before any cycle.

    Called for every pod about to enter activeQ, so it must be cheap and read only the pod.
    Returns None (Success) or UnschedulableAndUnresolvable: the pod waits among the
    unschedulable pods, un-attempted and without an event, until one of this plugin's
    registered events ungates it. No CycleState exists yet.
    """

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """None to let the pod into activeQ, or the status that keeps it gated."""
        raise NotImplementedError


class QueueSortPlugin(Plugin):
    """``QueueSortPlugin``: orders activeQ. Exactly one per profile; pure, no status."""

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """Whether ``a`` pops before ``b``."""
        raise NotImplementedError

    def sort_key(self, q: QueuedPodInfo) -> tuple[Any, ...]:
        """A key consistent with ``less`` (heap order); smaller pops first."""
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    """``PreFilterPlugin``: once per scheduling cycle, before Filter; may write CycleState.

    Returns ``(nodes, status)``: ``nodes`` narrows the candidates to those names (None: all;
    the runtime intersects the plugins' sets). Allowed codes: Success, Skip (this plugin's
    Filter is skipped this cycle), Unschedulable (the cycle goes on to PostFilter with every
    node failing), UnschedulableAndUnresolvable (same, and preemption cannot help), Error.
    """

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Returns (node names to consider or ``None`` for all, status)."""
        raise NotImplementedError


class PreFilterExtensions(Plugin):
    """``PreFilterExtensions``: a PreFilter plugin whose CycleState depends on the pods on the
    nodes updates it incrementally when preemption (or a nominated pod) adds or removes one.

    Upstream's InterPodAffinity, PodTopologySpread and VolumeRestrictions have them. ``node``
    already holds (``add_pod``) or no longer holds (``remove_pod``) the pod; the plugin changes
    only its state in ``state`` (a clone). Returns None or an Error status.
    """

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> Status | None:
        """``AddPod``: ``to_add`` now counts on ``node`` for ``pod``'s Filter."""
        raise NotImplementedError

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> Status | None:
        """``RemovePod``: ``to_remove`` no longer counts on ``node`` for ``pod``'s Filter."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    """``FilterPlugin``: once per candidate node; reads CycleState, never writes it.

    Allowed codes: Success (None), Unschedulable, UnschedulableAndUnresolvable (the node's
    reason appears in the FitError histogram), Error (the cycle fails). The first rejecting
    plugin decides a node's status.
    """

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """None when ``pod`` fits ``node``, else the rejecting status."""
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    """``PostFilterPlugin``: once per cycle, only when no node passed Filter.

    Gets every node's status; may write CycleState and plugin state (preemption would
    nominate a node here). Returns Success to end the PostFilter phase, Unschedulable (its
    reasons join the FitError message), UnschedulableAndUnresolvable, or Error.
    """

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        """Called with every node's status after Filter found no node."""
        raise NotImplementedError


class PreScorePlugin(Plugin):
    """``PreScorePlugin``: once per cycle over the feasible nodes; may write CycleState.

    Allowed codes: Success, Skip (this plugin's Score is skipped this cycle), Error.
    """

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Prepare this cycle's Score (CycleState); Skip opts out of Score."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    """``ScorePlugin``: raw scores for all feasible nodes in one call; reads CycleState only.

    ``normalize_score`` then maps them into ``0..MAX_NODE_SCORE`` in place; the runtime
    multiplies by the profile's weight and raises when a final score is out of range.
    """

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """Raw scores, one per node in order (upstream calls Score once per node)."""
        raise NotImplementedError

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """Rescale ``scores`` in place to ``0..MAX_NODE_SCORE``; the default leaves them."""
        return None


class ReservePlugin(Plugin):
    """``ReservePlugin``: after the pod is assumed on ``node``; may change plugin state.

    ``reserve`` returns Success, or Unschedulable/Error to fail the cycle; then every reserve
    plugin's ``unreserve`` runs in reverse order. ``unreserve`` also runs when Permit, PreBind
    or Bind fail later, so it must be idempotent, must not fail, and must undo only what this
    pod's ``reserve`` did.
    """

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """Claim what this pod needs on ``node`` in plugin state."""
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Undo this pod's ``reserve`` (idempotent, must not fail)."""
        raise NotImplementedError


class PermitPlugin(Plugin):
    """``PermitPlugin``: the last step of the scheduling cycle, the pod assumed on ``node``.

    Returns ``(status, timeout)``: Success admits; Wait parks the pod as a WaitingPod for up
    to ``timeout`` seconds, until a plugin allows or rejects it through the Handle;
    Unschedulable rejects (unreserve, requeue); Error fails the cycle.
    """

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status | None, float]:
        """Returns (status, timeout in seconds when the status is Wait)."""
        raise NotImplementedError


class PreBindPlugin(Plugin):
    """``PreBindPlugin``: in the binding cycle (asynchronous, after Permit), before Bind.

    May do slow work (VolumeBinding waits for volumes). Returns Success, Skip, or a failure
    that un-reserves the pod and sends it back to the queue.
    """

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``PreBindPreFlight``: whether :meth:`pre_bind` has work for this pod on ``node``,
        asked at the start of the binding cycle (NominatedNodeNameForExpectation).

        Returns None (Success: PreBind will do something, so the pod is nominated to ``node``
        first), Skip (nothing to do: PreBind is skipped for this plugin) or Error. Any other
        code is unsupported and fails the binding cycle. The default is Skip (no work).
        """
        return Status(Code.SKIP)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """Work before the Binding (may wait); None or Skip to continue."""
        raise NotImplementedError


class BindPlugin(Plugin):
    """``BindPlugin``: binds the pod; plugins are tried in order until one does not Skip.

    A failure un-reserves the pod, forgets the assumption and requeues it.
    """

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """Returns Skip to let the next bind plugin bind."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    """``PostBindPlugin``: informational, after a successful Bind; cannot fail."""

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Informational hook after the pod was bound to ``node``."""
        raise NotImplementedError


class EventRecorder(Protocol):
    """Where the scheduling loop reports to users (``kube.recorder.Recorder`` in production):
    events on pods (and on nodes and PodGroups it cannot use) and the pod's ``PodScheduled``
    condition and ``nominatedNodeName``."""

    def event(
        self, regarding: Pod | Node | PodGroup, *, controller: str, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Record an ``events.k8s.io/v1`` event about ``regarding`` (in the background): a pod,
        or a node or PodGroup the scheduler could not use."""
        ...

    def pod_scheduled_false(self, pod: Pod, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        """Set ``PodScheduled=False`` with ``reason``/``message`` (in the background)."""
        ...

    async def nominate(self, pod: Pod, node: str, abandon: asyncio.Future[Any] | None = None) -> None:
        """Set ``status.nominatedNodeName``; dropped unsent when ``abandon`` completes first."""
        ...


class Binder(Protocol):
    """The port DefaultBinder binds through (``kube.client.KubeClient`` in production)."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, guard: Callable[[], None] | None = None
    ) -> None:
        """POST ``pods/{name}/binding`` to ``node``; raises on any API failure.

        ``guard``, when given, is called right before each attempt (retries included) is
        sent; whatever it raises aborts the bind unsent and propagates (the fence,
        ``framework/fence.py``).
        """
        ...


class ApiWriter(Protocol):
    """The port the binding cycle's plugins write through: VolumeBinding's PreBind patches
    PersistentVolumes and claims, DynamicResources patches ResourceClaims (and reads one back
    after a conflict). Errors carry the HTTP status as ``code`` (409: a conflict)."""

    async def patch(self, path: str, body: Any, content_type: str = ..., **kw: Any) -> bytes:
        """PATCH of ``path`` (JSON merge patch unless ``content_type`` says otherwise); returns
        the object as the API server answered; raises on API errors. ``guard=`` in ``kw`` works
        as :meth:`Binder.bind`'s."""
        ...

    async def get(self, path: str, params: dict[str, str] | None = None, **kw: Any) -> bytes:
        """GET ``path``; raises on API errors (a read: not fenced)."""
        ...

    async def delete(self, path: str, **kw: Any) -> bytes:
        """DELETE ``path`` (DefaultPreemption's victims); raises on API errors (404: gone)."""
        ...


class WriteFence(Protocol):
    """What the framework runtime asks of the fence (``framework.fence.Fence``)."""

    def reason(self) -> str | None:
        """None while this process may send scheduling decisions, else why not."""
        ...


@dataclass
class FrameworkOptions:
    """What plugin constructors may read besides their own arguments and the Handle.

    ``binder`` and ``api_writer`` are None when plugins are built only to validate a
    configuration (``ome-scheduler`` checks every profile before it connects). ``fence`` is
    consulted by the runtime before a pod allowed at Permit proceeds to binding (None: no
    leader election, nothing to fence); the write ports come already fenced.
    """

    scheduler_name: str
    metrics: Metrics
    parallelism: int = 16
    binder: Binder | None = None
    api_writer: ApiWriter | None = None
    fence: WriteFence | None = None


PluginFactory = Callable[[Any, Handle, FrameworkOptions], Plugin]
"""``frameworkruntime.PluginFactory``: (decoded arguments or None, Handle, options) -> plugin."""
