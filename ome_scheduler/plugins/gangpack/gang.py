"""Gang resolution: from a member pod and its gang source to a validated :class:`Gang`.

Implements ``docs/design/gang-scheduling.md`` §2.1–§2.4: the gang key, the PodGroup fields read
(``minMember``, ``scheduleTimeoutSeconds``), the topology key (annotation first, then the
configured fallback) and the PreFilter validation order with its exact messages. A gang whose
source is a LeaderWorkerSet group (``framework/gangsource.py``) is resolved from its pod's
labels and annotations instead (:func:`resolve_lws_gang`). Pure: it reads the PodGroup or the
LeaderWorkerSet through the Handle and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ome_scheduler.api.core import Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.workloads import LeaderWorkerSet
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.gangsource import LWS_NAME_LABEL, GangSource, lws_size, lws_topology_key, source_of
from ome_scheduler.framework.interface import PodGroupLister
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.topology import level_key
from ome_scheduler.framework.types import GangKey, NodeInfo, PodInfo
from ome_scheduler.plugins.gangpack.levels import (
    PREFERRED_KEYS_ANNOTATION,
    SUBGROUP_KEY_ANNOTATION,
    SUBGROUP_SIZE_ANNOTATION,
    levels,
    parse_preferred_keys,
    parse_subgroups,
)


@dataclass(frozen=True, slots=True)
class Gang:
    """A validated gang: key, PodGroup UID (``""`` for an LWS group), size, domain label, Permit
    timeout (seconds), source, and whether its leader binds first (an LWS group with
    ``startupPolicy: LeaderReady``, whose workers are created only once the leader runs)."""

    key: GangKey
    namespace: str
    name: str
    uid: str
    min_member: int
    topology_key: str
    timeout: int
    source: GangSource = "PodGroup"
    leader_first: bool = False
    preferred_keys: tuple[str, ...] = ()
    """§3.9: the ``ome.io/topology-preferred-keys`` tried inside ``topology_key``, tightest first."""
    subgroup_size: int = 0
    """§3.10: members per sub-gang (0: no sub-gangs)."""
    subgroup_key: str = ""
    """§3.10: the label each sub-gang shares one domain of, inside ``topology_key``."""

    @property
    def sub_level(self) -> str:
        """§3.10: the level key of the sub-gangs' domains (``R>S``)."""
        return level_key(self.topology_key, self.subgroup_key)

    @property
    def levels(self) -> list[str]:
        """§3.9: the level keys the gang tries in order, the required ``topology_key`` last."""
        return levels(self.topology_key, self.preferred_keys) if self.preferred_keys else [self.topology_key]


def topology_key_of(pg: PodGroup, args: OMEGangPackArgs) -> str:
    """§2.3: the PodGroup's topology-key annotation when set, else the configured ``topologyKey``."""
    ann = args.pod_group_topology_key_annotation
    v = pg.metadata.annotations.get(ann, "") if ann else ""
    return v or args.topology_key


def permit_timeout(pg: PodGroup, args: OMEGangPackArgs) -> int:
    """§4.2: the gang's Permit wait in seconds (0: none configured): the PodGroup's positive
    ``scheduleTimeoutSeconds``, else ``defaultPermitTimeoutSeconds``, capped at the operator's
    ``maxPermitTimeoutSeconds`` when that is set. The same number bounds the gang's holds (rule 8)."""
    return capped_timeout(pg.spec.schedule_timeout_seconds, args)


def capped_timeout(sts: int | None, args: OMEGangPackArgs) -> int:
    """A positive ``sts`` else ``defaultPermitTimeoutSeconds`` (0: none), capped at
    ``maxPermitTimeoutSeconds`` when that is set."""
    timeout = sts if sts is not None and sts > 0 else (args.default_permit_timeout_seconds or 0)
    cap = args.max_permit_timeout_seconds
    return min(timeout, cap) if cap else timeout


