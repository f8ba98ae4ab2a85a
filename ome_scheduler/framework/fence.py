"""Fencing: a leader whose lease may have passed to another sends no scheduling decision.

client-go's ``tools/leaderelection`` says of itself that it "does not guarantee that only one
client is acting as a leader (a.k.a. fencing)": a leader that stalls (a long pause, an
overloaded API server) may still be sending Bindings when a standby, having seen the Lease
unrenewed for ``leaseDuration``, starts scheduling too. kube-scheduler relies on exiting when
renewals fail for ``renewDeadline``; a stalled process cannot exit. This module is the
scheduler's one seam against that, on the monotonic clock of the process:

* :class:`Fence` says whether this process may write a scheduling decision now: only while
  its last successful lease renewal is younger than ``renewDeadline``. A standby cannot take
  the Lease before ``leaseDuration`` has passed since that renewal (it must see the record
  unchanged that long on its own clock), so every decision the fence lets out leaves at
  least ``leaseDuration - renewDeadline`` before a successor can start.
* :class:`FencedBinder` and :class:`FencedApiWriter` wrap the binding cycle's two write ports
  (DefaultBinder's Binding POST, VolumeBinding's PreBind patches): the fence is checked right
  before *each* attempt is put on the wire (retries included), through the ports' ``guard``.
  A refused write raises :class:`Fenced`, which fails the binding cycle like any API error:
  the pod is unreserved, forgotten and requeued (the process is about to exit anyway).
* The framework runtime consults :meth:`Fence.reason` before it releases a pod allowed at
  Permit into its binding cycle (``Framework.wait_on_permit``), so a gang whose gate opens
  on a fenced leader is unwound, not half-bound.

What is left, the time between the guard and the bytes leaving (a synchronous write on a
pooled connection, unless the event loop stalls right there), is bounded by the loop
watchdog (``ome_scheduler.app.watchdog``), which ends the process when the loop stalls.

The scheduler is given a fence only when leader election is on (``ome_scheduler.app.run``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ome_scheduler.framework.interface import ApiWriter, Binder


class Fenced(Exception):
    """A write refused by the :class:`Fence`; ``reason`` says why (``str(exc)`` too)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"fenced: {reason}")
        self.reason = reason


class Fence:
    """Whether this process may send a scheduling decision now.

    ``renewed_at()`` returns the monotonic time (seconds, ``clock``'s scale) of the last
    successful lease renewal, or None when this process does not hold the lease (never
    acquired, lost, or released at shutdown). Writes are allowed while
    ``clock() - renewed_at() < renew_deadline``.
    """

    def __init__(
        self, renewed_at: Callable[[], float | None], renew_deadline: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.renewed_at = renewed_at
        self.renew_deadline = renew_deadline
        self.clock = clock

    def reason(self) -> str | None:
        """None while writes are allowed, else why not (for logs and the pod's error)."""
        at = self.renewed_at()
        if at is None:
            return "this process does not hold the leader lease"
        age = self.clock() - at
        if age >= self.renew_deadline:
            return f"last lease renewal {age:.1f}s ago, not within renewDeadline {self.renew_deadline:g}s"
        return None

    def check(self) -> None:
        """Return when writes are allowed.

        Raises:
            Fenced: they are not.
        """
        why = self.reason()
        if why is not None:
            raise Fenced(why)


class FencedBinder:
    """A :class:`~ome_scheduler.framework.interface.Binder` that binds only through the fence.

    The fence is checked once before the call (so a fenced leader does not even queue the
    request) and again by ``inner`` right before each attempt is sent (``guard``), with a
    caller's own ``guard`` after it.

    Raises:
        Fenced: from :meth:`bind`, when the fence refused an attempt before it was sent.
    """

    def __init__(self, inner: Binder, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, guard: Callable[[], None] | None = None
    ) -> None:
        """Bind ``namespace/name`` to ``node`` unless the fence refuses; see the class."""
        check = _chain(self.fence.check, guard)
        check()
        await self.inner.bind(namespace, name, uid, node, guard=check)


class FencedApiWriter:
    """An :class:`~ome_scheduler.framework.interface.ApiWriter` whose every attempt passes the
    fence first (VolumeBinding's PreBind patches: they record a node choice too).

    Raises:
        Fenced: from :meth:`patch`, when the fence refused an attempt before it was sent.
    """

    def __init__(self, inner: ApiWriter, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence

    async def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json", **kw: Any) -> bytes:
        """PATCH through ``inner`` with the fence as the per-attempt ``guard``."""
        check = _chain(self.fence.check, kw.pop("guard", None))
        check()
        return await self.inner.patch(path, body, content_type, guard=check, **kw)

    async def get(self, path: str, params: dict[str, str] | None = None, **kw: Any) -> bytes:
        """GET through ``inner``: a read records no decision, so the fence does not apply."""
        return await self.inner.get(path, params, **kw)

    async def delete(self, path: str, **kw: Any) -> bytes:
        """DELETE through ``inner`` with the fence as the per-attempt ``guard`` (a preemption victim)."""
        check = _chain(self.fence.check, kw.pop("guard", None))
        check()
        return await self.inner.delete(path, guard=check, **kw)


def _chain(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    """A guard that runs ``first``, then ``then`` (when given)."""
    if then is None:
        return first

    def both() -> None:
        first()
        then()

    return both
