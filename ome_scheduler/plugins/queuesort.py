"""PrioritySort: activeQ order by priority (highest first), then by queue timestamp.

Mirrors ``pkg/scheduler/framework/plugins/queuesort/priority_sort.go``.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.framework.interface import QueueSortPlugin
from ome_scheduler.framework.types import QueuedPodInfo


class PrioritySort(QueueSortPlugin):
    """``PrioritySort``: higher ``spec.priority`` first, then earlier queue time."""

    name = "PrioritySort"

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """Whether ``a`` pops before ``b``."""
        pa, pb = a.pod_info.priority, b.pod_info.priority
        return pa > pb or (pa == pb and a.timestamp < b.timestamp)

    def sort_key(self, q: QueuedPodInfo) -> tuple[Any, ...]:
        """``(-priority, timestamp)``: the heap key consistent with :meth:`less`."""
        return (-q.pod_info.priority, q.timestamp)
