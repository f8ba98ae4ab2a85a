"""The scheduler cache: nodes, the pods on them, and the pods this scheduler assumed.

Mirrors ``pkg/scheduler/backend/cache/cache.go`` and ``node_tree.go``. Pods bound by any
scheduler are accounted on their node, so other schedulers' pods count against capacity;
a pod this scheduler picked a node for is *assumed* (accounted before its Binding is
posted) until the informer shows it bound, or it is *forgotten* if binding fails. Assumed
pods never expire (upstream's TTL is 0 since 1.30): :meth:`SchedulerCache.finish_binding`
records when the Binding succeeded, and :meth:`SchedulerCache.unconfirmed` lists the
assumptions whose confirmation is overdue, for the cache debugger to check against the API
server (``ome_scheduler/app/debugger.py``) rather than to expire blindly.

The scheduling cycle runs synchronously on the event loop, so the cache itself is the
cycle's snapshot: nothing can change between PreFilter and Reserve. ``node_infos()`` lists
nodes in the node tree's order, which interleaves zones
(``topology.kubernetes.io/region`` + ``zone``) round-robin like upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

from ome_scheduler.api.core import Node
from ome_scheduler.backend.affinity_index import AffinityIndex
from ome_scheduler.framework.types import GangKey, ImageState, NodeInfo, PodInfo, PodKey, Resource

CHANGE_LOG_MAX = 200_000
"""Entries (node names) the change feed keeps before dropping its older half.

Every node change and every pod accounted or removed appends one entry, so an unbounded
log would grow for the life of the process. A reader whose cursor falls off the front
rebuilds from every node (``node_changes`` returns None), which is cheap next to the memory
saved; halving rather than trimming one entry at a time keeps ``del`` amortised O(1) per
append.
"""
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


@dataclass(slots=True)
class _PodState:
    """A cached pod: its PodInfo, the node it is accounted on, and whether it is only assumed."""

    info: PodInfo
    node: str
    assumed: bool
    bound_at: float | None = None
    """When the Binding of an assumed pod succeeded (``FinishBinding``); None while in flight."""


def _zone_of(node: Node) -> str:
    """``utilnode.GetZoneKey``: the node tree's zone id; ``""`` groups nodes with neither label."""
    labels = node.metadata.labels
    region, zone = labels.get(REGION_LABEL, ""), labels.get(ZONE_LABEL, "")
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"  # upstream's separator, so no region/zone pair can collide


