"""Gang resolution: from a member pod and its PodGroup to a validated :class:`Gang`.

Implements ``docs/design/gang-scheduling.md`` §2.1–§2.4: the gang key, the PodGroup fields read
(``minMember``, ``scheduleTimeoutSeconds``), the topology key (annotation first, then the
configured fallback) and the PreFilter validation order with its exact messages. Pure: it
reads the PodGroup through the Handle's lister and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ome_scheduler.api.core import Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.interface import PodGroupLister
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import GangKey, PodInfo


@dataclass(frozen=True, slots=True)
class Gang:
    """A validated gang: key, PodGroup UID, size, domain label and Permit timeout (seconds)."""

    key: GangKey
    namespace: str
    name: str
    uid: str
    min_member: int
    topology_key: str
    timeout: int


def topology_key_of(pg: PodGroup, args: OMEGangPackArgs) -> str:
    """§2.3: the PodGroup's topology-key annotation when set, else the configured ``topologyKey``."""
    ann = args.pod_group_topology_key_annotation
    v = pg.metadata.annotations.get(ann, "") if ann else ""
    return v or args.topology_key


def permit_timeout(pg: PodGroup, args: OMEGangPackArgs) -> int:
    """§4.2: the gang's Permit wait in seconds (0: none configured): the PodGroup's positive
    ``scheduleTimeoutSeconds``, else ``defaultPermitTimeoutSeconds``, capped at the operator's
    ``maxPermitTimeoutSeconds`` when that is set. The same number bounds the gang's holds (rule 8)."""
    sts = pg.spec.schedule_timeout_seconds
    timeout = sts if sts is not None and sts > 0 else (args.default_permit_timeout_seconds or 0)
    cap = args.max_permit_timeout_seconds
    return min(timeout, cap) if cap else timeout


def resolve_gang(pod: PodInfo, pod_groups: PodGroupLister, args: OMEGangPackArgs) -> Gang | Status:
    """§2.4: the member's gang, or the Unschedulable status that says why it cannot be planned.

    Checks in the documented order: the PodGroup exists and is readable, ``minMember`` is
    positive, a topology key resolves, the unsupported placement-group label is absent, and
    a Permit timeout is configured (UnschedulableAndUnresolvable when not).
    """
    ns, name = pod.namespace, pod.gang
    key = pod.gang_key
    pg = pod_groups.get(ns, name)
    if pg is None:
        err = pod_groups.error(ns, name)
        if err is not None:  # exists but unreadable (the CRD schema would normally prevent it)
            return Status.unschedulable(f"PodGroup {key} is invalid: {err}")
        return Status.unschedulable(f"PodGroup {key} not resolvable yet")
    mm = pg.spec.min_member or 0
    if mm <= 0:
        return Status.unschedulable(f"PodGroup {key} must declare a positive minMember")
    tk = topology_key_of(pg, args)
    if not tk:
        ann = args.pod_group_topology_key_annotation
        if not ann:
            return Status.unschedulable(
                "scheduler must configure topologyKey or podGroupTopologyKeyAnnotation for gang pods"
            )
        return Status.unschedulable(f"PodGroup {key} must declare {ann} or the scheduler must configure topologyKey")
    pgl = args.unsupported_placement_group_label
    if pgl and (pgl in pod.pod.metadata.labels or pgl in pg.metadata.labels):
        return Status.unschedulable("partner placement groups are not supported")
    timeout = permit_timeout(pg, args)
    if timeout <= 0:
        return Status.unresolvable(
            f"PodGroup {key} must set scheduleTimeoutSeconds or the scheduler must configure "
            "defaultPermitTimeoutSeconds"
        )
    return Gang(key, ns, name, pg.metadata.uid, mm, tk, timeout)


def is_live(pod: Pod) -> bool:
    """Not being deleted and not Succeeded or Failed."""
    return pod.metadata.deletion_timestamp is None and pod.status.phase not in ("Succeeded", "Failed")


def same_pod(a: Pod, b: Pod) -> bool:
    """§2.1: equal UIDs, or (one lacks a UID) equal namespace and non-empty name."""
    if a.metadata.uid and b.metadata.uid:
        return a.metadata.uid == b.metadata.uid
    return a.metadata.namespace == b.metadata.namespace and bool(a.metadata.name) and a.metadata.name == b.metadata.name
