"""Cluster snapshots built from manifest dicts, for the offline engine's tests (simulate, explain)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ome_scheduler.api.core import Namespace, Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotMeta


def with_uid(o: dict[str, Any]) -> dict[str, Any]:
    """``o`` with a ``metadata.uid`` derived from its namespace and name unless it has one."""
    md = o["metadata"]
    return {**o, "metadata": {**md, "uid": md.get("uid") or f"uid-{md.get('namespace', '')}-{md['name']}"}}


def snapshot(
    node_dicts: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]] = (),
    pgs: Sequence[dict[str, Any]] = (),
    namespace: str = "team",
) -> ClusterSnapshot:
    """A snapshot of these nodes, pods and PodGroups (given uids) and one namespace."""
    return ClusterSnapshot(
        metadata=SnapshotMeta(taken_at="2026-12-01T00:00:00Z"),
        nodes=[msgspec.convert(n, Node) for n in node_dicts],
        namespaces=[msgspec.convert({"metadata": {"name": namespace}}, Namespace)],
        pods=[msgspec.convert(with_uid(p), Pod) for p in pods],
        pod_groups=[msgspec.convert(with_uid(g), PodGroup) for g in pgs],
    )
