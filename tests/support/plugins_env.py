"""A whole scheduler (real frameworks, cache and queue) on in-memory objects, for plugin tests.

``Env`` builds a :class:`~ome_scheduler.scheduler.Scheduler` from a configuration (default:
the chart's profile, named ``ome-scheduler``), feeds it Nodes, Pods and storage objects
through the informer handlers, and runs one scheduling attempt the way ``schedule_one``
does up to the node choice: ``schedule(pod)`` returns the chosen node name, or the exact
FailedScheduling message (PostFilter included) when no node fits.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.config.load import DEFAULT_CONFIG, parse_config
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.runtime import FitError
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.generic_scheduler import NoNodesAvailable
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler

_uid = 0


def _next_uid() -> str:
    global _uid
    _uid += 1
    return f"env-uid-{_uid}"


class Recorder:
    """The events port: records ``(object name, reason, note)``; nominations and PodScheduled
    writes are accepted and dropped."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, regarding: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding.metadata.name, reason, note))

    def pod_scheduled_false(self, pod: Pod, reason: str, message: str, **_: Any) -> None:
        pass

    async def nominate(self, pod: Pod, node: str, abandon: Any = None) -> None:
        pass


class Binder:
    """The Binding port: accepts every Binding."""

    async def bind(self, namespace: str, name: str, uid: str, node: str, **_: Any) -> None:
        pass


def chart_config(**profile_overrides: Any) -> dict[str, Any]:
    """The built-in configuration (the chart's profile) with profile fields replaced."""
    cfg = copy.deepcopy(DEFAULT_CONFIG)
    cfg["leaderElection"] = {"leaderElect": False}
    cfg["profiles"][0].update(profile_overrides)
    return cfg


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    alloc: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    images: Sequence[tuple[str, int]] = (),
) -> Node:
    """A Node; ``alloc`` defaults to 8 cpu, 16Gi memory, 110 pods."""
    a = {"cpu": "8", "memory": "16Gi", "pods": "110", **(alloc or {})}
    raw = {
        "metadata": {"name": name, "uid": _next_uid(), "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {
            "allocatable": a,
            "capacity": a,
            "images": [{"names": [n], "sizeBytes": size} for n, size in images],
        },
    }
    return msgspec.convert(raw, Node)


def pod(
    name: str,
    ns: str = "default",
    *,
    requests: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    scheduler: str = "ome-scheduler",
    spec: Mapping[str, Any] | None = None,
) -> Pod:
    """A one-container pod; ``spec`` entries override the generated spec's keys."""
    s: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "img", "resources": {"requests": dict(requests or {})}}],
    }
    s.update(copy.deepcopy(dict(spec or {})))
    if node_name:
        s["nodeName"] = node_name
    raw = {"metadata": {"name": name, "namespace": ns, "uid": _next_uid(), "labels": dict(labels or {})}, "spec": s}
    return msgspec.convert(raw, Pod)


class Env:
    """One scheduler with its cache filled by hand."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        cfg = parse_config(dict(config or chart_config()), "test")
        self.recorder = Recorder()
        self.s = Scheduler(cfg, metrics=Metrics(), binder=Binder(), recorder=self.recorder)
        self.profile = cfg.profiles[0].scheduler_name

    def add_node(self, n: Node) -> Node:
        self.s.handlers.on_node_add(n)
        return n

    def add_pod(self, p: Pod) -> Pod:
        """An existing pod (give it ``node_name`` to have it bound)."""
        self.s.handlers.on_pod_add(p)
        return p

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.s.handlers.on_namespace_add(
            msgspec.convert({"metadata": {"name": name, "labels": dict(labels or {})}}, Namespace)
        )

    def add_pv(self, raw: Mapping[str, Any]) -> PersistentVolume:
        pv = msgspec.convert(dict(raw), PersistentVolume)
        self.s.volume_store().on_pv_add(pv)
        return pv

    def add_pvc(self, raw: Mapping[str, Any]) -> PersistentVolumeClaim:
        pvc = msgspec.convert(dict(raw), PersistentVolumeClaim)
        self.s.volume_store().on_pvc_add(pvc)
        return pvc

    def add_storage_class(self, raw: Mapping[str, Any]) -> StorageClass:
        sc = msgspec.convert(dict(raw), StorageClass)
        self.s.volume_store().on_class_add(sc)
        return sc

    def attempt(self, p: Pod) -> tuple[str, str, CycleState]:
        """(node, message, cycle state): node is "" when the pod does not fit."""
        fw = self.s.frameworks[p.spec.scheduler_name or self.profile]
        state = CycleState()
        pi = PodInfo(p)
        try:
            return self.s.cycles.algorithm.schedule_pod(fw, state, pi), "", state
        except FitError as fe:
            if fw.post_filter_plugins:
                fe.diagnosis.post_filter_msg = fw.run_post_filter(state, pi, fe.diagnosis.node_to_status).message()
            return "", str(fe), state
        except NoNodesAvailable as exc:
            return "", str(exc), state

    def schedule(self, p: Pod) -> str:
        """The chosen node's name, or the FailedScheduling message."""
        host, msg, _ = self.attempt(p)
        return host or msg

    def feasible(self, p: Pod) -> set[str]:
        """Every node the pod may land on (each node tried alone through the filters)."""
        fw = self.s.frameworks[p.spec.scheduler_name or self.profile]
        out = set()
        pi = PodInfo(p)
        nodes = self.s.cache.node_infos()
        for n in nodes:
            state = CycleState()
            result, st, _ = fw.run_pre_filter(state, pi, nodes)
            if st is not None and not st.is_success():
                continue
            if result is not None and n.name not in result:
                continue
            if fw.run_filter(state, pi, n) is None:
                out.add(n.name)
        return out
