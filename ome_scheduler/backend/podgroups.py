"""Pod-group state: the PodGroups, the pods that name each one, and where its members sit.

The scheduler-plugins coscheduling plugin keeps the same state in its ``PodGroupManager``
(``pkg/coscheduling/core/core.go``) over a PodGroup informer and the pod lister. Here it is
one backend object, filled by the informer event handlers (``eventhandlers.py``) and read by
plugins through the narrow :class:`~ome_scheduler.framework.interface.PodGroupLister` that
the Handle exposes:

* PodGroups by :data:`GangKey`, and the decode error of PodGroups that exist but cannot be
  read (their members then say why in FailedScheduling instead of "not resolvable yet");
* the gang index: every pod (scheduled or not) whose ``scheduling.x-k8s.io/pod-group`` label
  names a gang, as the informer last saw it;
* placed members: bound and assumed pods of a gang with their NodeInfo, from the cache.

Plugins that must react to PodGroup changes beyond the queueing hints (waking members in
backoff, re-evaluating members waiting at Permit) subscribe with :meth:`subscribe`; the event
handlers call :meth:`notify` after the queue has seen the event.

It also keeps what users are told about each gang (``controllers/podgroupstatus.py`` writes it): the
placement OMEGangPack reported (:meth:`set_placement`), the last reason a member could not be
scheduled (:meth:`set_reason`, from the scheduling cycle), and which gangs changed since the
status writer last looked (:meth:`take_changed`: every PodGroup, member or report change marks
its gang; a set add, so the hot path pays nothing more).
"""

from __future__ import annotations

from collections.abc import Callable

from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.framework.types import GangKey, GangPlacement, NodeInfo, PodInfo, gang_key

PodGroupListener = Callable[[PodGroup | None, PodGroup | None], None]
"""``(old, new)``: ``old`` None on add, ``new`` None on delete."""


