"""In-memory objects for unit tests: typed Pods and Nodes and NodeInfos built from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.framework.types import NodeInfo, PodInfo

_uid = 0


def _next_uid() -> str:
    global _uid
    _uid += 1
    return f"uid-{_uid}"


def make_pod(
    name: str,
    ns: str = "ns",
    *,
    gang: str | None = None,
    requests: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    spec: Mapping[str, Any] | None = None,
    anti_affinity_on: str | None = None,
    priority: int | None = None,
) -> Pod:
    lab = {"app": gang or name, **(labels or {})}
    if gang:
        lab["scheduling.x-k8s.io/pod-group"] = gang
    s: dict[str, Any] = {
        "schedulerName": "ome-scheduler",
        "containers": [{"name": "c", "resources": {"requests": dict(requests or {})}}],
        **(spec or {}),
    }
    if node_name:
        s["nodeName"] = node_name
    if priority is not None:
        s["priority"] = priority
    if anti_affinity_on:
        s["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": lab["app"]}}, "topologyKey": anti_affinity_on}
                ]
            }
        }
    raw = {"metadata": {"name": name, "namespace": ns, "uid": _next_uid(), "labels": lab}, "spec": s}
    return msgspec.convert(raw, Pod)


def make_node(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    alloc: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> Node:
    a = {"cpu": "32", "memory": "256Gi", "pods": "110", **(alloc or {})}
    raw = {
        "metadata": {"name": name, "uid": _next_uid(), "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {"allocatable": a, "capacity": a},
    }
    return msgspec.convert(raw, Node)


def node_info(node: Node, pods: Sequence[Pod] = ()) -> NodeInfo:
    ni = NodeInfo(node.metadata.name)
    ni.set_node(node)
    for p in pods:
        ni.add_pod(PodInfo(p))
    return ni


def make_pod_group(
    name: str,
    ns: str = "ns",
    *,
    min_member: int = 2,
    topology_key: str | None = None,
    timeout: int | None = 30,
    labels: Mapping[str, str] | None = None,
    uid: str | None = None,
) -> PodGroup:
    md: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or _next_uid(), "labels": dict(labels or {})}
    if topology_key:
        md["annotations"] = {"ome.io/topology-key": topology_key}
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return msgspec.convert({"metadata": md, "spec": spec}, PodGroup)
