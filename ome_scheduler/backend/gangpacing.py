"""Pacing of gang members in the scheduling queue: one attempt stands for the gang.

Lives here: :class:`GangPacing`, what the scheduling queue (``queue.py``) asks before it moves a
gang member (a pod with the ``scheduling.x-k8s.io/pod-group`` label). kube-scheduler 1.35 has
no gangs in its queue, so each member of a gang that no domain can hold is retried on its own:
under node churn (a thousand nodes added, then deleted) every member was attempted on every
event, 913 times in 2.5 minutes for a gang of 24 (issue 30). OMEGangPack plans the whole gang in
every member's PreFilter, so one member's attempt answers for all of them. The rules (product
rule 10 in ``docs/design/gang-scheduling.md``; the queue page ``docs/design/queue.md``):

* **One representative per event.** A cluster event whose hint says Queue moves at most one
  member of a gang out of the unschedulable pods, and none while another member already waits
  in activeQ or backoffQ, among the members only the gang plugin rejected (a verdict about the
  whole gang; a member another plugin rejected is retried on its own). The gang's siblings
  follow through OMEGangPack's own activations when the representative gets a pin (Permit
  wakes them), so nothing waits longer than before.
* **A gang backs off as one.** Each failed round of attempts (a member rejected by plugins
  after the gang's last backoff ended; siblings failing meanwhile count once) doubles the
  gang's backoff, ``initial * 2^(failures-1)`` capped at ``max`` on the queue's 1 s grid, as a
  pod's own backoff grows; a member requeued by an event waits out the longer of the two.
  Gang members never leave backoffQ early: the 1.35 pop from backoffQ while activeQ is empty
  (SchedulerPopFromBackoffQ) applies to standalone pods only, since for a gang it turned every
  event into an attempt. The gang's count resets when a member completes its cycle (bound).
* **A retry the plugin asks for.** OMEGangPack's PostFilter marks a member whose pinned domain
  failed while another fitting domain is untried: its failure then sends it to backoffQ even
  when no event has come, so the next domain is tried within the backoff.

Explicit activations (``Queue.activate``: Permit waking the gang, templates complete, a hold
released, a PodGroup change) are progress, not retries, and are not paced here. No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ome_scheduler.framework.types import GangKey, PodKey, QueuedPodInfo


@dataclass(slots=True)
class _Gang:
    failures: int = 0
    until: float = 0.0
    """Monotonic seconds before which no member leaves backoffQ (0: none)."""
    queued: set[PodKey] = field(default_factory=set)
    """Members that stand for the gang, in activeQ or backoffQ now."""


class GangPacing:
    """Per-gang backoff, the count of members queued, and the retries OMEGangPack asked for.

    Args:
        initial_backoff: seconds of the first gang backoff (the queue's ``podInitialBackoffSeconds``).
        max_backoff: seconds the gang backoff grows to at most (``podMaxBackoffSeconds``).
        window: the queue's backoff grid, seconds (expirations are aligned down to it).
    """

    def __init__(
        self, initial_backoff: float, max_backoff: float, window: float, gang_plugin: str = "OMEGangPack"
    ) -> None:
        self.gang_plugin = gang_plugin
        """The plugin whose rejections are verdicts about the whole gang."""
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.window = window
        self._gangs: dict[GangKey, _Gang] = {}
        self._retry: set[PodKey] = set()

    def __len__(self) -> int:
        return len(self._gangs)

    def _of(self, gang: GangKey) -> _Gang:
        g = self._gangs.get(gang)
        if g is None:
            g = self._gangs[gang] = _Gang()
        return g

    def _forget_if_idle(self, gang: GangKey) -> None:
        g = self._gangs.get(gang)
        if g is not None and not g.queued and g.failures == 0:
            del self._gangs[gang]

    # ---- members queued ----------------------------------------------------------------------

    def _stands_for_gang(self, q: QueuedPodInfo) -> bool:
        """Whether ``q``'s last attempt was rejected by the gang plugin alone: a verdict on the
        whole gang, so its next attempt answers for every sibling rejected the same way."""
        return bool(q.pod_info.gang) and q.unschedulable_plugins == {self.gang_plugin} and not q.pending_plugins

    def queued_changed(self, q: QueuedPodInfo, delta: int) -> None:
        """A pod joined (+1) or left (-1) activeQ or backoffQ (called by the queue's heaps); only
        members that stand for their gang are counted."""
        if not q.pod_info.gang:
            return
        key = q.pod_info.gang_key
        if delta > 0:
            if self._stands_for_gang(q):
                self._of(key).queued.add(q.pod_info.pod_key)
            return
        g = self._gangs.get(key)
        if g is not None:
            g.queued.discard(q.pod_info.pod_key)  # by uid: whatever its plugins are by now
            self._forget_if_idle(key)

    def busy(self, q: QueuedPodInfo) -> bool:
        """Whether ``q`` was rejected by the gang plugin alone and a sibling rejected the same way
        already waits in activeQ or backoffQ (then that one stands for it). A sibling that is new
        or was rejected by another plugin stands for no one."""
        if not self._stands_for_gang(q):
            return False
        g = self._gangs.get(q.pod_info.gang_key)
        return g is not None and bool(g.queued)

    # ---- the gang's backoff ------------------------------------------------------------------

    def failed(self, q: QueuedPodInfo, now: float) -> None:
        """A member's attempt was rejected by plugins: the gang's backoff grows, once per round
        (members failing while the gang still backs off count as the same failure)."""
        if not q.pod_info.gang or self.max_backoff == 0:
            return
        g = self._of(q.pod_info.gang_key)
        if now < g.until:
            return
        g.failures += 1
        d = self.initial_backoff * 2 ** min(g.failures - 1, 32)
        g.until = math.floor((now + min(d, self.max_backoff)) / self.window) * self.window

    def progressed(self, gang: GangKey) -> None:
        """A member completed its cycle: the gang's backoff starts afresh."""
        g = self._gangs.get(gang)
        if g is not None:
            g.failures, g.until = 0, 0.0
            self._forget_if_idle(gang)

    def until(self, q: QueuedPodInfo) -> float:
        """When ``q``'s gang backoff ends (monotonic seconds; 0: none, or not a gang member)."""
        if not q.pod_info.gang:
            return 0.0
        g = self._gangs.get(q.pod_info.gang_key)
        return g.until if g is not None else 0.0

    # ---- retries asked for -----------------------------------------------------------------

    def retry_after_backoff(self, uid: PodKey) -> None:
        """Send the pod to backoffQ when its current attempt fails, event or not."""
        self._retry.add(uid)

    def take_retry(self, uid: PodKey) -> bool:
        """Whether a retry was asked for the pod's attempt that just ended (the mark is used up)."""
        if uid in self._retry:
            self._retry.discard(uid)
            return True
        return False
