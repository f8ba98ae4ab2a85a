"""DefaultBinder: POST the pod's Binding to the API server.

Mirrors ``pkg/scheduler/framework/plugins/defaultbinder/default_binder.go``. The plugin does
no I/O of its own: it calls the Binder port the scheduler hands it (``kube/``), so the
framework stays free of Kubernetes clients.
"""

from __future__ import annotations

from ome_scheduler.framework.interface import Binder, BindPlugin, CycleState, FrameworkOptions, Handle
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo


class DefaultBinder(BindPlugin):
    """``DefaultBinder``: POSTs the pod's Binding through the Binder port."""

    name = "DefaultBinder"

    def __init__(self, binder: Binder | None) -> None:
        self.binder = binder

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """POST the Binding; any API failure is an Error status (the pod is requeued)."""
        if self.binder is None:  # built only to check a configuration
            return Status.as_error(RuntimeError("DefaultBinder has no API client"))
        try:
            await self.binder.bind(pod.namespace, pod.name, pod.uid, node)
        except Exception as exc:
            return Status.as_error(exc)
        return None

    @classmethod
    def new(cls, args: None, handle: Handle, options: FrameworkOptions) -> DefaultBinder:
        """Bind through ``options.binder`` (None when built only to check a configuration)."""
        return cls(options.binder)
