"""CSI attach limits in the gang room (``docs/design/gang-scheduling.md`` §3.1).

NodeVolumeLimits rejects a node where a pod's new volumes of a CSI driver would make the
node's attached volumes of that driver exceed its CSINode's ``allocatable.count``
(``node(s) exceed max volume count``). :class:`AttachRoom` makes the gang's room count the same
limit, so a gang is not pinned to a domain whose nodes cannot attach all its members' volumes.

Per node ``N`` and limited driver ``D`` (a driver with a count in N's CSINode):

* ``used(N, D)``: what NodeVolumeLimits' Filter counts as attached: unique ``driver/handle``
  of the volumes of N's bound and assumed pods (nominated pods are not modelled, as in the
  rest of the room), plus N's VolumeAttachments no pod of it counts
  (:meth:`NodeVolumeLimits.node_volume_counts`);
* the member's volumes of D, resolved as Filter resolves them (claim -> PV -> driver, an unbound
  claim by its StorageClass's provisioner, generic ephemeral, in-tree translation:
  :meth:`NodeVolumeLimits.attachable_volumes`), less those a pod on N already counts;
* of those, the *shared* ones: a claim (``persistentVolumeClaim``, by ``namespace/name``) that
  two or more of the gang's unplaced members use. Members landing together on N attach a
  shared volume once, as Filter counts it (a volume counts once however many pods use it);
  every other volume (a member's own claim, a generic ephemeral volume, an inline volume)
  is *private*: each member on N attaches its own.

With ``s`` shared and ``p`` private new volumes of D and ``free = limit(N, D) - used(N, D)``,
N takes ``0`` members when ``free < s + p``, else ``(free - s) // p`` (no cap from D when
``p == 0``). The node's member capacity is the smallest of that over its limited drivers and
:func:`~ome_scheduler.plugins.gangpack.fit.member_capacity`. A member whose volumes do not
resolve (a missing claim, an ephemeral claim it does not own) is not capped here: Filter and
rule 12 report it. A node without a CSINode, or whose CSINode reports no count, has no limit.

Only when the pod's profile runs NodeVolumeLimits as a Filter plugin; a gang whose members
have no claim, ephemeral or migratable inline volume does no work here at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ome_scheduler.api.storage import CSINode
from ome_scheduler.framework.interface import Handle
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.gangpack.fit import member_capacity
from ome_scheduler.plugins.nodevolumelimits import NodeVolumeLimits, PVCNotFound, VolumeError, counts_volumes
from ome_scheduler.plugins.volumebinding import store_of

NODE_VOLUME_LIMITS = NodeVolumeLimits.name


@dataclass(frozen=True, slots=True)
class AttachCap:
    """The tightest attach limit on one node for one member shape."""

    members: int
    """Members the node's attach limits let it take (0: not one)."""
    driver: str
    """The CSI driver whose limit it is."""
    free: int
    """``limit - used`` for that driver on the node."""
    per_member: int
    """New volumes of that driver each further member attaches there (0: only shared ones)."""


def runs_node_volume_limits(handle: Handle, pod: PodInfo) -> bool:
    """Whether ``pod``'s profile runs NodeVolumeLimits' Filter (a handle that cannot tell: yes)."""
    fn = getattr(handle, "runs_filter_plugin", None)
    if fn is None:
        return True
    return bool(fn(pod.pod.spec.scheduler_name, NODE_VOLUME_LIMITS))


