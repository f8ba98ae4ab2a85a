"""The pin store: each gang's pin, and the reservation (hence the hold) it keeps while forming.

Pure state, no I/O. Mirrors ``docs/design/gang-scheduling.md`` §2.6 (where a stored pin is
called a *commitment*): a :class:`Pin` binds a gang key to a :class:`Domain` with the
PodGroup UID as owner, a fresh token, the domain's node set at creation, and ``remaining``
reserved slots. While ``remaining > 0`` every node of the set is held: other gangs see the
domain's room as 0 and standalone pods are rejected there. Reserve drains one slot per
member; the pin is *drained* at 0. Any release removes the pin and its hold; the caller's
callback runs inside the release so old-attempt waiters are rejected before a retry can pin
again (here: before ``release_if`` returns).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from ome_scheduler.framework.topology import domain_value
from ome_scheduler.framework.types import GangKey

ANY_PIN: Final = None
"""The token that matches whatever pin a gang has (:meth:`PinStore.release_if`)."""


class Domain(NamedTuple):
    """One topology domain: the nodes whose label ``topology_key`` is ``value``.

    The same value under two keys is two domains. A NamedTuple, so the dicts keyed by it
    (:attr:`PinStore.reserved`, the manager's failed domains) hash it at tuple speed.
    """

    topology_key: str
    value: str


@dataclass(slots=True)
class Pin:
    """One gang's pin: its domain, owner (PodGroup UID), reservation, token and node set."""

    domain: Domain
    owner: str
    remaining: int
    token: int
    nodes: frozenset[str] = field(default_factory=frozenset)
    holding: bool = True
    """Whether the reservation keeps others out of the domain (the hold). A pin whose hold
    expired still counts its reservation for the Permit gate, but blocks nobody."""
    hold_until: float = 0.0
    """Monotonic time at which the hold expires (0: never set)."""
    alternative: bool = False
    """When the pin was chosen, another fitting domain was neither held nor failed: a member
    failing here is retried within its backoff, in that next domain (rule 10)."""
    quota: dict[str, int] = field(default_factory=dict)
    """§3.10: sub-domain (level value ``r,s``) -> members the gang places there (placed ones
    included), multiples of the sub-gang size; empty until planned."""
    preempting_until: float = 0.0
    """Monotonic deadline of a gang preemption that chose this domain (0: none, design §16.6):
    until then the pin waits for the victims to leave instead of being stale (§3.7 step 10)."""


class PinStore:
    """Pins by gang key, with the derived per-domain and per-node reservation counts."""

    def __init__(self) -> None:
        self.by_group: dict[GangKey, Pin] = {}
        self.reserved: dict[Domain, int] = {}
        self.reserved_nodes: dict[str, int] = {}
        self._tokens = itertools.count(1)
        self.version = 0
        """Bumped whenever a hold starts, drains or is released (what standalone Filter reads)."""

    def __len__(self) -> int:
        return len(self.by_group)

    def _set_remaining(self, c: Pin, new: int) -> None:
        """Set ``c.remaining`` (floored at 0), keeping the derived counts and ``version`` in step."""
        new = max(0, new)
        old = c.remaining
        if new == old:
            return
        if not c.holding:  # no hold: only the gate's count changes
            c.remaining = new
            return
        r = self.reserved.get(c.domain, 0) + new - old
        if r <= 0:
            self.reserved.pop(c.domain, None)
        else:
            self.reserved[c.domain] = r
        # The node hold depends only on whether slots remain, so node counts (and the version
        # standalone Filter results are cached under) change only when crossing zero. Nodes are
        # counted, not flagged: two pins (under different topology keys, say) may share a node.
        if (old > 0) != (new > 0):
            self.version += 1
            delta = 1 if new > 0 else -1
            for n in c.nodes:
                v = self.reserved_nodes.get(n, 0) + delta
                if v <= 0:
                    self.reserved_nodes.pop(n, None)
                else:
                    self.reserved_nodes[n] = v
        c.remaining = new

    def _new(
        self, group: GangKey, owner: str, domain: Domain, remaining: int, nodes: Iterable[str], *, holding: bool = True
    ) -> Pin:
        """Store a new pin with a fresh token; it starts at 0 and _set_remaining applies the hold."""
        c = Pin(
            domain=domain,
            owner=owner,
            remaining=0,
            token=next(self._tokens),
            nodes=frozenset(n for n in nodes if n),
            holding=holding,
        )
        self.by_group[group] = c
        self._set_remaining(c, remaining)
        return c

    def choose(
        self,
        group: GangKey,
        owner: str,
        topology_key: str,
        domain: str,
        nodes: Iterable[str],
        gang_size: int,
        *,
        holding: bool = True,
    ) -> Pin:
        """Create a fresh pin of ``domain`` reserving ``gang_size`` slots (held unless ``holding`` is False)."""
        return self._new(group, owner, Domain(topology_key, domain), gang_size, nodes, holding=holding)

    def set_reservation(
        self,
        group: GangKey,
        owner: str,
        topology_key: str,
        domain: str,
        remaining: int,
        nodes: Iterable[str],
        *,
        holding: bool = True,
    ) -> Pin:
        """Adoption: replace any pin of the group with a new one (new token)."""
        old = self.by_group.get(group)
        if old is not None:
            self._set_remaining(old, 0)
        return self._new(group, owner, Domain(topology_key, domain), remaining, nodes, holding=holding)

    def get(self, group: GangKey) -> Pin | None:
        """The gang's pin, or None when it has none."""
        return self.by_group.get(group)

    def place_if(self, group: GangKey, token: int) -> tuple[bool, bool]:
        """Drain one slot if the gang's pin has ``token``: (placed, drained to 0)."""
        c = self.by_group.get(group)
        # A stale token means the member planned under an earlier pin (released and re-pinned
        # since): it must not drain the new reservation.
        if c is None or c.token != token or c.remaining <= 0:
            return False, False
        self._set_remaining(c, c.remaining - 1)
        return True, c.remaining == 0

    def drop_hold(self, group: GangKey) -> bool:
        """End the pin's hold but keep its reservation for the gate; returns whether one ended."""
        c = self.by_group.get(group)
        if c is None or not c.holding:
            return False
        remaining = c.remaining
        self._set_remaining(c, 0)  # withdraws the domain and node counts
        c.holding = False
        c.remaining = remaining
        return remaining > 0

    def reopen(self, group: GangKey, remaining: int) -> bool:
        """Re-open a drained pin's reservation with a hold (rule 11: a bound gang lost members);
        returns whether it did (False: no pin, or it still reserves slots)."""
        c = self.by_group.get(group)
        if c is None or c.remaining > 0:
            return False
        c.holding = True  # at 0 remaining no counts were kept, with or without a hold
        self._set_remaining(c, remaining)
        return c.remaining > 0

    def set_remaining_if(self, group: GangKey, token: int, remaining: int) -> bool:
        """Resize the pin's reservation (the gang's size changed) if the gang's pin has
        ``token``; returns whether the pin is now drained."""
        c = self.by_group.get(group)
        if c is None or c.token != token:
            return False
        self._set_remaining(c, remaining)
        return c.remaining == 0

    def is_drained(self, group: GangKey, token: int) -> bool:
        """The gang's pin exists, has ``token`` and reserves nothing any more."""
        c = self.by_group.get(group)
        return c is not None and c.token == token and c.remaining == 0

    def release_if(self, group: GangKey, token: int | None, callback: Callable[[Pin], None] | None = None) -> bool:
        """Delete the gang's pin when it has ``token`` (:data:`ANY_PIN`: whatever pin it has);
        run ``callback`` before returning."""
        c = self.by_group.get(group)
        if c is None or (token is not ANY_PIN and c.token != token):
            return False
        self._set_remaining(c, 0)
        del self.by_group[group]
        if callback is not None:
            callback(c)
        return True

    def blocks_node(self, node: str, labels: Mapping[str, str]) -> bool:
        """Whether a standalone pod must avoid ``node`` (design §2.6 "Blocks node")."""
        if self.reserved_nodes.get(node, 0) > 0:
            return True
        # A pin made without a node set (none known at creation) holds the domain by label.
        for c in self.by_group.values():
            if (
                c.holding
                and c.remaining > 0
                and not c.nodes
                and domain_value(labels, c.domain.topology_key) == c.domain.value
            ):
                return True
        return False

    def owners(self) -> dict[GangKey, str]:
        """Gang key -> owning PodGroup UID of every pin (a new copy)."""
        return {g: c.owner for g, c in self.by_group.items()}
