"""The LWS guard (design §2.1): a PodGroup over a LeaderWorkerSet group that creates its workers late.

A PodGroup label on the pods of an LWS group whose set has ``exclusive-topology`` or
``startupPolicy: LeaderReady`` makes a gang that can never form: the LWS controller creates the
workers only once the leader runs. :func:`lws_deadlock` says so once per gang. Upstream has no
counterpart.
"""

from __future__ import annotations

from collections.abc import Sequence

from ome_scheduler.framework.gangsource import LWS_EXCLUSIVE_TOPOLOGY, LWS_NAME_LABEL, is_lws_leader
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.gangpack.gang import Gang
from ome_scheduler.plugins.gangpack.state import GangState


def lws_deadlock(state: GangState, pod: PodInfo, gang: Gang, live: Sequence[PodInfo]) -> bool:
    """§2.1 LWS guard: a PodGroup gang waiting for members, whose members are the pods of an LWS
    group with ``exclusive-topology`` or ``startupPolicy: LeaderReady``, can never form: the LWS
    controller creates the workers only once the leader has a node (is ready). True (with one
    ``LeaderWorkerSetDeadlock`` warning on the PodGroup) when every live member is such a
    leader, so no worker exists yet."""
    leaders = [p for p in live if is_lws_leader(p.pod.metadata)]
    if not leaders or len(leaders) != len(live):
        return False
    leader = leaders[0]
    lws = leader.pod.metadata.labels.get(LWS_NAME_LABEL, "")
    owner = state.handle.leader_worker_set(gang.namespace, lws) if lws else None
    if leader.pod.metadata.annotations.get(LWS_EXCLUSIVE_TOPOLOGY):
        why, when = f"sets {LWS_EXCLUSIVE_TOPOLOGY}", "has a node"
    elif owner is not None and owner.spec.startup_policy == "LeaderReady":
        why, when = "has startupPolicy LeaderReady", "is ready"
    else:
        return False
    note = (
        f"PodGroup {gang.key} needs {gang.min_member} members, but its members belong to LeaderWorkerSet "
        f"{gang.namespace}/{lws}, which {why}: the LWS controller creates the "
        f"workers only after the leader {leader.name} {when}, so this gang can never form. Remove "
        "the PodGroup label from the LeaderWorkerSet's pods (ome-scheduler schedules an LWS group as a gang "
        "by itself) or lower minMember to what exists before the leader runs"
    )
    state.warn_once(gang.key, gang.uid, "lws-deadlock", "LeaderWorkerSetDeadlock", note)
    return True
