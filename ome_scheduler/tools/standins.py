"""The API server's stand-ins for an offline run of the scheduler.

* :class:`MemoryBinder`: a Binding succeeds at once and is confirmed the way the informer
  confirms it, by feeding the bound pod back through ``handlers.on_pod_update``;
* :class:`CapturingRecorder`: keeps each pod's ``FailedScheduling`` and ``Scheduled`` notes
  and every PodGroup event;
* :class:`MemoryWriter`: preemption's deletes happen on the simulated clock; volume and claim
  bindings are not simulated, so PreBind's writes fail.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.tools.report import Eviction
from ome_scheduler.util.timestamps import now_rfc3339

if TYPE_CHECKING:
    from ome_scheduler.scheduler import Scheduler


@dataclass
class PodNotes:
    """What the recorder saw for one pod: the last ``FailedScheduling`` note and when."""

    failed: int = 0
    last_failure: str = ""
    last_failure_at: float = 0.0
    last_failure_seq: int = 0
    scheduled: str = ""
    nominated: str = ""


class CapturingRecorder:
    """An :class:`~ome_scheduler.framework.interface.EventRecorder` that keeps, per pod
    (``namespace/name``), the notes a user would read with ``kubectl describe``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.notes: dict[str, PodNotes] = {}
        self.gang_events: dict[str, list[str]] = {}
        """``namespace/podgroup`` -> ``"Reason: note"`` of every event on the PodGroup, in order."""
        self._clock = clock
        self._seq = 0

    def _of(self, pod: Pod) -> PodNotes:
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        n = self.notes.get(key)
        if n is None:
            n = self.notes[key] = PodNotes()
        return n

    def event(
        self, obj: Pod | Node | PodGroup, *, controller: str, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Keep a pod's ``FailedScheduling`` and ``Scheduled`` notes and every PodGroup event."""
        if isinstance(obj, PodGroup):
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            self.gang_events.setdefault(key, []).append(f"{reason}: {note}")
            return
        if not isinstance(obj, Pod):
            return
        n = self._of(obj)
        if reason == "FailedScheduling":
            self._seq += 1
            n.failed += 1
            n.last_failure, n.last_failure_at, n.last_failure_seq = note, self._clock(), self._seq
        elif reason == "Scheduled":
            n.scheduled = note

    def pod_scheduled_false(self, pod: Pod, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        """The condition carries the same message as the event: nothing more to keep."""
        if clear_nominated:
            self._of(pod).nominated = ""

    async def nominate(self, pod: Pod, node: str, abandon: asyncio.Future[Any] | None = None) -> None:
        """Remember the nominated node (a member waiting at Permit)."""
        self._of(pod).nominated = node


class MemoryBinder:
    """The :class:`~ome_scheduler.framework.interface.Binder`: every Binding succeeds, and the
    bound pod reaches ``handlers.on_pod_update`` on the next loop turn, as a watch event would."""

    def __init__(self, scheduler: Callable[[], Scheduler]) -> None:
        self.scheduler = scheduler
        """The scheduler whose pods this binds (called: the binder is made before the scheduler)."""
        self.bound: dict[str, str] = {}
        """``namespace/name`` -> node, in bind order."""
        self.in_flight = 0

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, guard: Callable[[], None] | None = None
    ) -> None:
        """Record the binding and schedule its informer confirmation (``guard`` is called first,
        as a real client calls it before sending).

        Raises:
            RuntimeError: the pod is gone or was re-created (the API server's 404/409).
        """
        if guard is not None:
            guard()
        key = f"{namespace}/{name}"
        pi = self.scheduler().pods.get(key)
        if pi is None or pi.uid != uid:
            raise RuntimeError(f'pods "{name}" not found')
        old = pi.pod
        new = msgspec.structs.replace(old, spec=msgspec.structs.replace(old.spec, node_name=node))
        self.bound[key] = node
        self.in_flight += 1
        asyncio.get_running_loop().call_soon(self._confirm, old, new)

    def _confirm(self, old: Pod, new: Pod) -> None:
        self.in_flight -= 1
        self.scheduler().handlers.on_pod_update(old, new)


DEFAULT_GRACE_SECONDS = 30
"""The API's default ``terminationGracePeriodSeconds``: how long a victim without its own keeps
running after its delete, in simulated seconds."""

_POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/status)?$")


