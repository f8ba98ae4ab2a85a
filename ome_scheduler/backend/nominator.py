"""The pod nominator: which unbound pods of this scheduler are nominated to which node.

Mirrors ``nominator`` in ``pkg/scheduler/backend/queue/nominator.go`` (v1.35.4): a pod enters
when DefaultPreemption nominates it (``AddNominatedPod``, before its status patch lands) or when
the informer shows it unbound with ``status.nominatedNodeName``; it leaves when it is bound,
assumed, deleted, or its nomination is cleared. The framework counts these pods in Filter for
pods of lower or equal priority (``RunFilterPluginsWithNominatedPods``).
"""

from __future__ import annotations

from ome_scheduler.framework.types import PodInfo, PodKey


class Nominator:
    """Nominated pods by node name, and each pod's node by :data:`PodKey`."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[PodKey, PodInfo]] = {}
        self._node_of: dict[PodKey, str] = {}

    def __len__(self) -> int:
        return len(self._node_of)

    def add(self, pi: PodInfo, node: str) -> None:
        """``addNominatedPodUnlocked``: nominate ``pi`` to ``node`` (replacing an older nomination);
        an empty ``node`` only deletes."""
        self.delete(pi.pod_key)
        if not node:
            return
        self._by_node.setdefault(node, {})[pi.pod_key] = pi
        self._node_of[pi.pod_key] = node

    def update(self, old_nominated: str, pi: PodInfo) -> None:
        """``updateNominatedPodUnlocked``: follow an informer update of an unbound pod. Its new
        ``status.nominatedNodeName`` when set; none before and none now keeps a nomination made
        in memory (its patch has not landed yet); one removed by the update removes it."""
        nnn = pi.pod.status.nominated_node_name
        if nnn:
            self.add(pi, nnn)
            return
        node = self._node_of.get(pi.pod_key)
        if node is not None and not old_nominated:
            self._by_node[node][pi.pod_key] = pi
        else:
            self.delete(pi.pod_key)

    def delete(self, key: PodKey) -> None:
        """``DeleteNominatedPodIfExists``."""
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._by_node.get(node)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._by_node[node]

    def node_of(self, key: PodKey) -> str | None:
        """The node ``key`` is nominated to, or None."""
        return self._node_of.get(key)

    def for_node(self, node: str) -> list[PodInfo]:
        """``NominatedPodsForNode``: in nomination order."""
        pods = self._by_node.get(node)
        return list(pods.values()) if pods else []
