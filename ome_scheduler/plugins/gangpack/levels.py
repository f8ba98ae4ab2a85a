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

from typing import Final

from ome_scheduler.framework.topology import level_key
from ome_scheduler.util.validation import is_qualified_name

PREFERRED_KEYS_ANNOTATION: Final = "ome.io/topology-preferred-keys"
"""PodGroup annotation: preferred topology keys, tightest first, inside the required key."""

MAX_PREFERRED_KEYS: Final = 4
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