class NotFound(RuntimeError):
    """A 404, with ``code`` as the API client's errors carry it."""

    code = 404


class MemoryWriter:
    """The :class:`~ome_scheduler.framework.interface.ApiWriter` of an offline run: preemption's
    writes are simulated, volume and claim writes are not.

    * a pod's status PATCH (the ``DisruptionTarget`` condition, a nomination cleared) is
      accepted and not fed back, as other status patches (the module docstring of
      :mod:`ome_scheduler.tools.simulation`);
    * a pod's DELETE (a preemption victim) is what the API server and the kubelet would do:
      at once the pod gets its ``deletionTimestamp`` (an informer update: it is terminating and
      still holds its node), then after its ``terminationGracePeriodSeconds`` (default
      :data:`DEFAULT_GRACE_SECONDS`) on the simulated clock it is deleted (an informer delete),
      which frees its room and wakes the preemptor;
    * any other PATCH (a PersistentVolume, claim or ResourceClaim of PreBind) and every GET
      raise, so a pod needing them fails PreBind.
    """

    def __init__(self, scheduler: Callable[[], Scheduler], loop: asyncio.AbstractEventLoop) -> None:
        self.scheduler = scheduler
        self.loop = loop
        self.start = 0.0
        """The simulated time the run started (evictions are reported from it)."""
        self.evictions: list[Eviction] = []
        """Every victim deleted, in order."""
        self.terminating = 0
        """Victims deleted and not yet gone (a simulation is not quiescent while any is)."""

    async def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> bytes:
        """Accept a pod's status patch; refuse any other.

        Raises:
            RuntimeError: not a pod's status, naming the object that would have been written.
        """
        m = _POD_PATH.match(path)
        if m is not None and m.group(3):
            return b"{}"
        raise RuntimeError(f"simulate does not bind volumes or claims (would PATCH {path})")

    async def get(self, path: str, params: dict[str, str] | None = None, **kw: Any) -> bytes:
        """Refuse (only a PATCH that met a conflict reads back).

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError(f"simulate reads nothing back (would GET {path})")

    async def delete(self, path: str, **kw: Any) -> bytes:
        """Delete a pod gracefully on the simulated clock (see the class docstring).

        Raises:
            NotFound: the pod is not there (the API server's 404).
            RuntimeError: not a pod.
        """
        m = _POD_PATH.match(path)
        if m is None or m.group(3):
            raise RuntimeError(f"simulate deletes only pods (would DELETE {path})")
        sch = self.scheduler()
        pi = sch.pods.get(f"{m.group(1)}/{m.group(2)}")
        if pi is None:
            raise NotFound(f'pods "{m.group(2)}" not found')
        old = pi.pod
        if old.metadata.deletion_timestamp:
            return b"{}"
        grace = old.spec.termination_grace_period_seconds
        grace = DEFAULT_GRACE_SECONDS if grace is None else max(0, grace)
        meta = msgspec.structs.replace(old.metadata, deletion_timestamp=now_rfc3339())
        new = msgspec.structs.replace(old, metadata=meta)
        now = self.loop.time() - self.start
        self.evictions.append(Eviction(pi.key, old.spec.node_name, round(now, 3), round(now + grace, 3)))
        self.terminating += 1
        sch.handlers.on_pod_update(old, new)
        self.loop.call_later(grace, self._gone, new)
        return b"{}"

    def _gone(self, pod: Pod) -> None:
        self.terminating -= 1
        self.scheduler().handlers.on_pod_delete(pod)
