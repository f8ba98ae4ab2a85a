"""An in-memory framework Handle for plugin unit tests (no event loop, no API server)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ome_scheduler.api.core import Namespace, Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.workloads import LeaderWorkerSet
from ome_scheduler.framework.types import AffinityTerm, GangKey, NodeInfo, PodInfo
from ome_scheduler.util.labels import Selector


class FakeWaitingPod:
    def __init__(self, pi: PodInfo) -> None:
        self.pod_info = pi
        self.node = pi.pod.spec.node_name
        self.allowed: list[str] = []
        self.rejected: list[tuple[str, str]] = []
        self.timeouts: list[tuple[str, float]] = []

    def set_timeout(self, plugin: str, timeout: float) -> None:
        self.timeouts.append((plugin, timeout))

    @property
    def key(self) -> str:
        return self.pod_info.pod_key

    def allow(self, plugin: str) -> None:
        self.allowed.append(plugin)

    def reject(self, plugin: str, msg: str) -> None:
        self.rejected.append((plugin, msg))


class FakePodGroups:
    """The PodGroupLister view of a FakeHandle's dicts."""

    def __init__(self, h: FakeHandle) -> None:
        self.h = h

    def get(self, namespace: str, name: str) -> PodGroup | None:
        return self.h.groups.get(f"{namespace}/{name}")

    def error(self, namespace: str, name: str) -> str | None:
        return self.h.group_errors.get(f"{namespace}/{name}")

    def members(self, gang: GangKey) -> list[PodInfo]:
        return [p for p in self.h.pods.values() if p.gang and p.gang_key == gang]

    def placed_members(self, gang: GangKey) -> list[tuple[PodInfo, NodeInfo | None]]:
        return [(pi, n) for n in self.h.nodes.values() for pi in n.pods.values() if pi.gang and pi.gang_key == gang]

    def live_gang_keys(self) -> set[GangKey]:
        return {p.gang_key for p in self.h.pods.values() if p.gang and p.pod.metadata.deletion_timestamp is None}

    def subscribe(self, listener: Callable[[PodGroup | None, PodGroup | None], None]) -> None:
        self.h.listeners.append(listener)

    def subscribe_unresolvable(self, listener: Callable[[PodInfo, str, str], None]) -> None:
        self.h.unresolvable_listeners.append(listener)

    def subscribe_member_left(self, listener: Callable[[PodInfo], None]) -> None:
        self.h.member_left_listeners.append(listener)


class FakeHandle:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.groups: dict[str, PodGroup] = {}
        self.group_errors: dict[str, str] = {}
        self.activated: list[list[str]] = []
        self.retried: list[str] = []
        self.unresolvable_members: dict[str, tuple[str, str]] = {}
        """Pod name -> (plugin, message) another plugin's PreFilter would give it."""
        self.unresolvable_listeners: list[Callable[[PodInfo, str, str], None]] = []
        self.member_left_listeners: list[Callable[[PodInfo], None]] = []
        self.waiting: dict[str, FakeWaitingPod] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.listeners: list[Callable[[PodGroup | None, PodGroup | None], None]] = []
        self.node_listeners: list[Callable[[Node | None, Node | None], None]] = []
        self.events: list[tuple[str, str, str, str]] = []
        self.placements: dict[str, Any] = {}
        self.lws: dict[tuple[str, str], LeaderWorkerSet] = {}
        self.lws_leaders: dict[str, str] = {}
        """Pod name -> the leader UID of its LWS group incarnation."""

    # setup helpers
    def add_node(self, node: Node, pods: Sequence[Pod] = ()) -> NodeInfo:
        ni = NodeInfo(node.metadata.name)
        ni.set_node(node)
        self.nodes[ni.name] = ni
        for p in pods:
            self.bind(p, ni.name)
        return ni

    def add_pod(self, pod: Pod) -> PodInfo:
        pi = PodInfo(pod)
        self.pods[pi.key] = pi
        return pi

    def bind(self, pod: Pod, node: str) -> PodInfo:
        pi = self.add_pod(pod).with_node(node)
        self.pods[pi.key] = pi
        self.nodes[node].add_pod(pi)
        return pi

    def assume(self, pi: PodInfo, node: str) -> PodInfo:
        a = pi.with_node(node)
        self.nodes[node].add_pod(a)
        return a

    def forget(self, pi: PodInfo, node: str) -> None:
        self.nodes[node].remove_pod(pi.pod_key)

    def wait(self, pi: PodInfo) -> FakeWaitingPod:
        wp = FakeWaitingPod(pi)
        self.waiting[pi.pod_key] = wp
        return wp

    # Handle protocol
    def node_infos(self) -> Sequence[NodeInfo]:
        return list(self.nodes.values())

    def get_node_info(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    def anti_affinity_terms_for(self, labels: Mapping[str, str]) -> Iterable[tuple[AffinityTerm, NodeInfo]]:
        return [(t, n) for n in self.nodes.values() for p in n.pods.values() for t in p.required_anti_affinity_terms]

    def pods_with_affinity_score_terms(self) -> Iterable[tuple[PodInfo, NodeInfo]]:
        return [(p, n) for n in self.nodes.values() for p in n.pods.values() if p.has_affinity]

    def pods_for_selector(self, selector: Selector) -> Iterable[tuple[PodInfo, NodeInfo]]:
        return [(p, n) for n in self.nodes.values() for p in n.pods.values()]

    def node_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        return cursor + 1, None  # no change feed: the plugin rebuilds its indexes every time

    def subscribe_node_changes(self, listener: Callable[[Node | None, Node | None], None]) -> None:
        self.node_listeners.append(listener)

    def pod_groups(self) -> FakePodGroups:
        return FakePodGroups(self)

    def namespace(self, name: str) -> Namespace | None:
        return self.namespaces.get(name)

    def namespace_names(self) -> Iterable[str]:
        return list(self.namespaces)

    def leader_worker_set(self, namespace: str, name: str) -> LeaderWorkerSet | None:
        return self.lws.get((namespace, name))

    def lws_leader_uid(self, pod: Pod) -> str:
        return self.lws_leaders.get(pod.metadata.name, "")

    def event_recorder(self) -> FakeHandle:
        return self

    def event(self, obj: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((obj.metadata.name, type_, reason, note))

    def report_gang_placement(self, gang: GangKey, placement: Any) -> None:
        self.placements[gang] = placement

    def activate(self, pods: Iterable[Pod]) -> None:
        self.activated.append(sorted(p.metadata.name for p in pods))

    def unresolvable_at_prefilter(self, pod: PodInfo, *, skip: str) -> tuple[str, str] | None:
        return self.unresolvable_members.get(pod.pod.metadata.name)

    def retry_after_backoff(self, pod: Pod) -> None:
        self.retried.append(pod.metadata.name)

    def waiting_pods(self) -> Iterable[Any]:
        return list(self.waiting.values())

    def get_waiting_pod(self, uid: str) -> Any:
        return self.waiting.get(uid)
