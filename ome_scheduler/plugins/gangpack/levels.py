"""Topology levels: a gang's required key and the preferred keys tried inside it (design §3.9).

A PodGroup may name, besides its required topology key ``R`` (``ome.io/topology-key`` or the
configured ``topologyKey``), preferred keys ``P1, P2, ...`` in the annotation
``ome.io/topology-preferred-keys`` (a comma list, tightest first, each nested inside ``R``).
The gang then tries one domain of ``P1``, then of ``P2``, ..., and falls back to one domain of
``R``; it never splits beyond ``R``.

A domain of a preferred level is named by a *level key* ``R>P`` and a *level value* ``r,p``
(:mod:`ome_scheduler.framework.topology`), so a ``P`` value seen under two ``R`` values is two
domains (nesting is checked, not assumed), and everything keyed by
:class:`~ome_scheduler.plugins.gangpack.pins.Domain` (holds, failed domains, pins) works on
these names unchanged.

Pure: no I/O. Upstream has no counterpart (kube-scheduler has no gangs); Kueue's
topology-aware scheduling has "preferred" and "required" levels of the same meaning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from ome_scheduler.framework.topology import level_key
from ome_scheduler.util.validation import is_qualified_name

PREFERRED_KEYS_ANNOTATION: Final = "ome.io/topology-preferred-keys"
"""PodGroup annotation: preferred topology keys, tightest first, inside the required key."""

SUBGROUP_SIZE_ANNOTATION: Final = "ome.io/subgroup-size"
"""PodGroup annotation: members per sub-gang (a divisor of ``minMember``), §3.10."""

SUBGROUP_KEY_ANNOTATION: Final = "ome.io/subgroup-topology-key"
"""PodGroup annotation: the label whose one domain each sub-gang shares, nested in the required key."""

SUBGROUP_INDEX_LABEL: Final = "ome.io/subgroup-index"
"""Pod label: the sub-gang a member belongs to (members with one value share a sub-domain)."""

MAX_PREFERRED_KEYS: Final = 4

_DIGITS: Final = re.compile("[0-9]+")
"""ASCII digits only (``str.isdigit`` also takes ``²`` and other scripts' digits)."""
"""At most this many preferred keys per gang (each level is one survey of the cluster)."""


def parse_preferred_keys(text: str, required: str) -> tuple[str, ...] | str:
    """The preferred keys of an annotation value, or the reason it is invalid (a ``str``).

    ``text`` is a comma list; blanks around items are ignored and an empty value means none.
    Invalid: an item that is not a label key, the required key itself, a repeated key, or more
    than :data:`MAX_PREFERRED_KEYS` keys.
    """
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    out: list[str] = []
    for k in items:
        errs = is_qualified_name(k)
        if errs:
            return f"{k!r} is not a label key: {'; '.join(errs)}"
        if k == required:
            return f"{k} is the required topology key itself"
        if k in out:
            return f"{k} is listed twice"
        out.append(k)
    if len(out) > MAX_PREFERRED_KEYS:
        return f"at most {MAX_PREFERRED_KEYS} keys are allowed, got {len(out)}"
    return tuple(out)


def levels(required: str, preferred: tuple[str, ...]) -> list[str]:
    """The levels a gang tries, in order: each preferred level, then the required key."""
    return [level_key(required, p) for p in preferred] + [required]


def parse_subgroups(size_text: str, key: str, required: str, min_member: int) -> tuple[int, str] | str:
    """§3.10: (sub-gang size, sub-gang topology key) from the two annotations, ``(0, "")`` when
    neither is set, or the reason they are invalid (a ``str``): one without the other, a size that
    is not a positive integer dividing ``minMember``, or a key that is not a label key or is the
    required key itself."""
    size_text, key = size_text.strip(), key.strip()
    if not size_text and not key:
        return 0, ""
    if not size_text or not key:
        return f"{SUBGROUP_SIZE_ANNOTATION} and {SUBGROUP_KEY_ANNOTATION} go together"
    if not _DIGITS.fullmatch(size_text) or int(size_text) <= 0:
        return f"{SUBGROUP_SIZE_ANNOTATION} {size_text!r} is not a positive integer"
    size = int(size_text)
    if min_member % size:
        return f"{SUBGROUP_SIZE_ANNOTATION} {size} does not divide minMember {min_member}"
    errs = is_qualified_name(key)
    if errs:
        return f"{SUBGROUP_KEY_ANNOTATION} {key!r} is not a label key: {'; '.join(errs)}"
    if key == required:
        return f"{SUBGROUP_KEY_ANNOTATION} {key} is the required topology key itself"
    return size, key


def plan_subgroups(rooms: Mapping[str, int], placed: Mapping[str, int], size: int, count: int) -> dict[str, int] | None:
    """§3.10 exact counting: how many members each sub-domain takes so that every one of ``count``
    equal sub-gangs of ``size`` lies inside one sub-domain, or None when they cannot.

    ``rooms``: sub-domain -> members it takes now (free room); ``placed``: sub-domain -> members
    already placed there. A sub-domain with placed members first completes its partial sub-gangs
    (rounded up to whole ones); the sub-gangs left go to the sub-domains that take the most whole
    ones, ties by name, so the gang spans the fewest sub-domains. Returns the quota per sub-domain
    (placed members included), multiples of ``size``."""
    quota: dict[str, int] = {}
    spare: dict[str, int] = {}
    for d in sorted(set(rooms) | set(placed)):
        have = placed.get(d, 0)
        whole = -(-have // size) * size
        if whole - have > rooms.get(d, 0):
            return None  # a partial sub-gang here cannot be completed
        if whole:
            quota[d] = whole
        spare[d] = (rooms.get(d, 0) - (whole - have)) // size
    left = count - sum(quota.values()) // size
    if left < 0:
        return None
    for d in sorted(spare, key=lambda x: (-spare[x], x)):
        if left <= 0:
            break
        take = min(spare[d], left)
        if take > 0:
            quota[d] = quota.get(d, 0) + take * size
            left -= take
    return quota if left == 0 else None
