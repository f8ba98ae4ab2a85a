"""OMEGangPack: each gang in one topology domain, bound all or nothing (``docs/design/gang-scheduling.md``).

Glossary. The code uses these words, each for one idea only:

gang
    The pods whose ``scheduling.x-k8s.io/pod-group`` label names one PodGroup; its key is
    ``namespace/podgroup`` and its size ``minMember`` (``gang.py``).
domain
    The nodes that share one value of the gang's topology label (the PodGroup's
    ``ome.io/topology-key`` annotation or the configured ``topologyKey``); the same value
    under two keys is two domains.
room
    How many more members of a gang a domain takes now, counted in members (product rule 1;
    ``placement.py``), CSI attach limits included (§3.1; ``volumes.py``).
pin
    A gang's choice of one domain. PreFilter creates it (best fit, or *adopted* from members
    already bound after a restart); every later member's cycle follows it; a *release* ends
    it. Each pin carries a fresh token, so a late Unreserve of an older attempt cannot undo a
    newer pin (``pins.py``).
reservation
    The member slots a pin still keeps for its gang. Reserve drains one slot per member; at
    zero the pin is *drained*: the Permit gate opens and the domain stays pinned only for the
    gang's own remaining members.
hold
    What a reservation does to everyone else: while a pin's reservation is above zero every
    node of its domain is held. Other gangs see room 0 there and this scheduler's standalone
    pods are rejected there (``node is reserved for a forming gang``). Releasing or draining
    the pin ends the hold and wakes the pods it parked.
release, unwind
    A release deletes a pin (and so its hold) and rejects the members of that attempt still
    waiting at Permit; a release caused by a failed attempt counts as an *unwind*.

The design's own word for a pin's stored record, *commitment*, appears only in user-facing
messages that the design fixes (``released commitment ...``).

Rooms: ``plugin.py`` is the thin framework glue; ``gang.py`` resolves a gang from its
PodGroup; ``state.py`` keeps the gangs' pins and records and the release routine;
``planner.py`` is PreFilter's pin decision (``pin_gang``, step by step); ``manager.py`` the
other decisions on that state (Reserve, the Permit gate, Unreserve, PostBind, PodGroup and
node changes, GC, hold expiry); ``survey.py`` is the pure per-cycle view of the domains;
``placement.py`` and ``fit.py`` the pure algorithms; ``volumes.py`` the CSI attach limits in
the room; ``pins.py`` the pin store; ``hints.py`` the queueing hints; ``metrics.py`` the plugin's metrics.

Citations: a "§3.7" (or "design §3.7") and a "rule 9" in this package name a heading of
``docs/design/gang-scheduling.md`` (``tests/test_design_citations.py`` checks that each does).
"""
