"""OMEGangPack's metrics (``docs/design/gang-scheduling.md`` §11) and the per-domain fragmentation gauges.

The metric families live in the process registry (``ome_scheduler/metrics.py``); this
module is the plugin's one door to them, with the documented label values:

* ``ome_scheduler_gang_pin_total{result}``: ``pinned``, ``no_fit``, ``reserved``, ``adopted``,
  ``stale_replan``, ``topology_replan``;
* ``ome_scheduler_gang_gate_total{result}``: ``wait``, ``admit``;
* ``ome_scheduler_gang_activation_total{trigger}``: ``permit``, ``templates_complete``,
  ``reservation_released``, ``podgroup_change``;
* ``ome_scheduler_gang_unwind_total``, ``ome_scheduler_pinned_groups``,
  ``ome_scheduler_gang_longest_hold_seconds``,
  ``ome_scheduler_gang_bind_skew_seconds``, ``ome_scheduler_gang_scheduling_duration_seconds``;
* ``ome_scheduler_domain_free_nodes`` and ``ome_scheduler_domain_max_gang_size`` per
  (topology key, domain), refreshed by a background task (:func:`refresh_domain_gauges`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.placement import GangPlanner, group_by_domain

PinResult = Literal["pinned", "no_fit", "reserved", "adopted", "stale_replan", "topology_replan"]
Trigger = Literal["permit", "templates_complete", "reservation_released", "podgroup_change"]
PIN_RESULTS: tuple[PinResult, ...] = ("pinned", "no_fit", "reserved", "adopted", "stale_replan", "topology_replan")


class GangMetrics:
    """Counters and gauges of one OMEGangPack instance (label children resolved once)."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics
        self._pin = {r: metrics.gang_pin.labels(r) for r in PIN_RESULTS}

    def pin(self, result: PinResult) -> None:
        """Count one pin decision."""
        self._pin[result].inc()

    def gate(self, result: Literal["wait", "admit"]) -> None:
        """Count one Permit decision."""
        self.m.gang_gate.labels(result).inc()

    def activation(self, trigger: Trigger) -> None:
        """Count one explicit activation of parked pods."""
        self.m.gang_activation.labels(trigger).inc()

    def unwind(self) -> None:
        """Count one release of a gang attempt."""
        self.m.gang_unwind.inc()

    def longest_hold(self, seconds: float) -> None:
        """Set how long the oldest current hold has lasted, in seconds (0: none)."""
        self.m.gang_longest_hold.set(seconds)

    def pinned_groups(self, n: int) -> None:
        """Set the number of pins held (drained ones included)."""
        self.m.pinned_groups.set(n)

    def bind_skew(self, seconds: float) -> None:
        """First to last member bound of one gang, in seconds."""
        self.m.gang_bind_skew.observe(seconds)

    def scheduling_duration(self, seconds: float) -> None:
        """Last member created to last member bound, in seconds."""
        self.m.gang_scheduling_duration.observe(seconds)


def label_of(key: str) -> Callable[[NodeInfo], str]:
    """A function giving a node's value of label ``key`` (``""`` when unset)."""
    return lambda n: n.labels.get(key, "")


def is_free_node(n: NodeInfo) -> bool:
    """Schedulable, and nobody requests its extended resources (or, without any, cpu and memory)."""
    if n.unschedulable:
        return False
    ext = [k for k in n.allocatable.scalar if "/" in k]
    used = n.requested
    if ext:
        return all(used.scalar.get(k, 0) == 0 for k in ext)
    return used.milli_cpu == 0 and used.memory == 0


def refresh_domain_gauges(
    metrics: Metrics, nodes: Sequence[NodeInfo], keys: Sequence[str], shapes: Mapping[str, PodInfo]
) -> None:
    """Per domain of every topology key in ``keys``: free whole nodes, and the largest gang of
    the last planned member shape under that key (``shapes``) that still fits, so operators
    see fragmentation. Costs one planning pass per domain; run it off the hot path."""
    metrics.domain_free_nodes.clear()
    metrics.domain_max_gang_size.clear()
    for tk in sorted(keys):
        by = group_by_domain(nodes, label_of(tk))
        shape = shapes.get(tk)
        planner = (
            GangPlanner([shape], 1, member_capacity, one_per_node=one_per_node([shape]), signature=template_signature)
            if shape is not None
            else None
        )
        for d, members in by.items():
            metrics.domain_free_nodes.labels(tk, d).set(sum(1 for n in members if is_free_node(n)))
            if planner is not None:
                metrics.domain_max_gang_size.labels(tk, d).set(planner.plan_domain(d, members).room)
