"""DefaultPreemption: accepted in profiles, but preemption is not implemented.

ome-scheduler's chart disables DefaultPreemption (a domain-blind preemptor could evict
scattered victims that never free a whole domain, ``docs/design/gang-scheduling.md`` §15.1). A profile that
leaves it enabled still loads; the PostFilter then reports nothing and evicts nothing, and
a warning at startup says so. See docs/plugins.md.
"""

from __future__ import annotations

from ome_scheduler.framework.interface import CycleState, FrameworkOptions, Handle, NodeToStatus, PostFilterPlugin
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.logs import get_logger


class DefaultPreemption(PostFilterPlugin):
    """``DefaultPreemption``: accepted in profiles; this scheduler never preempts."""

    name = "DefaultPreemption"

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        """Unschedulable: preemption is not performed (no victims are chosen)."""
        return Status.unschedulable()

    @classmethod
    def new(cls, args: None, handle: Handle, options: FrameworkOptions) -> DefaultPreemption:
        """Build the plugin and warn that it does not preempt (its arguments are ignored)."""
        get_logger().warning(
            "DefaultPreemption is enabled but ome-scheduler does not preempt; disable it in the profile",
            profile=options.scheduler_name,
        )
        return cls()
