"""A pod's ResourceClaims: which claim each ``spec.resourceClaims`` entry names, and whose it is.

Mirrors ``k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`` (``Name``,
``IsForPod``, ``IsReservedForPod``, ``CanBeReserved``) and the plugin's ``foreachPodResourceClaim``
(``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``, v1.35.4). Every
error text is upstream's; the plugin turns it into an UnschedulableAndUnresolvable status.
"""

from __future__ import annotations

from collections.abc import Callable

from ome_scheduler.api.core import Pod, PodResourceClaim
from ome_scheduler.api.resource import ResourceClaim

ERR_CLAIM_NOT_FOUND = "ResourceClaim not created yet"
"""``resourceclaim.ErrClaimNotFound``: the resourceclaim controller has not yet created the
claim of a template entry (nor recorded it in ``status.resourceClaimStatuses``)."""
ERR_API_UNSUPPORTED = "none of the supported fields are set"
"""``resourceclaim.ErrAPIUnsupported``: an entry with neither a claim nor a template name."""

ClaimGetter = Callable[[str, str], ResourceClaim | None]
"""(namespace, name) -> the claim, or None (``ResourceClaims().Get``)."""


class ClaimError(Exception):
    """Why a pod cannot be scheduled now because of its claims (the message is upstream's)."""


def claim_name(pod: Pod, entry: PodResourceClaim) -> tuple[str | None, bool]:
    """``resourceclaim.Name``: (the claim's name or None, whether the pod must own it).

    None means the template needed no claim (the controller recorded a status entry without a
    name); such an entry is skipped.

    Raises:
        ClaimError: ``pod "ns/name": ResourceClaim not created yet`` (a template entry without a
            status entry yet), or ``pod "ns/name", spec.resourceClaim "x": none of the supported
            fields are set``.
    """
    md = pod.metadata
    if entry.resource_claim_name is not None:
        return entry.resource_claim_name, False
    if entry.resource_claim_template_name is not None:
        for status in pod.status.resource_claim_statuses:
            if status.name == entry.name:
                return status.resource_claim_name, True
        raise ClaimError(f'pod "{md.namespace}/{md.name}": {ERR_CLAIM_NOT_FOUND}')
    raise ClaimError(f'pod "{md.namespace}/{md.name}", spec.resourceClaim "{entry.name}": {ERR_API_UNSUPPORTED}')


def is_for_pod(pod: Pod, claim: ResourceClaim) -> str:
    """``resourceclaim.IsForPod``: "" when the pod controls the claim, else the error text."""
    md, cmd = pod.metadata, claim.metadata
    if cmd.namespace == md.namespace:
        for ref in cmd.owner_references:
            if ref.controller and ref.uid == md.uid:
                return ""
    return (
        f"ResourceClaim {cmd.namespace}/{cmd.name} was not created for pod {md.namespace}/{md.name} (pod is not owner)"
    )


def is_reserved_for_pod(pod: Pod, claim: ResourceClaim) -> bool:
    """``resourceclaim.IsReservedForPod``: the pod's UID is among ``status.reservedFor``."""
    uid = pod.metadata.uid
    return any(r.uid == uid for r in claim.status.reserved_for)


def pod_claims(pod: Pod, get: ClaimGetter) -> list[tuple[str, ResourceClaim]]:
    """``foreachPodResourceClaim``: (entry name, claim) for every entry that names a claim, in
    ``spec.resourceClaims`` order.

    Raises:
        ClaimError: a claim is not created yet, missing (``could not find ResourceClaim
            "ns/name"``), being deleted (``resourceclaim "name" is being deleted``) or, for a
            template entry, not owned by the pod.
    """
    out: list[tuple[str, ResourceClaim]] = []
    ns = pod.metadata.namespace
    for entry in pod.spec.resource_claims:
        name, must_own = claim_name(pod, entry)
        if name is None:
            continue
        claim = get(ns, name)
        if claim is None:
            raise ClaimError(f'could not find ResourceClaim "{ns}/{name}"')
        if claim.metadata.deletion_timestamp is not None:
            raise ClaimError(f'resourceclaim "{claim.metadata.name}" is being deleted')
        if must_own:
            err = is_for_pod(pod, claim)
            if err:
                raise ClaimError(err)
        out.append((entry.name, claim))
    return out


def claim_ref(claim: ResourceClaim) -> str:
    """``klog.KObj(claim)``: ``namespace/name``."""
    md = claim.metadata
    return f"{md.namespace}/{md.name}" if md.namespace else md.name