class SchedulerCache:
    """Nodes by name plus pod accounting (``cacheImpl`` in ``cache.go``).

    Pod methods are O(1) or O(pods on one node); :meth:`node_infos` rebuilds in O(nodes) after
    the node set changed, :meth:`remove_node` is O(nodes in its zone), :meth:`counts` O(pods).
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[PodKey, _PodState] = {}
        self._zones: dict[str, list[str]] = {}
        self._node_zone: dict[str, str] = {}
        self._list: list[NodeInfo] | None = None
        self.image_states: dict[str, ImageState] = {}
        self.gang_members: dict[GangKey, dict[PodKey, str]] = {}
        """Bound and assumed members of each gang: gang -> pod -> node name."""
        self.affinity_index = AffinityIndex()
        self.version = 0
        """Bumped when a node joins or leaves or its images change (cluster-wide inputs)."""
        self._change_log: list[str] = []
        self._change_base = 1
        self._awaiting: dict[PodKey, _PodState] = {}
        """Assumed pods whose Binding finished, until confirmed (entries pruned lazily)."""

    # ---- node tree --------------------------------------------------------------------

    def _tree_add(self, name: str, zone: str) -> None:
        self._zones.setdefault(zone, []).append(name)
        self._node_zone[name] = zone
        self._list = None

    def _tree_remove(self, name: str) -> None:
        zone = self._node_zone.pop(name, None)
        if zone is None:
            return
        names = self._zones.get(zone, [])
        if name in names:
            names.remove(name)
        if not names:
            self._zones.pop(zone, None)
        self._list = None

    def node_infos(self) -> list[NodeInfo]:
        """Real nodes (with a Node object), zones interleaved round-robin.

        Rebuilt only after the tree changed and shared between calls: callers must not mutate
        the list.
        """
        # Interleaving zones (node_tree.go) means a search cut short by percentageOfNodesToScore
        # has still seen nodes of every zone, not just the first zone's.
        if self._list is None:
            lists = list(self._zones.values())
            out: list[NodeInfo] = []
            i = 0
            while True:
                added = False
                for names in lists:
                    if i < len(names):
                        ni = self.nodes.get(names[i])
                        if ni is not None and ni.node is not None:
                            out.append(ni)
                        added = True
                if not added:
                    break
                i += 1
            self._list = out
        return self._list

    def num_nodes(self) -> int:
        """Nodes with a Node object (ghost entries of deleted nodes excluded)."""
        return len(self.node_infos())

    # ---- nodes ------------------------------------------------------------------------

    def add_or_update_node(self, node: Node) -> NodeInfo:
        """``AddNode``/``UpdateNode``: install ``node`` (re-filing it if its zone changed).

        Returns the node's NodeInfo; an entry that held only the pods of a deleted node (a
        ghost) becomes real again, its pods still accounted.

        Raises:
            QuantityError: an allocatable value is not a quantity; nothing was changed.
        """
        allocatable = Resource.from_list(node.status.allocatable)  # first: it is the part that can fail
        name = node.metadata.name
        ni = self.nodes.get(name)
        if ni is None:
            ni = self.nodes[name] = NodeInfo(name)
        old_zone = self._node_zone.get(name)
        zone = _zone_of(node)
        if old_zone is None:
            self._tree_add(name, zone)
        elif old_zone != zone:
            self._tree_remove(name)
            self._tree_add(name, zone)
        elif ni.node is None:
            self._list = None  # filed in the tree but not listed without a Node object: relist
        if ni.node is None or ni.node.status.images != node.status.images:
            self.version += 1  # a node joined, or image spread changed: cluster-wide scores move
        # Remove-then-add keeps the shared ImageStates' node sets right when images change.
        self._remove_images(ni.node)
        self._add_images(node, ni)
        ni.set_node(node, allocatable)
        self._changed(name)
        return ni

    def _add_images(self, node: Node, ni: NodeInfo) -> None:
        """``addNodeImageStates``: share one ImageState per image name (size from its first node)."""
        states: dict[str, ImageState] = {}
        for img in node.status.images:
            for name in img.names:
                st = self.image_states.get(name)
                if st is None:
                    st = self.image_states[name] = ImageState(img.size_bytes)
                st.nodes.add(node.metadata.name)
                states.setdefault(name, st)
        ni.image_states = states

    def _remove_images(self, node: Node | None) -> None:
        """``removeNodeImageStates``: forget the node; drop images no node holds any more."""
        if node is None:
            return
        for img in node.status.images:
            for name in img.names:
                st = self.image_states.get(name)
                if st is not None:
                    st.nodes.discard(node.metadata.name)
                    if not st.nodes:
                        del self.image_states[name]

    def remove_node(self, name: str) -> None:
        """Drop the node; its pods stay accounted on a ghost entry until they are deleted."""
        ni = self.nodes.get(name)
        if ni is None:
            return
        self._tree_remove(name)
        self._remove_images(ni.node)
        ni.image_states = {}
        ni.node = None
        self.version += 1
        self._changed(name)
        # Pod and node events arrive on different watches, so the deletes of this node's pods
        # may still be on their way. Keeping a ghost NodeInfo (node None, hidden from
        # node_infos) lets those deletes find and un-account them; the last one drops the
        # entry (_unaccount). Upstream RemoveNode keeps the NodeInfo for the same reason.
        if not ni.pods:
            del self.nodes[name]
        self._list = None

    def get_node_info(self, name: str) -> NodeInfo | None:
        """The node's NodeInfo, or None when unknown or deleted (a ghost entry)."""
        ni = self.nodes.get(name)
        return ni if ni is not None and ni.node is not None else None

    # ---- pods -------------------------------------------------------------------------

    def _account(self, info: PodInfo, node: str) -> None:
        """Add a pod to its node's aggregates, the affinity index and its gang's members."""
        ni = self.nodes.get(node)
        if ni is None:
            # A pod bound to a node the informer has not delivered yet (or already deleted):
            # account it on a ghost entry so the node arrives with its pods already counted.
            ni = self.nodes[node] = NodeInfo(node)
        ni.add_pod(info)
        self.affinity_index.add(info.pod_key, info, node)
        self._changed(node)
        if info.gang:
            self.gang_members.setdefault(info.gang_key, {})[info.pod_key] = node

    def _unaccount(self, key: PodKey, node: str) -> None:
        """Undo :meth:`_account`; drops a ghost node entry once its last pod is gone."""
        ni = self.nodes.get(node)
        if ni is None:
            return
        pi = ni.remove_pod(key)
        if pi is not None:
            self.affinity_index.remove(key, pi)
        self._changed(node)
        if pi is not None and pi.gang:
            members = self.gang_members.get(pi.gang_key)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self.gang_members[pi.gang_key]
        if ni.node is None and not ni.pods:
            del self.nodes[node]

    # ---- change feed --------------------------------------------------------------------

    def _changed(self, node: str) -> None:
        """Append ``node`` to the change feed (see :data:`CHANGE_LOG_MAX`)."""
        log = self._change_log
        log.append(node)
        if len(log) > CHANGE_LOG_MAX:
            drop = len(log) // 2
            del log[:drop]
            self._change_base += drop

    def change_cursor(self) -> int:
        """The change feed's current position (pass it to :meth:`node_changes` later)."""
        return self._change_base + len(self._change_log)

    def node_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        """Nodes changed (pods added or removed, node added, updated or deleted) since ``cursor``.

        Returns (new cursor, names), or (new cursor, None) when ``cursor`` is older than the
        bounded log and the caller must rebuild from every node. Cursor 0 always rebuilds.
        """
        end = self._change_base + len(self._change_log)
        if cursor <= 0 or cursor < self._change_base:
            return end, None
        return end, set(self._change_log[cursor - self._change_base :])

    def placed_members(self, gang: GangKey) -> dict[PodKey, str]:
        """Bound and assumed pods of one gang: pod key -> node name."""
        return self.gang_members.get(gang, {})

    def is_assumed(self, key: PodKey) -> bool:
        """Whether the pod is assumed (accounted by this scheduler, Binding not yet observed)."""
        st = self.pods.get(key)
        return st is not None and st.assumed

    def assumed_node(self, key: PodKey) -> str | None:
        """The node an assumed pod holds, or None when the pod is not assumed."""
        st = self.pods.get(key)
        return st.node if st is not None and st.assumed else None

    def assumed_info(self, key: PodKey) -> PodInfo | None:
        """The PodInfo an assumed pod was accounted with (its pod has ``spec.nodeName`` set), or None."""
        st = self.pods.get(key)
        return st.info if st is not None and st.assumed else None

    def assume_pod(self, info: PodInfo, node: str) -> None:
        """Account ``info`` on ``node`` before binding (``AssumePod``).

        Raises:
            ValueError: the pod is already in the cache.
        """
        key = info.pod_key
        if key in self.pods:
            raise ValueError(f"pod {info.key}({key}) is in the cache, so can't be assumed")
        # No expiry deadline: upstream's assumed-pod TTL is 0 (durationToExpireAssumedPod), so
        # an assumption ends only when the informer shows the pod (add_pod) or binding fails
        # (forget_pod). Expiring it while a slow Binding is in flight would free capacity the
        # pod is about to use and let a second pod be placed on top of it.
        self.pods[key] = _PodState(info, node, assumed=True)
        self._account(info, node)

    def finish_binding(self, key: PodKey, now: float) -> None:
        """``FinishBinding``: the assumed pod's Binding succeeded at ``now`` (monotonic seconds);
        it stays assumed until the informer shows it bound. No-op when not assumed (the
        informer's update came first)."""
        st = self.pods.get(key)
        if st is not None and st.assumed:
            st.bound_at = now
            self._awaiting[key] = st

    def unconfirmed(self, bound_before: float) -> list[tuple[PodInfo, str, float]]:
        """Assumed pods whose Binding succeeded at or before ``bound_before`` but that the
        informer has not shown bound yet: (PodInfo, node, when the Binding succeeded).
        O(pods awaiting confirmation), not O(pods)."""
        for key in [k for k, st in self._awaiting.items() if self.pods.get(k) is not st]:
            del self._awaiting[key]  # confirmed, forgotten or deleted since
        return [
            (st.info, st.node, st.bound_at)
            for st in self._awaiting.values()
            if st.bound_at is not None and st.bound_at <= bound_before
        ]

    def assumed_pods(self) -> list[tuple[PodInfo, str, float | None]]:
        """Every assumed pod: (PodInfo, node, when its Binding succeeded or None while in flight)."""
        return [(st.info, st.node, st.bound_at) for st in self.pods.values() if st.assumed]

    def bound_pods(self) -> dict[PodKey, tuple[PodInfo, str]]:
        """Every pod accounted as bound (not assumed): pod key -> (PodInfo, node)."""
        return {k: (st.info, st.node) for k, st in self.pods.items() if not st.assumed}

    def forget_pod(self, key: PodKey) -> bool:
        """Undo an assumption after a failed Permit or Bind (``ForgetPod``); False if not assumed."""
        st = self.pods.get(key)
        if st is None or not st.assumed:
            return False
        del self.pods[key]
        self._unaccount(key, st.node)
        return True

    def add_pod(self, info: PodInfo) -> None:
        """A bound pod from the informer (any scheduler). Confirms a matching assumption."""
        key = info.pod_key
        node = info.pod.spec.node_name
        st = self.pods.get(key)
        if st is not None:
            # Re-account from scratch: the informer's version replaces the assumed (or older)
            # one, whose node or requests may differ.
            self._unaccount(key, st.node)
        self.pods[key] = _PodState(info, node, assumed=False)
        self._account(info, node)

    def update_pod(self, info: PodInfo) -> None:
        """``UpdatePod``: re-account the pod's new version (same as :meth:`add_pod`)."""
        self.add_pod(info)

    def remove_pod(self, key: PodKey) -> None:
        """``RemovePod``: un-account a deleted pod, assumed or bound; no-op when unknown."""
        st = self.pods.pop(key, None)
        if st is not None:
            self._unaccount(key, st.node)

    def counts(self) -> tuple[int, int, int]:
        """(nodes, pods, assumed pods) for ``scheduler_cache_size``."""
        assumed = sum(1 for s in self.pods.values() if s.assumed)
        return self.num_nodes(), len(self.pods), assumed
