"""Rule 11 (docs/design/gang-scheduling.md): a bound gang that drops below ``minMember`` holds
room for its missing members in its recorded domain, on the running scheduler (a member
deleted, its node deleted) as on a restarted one (the repair sweep adopts with a hold)."""

from __future__ import annotations

from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from tests.plugins.gangpack.test_plugin import DK, count, domains, members, plugin, schedule
from tests.support.builders import make_pod, make_pod_group
from tests.support.fakes import FakeHandle


def bound_gang(h: FakeHandle, p: OMEGangPack, n: int = 2) -> dict[str, str]:
    """Schedule gang ``g`` of ``n`` one-node members to completion; member name -> node."""
    h.groups["ns/g"] = make_pod_group("g", min_member=n, topology_key=DK, timeout=30)
    placed: dict[str, str] = {}
    for pi in members(h, "g", n):
        node, _, status = schedule(p, h, pi)
        placed[pi.name] = node
        if status is None or status.code != Code.WAIT:
            break
    pin = p.gangs.pins.get("ns/g")
    assert pin is not None and pin.remaining == 0, "the gang did not complete"
    for name, node in placed.items():  # the Bindings came back
        h.bind(h.pods[f"ns/{name}"].pod, node)
    return placed


def delete_member(h: FakeHandle, p: OMEGangPack, name: str, node: str) -> PodInfo:
    pi = h.pods.pop(f"ns/{name}")
    h.nodes[node].remove_pod(pi.pod_key)
    for listener in h.member_left_listeners:
        listener(pi)
    return pi


def standalone_filter(p: OMEGangPack, h: FakeHandle, node: str) -> str | None:
    solo = h.add_pod(make_pod("solo", requests={"nvidia.com/gpu": "1"}))
    st = CycleState()
    p.pre_filter(st, solo, h.node_infos())
    s = p.filter(st, solo, h.nodes[node])
    return None if s is None else s.message()


def test_a_deleted_member_reopens_its_gangs_hold_in_the_recorded_domain() -> None:
    h = FakeHandle()
    domains(h, {"a": 3, "b": 3})
    p, _ = plugin(h)
    placed = bound_gang(h, p)
    domain = h.nodes[placed["g-0"]].labels[DK]
    free = sorted(n for n, ni in h.nodes.items() if ni.labels[DK] == domain and n not in placed.values())
    assert standalone_filter(p, h, free[0]) is None  # completed: the drained pin holds nothing
    delete_member(h, p, "g-1", placed["g-1"])
    pin = p.gangs.pins.get("ns/g")
    assert pin is not None and pin.remaining == 1 and pin.holding
    assert pin.domain.value == domain
    assert h.events[-1][2] == "Repairing"
    assert h.events[-1][3] == f"member ns/g-1 was deleted: holding {DK}={domain} for 1 missing member(s), at most 30s"
    # Another pod is kept out of the domain; the replacement goes only there and completes it.
    assert standalone_filter(p, h, free[0]) == "node is reserved for a forming gang"
    other = sorted(n for n, ni in h.nodes.items() if ni.labels[DK] != domain)
    assert standalone_filter(p, h, other[0]) is None
    h.pods.pop("ns/solo")
    repl = h.add_pod(
        make_pod("g-2", gang="g", requests={"nvidia.com/gpu": "4"}, anti_affinity_on="kubernetes.io/hostname")
    )
    node, _, status = schedule(p, h, repl)
    assert h.nodes[node].labels[DK] == domain and status is None  # the gate is met at once
    assert pin.remaining == 0
    assert standalone_filter(p, h, free[-1] if free[-1] != node else free[0]) is None


def test_the_repair_hold_ends_after_the_timeout() -> None:
    h = FakeHandle()
    domains(h, {"a": 3})
    p, _ = plugin(h)
    placed = bound_gang(h, p)
    delete_member(h, p, "g-0", placed["g-0"])
    pin = p.gangs.pins.get("ns/g")
    assert pin is not None and pin.holding and pin.remaining == 1
    p.gangs._expire(pin.hold_until + 0.1)
    assert not pin.holding and pin.remaining == 1
    assert h.events[-1][1:3] == ("Warning", "HoldReleased")


def test_a_deleted_node_reopens_the_hold_for_its_member() -> None:
    h = FakeHandle()
    domains(h, {"a": 3})
    p, _ = plugin(h)
    placed = bound_gang(h, p)
    gone = h.nodes.pop(placed["g-1"])
    for listener in h.node_listeners:
        listener(gone.node, None)
    pin = p.gangs.pins.get("ns/g")
    assert pin is not None and pin.remaining == 1 and pin.holding
    assert h.events[-1][2:] == (
        "Repairing",
        f"node {gone.name} was deleted: holding {DK}=a for 1 missing member(s), at most 30s",
    )


def test_a_gang_still_forming_or_whole_is_left_alone() -> None:
    h = FakeHandle()
    domains(h, {"a": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK, timeout=30)
    ms = members(h, "g", 3)
    schedule(p, h, ms[0])
    assert not p.gangs.repair("ns/g", "probe")  # forming: its pin still reserves slots
    assert p.gangs.pins.get("ns/g") is not None
    h2 = FakeHandle()
    domains(h2, {"a": 3})
    p2, _ = plugin(h2)
    bound_gang(h2, p2)
    assert not p2.gangs.repair("ns/g", "probe")  # nothing missing


def test_a_restarted_scheduler_adopts_with_a_hold_before_any_replacement_arrives() -> None:
    h = FakeHandle()
    domains(h, {"a": 3, "b": 3})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK, timeout=30)
    for i, node in enumerate(("b1", "b2")):
        h.bind(make_pod(f"g-{i}", gang="g", requests={"nvidia.com/gpu": "4"}), node)
    p.gangs.repair_all()  # the sweep at the start of leading
    pin = p.gangs.pins.get("ns/g")
    assert pin is not None and pin.domain.value == "b" and pin.remaining == 1 and pin.holding
    assert h.events[-1][2:] == ("Adopted", f"adopted {DK}=b, where 2 members are already placed, holding it")
    assert count(m, "ome_scheduler_gang_pin_total", result="adopted") == 1
    assert standalone_filter(p, h, "b3") == "node is reserved for a forming gang"
    # A window that already ran out is not re-opened by a later sweep (rule 8).
    p.gangs.release("ns/g", pin.owner, pin.token)
    p.gangs.forming_since["ns/g"] -= 10_000
    p.gangs.repair_all()
    assert p.gangs.pins.get("ns/g") is None
