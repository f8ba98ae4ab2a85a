"""The ResourceClaim writes of DynamicResources: PreBind's allocation and reservation, PostFilter's
deallocation, Unreserve's release. All I/O goes through the Handle's API writer port.

Mirrors ``bindClaim``, the deallocation in ``PostFilter`` and the reservation removal in
``Unreserve`` of ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``
(v1.35.4). Upstream replaces the claim (``Update`` to add the finalizer, ``UpdateStatus`` for the
allocation and ``reservedFor``) from the object it read; the scheduler's records hold only the
fields it reads, so replacing would drop the rest. Instead each write is a JSON merge patch
carrying the ``resourceVersion`` (and ``uid``) it was computed from: the API server refuses it
with 409 Conflict when the claim changed since, exactly as it refuses a stale update, and what
the patch leaves out stays as it is. Lists in a merge patch are replaced whole, as an update
replaces them.

On a conflict the claim is read again (GET) and the write recomputed, at most
:data:`RETRY_STEPS` times with :data:`RETRY_DELAY` seconds between (client-go's
``retry.DefaultRetry``); a claim that got deleted or allocated by someone else in the meantime
ends the attempt with upstream's message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import FINALIZER, AllocationResult, ResourceClaim
from ome_scheduler.framework.interface import ApiWriter
from ome_scheduler.plugins.dynamicresources.claims import claim_ref

RETRY_STEPS = 5
RETRY_DELAY = 0.01
_DECODE = msgspec.json.Decoder(ResourceClaim)
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


MSG_ALLOCATED_ELSEWHERE = "got allocated elsewhere in the meantime"


def claim_path(claim: ResourceClaim, status: bool = False) -> str:
    """The claim's API path (``/status`` for the status subresource)."""
    md = claim.metadata
    path = f"/apis/resource.k8s.io/v1/namespaces/{md.namespace}/resourceclaims/{md.name}"
    return path + "/status" if status else path


def is_conflict(exc: BaseException) -> bool:
    """The API server answered 409 Conflict (the object changed since it was read)."""
    return getattr(exc, "code", None) == 409


class ClaimWriteError(RuntimeError):
    """A claim write failed; the message is upstream's (``add finalizer to claim ns/c: ...``)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


def _precondition(claim: ResourceClaim) -> dict[str, Any]:
    md = claim.metadata
    return {"uid": md.uid, "resourceVersion": md.resource_version}


async def bind_claim(
    writer: ApiWriter, claim: ResourceClaim, allocation: AllocationResult | None, pod: Pod
) -> ResourceClaim:
    """``bindClaim``: write ``allocation`` (when the scheduler allocated the claim) and reserve
    the claim for ``pod``; returns the claim as the API server answered.

    First, if the claim lacks :data:`FINALIZER`, a patch adds it; then one patch of the status
    subresource writes ``allocation`` and ``reservedFor`` (the old entries plus the pod).

    Raises:
        ClaimWriteError: ``claim ns/c got deleted in the meantime``, ``claim ns/c got allocated
            elsewhere in the meantime``, ``add finalizer to claim ns/c: ...``, ``add allocation
            and reservation to claim ns/c: ...`` / ``add reservation to claim ns/c: ...``, or
            ``get updated claim ns/c after conflict: ...``; a conflict that outlasts the retries
            is the last of these with the 409 in it.
    """
    refresh = False
    last: ClaimWriteError | None = None
    for attempt in range(RETRY_STEPS):
        if attempt:
            await asyncio.sleep(RETRY_DELAY)
        if refresh:
            try:
                claim = _DECODE.decode(await writer.get(claim_path(claim)))
            except Exception as exc:
                raise ClaimWriteError(f"get updated claim {claim_ref(claim)} after conflict: {exc}", exc) from exc
        refresh = True
        ref = claim_ref(claim)
        if claim.metadata.deletion_timestamp is not None:
            raise ClaimWriteError(f"claim {ref} got deleted in the meantime")
        status: dict[str, Any] = {}
        if allocation is not None:
            if claim.status.allocation is not None:
                raise ClaimWriteError(f"claim {ref} {MSG_ALLOCATED_ELSEWHERE}")
            if FINALIZER not in claim.metadata.finalizers:
                body = {"metadata": {**_precondition(claim), "finalizers": [*claim.metadata.finalizers, FINALIZER]}}
                try:
                    claim = _DECODE.decode(await writer.patch(claim_path(claim), body))
                except Exception as exc:
                    last = ClaimWriteError(f"add finalizer to claim {ref}: {exc}", exc)
                    if is_conflict(exc):
                        continue
                    raise last from exc
            status["allocation"] = msgspec.to_builtins(allocation)
        reserved = [msgspec.to_builtins(r) for r in claim.status.reserved_for]
        reserved.append({"resource": "pods", "name": pod.metadata.name, "uid": pod.metadata.uid})
        status["reservedFor"] = reserved
        body = {"metadata": _precondition(claim), "status": status}
        try:
            return _DECODE.decode(await writer.patch(claim_path(claim, status=True), body))
        except Exception as exc:
            what = "add allocation and reservation to claim" if allocation is not None else "add reservation to claim"
            last = ClaimWriteError(f"{what} {ref}: {exc}", exc)
            if is_conflict(exc):
                continue
            raise last from exc
    assert last is not None
    raise last


async def deallocate(writer: ApiWriter, claim: ResourceClaim) -> None:
    """PostFilter's deallocation: ``status.allocation``, ``reservedFor`` and ``devices`` cleared,
    guarded by the claim's resourceVersion (a claim that changed since is left alone).

    Raises:
        Exception: the API error.
    """
    body = {"metadata": _precondition(claim), "status": {"allocation": None, "reservedFor": None, "devices": None}}
    await writer.patch(claim_path(claim, status=True), body)


async def unreserve(writer: ApiWriter, claim: ResourceClaim, pod: Pod) -> None:
    """Unreserve: drop ``pod`` from ``status.reservedFor`` with a strategic merge patch (the
    list's merge key is ``uid``, so no fresh copy of the claim is needed).

    Raises:
        Exception: the API error.
    """
    body = {
        "metadata": {"uid": claim.metadata.uid},
        "status": {"reservedFor": [{"$patch": "delete", "uid": pod.metadata.uid}]},
    }
    await writer.patch(claim_path(claim, status=True), body, STRATEGIC_MERGE_PATCH)
