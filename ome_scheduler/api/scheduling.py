"""``scheduling.x-k8s.io/v1alpha1`` PodGroup, as scheduler-plugins defines it.

Mirrors ``sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1/types.go``: the fields
OMEGangPack reads (``minMember``, ``scheduleTimeoutSeconds``) and the status the leader keeps
(``phase``, ``running``, ``succeeded``, ``failed``, ``scheduleStartTime``, ``occupiedBy``), as
the CRD in ``e2e/crds`` (``v0.35.4-devel``) declares them.

That CRD's status has no ``conditions`` and no ``scheduled`` (the API server prunes fields its
structural schema does not declare), so *where* a gang is and *why* it waits are kept in the
annotations of :data:`STATUS_ANNOTATIONS` instead. They are written by the scheduler, never read
as configuration: :func:`same_definition` ignores them, so the scheduler's own writes wake no gang.
"""

from __future__ import annotations

import msgspec

from ome_scheduler.api.meta import ObjectMeta, Record

PHASE_PENDING = "Pending"
"""Fewer than ``minMember`` members exist (scheduler-plugins' ``PodGroupPending``)."""
PHASE_SCHEDULING = "Scheduling"
"""``minMember`` members exist, fewer than ``minMember`` are bound (``PodGroupScheduling``)."""
PHASE_SCHEDULED = "Scheduled"
"""``minMember`` members are bound, fewer than ``minMember`` run or have succeeded (``PodGroupScheduled``
of scheduler-plugins' earlier API: the phase between binding and running)."""
PHASE_RUNNING = "Running"
"""Running plus succeeded members reach ``minMember`` (``PodGroupRunning``)."""
PHASE_FINISHED = "Finished"
"""Succeeded members reach ``minMember`` (``PodGroupFinished``; final)."""
PHASE_FAILED = "Failed"
"""A member failed and failed + running + succeeded reach ``minMember`` (``PodGroupFailed``; final)."""
FINAL_PHASES = frozenset({PHASE_FINISHED, PHASE_FAILED})
"""Phases the status is never moved out of, as scheduler-plugins' controller stops reconciling them."""

ANN_PLACEMENT = "ome.io/placement"
"""``Holding`` (pinned to a domain and holding it while the gang forms), ``Pinned`` (pinned, its
hold expired after ``scheduleTimeoutSeconds``) or ``Bound`` (``minMember`` members bound there)."""
ANN_PLACEMENT_DOMAIN = "ome.io/placement-domain"
"""The domain (a value of the topology label) the gang is pinned to or bound in."""
ANN_PLACEMENT_TOPOLOGY_KEY = "ome.io/placement-topology-key"
"""The topology key (node label) that domain is a value of."""
ANN_WAITING_REASON = "ome.io/waiting-reason"
"""While the gang is not bound: the last reason a member could not be scheduled, as its
``FailedScheduling`` event says it."""
STATUS_ANNOTATIONS = (ANN_PLACEMENT, ANN_PLACEMENT_DOMAIN, ANN_PLACEMENT_TOPOLOGY_KEY, ANN_WAITING_REASON)
"""The annotations the leader writes on PodGroups (and reads back nowhere but ``explain``)."""
PLACEMENT_HOLDING, PLACEMENT_PINNED, PLACEMENT_BOUND = "Holding", "Pinned", "Bound"


class PodGroupSpec(Record, gc=False):
    """``PodGroupSpec``: ``minMember`` (gang size) and ``scheduleTimeoutSeconds`` (Permit wait, seconds)."""

    min_member: int | None = None
    schedule_timeout_seconds: int | None = None


class PodGroupStatus(Record, gc=False):
    """``PodGroupStatus``: the phase (``PHASE_*``), member counts and ``scheduleStartTime`` (RFC 3339).

    Every field of the CRD's status schema is declared, so a status written back whole
    (``PUT .../status``) keeps what another writer set (``occupiedBy``).
    """

    phase: str = ""
    occupied_by: str = ""
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    schedule_start_time: str | None = None


class PodGroup(Record):
    """``scheduling.x-k8s.io/v1alpha1 PodGroup``: one gang (its spec, topology-key annotation and labels)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)


def definition_annotations(pg: PodGroup) -> dict[str, str]:
    """The PodGroup's annotations without the scheduler's :data:`STATUS_ANNOTATIONS`."""
    ann = pg.metadata.annotations
    if not any(k in ann for k in STATUS_ANNOTATIONS):
        return ann
    return {k: v for k, v in ann.items() if k not in STATUS_ANNOTATIONS}


def same_definition(old: PodGroup, new: PodGroup) -> bool:
    """Whether ``new`` defines the same gang as ``old``: same UID, spec, labels and annotations
    other than the scheduler's :data:`STATUS_ANNOTATIONS`. Status and those annotations are what
    the scheduler itself writes, so an update that changes only them changes nothing to plan."""
    return (
        old.metadata.uid == new.metadata.uid
        and old.spec == new.spec
        and old.metadata.labels == new.metadata.labels
        and definition_annotations(old) == definition_annotations(new)
    )
