"""Pods parked at Permit (``WaitingPod``) and the map of them.

Mirrors ``pkg/scheduler/framework/runtime/waiting_pods_map.go``: a waiting pod holds one
timer per plugin that returned Wait; ``allow(plugin)`` clears that plugin and, once none is
pending, releases the pod; ``reject`` or a timer firing releases it with Unschedulable and
the message ``rejected due to timeout after waiting {d} at plugin {p}`` on timeout.
"""

from __future__ import annotations

import asyncio

from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo, PodKey
from ome_scheduler.util.durations import format_go_duration


class WaitingPod:
    """A pod that passed Reserve and waits at Permit; times are monotonic seconds."""

    __slots__ = ("pod_info", "node", "started", "_pending", "_future")

    def __init__(self, pod_info: PodInfo, node: str, timeouts: dict[str, float]) -> None:
        self.pod_info = pod_info
        self.node = node
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        """When the wait began (the event loop's monotonic clock, seconds)."""
        self._future: asyncio.Future[Status | None] = loop.create_future()
        self._pending: dict[str, asyncio.TimerHandle] = {}
        # One timer per waiting plugin: the first to fire rejects the pod in the name of the
        # plugin whose wait ran out, which is the message the user sees.
        for plugin, timeout in timeouts.items():
            self._arm(plugin, timeout)

    def _arm(self, plugin: str, timeout: float) -> None:
        msg = f"rejected due to timeout after waiting {format_go_duration(timeout)} at plugin {plugin}"
        loop = asyncio.get_running_loop()
        self._pending[plugin] = loop.call_at(self.started + timeout, self.reject, plugin, msg)

    def set_timeout(self, plugin: str, timeout: float) -> None:
        """Replace ``plugin``'s wait limit by ``timeout`` seconds counted from the start of the
        wait (a PodGroup's ``scheduleTimeoutSeconds`` changed); already past it, the pod is
        rejected at once with the timeout message. No-op when ``plugin`` no longer waits."""
        handle = self._pending.pop(plugin, None)
        if handle is None:
            return
        handle.cancel()
        self._arm(plugin, timeout)

    @property
    def key(self) -> PodKey:
        """The waiting pod's :data:`PodKey`."""
        return self.pod_info.pod_key

    def pending_plugins(self) -> list[str]:
        """Plugins that returned Wait and have not allowed the pod yet."""
        return list(self._pending)

    def allow(self, plugin: str) -> None:
        """Clear ``plugin``'s wait; the pod proceeds to binding once no plugin is pending."""
        handle = self._pending.pop(plugin, None)
        if handle is not None:
            handle.cancel()
        if not self._pending and not self._future.done():
            self._future.set_result(None)

    def reject(self, plugin: str, message: str) -> None:
        """Fail the wait with Unschedulable ``message``, attributed to ``plugin``."""
        # Idempotent: the first outcome (allow, reject or timeout) wins, later calls only
        # cancel timers that are already gone.
        for h in self._pending.values():
            h.cancel()
        self._pending.clear()
        if not self._future.done():
            self._future.set_result(Status.unschedulable(message).with_plugin(plugin))

    async def wait(self) -> Status | None:
        """Block until allowed (``None``) or rejected (an Unschedulable status)."""
        return await self._future

    def done(self) -> bool:
        """Whether the wait has ended (allowed or rejected)."""
        return self._future.done()

    @property
    def settled(self) -> asyncio.Future[Status | None]:
        """Completes when the wait ends (allowed or rejected); do not cancel or set it."""
        return self._future


class WaitingPodsMap:
    """Waiting pods by :data:`PodKey` (``waitingPodsMap``)."""

    def __init__(self) -> None:
        self._pods: dict[PodKey, WaitingPod] = {}

    def add(self, wp: WaitingPod) -> None:
        """Park ``wp`` (replacing a previous wait of the same pod)."""
        self._pods[wp.key] = wp

    def remove(self, key: PodKey) -> None:
        """Forget the pod's wait (no-op when absent)."""
        self._pods.pop(key, None)

    def get(self, key: PodKey) -> WaitingPod | None:
        """The pod's wait, or None."""
        return self._pods.get(key)

    def values(self) -> list[WaitingPod]:
        """A snapshot list of the waiting pods (safe to iterate while allowing or rejecting)."""
        return list(self._pods.values())

    def __len__(self) -> int:
        return len(self._pods)
