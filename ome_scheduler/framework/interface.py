"""Plugin interfaces, CycleState, NodeToStatus and the Handle plugins get.

Mirrors ``k8s.io/kube-scheduler/framework/interface.go`` and ``cycle_state.go``. A plugin is
an object deriving from :class:`Plugin` and from one base class per extension point it
implements (PreFilterPlugin, FilterPlugin, ...), exactly as a Go plugin implements one
interface per extension point. Two deliberate differences keep the Python hot path lean:
Score and NormalizeScore work on the whole node list in one call, and Success is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ome_scheduler.framework.events import ClusterEventWithHint
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import AffinityTerm, NodeInfo, PodInfo, QueuedPodInfo

if TYPE_CHECKING:
    from ome_scheduler.api.core import Namespace, Pod
    from ome_scheduler.api.scheduling import PodGroup
    from ome_scheduler.framework.waiting_pods import WaitingPod
    from ome_scheduler.metrics import Metrics
    from ome_scheduler.util.labels import Selector

MAX_NODE_SCORE = 100
"""``fwk.MaxNodeScore``: the top of every plugin's normalised score range."""


class CycleState:
    """Per-cycle scratch space shared by the plugins of one scheduling attempt.

    ``data`` holds plugin state keyed by plugin-chosen strings; ``skip_filter_plugins`` and
    ``skip_score_plugins`` record plugins whose PreFilter/PreScore returned Skip.
    """

    __slots__ = ("data", "skip_filter_plugins", "skip_score_plugins", "record_plugin_metrics")

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        self.record_plugin_metrics = False

    def write(self, key: str, value: Any) -> None:
        self.data[key] = value

    def read(self, key: str) -> Any:
        """Raises KeyError when the key was never written (upstream ``ErrNotFound``)."""
        return self.data[key]

    def get(self, key: str) -> Any:
        return self.data.get(key)


class NodeToStatus:
    """``framework.NodeToStatus``: why each rejected node failed, plus a status for absent nodes."""

    __slots__ = ("statuses", "absent")

    def __init__(self) -> None:
        self.statuses: dict[str, Status] = {}
        self.absent = Status.unresolvable()

    def set(self, node: str, status: Status) -> None:
        self.statuses[node] = status

    def get(self, node: str) -> Status:
        return self.statuses.get(node, self.absent)

    def __len__(self) -> int:
        return len(self.statuses)


class Handle(Protocol):
    """What plugins may ask of the scheduler (``framework.Handle``), without any I/O."""

    def node_infos(self) -> Sequence[NodeInfo]:
        """All NodeInfos of the current snapshot (bound and assumed pods included)."""
        ...

    def get_node_info(self, name: str) -> NodeInfo | None: ...

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

    def pods_in_group(self, namespace: str, group: str) -> list[PodInfo]:
        """Every pod in the informer cache labelled with this PodGroup in this namespace."""
        ...

    def live_gang_keys(self) -> set[str]:
        """``ns/group`` of every pod-group label on a pod that is neither deleting nor finished."""
        ...

    def placed_members(self, namespace: str, group: str) -> list[tuple[PodInfo, NodeInfo | None]]:
        """Bound and assumed pods of one gang with their node (None: the node is gone)."""
        ...

    def node_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        """Node names changed since ``cursor`` (None: rebuild from all nodes) and the new cursor."""
        ...

    def pod_group(self, namespace: str, name: str) -> PodGroup | None:
        """The PodGroup from the informer cache, or None (missing, or the CRD is absent)."""
        ...

    def pod_group_error(self, namespace: str, name: str) -> str | None:
        """Why an existing PodGroup could not be read (its decode error), or None."""
        ...

    def namespace(self, name: str) -> Namespace | None: ...

    def namespace_names(self) -> Iterable[str]: ...

    def activate(self, pods: Iterable[Pod]) -> None:
        """Move these pods from backoffQ / unschedulable pods straight to activeQ."""
        ...

    def waiting_pods(self) -> Iterable[WaitingPod]: ...

    def get_waiting_pod(self, uid: str) -> WaitingPod | None: ...


class Plugin:
    """Base of every plugin; ``name`` is the name used in the profile."""

    name: ClassVar[str] = ""
    node_local_filter: ClassVar[bool] = False
    """Filter depends only on the pod's shape and the one NodeInfo (and ``cache_token``)."""
    node_local_score: ClassVar[bool] = False
    """Score depends only on the pod's shape and the one NodeInfo (and ``cache_token``)."""

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """``EnqueueExtensions``: the cluster events that may make a rejected pod schedulable."""
        return []


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        raise NotImplementedError


class QueueSortPlugin(Plugin):
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        raise NotImplementedError

    def sort_key(self, q: QueuedPodInfo) -> tuple[Any, ...]:
        """A key consistent with ``less`` (heap order); smaller pops first."""
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Returns (node names to consider or ``None`` for all, status)."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """Raw scores, one per node in order (upstream calls Score once per node)."""
        raise NotImplementedError

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """Rescale ``scores`` in place to ``0..MAX_NODE_SCORE``; the default leaves them."""
        return None


class ReservePlugin(Plugin):
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


class PermitPlugin(Plugin):
    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status | None, float]:
        """Returns (status, timeout in seconds when the status is Wait)."""
        raise NotImplementedError


class PreBindPlugin(Plugin):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        raise NotImplementedError


class BindPlugin(Plugin):
    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """Returns Skip to let the next bind plugin bind."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


class Binder(Protocol):
    """The port DefaultBinder binds through (``kube.client.KubeClient`` in production)."""

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST ``pods/{name}/binding`` to ``node``; raises on any API failure."""
        ...


class ApiWriter(Protocol):
    """The port VolumeBinding's PreBind patches PersistentVolumes and claims through."""

    async def patch(self, path: str, body: Any, content_type: str = ..., **kw: Any) -> bytes:
        """JSON merge PATCH of ``path``; raises on API errors."""
        ...


@dataclass
class FrameworkOptions:
    """What plugin constructors may read besides their own arguments and the Handle.

    ``binder`` and ``api_writer`` are None when plugins are built only to validate a
    configuration (``ome-scheduler`` checks every profile before it connects).
    """

    scheduler_name: str
    metrics: Metrics
    parallelism: int = 16
    binder: Binder | None = None
    api_writer: ApiWriter | None = None


PluginFactory = Callable[[Any, Handle, FrameworkOptions], Plugin]
"""``frameworkruntime.PluginFactory``: (decoded arguments or None, Handle, options) -> plugin."""