class AttachRoom:
    """Attach-limit-aware member capacity for one gang's templates, for one cycle's snapshot.

    Args:
        handle: where the VolumeStore (PVs, claims, classes, CSINodes, VolumeAttachments) is read.
        templates: the current member first, then the other unplaced live members (§3.3);
            claims two or more of them use are shared.

    ``active`` is False (and :meth:`capacity` is :func:`member_capacity`) when no template has a
    counted volume or the profile does not run NodeVolumeLimits. Memoises each node's used
    volumes, so it must not outlive the snapshot it was asked about.
    """

    def __init__(self, handle: Handle, templates: Sequence[PodInfo]) -> None:
        self.active = bool(templates) and any(counts_volumes(t.pod) for t in templates)
        self.active = self.active and runs_node_volume_limits(handle, templates[0])
        uses: dict[str, int] = {}
        if self.active:
            self.store = store_of(handle)
            self.nvl = NodeVolumeLimits(handle)
            for t in templates:
                ns = t.namespace
                refs = (v.persistent_volume_claim for v in t.pod.spec.volumes)
                claims = {r.claim_name for r in refs if r is not None}
                for c in claims:
                    k = f"{ns}/{c}"
                    uses[k] = uses.get(k, 0) + 1
        self.shared_claims = frozenset(k for k, n in uses.items() if n > 1)
        """``namespace/claim`` of the claims two or more unplaced members use."""
        self._used: dict[str, tuple[dict[str, str], dict[str, int]] | None] = {}

    def capacity(self, pod: PodInfo, node: NodeInfo) -> int:
        """Members like ``pod`` that ``node`` takes now: :func:`member_capacity` capped by the
        node's CSI attach limits (0: it does not fit)."""
        base = member_capacity(pod, node)
        if base <= 0 or not self.active:
            return base
        cap = self.limit(pod, node)
        return base if cap is None else min(base, cap.members)

    def limit(self, pod: PodInfo, node: NodeInfo) -> AttachCap | None:
        """The tightest attach limit ``node`` puts on members like ``pod``; None when none
        applies (no counted volume, no CSINode or no limited driver, nothing new to attach, or a
        volume that does not resolve)."""
        if not self.active or not counts_volumes(pod.pod):
            return None
        vs = self.store
        csi_node = vs.csi_node(node.name)
        limits = csi_node.volume_limits() if csi_node is not None else {}
        if not limits:
            return None
        new: dict[str, str] = {}
        try:
            self.nvl.attachable_volumes(vs, pod.pod, csi_node, new, new_pod=True)
        except (PVCNotFound, VolumeError):
            return None  # Filter (and rule 12) report it
        if not new:
            return None
        used = self._node_used(node, csi_node)
        if used is None:
            return None
        attached, counts = used
        shared = self._shared_volumes(pod, csi_node)
        per: dict[str, list[int]] = {}  # driver -> [shared, private] new volumes
        for unique, driver in new.items():
            if unique in attached or driver not in limits:
                continue  # already on the node, or not limited
            per.setdefault(driver, [0, 0])[0 if unique in shared else 1] += 1
        best: AttachCap | None = None
        for driver, (s, p) in sorted(per.items()):
            free = limits[driver] - counts.get(driver, 0)
            if free < s + p:
                n = 0
            elif p == 0:
                continue  # only shared volumes, attached once: no cap from this driver
            else:
                n = (free - s) // p
            if best is None or n < best.members:
                best = AttachCap(n, driver, free, p)
        return best

    def _node_used(self, node: NodeInfo, csi_node: CSINode | None) -> tuple[dict[str, str], dict[str, int]] | None:
        """The node's attached volumes as Filter counts them (None: a pod's volume does not
        resolve; Filter reports that node's Error)."""
        if node.name not in self._used:
            try:
                self._used[node.name] = self.nvl.node_volume_counts(self.store, node, csi_node)
            except (PVCNotFound, VolumeError):
                self._used[node.name] = None
        return self._used[node.name]

    def _shared_volumes(self, pod: PodInfo, csi_node: CSINode | None) -> set[str]:
        """``driver/handle`` of ``pod``'s claims that siblings use too (``shared_claims``)."""
        out: set[str] = set()
        if not self.shared_claims:
            return out
        ns = pod.namespace
        for v in pod.pod.spec.volumes:
            ref = v.persistent_volume_claim
            if ref is None or f"{ns}/{ref.claim_name}" not in self.shared_claims:
                continue
            pvc = self.store.pvc_api_object(ns, ref.claim_name)
            if pvc is None:
                continue
            driver, handle = self.nvl.csi_driver_info(self.store, csi_node, pvc)
            if driver and handle:
                out.add(f"{driver}/{handle}")
        return out
