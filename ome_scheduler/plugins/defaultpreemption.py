"""DefaultPreemption: evict lower-priority pods so that a pod no node can take fits one.

Mirrors ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`` (v1.35.4)
with the async preemption that 1.35 runs by default; the evaluator (candidates, victims, the
node pick, the writes) is ``framework/preemption.py``. PostFilter answers Success with the
chosen node (the scheduling cycle then nominates the pod there) or Unschedulable with
``preemption: ...``; PreEnqueue keeps a preemptor whose victims are still being written out of
activeQ (``waiting for the preemption for this pod to be finished``). Every PostFilter call
counts in ``scheduler_preemption_attempts_total``.

ome-scheduler's chart disables it by default (a domain-blind preemptor could evict scattered
victims that never free a whole domain, ``docs/design/gang-scheduling.md`` §15.1). Deviation:
gang members are never victims (no gang is evicted partly); see docs/plugins.md.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.api.core import Pod
from ome_scheduler.config.pluginargs import DefaultPreemptionArgs
from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, QueueingHint, on
from ome_scheduler.framework.interface import (
    POST_FILTER_NOMINATION_KEY,
    CycleState,
    FrameworkOptions,
    Handle,
    NodeToStatus,
    PostFilterPlugin,
    PreEnqueuePlugin,
)
from ome_scheduler.framework.preemption import IN_FLIGHT, Evaluator
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.metrics import Metrics


class DefaultPreemption(PostFilterPlugin, PreEnqueuePlugin):
    """``DefaultPreemption``: PostFilter preemption and the PreEnqueue gate of preemptors in flight."""

    name = "DefaultPreemption"

    def __init__(self, evaluator: Evaluator, metrics: Metrics) -> None:
        self.evaluator = evaluator
        self.metrics = metrics

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        """``PostFilter``: Success after choosing a node (written to the CycleState under
        :data:`POST_FILTER_NOMINATION_KEY`), else the reason prefixed ``preemption: ``."""
        try:
            node, st = self.evaluator.preempt(state, pod, statuses)
        finally:
            self.metrics.preemption_attempts.inc()
        if node is not None:
            state.write(POST_FILTER_NOMINATION_KEY, node)
        msg = st.message()
        if msg:
            return Status(st.code, "preemption: " + msg)
        return st

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """``PreEnqueue``: UnschedulableAndUnresolvable while the pod's preemption is in flight."""
        if self.evaluator.is_pod_running_preemption(pod.uid):
            return Status.unresolvable(IN_FLIGHT)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Pod deletions with a hint that always skips: the gate lifts when another rejector's
        hint requeues the pod (the queue consults every plugin that rejected it)."""
        return [on("Pod", ActionType.DELETE, self.is_schedulable_after_pod_deletion)]

    @staticmethod
    def is_schedulable_after_pod_deletion(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """``isPodSchedulableAfterPodDeletion``: QueueSkip."""
        return QueueingHint.QUEUE_SKIP

    @classmethod
    def new(cls, args: DefaultPreemptionArgs | None, handle: Handle, options: FrameworkOptions) -> DefaultPreemption:
        """Build the plugin (``args`` validated by ``decode_plugin_args``; None: the defaults)."""
        a = args if args is not None else DefaultPreemptionArgs()
        ev = Evaluator(
            cls.name,
            handle,
            options.api_writer,
            options.metrics,
            min_candidate_nodes_percentage=a.min_candidate_nodes_percentage,
            min_candidate_nodes_absolute=a.min_candidate_nodes_absolute,
        )
        return cls(ev, options.metrics)
