"""The Binder the scheduler binds through: no Binding from a view the API server may have outrun.

kube-scheduler's DefaultBinder POSTs the Binding the scheduling cycle decided, whatever
happened meanwhile; the API server accepts a Binding to a node that no longer exists (the pod
then sits there until the pod garbage collector deletes it). Outages make that likely: while
the scheduler cannot reach the API server its informers stop hearing about changes, and when
the connection comes back its watches (one per resource, each resuming on its own) and its
Bindings race each other, so a Binding decided on the old view can land before the node's
deletion reaches the cache. :class:`GatedBinder` closes that race:

* **No Binding from a stale view.** An informer whose watch failed or stalled is *stale* until
  its next LIST completes (``kube/informer.py``); a LIST is a consistent read, so afterwards
  the cache holds every change made while the server was out of reach. A Binding waits while
  any informer is stale.
* **Live node.** A Binding goes only to a node the node informer still has; otherwise it fails
  with ``node "X" no longer exists`` and the pod is scheduled again.
* **Lost answers.** A Binding that fails in transport at time *t* is not re-sent blindly: the
  path to the server broke around *t*, perhaps unnoticed by the watches yet, so first every
  informer must be known current since *t* (a LIST, a new watch or an event after *t*; the
  quiet ones are asked to relist). Then the pod informer tells whether the Binding landed
  (the pod is bound to our node: success) or not (the node is checked again and the Binding
  re-sent), at most ``attempts`` times in all.

Each wait is bounded by ``fresh_timeout`` seconds; beyond it the Binding fails (an error
status: the pod is requeued with backoff, as for any Bind error). In steady state (no stale
informer) the checks are two dictionary lookups.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from ome_scheduler.kube.client import TRANSPORT_ERRORS, KubeClient
from ome_scheduler.kube.informer import Informer
from ome_scheduler.logs import get_logger

log = get_logger()


class BindingRefused(Exception):
    """The Binding was not sent: the node or the pod is not what the scheduler decided on."""


class StaleView(Exception):
    """The informers did not re-read the cluster within ``fresh_timeout`` seconds."""


class GatedBinder:
    """``Binder`` over ``client`` (see the module docstring); call :meth:`use` with the
    informers before the first Binding (until then only the transport-retry rule applies)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        fresh_timeout: float = 30.0,
        attempts: int = 4,
        poll: float = 0.05,
        status_settled: Callable[[str, str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.status_settled = status_settled
        """Awaited with (uid, namespace, name) before the first attempt: the pod's earlier status
        writes end first (``Recorder.status_settled``)."""
        self.fresh_timeout = fresh_timeout
        self.attempts = attempts
        self.poll = poll
        self.informers: list[Informer[Any]] = []
        self.nodes: Informer[Any] | None = None
        self.pods: Informer[Any] | None = None

    def use(self, informers: Iterable[Informer[Any]], *, nodes: Informer[Any], pods: Informer[Any]) -> None:
        """The informers whose view a Binding must not outrun, and the node and pod informers."""
        self.informers = list(informers)
        self.nodes = nodes
        self.pods = pods

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, guard: Callable[[], None] | None = None
    ) -> None:
        """POST the Binding of ``namespace/name`` (``uid``) to ``node`` (see the module docstring).
        ``guard`` (the leader's fence) runs right before each attempt is sent, after every wait.

        Raises:
            BindingRefused: the node is gone, or the pod is gone or bound elsewhere.
            StaleView: the informers could not re-read the cluster within ``fresh_timeout``.
            ApiError: the API server refused the Binding.
            aiohttp.ClientError / TimeoutError: every attempt failed in transport.
            Exception: whatever ``guard`` raised (the Binding was not sent).
        """
        last: BaseException | None = None
        failed_at: float | None = None
        if self.status_settled is not None:
            await self.status_settled(uid, namespace, name)
        for _ in range(max(1, self.attempts)):
            await self.fresh_view(failed_at)
            if self._landed(namespace, name, uid, node):
                return
            try:
                await self.client.bind(namespace, name, uid, node, transport_retries=0, guard=guard)
                return
            except TRANSPORT_ERRORS as exc:
                last, failed_at = exc, time.monotonic()
                log.info(
                    "Binding not sent or its answer lost; re-reading the cluster before retrying",
                    v=2,
                    pod=f"{namespace}/{name}",
                    node=node,
                    error=repr(exc),
                )
        assert last is not None
        raise last

    def behind(self, since: float | None = None) -> list[Informer[Any]]:
        """Informers a Binding must wait for: the stale ones, and with ``since`` (monotonic
        seconds) the ones not known current since then."""
        if since is None:
            return [inf for inf in self.informers if inf.stale]
        return [inf for inf in self.informers if not inf.current_since(since)]

    async def fresh_view(self, since: float | None = None) -> None:
        """Wait until no informer is :meth:`behind` (``since``); with ``since``, the quiet ones
        are asked to relist.

        Raises:
            StaleView: not within ``fresh_timeout`` seconds.
        """
        behind = self.behind(since)
        if not behind:
            return
        t0 = time.monotonic()
        log.info("waiting for a fresh view before binding", v=2, informers=[inf.name for inf in behind])
        if since is not None:
            for inf in behind:
                if not inf.stale:
                    inf.request_relist()  # quiet, perhaps on a broken path: re-read it
        try:
            with anyio.fail_after(self.fresh_timeout):
                while behind:
                    await anyio.sleep(self.poll)
                    behind = self.behind(since)
        except TimeoutError:
            names = ", ".join(inf.name for inf in behind)
            raise StaleView(
                f"the cluster was not re-read within {self.fresh_timeout:g}s after the API server was "
                f"out of reach (informers: {names})"
            ) from None
        log.info("view re-read, binding", v=2, waitedSeconds=round(time.monotonic() - t0, 3))

    def _landed(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Whether the pod informer shows the pod bound to ``node`` already (a Binding whose
        answer was lost); raises :class:`BindingRefused` when the Binding must not be sent."""
        if self.pods is not None:
            pod = self.pods.store.get(f"{namespace}/{name}")
            if pod is None or (uid and pod.metadata.uid != uid):
                raise BindingRefused(f"pod {namespace}/{name} no longer exists")
            bound = str(pod.spec.node_name or "")
            if bound == node:
                return True
            if bound:
                raise BindingRefused(f'pod {namespace}/{name} is already bound to node "{bound}"')
        if self.nodes is not None and node not in self.nodes.store:
            raise BindingRefused(f'node "{node}" no longer exists')
        return False