class PodGroupState:
    """PodGroups, unreadable PodGroups, the gang index and placed members (see module doc)."""

    def __init__(self, cache: SchedulerCache) -> None:
        self._cache = cache
        self._groups: dict[GangKey, PodGroup] = {}
        self._invalid: dict[GangKey, str] = {}
        self._members: dict[GangKey, dict[str, PodInfo]] = {}
        self._gang_of_pod: dict[str, GangKey] = {}
        self._listeners: list[PodGroupListener] = []
        self._unresolvable_listeners: list[Callable[[PodInfo, str, str], None]] = []
        self._member_left_listeners: list[Callable[[PodInfo], None]] = []
        self._placements: dict[GangKey, GangPlacement | None] = {}
        """Gang -> its last reported placement (None: released since; absent: never reported)."""
        self._reasons: dict[GangKey, str] = {}
        self._changed: set[GangKey] = set()
        self._shrunk: set[GangKey] = set()
        """Gangs that lost a member since :meth:`take_shrunk` (it may have finished: Succeeded and
        Failed pods leave the pod informer, whose field selector drops them)."""

    # ---- writes (informer event handlers) ------------------------------------------------

    def add_or_update(self, pg: PodGroup) -> None:
        """A PodGroup was added or updated (and is readable again if it was not)."""
        key = gang_key(pg.metadata.namespace, pg.metadata.name)
        self._groups[key] = pg
        self._invalid.pop(key, None)
        self._changed.add(key)

    def delete(self, pg: PodGroup) -> None:
        """A PodGroup was deleted."""
        key = gang_key(pg.metadata.namespace, pg.metadata.name)
        self._groups.pop(key, None)
        self._invalid.pop(key, None)
        self._placements.pop(key, None)
        self._reasons.pop(key, None)
        self._changed.discard(key)
        self._shrunk.discard(key)

    def set_invalid(self, namespace: str, name: str, error: str) -> None:
        """A PodGroup exists but cannot be decoded: remember why. (The informer then deletes its
        last readable version through :meth:`delete`.)"""
        self._invalid[gang_key(namespace, name)] = error

    def index_pod(self, pi: PodInfo) -> None:
        """Record the latest version of a pod; moves it between gangs when its label changed."""
        # A pod's pod-group label is mutable: an update may move it to another gang or out of
        # every gang, and it must then leave the old gang's member list.
        old = self._gang_of_pod.get(pi.key)
        if old is not None and old != pi.gang_key:
            self._drop(old, pi.key)
        if pi.gang:
            self._members.setdefault(pi.gang_key, {})[pi.key] = pi
            self._gang_of_pod[pi.key] = pi.gang_key
            self._changed.add(pi.gang_key)
        else:
            self._gang_of_pod.pop(pi.key, None)

    def unindex_pod(self, namespace: str, name: str) -> None:
        """A pod was deleted: drop it from its gang."""
        key = f"{namespace}/{name}"
        gang = self._gang_of_pod.pop(key, None)
        if gang is not None:
            self._drop(gang, key)

    def _drop(self, gang: GangKey, key: str) -> None:
        members = self._members.get(gang)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self._members[gang]
        self._changed.add(gang)
        self._shrunk.add(gang)
        if gang not in self._members and gang not in self._groups:
            self._reasons.pop(gang, None)  # neither PodGroup nor member left: nothing to tell
            self._placements.pop(gang, None)

    def subscribe(self, listener: PodGroupListener) -> None:
        """Call ``listener(old, new)`` after every PodGroup add, update and delete."""
        self._listeners.append(listener)

    def subscribe_unresolvable(self, listener: Callable[[PodInfo, str, str], None]) -> None:
        """Call ``listener(member, plugin, message)`` for every :meth:`member_unresolvable`."""
        self._unresolvable_listeners.append(listener)

    def subscribe_member_left(self, listener: Callable[[PodInfo], None]) -> None:
        """Call ``listener(member)`` for every :meth:`member_left`."""
        self._member_left_listeners.append(listener)

    def member_left(self, member: PodInfo) -> None:
        """The event handlers' report: ``member``, bound, was deleted and left the cache.
        Passed to the subscribers (OMEGangPack: product rule 11), in subscription order."""
        for listener in self._member_left_listeners:
            listener(member)

    def member_unresolvable(self, member: PodInfo, plugin: str, message: str) -> None:
        """The scheduling cycle's report: ``member``'s attempt failed because ``plugin``'s
        PreFilter found it UnschedulableAndUnresolvable. Passed to the subscribers (OMEGangPack:
        product rule 12), in subscription order."""
        for listener in self._unresolvable_listeners:
            listener(member, plugin, message)

    def notify(self, old: PodGroup | None, new: PodGroup | None) -> None:
        """Tell the subscribers about one PodGroup change, in subscription order."""
        for listener in self._listeners:
            listener(old, new)

    # ---- what users are told (the status writer reads it) -----------------------------------

    def set_placement(self, gang: GangKey, placement: GangPlacement | None) -> None:
        """OMEGangPack's report of where ``gang`` is (None: its pin was released). A new pin or a
        ``Bound`` placement supersedes the gang's last failure reason, which is dropped (a member
        failing later reports a new one)."""
        if self._placements.get(gang, False) == placement:
            return
        self._placements[gang] = placement
        if placement is not None:
            self._reasons.pop(gang, None)
        self._changed.add(gang)

    def placement(self, gang: GangKey) -> tuple[bool, GangPlacement | None]:
        """(whether a placement was ever reported since this process started, the last one)."""
        if gang not in self._placements:
            return False, None
        return True, self._placements[gang]

    def set_reason(self, gang: GangKey, reason: str) -> None:
        """A member of ``gang`` could not be scheduled: ``reason`` is its ``FailedScheduling`` note."""
        if self._reasons.get(gang) != reason and (gang in self._members or gang in self._groups):
            self._reasons[gang] = reason
            self._changed.add(gang)

    def reason(self, gang: GangKey) -> str | None:
        """The last reason a member of ``gang`` could not be scheduled (None: none since it bound
        or since this process started)."""
        return self._reasons.get(gang)

    def take_changed(self) -> set[GangKey]:
        """The gangs changed since the last call (PodGroup, member or report), and forget them."""
        out, self._changed = self._changed, set()
        return out

    def take_shrunk(self, gang: GangKey) -> bool:
        """Whether ``gang`` lost a member since the last call for it (and forget it)."""
        if gang in self._shrunk:
            self._shrunk.discard(gang)
            return True
        return False

    def gang_keys(self) -> list[GangKey]:
        """Every PodGroup's gang key."""
        return list(self._groups)

    # ---- reads (PodGroupLister) ------------------------------------------------------------

    def groups(self) -> dict[GangKey, PodGroup]:
        """Every readable PodGroup by gang key (a copy)."""
        return dict(self._groups)

    def get(self, namespace: str, name: str) -> PodGroup | None:
        """The PodGroup, or None (missing, unreadable, or the CRD is absent)."""
        return self._groups.get(gang_key(namespace, name))

    def error(self, namespace: str, name: str) -> str | None:
        """Why an existing PodGroup could not be read (its decode error), or None."""
        return self._invalid.get(gang_key(namespace, name))

    def members(self, gang: GangKey) -> list[PodInfo]:
        """Every pod the informer holds whose pod-group label names ``gang`` (any phase)."""
        return list(self._members.get(gang, {}).values())

    def placed_members(self, gang: GangKey) -> list[tuple[PodInfo, NodeInfo | None]]:
        """Bound and assumed members with their NodeInfo (None when the Node object is gone)."""
        out: list[tuple[PodInfo, NodeInfo | None]] = []
        nodes = self._cache.nodes
        for key, node in self._cache.placed_members(gang).items():
            ni = nodes.get(node)
            pi = ni.pods.get(key) if ni is not None else None
            # A ghost entry (Node deleted, its pods not yet) still yields the member, with None:
            # the member is placed, but on a node that no longer exists.
            if pi is not None:
                out.append((pi, ni if ni is not None and ni.node is not None else None))
        return out

    def live_gang_keys(self) -> set[GangKey]:
        """Gangs with at least one member that is not being deleted."""
        return {
            gang
            for gang, members in self._members.items()
            if any(p.pod.metadata.deletion_timestamp is None for p in members.values())
        }

    def __len__(self) -> int:
        return len(self._groups)
