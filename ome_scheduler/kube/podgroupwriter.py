"""PodGroup status and annotation writes, and the member count that needs a LIST.

The I/O half of the leader's PodGroup status keeper (``ome_scheduler/controllers/podgroupstatus.py``
decides *what* to write and *when*; this module only writes it):

* :meth:`PodGroupWriter.update_status`: ``PUT .../podgroups/{name}/status`` (the status
  subresource, RBAC ``podgroups/status`` ``update``) guarded by the ``resourceVersion`` the
  informer last saw. A 409 Conflict (someone else wrote the PodGroup meanwhile) re-reads it
  and asks the caller for the status again from the fresh object, so another writer's fields
  (``occupiedBy``) survive; a 404 means the PodGroup is gone and is not an error.
* :meth:`PodGroupWriter.patch_annotations`: a JSON merge PATCH of ``metadata.annotations``
  (RBAC ``podgroups`` ``patch``; the CRD's status has no ``conditions``, see
  ``api/scheduling.py``) with the UID as a precondition, so a re-created PodGroup of the same
  name is never written with its predecessor's placement (409).
* :meth:`PodGroupWriter.count_members`: a LIST of the gang's pods by label, the only way to
  count Succeeded and Failed members (the scheduler's pod informer drops finished pods).

Every request goes at :data:`~ome_scheduler.kube.client.PRIORITY_EVENTS`, the lowest: when the
API server is the bottleneck, Bindings, Lease renewals and pod status patches go first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.meta import ObjectList
from ome_scheduler.api.scheduling import PodGroup, PodGroupStatus
from ome_scheduler.kube.client import PRIORITY_EVENTS, ApiError, KubeClient

GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""The label that names a pod's PodGroup (``framework.types.POD_GROUP_LABEL``; kube/ stays below
the framework, so it is spelled here too)."""
_PG = msgspec.json.Decoder(PodGroup)
_PODS = msgspec.json.Decoder(ObjectList[Pod])

WRITTEN, UNCHANGED, GONE, CONFLICT = "written", "unchanged", "gone", "conflict"
"""Outcomes of a write: done; nothing to write (after a re-read); the PodGroup is gone (or
re-created); still conflicting after every retry."""


def pod_group_path(namespace: str, name: str) -> str:
    """The PodGroup's API path."""
    return f"/apis/{GROUP_VERSION}/namespaces/{namespace}/podgroups/{name}"


@dataclass(frozen=True, slots=True)
class MemberCounts:
    """A gang's pods as a LIST shows them: all that exist, and those Running, Succeeded, Failed."""

    total: int
    running: int
    succeeded: int
    failed: int


class PodGroupWriter:
    """Writes PodGroup status and annotations through ``client`` at the lowest priority."""

    def __init__(self, client: KubeClient, *, conflict_retries: int = 3) -> None:
        self.client = client
        self.conflict_retries = conflict_retries

    async def update_status(
        self, pg: PodGroup, status_of: Callable[[PodGroup], PodGroupStatus | None]
    ) -> tuple[str, PodGroup]:
        """Write ``status_of(pg)`` to ``pg``'s status subresource (None: nothing to write).

        On 409 the PodGroup is read again and ``status_of`` asked again with the fresh object,
        up to ``conflict_retries`` times. Returns the outcome (:data:`WRITTEN`, ...) and the
        last PodGroup read.

        Raises:
            ApiError: an answer other than 2xx, 404 and 409 (403 without the RBAC rule).
            aiohttp.ClientError / TimeoutError: the API server could not be reached.
        """
        md = pg.metadata
        path = pod_group_path(md.namespace, md.name)
        for _ in range(self.conflict_retries + 1):
            status = status_of(pg)
            if status is None:
                return UNCHANGED, pg
            body: dict[str, Any] = {
                "apiVersion": GROUP_VERSION,
                "kind": "PodGroup",
                "metadata": {
                    "name": pg.metadata.name,
                    "namespace": pg.metadata.namespace,
                    "uid": pg.metadata.uid,
                    "resourceVersion": pg.metadata.resource_version,
                },
                "status": msgspec.to_builtins(status),
            }
            try:
                await self.client.put(f"{path}/status", body, retries=2, priority=PRIORITY_EVENTS)
                return WRITTEN, pg
            except ApiError as exc:
                if exc.code == 404:
                    return GONE, pg
                if exc.code != 409:
                    raise
            try:
                fresh = _PG.decode(await self.client.get(path, priority=PRIORITY_EVENTS))
            except ApiError as exc:
                if exc.code == 404:
                    return GONE, pg
                raise
            if md.uid and fresh.metadata.uid != md.uid:
                return GONE, fresh  # deleted and re-created meanwhile: not the gang we counted
            pg = fresh
        return CONFLICT, pg

    async def patch_annotations(self, pg: PodGroup, changes: dict[str, str | None]) -> str:
        """Merge-patch ``changes`` into the PodGroup's annotations (None deletes one).

        The PodGroup's UID is sent as a precondition: a 409 means it was re-created and is
        reported as :data:`GONE`, like a 404.

        Raises:
            ApiError: any other failure (403 without the RBAC rule).
            aiohttp.ClientError / TimeoutError: the API server could not be reached.
        """
        if not changes:
            return UNCHANGED
        md = pg.metadata
        meta: dict[str, Any] = {"annotations": changes}
        if md.uid:
            meta["uid"] = md.uid
        try:
            await self.client.patch(
                pod_group_path(md.namespace, md.name), {"metadata": meta}, retries=2, priority=PRIORITY_EVENTS
            )
        except ApiError as exc:
            if exc.code in (404, 409):
                return GONE
            raise
        return WRITTEN

    async def count_members(self, namespace: str, name: str) -> MemberCounts:
        """LIST the pods labelled for PodGroup ``namespace/name`` and count them by phase.

        Raises:
            ApiError / transport errors: the LIST failed.
        """
        raw = await self.client.get(
            f"/api/v1/namespaces/{namespace}/pods",
            {"labelSelector": f"{POD_GROUP_LABEL}={name}"},
            priority=PRIORITY_EVENTS,
        )
        pods = _PODS.decode(raw).items
        phases = [p.status.phase for p in pods]
        return MemberCounts(len(pods), phases.count("Running"), phases.count("Succeeded"), phases.count("Failed"))
