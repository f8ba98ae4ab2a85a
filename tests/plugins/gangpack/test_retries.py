"""What a gang does after a failure (product rules 10 and 12; issue 30).

* A member that fails Filter in its pinned domain while another fitting domain is untried asks
  the queue for a retry within its backoff; once a member failed in every fitting domain,
  nothing is pinned and the gang waits for an event that can help.
* A member no node can take as the cluster stands (another plugin's PreFilter says
  UnschedulableAndUnresolvable) keeps its gang from holding anything, and its siblings are told
  which member and why.
* Node events wake a gang only when they can make room for it.
"""

from __future__ import annotations

import msgspec

from ome_scheduler.framework.events import QueueingHint
from ome_scheduler.framework.interface import NodeToStatus
from tests.plugins.gangpack.test_plugin import DK, domains, members, plugin, prefilter, schedule
from tests.support.builders import make_node, make_pod_group
from tests.support.fakes import FakeHandle


def test_a_member_failing_in_its_domain_retries_the_next_within_its_backoff() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    r, _, st = prefilter(p, h, g[0])
    assert r == {"a1", "a2"}
    p.post_filter(st, g[0], NodeToStatus())
    assert h.retried == ["g-0"]  # b is untried: the queue brings g-0 back within its backoff
    r, _, st = prefilter(p, h, g[0])
    assert r == {"b1", "b2", "b3"}
    p.post_filter(st, g[0], NodeToStatus())
    assert h.retried == ["g-0"]  # no domain left to try: no retry asked
    r, s, _ = prefilter(p, h, g[0])
    assert r is None and s is not None
    assert s.message() == "no domain has room for gang ns/g: a member failed in every fitting domain"
    assert p.gangs.pins.get(g[0].gang_key) is None  # nothing pinned, nothing held
    r, _, _ = prefilter(p, h, g[0])  # the next attempt (after an event) starts the round again
    assert r == {"a1", "a2"}


def test_a_member_no_node_can_take_keeps_its_gang_from_holding_and_is_named() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    node, _, _ = schedule(p, h, g[0])  # g-0 waits at Permit, holding its domain
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    for listener in h.unresolvable_listeners:  # the scheduling cycle's report of g-1's failure
        listener(g[1], "VolumeBinding", 'persistentvolumeclaim "data" not found')
    assert p.gangs.pins.get(g[0].gang_key) is None  # the hold is gone
    assert waiting.rejected and "member ns/g-1 cannot be scheduled" in waiting.rejected[0][1]
    r, s, _ = prefilter(p, h, g[0])
    assert (
        r is None
        and s is not None
        and s.message()
        == ('gang ns/g cannot be placed: member ns/g-1 cannot be scheduled: persistentvolumeclaim "data" not found')
    )
    assert p.gangs.pins.get(g[0].gang_key) is None
    r, s, st = prefilter(p, h, g[1])  # g-1 itself passes now (its claim exists): it pins
    assert s is None and r
    a = h.assume(g[1], sorted(r)[0])
    p.reserve(st, a, sorted(r)[0])
    assert not p.gangs.unresolvable  # a member that reached Reserve blocks no one


def test_a_gang_never_pins_while_a_sibling_is_unresolvable() -> None:
    """Checked before a fresh pin: the member arriving first does not hold a domain for a gang
    whose other member no node can take (rule 12: the gang never holds)."""
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    h.unresolvable_members["g-1"] = ("VolumeBinding", 'persistentvolumeclaim "data" not found')
    r, s, _ = prefilter(p, h, g[0])
    assert r is None and s is not None and "member ns/g-1 cannot be scheduled" in s.message()
    assert p.gangs.pins.get(g[0].gang_key) is None and not h.events  # no Pinned, no hold
    del h.unresolvable_members["g-1"]
    r, s, st = prefilter(p, h, g[1])  # the claim exists now: g-1 pins, g-0 follows
    assert s is None and r


def node(name: str, labels: dict[str, str], gpus: str = "4", **spec: object) -> object:
    n = make_node(name, labels, alloc={"nvidia.com/gpu": gpus})
    return msgspec.structs.replace(n, spec=msgspec.structs.replace(n.spec, **spec)) if spec else n


def test_node_events_queue_a_gang_only_when_they_can_make_room() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    target = members(h, "g", 1)[0].pod
    change = p.hints.is_schedulable_after_domain_node_change
    delete = p.hints.is_schedulable_after_domain_node_delete
    q, skip = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
    a3 = node("a3", {DK: "a"})
    assert change(target, None, a3) == q  # a node joined a domain
    assert change(target, None, node("x", {})) == skip  # outside every domain
    assert change(target, a3, node("a3", {DK: "a"}, gpus="8")) == q  # allocatable grew
    assert change(target, node("a3", {DK: "a"}, gpus="8"), a3) == skip  # shrank
    assert change(target, node("a3", {DK: "a"}, unschedulable=True), a3) == q  # uncordoned
    assert change(target, a3, node("a3", {DK: "a"}, unschedulable=True)) == skip  # cordoned
    assert change(target, a3, node("a3", {DK: "b"})) == q  # moved into another domain
    assert delete(target, a3, None) == skip  # no pin: a deleted node adds no room
    h.groups["ns/g"] = make_pod_group("g", min_member=1, topology_key=DK)
    schedule(p, h, members(h, "g", 1)[0])  # now the gang pins a domain
    pin = p.gangs.pins.get("ns/g")  # type: ignore[arg-type]
    assert pin is not None
    assert delete(target, node("z", {DK: pin.domain.value}), None) == q  # its pinned domain lost a node
    assert delete(target, node("z", {DK: "elsewhere"}), None) == skip
