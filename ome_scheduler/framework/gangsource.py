"""Gang sources: which gang a pod belongs to, from its PodGroup label or its LeaderWorkerSet group.

``docs/design/gang-scheduling.md`` §2.1 (gang membership). A pod is a gang member when

* its ``scheduling.x-k8s.io/pod-group`` label names a PodGroup (source ``PodGroup``; the label
  always wins), or
* LWS gangs are on (OMEGangPack's ``lwsGangs``, default true) and the LeaderWorkerSet
  controller labelled it as one group's pod (source ``LeaderWorkerSet``): labels
  ``leaderworkerset.sigs.k8s.io/name`` + ``/group-index``, or else ``/group-key``.

An LWS gang's name is ``lws:<set>:<group-index>`` (or ``lws:<group-key>``): a colon never
appears in an object name, so it cannot collide with a PodGroup's. Its key is
``namespace/name`` as for every gang. The label and annotation names are those of
``sigs.k8s.io/lws`` v0.5.1 ``api/leaderworkerset/v1/leaderworkerset_types.go``.

The ``lwsGangs`` switch is process-wide (:func:`configure`): every PodInfo is built before any
plugin sees it, so the membership rule cannot wait for a profile. OMEGangPack sets it when it
is built; without OMEGangPack it stays on, which only matters to a profile that has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from ome_scheduler.api.meta import ObjectMeta

POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
"""The scheduler-plugins label that names a pod's PodGroup (``apis/scheduling/v1alpha1``)."""

LWS: Final = "leaderworkerset.sigs.k8s.io/"
LWS_NAME_LABEL: Final = LWS + "name"
"""``SetNameLabelKey``: the LeaderWorkerSet's name, on every pod of every group."""
LWS_GROUP_INDEX_LABEL: Final = LWS + "group-index"
"""``GroupIndexLabelKey``: the group's index within its set (``"0"``, ``"1"``, ...)."""
LWS_GROUP_KEY_LABEL: Final = LWS + "group-key"
"""``GroupUniqueHashLabelKey``: a hash unique to the group, shared by its leader and workers."""
LWS_WORKER_INDEX_LABEL: Final = LWS + "worker-index"
"""``WorkerIndexLabelKey``: ``"0"`` for the leader, ``1..size-1`` for the workers."""
LWS_SIZE: Final = LWS + "size"
"""``SizeAnnotationKey``: the group's pod count (leader included); read as a label or annotation."""
LWS_EXCLUSIVE_TOPOLOGY: Final = LWS + "exclusive-topology"
"""``ExclusiveKeyAnnotationKey``: the node label whose one value the whole group shares."""
LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY: Final = LWS + "subgroup-exclusive-topology"
"""``SubGroupExclusiveKeyAnnotationKey``: the same per subgroup (read when the former is absent)."""
LWS_GANG_PREFIX: Final = "lws:"

GangSource = Literal["PodGroup", "LeaderWorkerSet"]
"""Where a gang's definition comes from."""

_settings = {"lws_gangs": True, "fallback_topology_key": True}


def configure(*, lws_gangs: bool, fallback_topology_key: bool = True) -> None:
    """Turn LWS groups as gangs on or off for this process (OMEGangPack's ``lwsGangs``), and
    say whether a ``topologyKey`` is configured: without one, an LWS group whose pods name no
    ``exclusive-topology`` has no domain to share, and its pods stay standalone."""
    _settings["lws_gangs"] = lws_gangs
    _settings["fallback_topology_key"] = fallback_topology_key


def lws_gangs_enabled() -> bool:
    """Whether LWS groups are gangs in this process."""
    return _settings["lws_gangs"]


def lws_gang_name(labels: Mapping[str, str]) -> str:
    """The LWS gang name of a pod's labels (``lws:<set>:<index>`` or ``lws:<group-key>``), or
    ``""`` when they name no group. Ignores the :func:`configure` switch."""
    name, index = labels.get(LWS_NAME_LABEL, ""), labels.get(LWS_GROUP_INDEX_LABEL, "")
    if name and index:
        return f"{LWS_GANG_PREFIX}{name}:{index}"
    key = labels.get(LWS_GROUP_KEY_LABEL, "")
    return f"{LWS_GANG_PREFIX}{key}" if key else ""


def gang_name(meta: ObjectMeta) -> str:
    """The gang a pod belongs to (``""``: standalone): its PodGroup label when set, else its
    LWS group's gang name when LWS gangs are on and the group has a topology key (its
    ``exclusive-topology`` annotations, or the configured ``topologyKey``)."""
    pg = meta.labels.get(POD_GROUP_LABEL, "")
    if pg or not _settings["lws_gangs"]:
        return pg
    name = lws_gang_name(meta.labels)
    if name and not _settings["fallback_topology_key"] and not lws_topology_key(meta):
        return ""  # no domain to share: standalone, as without LWS gangs
    return name


def source_of(name: str) -> GangSource:
    """The source of a gang by its name (as :func:`gang_name` returns it)."""
    return "LeaderWorkerSet" if name.startswith(LWS_GANG_PREFIX) else "PodGroup"


def lws_group(name: str) -> tuple[str, str] | None:
    """``(set, group-index)`` of an LWS gang name ``lws:<set>:<index>``; None for other names
    (a PodGroup's, or a group known only by its ``group-key``)."""
    if not name.startswith(LWS_GANG_PREFIX):
        return None
    rest = name[len(LWS_GANG_PREFIX) :]
    lws, sep, index = rest.rpartition(":")
    return (lws, index) if sep and lws else None


def lws_size(meta: ObjectMeta) -> int | None:
    """The group size from the ``leaderworkerset.sigs.k8s.io/size`` label, else annotation; None
    when absent or not a positive integer."""
    raw = meta.labels.get(LWS_SIZE) or meta.annotations.get(LWS_SIZE, "")
    try:
        n = int(raw)
    except ValueError:
        return None
    return n if n > 0 else None


def lws_topology_key(meta: ObjectMeta) -> str:
    """The group's own domain label: the ``exclusive-topology`` annotation, else
    ``subgroup-exclusive-topology``, else ``""`` (the caller falls back to ``topologyKey``)."""
    ann = meta.annotations
    return ann.get(LWS_EXCLUSIVE_TOPOLOGY, "") or ann.get(LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY, "")


def is_lws_leader(meta: ObjectMeta) -> bool:
    """Whether the pod is its group's leader (``worker-index`` ``"0"``)."""
    return meta.labels.get(LWS_WORKER_INDEX_LABEL) == "0"
