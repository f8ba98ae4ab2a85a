"""``scheduling.x-k8s.io/v1alpha1`` PodGroup, as scheduler-plugins defines it.

Mirrors ``sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1/types.go``: the fields
OMEGangPack reads (``minMember``, ``scheduleTimeoutSeconds``) of the CRD in ``e2e/crds``.
"""

from __future__ import annotations

import msgspec

from ome_scheduler.api.meta import ObjectMeta, Record


class PodGroupSpec(Record, gc=False):
    """``PodGroupSpec``: ``minMember`` (gang size) and ``scheduleTimeoutSeconds`` (Permit wait, seconds)."""

    min_member: int | None = None
    schedule_timeout_seconds: int | None = None


class PodGroup(Record):
    """``scheduling.x-k8s.io/v1alpha1 PodGroup``: one gang (its spec, topology-key annotation and labels)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