def resolve_lws_gang(
    pod: PodInfo, args: OMEGangPackArgs, lws: Callable[[str, str], LeaderWorkerSet | None]
) -> Gang | Status:
    """§2.1: the gang of an LWS group's pod, or the Unschedulable status that says why not.

    Size from the ``leaderworkerset.sigs.k8s.io/size`` label or annotation; topology key from
    the ``exclusive-topology`` (else ``subgroup-exclusive-topology``) annotation, else the
    configured ``topologyKey``; timeout ``defaultPermitTimeoutSeconds`` (capped). ``lws(ns,
    name)`` looks up the LeaderWorkerSet for its ``startupPolicy``: ``LeaderReady`` makes the
    leader bind first; a set not (yet) in the cache counts as ``LeaderCreated``.
    """
    ns, key, md = pod.namespace, pod.gang_key, pod.pod.metadata
    size = lws_size(md)
    if size is None:
        return Status.unschedulable(f"LeaderWorkerSet group {key} has no positive leaderworkerset.sigs.k8s.io/size")
    tk = lws_topology_key(md) or args.topology_key
    if not tk:
        return Status.unschedulable(
            f"LeaderWorkerSet group {key} must declare leaderworkerset.sigs.k8s.io/exclusive-topology "
            "or the scheduler must configure topologyKey"
        )
    timeout = capped_timeout(None, args)
    if timeout <= 0:
        return Status.unresolvable(
            f"LeaderWorkerSet group {key} needs the scheduler to configure defaultPermitTimeoutSeconds"
        )
    owner = lws(ns, md.labels.get(LWS_NAME_LABEL, "")) if md.labels.get(LWS_NAME_LABEL) else None
    leader_first = owner is not None and owner.spec.startup_policy == "LeaderReady"
    return Gang(key, ns, pod.gang, "", size, tk, timeout, "LeaderWorkerSet", leader_first)


def resolve_gang(
    pod: PodInfo,
    pod_groups: PodGroupLister,
    args: OMEGangPackArgs,
    lws: Callable[[str, str], LeaderWorkerSet | None] | None = None,
) -> Gang | Status:
    """§2.4: the member's gang, or the Unschedulable status that says why it cannot be planned.

    An LWS group's gang (§2.1) is resolved by :func:`resolve_lws_gang` (``lws``: the
    LeaderWorkerSet lookup; None: none known). A PodGroup's checks, in the documented order:
    the PodGroup exists and is readable, ``minMember`` is
    positive, a topology key resolves, the unsupported placement-group label is absent,
    a Permit timeout is configured (UnschedulableAndUnresolvable when not), and the preferred
    keys (§3.9) parse (UnschedulableAndUnresolvable naming the annotation when not).
    """
    if source_of(pod.gang) == "LeaderWorkerSet":
        return resolve_lws_gang(pod, args, lws or (lambda _ns, _name: None))
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
    notes = pg.metadata.annotations
    preferred = parse_preferred_keys(notes.get(PREFERRED_KEYS_ANNOTATION, ""), tk)
    if isinstance(preferred, str):
        return Status.unresolvable(f"PodGroup {key} has an invalid {PREFERRED_KEYS_ANNOTATION} annotation: {preferred}")
    sub = parse_subgroups(notes.get(SUBGROUP_SIZE_ANNOTATION, ""), notes.get(SUBGROUP_KEY_ANNOTATION, ""), tk, mm)
    if isinstance(sub, str):
        return Status.unresolvable(f"PodGroup {key} has invalid sub-gang annotations: {sub}")
    if sub[0] and preferred:
        return Status.unresolvable(
            f"PodGroup {key} has invalid sub-gang annotations: {SUBGROUP_SIZE_ANNOTATION} cannot be combined "
            f"with {PREFERRED_KEYS_ANNOTATION}"
        )
    return Gang(
        key,
        ns,
        name,
        pg.metadata.uid,
        mm,
        tk,
        timeout,
        preferred_keys=preferred,
        subgroup_size=sub[0],
        subgroup_key=sub[1],
    )


def is_live(pod: Pod) -> bool:
    """Not being deleted and not Succeeded or Failed."""
    return pod.metadata.deletion_timestamp is None and pod.status.phase not in ("Succeeded", "Failed")


def same_pod(a: Pod, b: Pod) -> bool:
    """§2.1: equal UIDs, or (one lacks a UID) equal namespace and non-empty name."""
    if a.metadata.uid and b.metadata.uid:
        return a.metadata.uid == b.metadata.uid
    return a.metadata.namespace == b.metadata.namespace and bool(a.metadata.name) and a.metadata.name == b.metadata.name


@dataclass(frozen=True, slots=True)
class Placement:
    """§3.2: the gang's members bound or assumed on nodes still in the snapshot."""

    members: list[tuple[PodInfo, NodeInfo]]
    names: set[str]
    domain: str
    """The one domain they are in ("" when none is placed)."""

    @property
    def count(self) -> int:
        """How many members are placed."""
        return len(self.members)
