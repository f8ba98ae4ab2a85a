"""The Services, ReplicationControllers, ReplicaSets and StatefulSets PodTopologySpread reads,
the LeaderWorkerSets OMEGangPack reads (:meth:`WorkloadStore.leader_worker_set`) and the
PodDisruptionBudgets DefaultPreemption reads.

``WorkloadStore`` is kept current by informers (``app/informers.py``) and answers
:meth:`WorkloadStore.default_selector`, which mirrors ``helper.DefaultSelector``
(``pkg/scheduler/framework/plugins/helper/spread.go``, v1.35.4): the selector that system (or
listed) default topology spread constraints use for a pod without constraints of its own. The
scheduler's Handle offers it as ``default_spread_selector``. No cluster event is emitted: no
plugin registers these objects' events upstream either.
"""

from __future__ import annotations

from ome_scheduler.api.core import Pod
from ome_scheduler.api.workloads import (
    LeaderWorkerSet,
    PodDisruptionBudget,
    ReplicaSet,
    ReplicationController,
    Service,
    StatefulSet,
)
from ome_scheduler.util.labels import Selector

LWS = "leaderworkerset.sigs.k8s.io/"


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class WorkloadStore:
    """Services by namespace then name; ReplicationControllers, ReplicaSets, StatefulSets and
    LeaderWorkerSets by ``ns/name``."""

    def __init__(self) -> None:
        self._services: dict[str, dict[str, Service]] = {}
        self._rcs: dict[str, ReplicationController] = {}
        self._replica_sets: dict[str, ReplicaSet] = {}
        self._stateful_sets: dict[str, StatefulSet] = {}
        self._lws: dict[str, LeaderWorkerSet] = {}
        self._pdbs: dict[str, PodDisruptionBudget] = {}

    def lws_leader_uid(self, pod: Pod) -> str:
        """The UID of the leader whose group incarnation ``pod`` belongs to: a leader's own
        (``worker-index`` 0); a worker's is its StatefulSet's controller, the leader pod (the
        LWS controller, v0.5.1); ``""`` when the StatefulSet is not in the store."""
        md = pod.metadata
        if md.labels.get(LWS + "worker-index") == "0":
            return md.uid
        owner = next((r for r in md.owner_references if r.controller and r.kind == "StatefulSet"), None)
        sts = self._stateful_sets.get(_key(md.namespace, owner.name)) if owner is not None else None
        if sts is None:
            return ""
        leader = next((r for r in sts.metadata.owner_references if r.kind == "Pod"), None)
        return leader.uid if leader is not None else ""

    def leader_worker_set(self, namespace: str, name: str) -> LeaderWorkerSet | None:
        """The LeaderWorkerSet from the informer cache, or None (missing, or the CRD is absent)."""
        return self._lws.get(_key(namespace, name))

    def pod_disruption_budgets(self) -> list[PodDisruptionBudget]:
        """Every PodDisruptionBudget the informer holds (``pdbLister.List(labels.Everything())``),
        for DefaultPreemption; in no particular order, as upstream's lister."""
        return list(self._pdbs.values())

    def default_selector(self, pod: Pod) -> Selector:
        """``DefaultSelector``: the label sets of the Services of the pod's namespace whose
        (non-nil) selector matches the pod, merged (a later Service's value wins on a shared key),
        plus the selector of the pod's controller: a ``v1`` ReplicationController's label set is
        merged in; an ``apps/v1`` ReplicaSet's or StatefulSet's ``metav1.LabelSelector`` adds its
        requirements (nil or invalid: nothing added). A controller that is not in the store adds
        nothing. An empty result means "no default constraints" to PodTopologySpread."""
        md = pod.metadata
        label_set: dict[str, str] = {}
        for svc in self._services.get(md.namespace, {}).values():
            sel = svc.spec.selector
            if sel is None:
                continue  # a nil selector selects nothing, not everything
            if Selector.from_map(sel).matches(md.labels):
                label_set.update(sel)
        selector = Selector.from_map(label_set)
        owner = next((r for r in md.owner_references if r.controller), None)
        if owner is None:
            return selector
        key = _key(md.namespace, owner.name)
        if owner.api_version == "v1" and owner.kind == "ReplicationController":
            rc = self._rcs.get(key)
            if rc is not None and rc.spec.selector:
                label_set.update(rc.spec.selector)
                selector = Selector.from_map(label_set)
        elif owner.api_version == "apps/v1" and owner.kind in ("ReplicaSet", "StatefulSet"):
            obj = self._replica_sets.get(key) if owner.kind == "ReplicaSet" else self._stateful_sets.get(key)
            if obj is not None:
                try:
                    other = Selector.from_label_selector(obj.spec.selector)
                except ValueError:
                    return selector
                if not other.is_nothing():
                    selector = selector.with_requirements(other.requirements)
        return selector

    # ---- informer handlers --------------------------------------------------------------

    def on_service_add(self, svc: Service) -> None:
        """Informer handler."""
        self._services.setdefault(svc.metadata.namespace, {})[svc.metadata.name] = svc

    def on_service_update(self, old: Service, new: Service) -> None:
        """Informer handler."""
        self.on_service_add(new)

    def on_service_delete(self, svc: Service) -> None:
        """Informer handler."""
        in_ns = self._services.get(svc.metadata.namespace)
        if in_ns is not None:
            in_ns.pop(svc.metadata.name, None)
            if not in_ns:
                del self._services[svc.metadata.namespace]

    def on_rc_add(self, rc: ReplicationController) -> None:
        """Informer handler."""
        self._rcs[_key(rc.metadata.namespace, rc.metadata.name)] = rc

    def on_rc_update(self, old: ReplicationController, new: ReplicationController) -> None:
        """Informer handler."""
        self.on_rc_add(new)

    def on_rc_delete(self, rc: ReplicationController) -> None:
        """Informer handler."""
        self._rcs.pop(_key(rc.metadata.namespace, rc.metadata.name), None)

    def on_replicaset_add(self, rs: ReplicaSet) -> None:
        """Informer handler."""
        self._replica_sets[_key(rs.metadata.namespace, rs.metadata.name)] = rs

    def on_replicaset_update(self, old: ReplicaSet, new: ReplicaSet) -> None:
        """Informer handler."""
        self.on_replicaset_add(new)

    def on_replicaset_delete(self, rs: ReplicaSet) -> None:
        """Informer handler."""
        self._replica_sets.pop(_key(rs.metadata.namespace, rs.metadata.name), None)

    def on_statefulset_add(self, ss: StatefulSet) -> None:
        """Informer handler."""
        self._stateful_sets[_key(ss.metadata.namespace, ss.metadata.name)] = ss

    def on_statefulset_update(self, old: StatefulSet, new: StatefulSet) -> None:
        """Informer handler."""
        self.on_statefulset_add(new)

    def on_statefulset_delete(self, ss: StatefulSet) -> None:
        """Informer handler."""
        self._stateful_sets.pop(_key(ss.metadata.namespace, ss.metadata.name), None)

    def on_lws_add(self, lws: LeaderWorkerSet) -> None:
        """Informer handler."""
        self._lws[_key(lws.metadata.namespace, lws.metadata.name)] = lws

    def on_lws_update(self, old: LeaderWorkerSet, new: LeaderWorkerSet) -> None:
        """Informer handler."""
        self.on_lws_add(new)

    def on_lws_delete(self, lws: LeaderWorkerSet) -> None:
        """Informer handler."""
        self._lws.pop(_key(lws.metadata.namespace, lws.metadata.name), None)

    def on_pdb_add(self, pdb: PodDisruptionBudget) -> None:
        """Informer handler."""
        self._pdbs[_key(pdb.metadata.namespace, pdb.metadata.name)] = pdb

    def on_pdb_update(self, old: PodDisruptionBudget, new: PodDisruptionBudget) -> None:
        """Informer handler."""
        self.on_pdb_add(new)

    def on_pdb_delete(self, pdb: PodDisruptionBudget) -> None:
        """Informer handler."""
        self._pdbs.pop(_key(pdb.metadata.namespace, pdb.metadata.name), None)
