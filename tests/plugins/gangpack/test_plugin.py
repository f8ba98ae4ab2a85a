"""OMEGangPack on in-memory snapshots: validation, pins, holds, Permit, unwind, adoption, GC, packing."""

from __future__ import annotations

import msgspec
import pytest

from ome_scheduler.api.core import PodCondition
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.config.validation_pluginargs import decode_plugin_args
from ome_scheduler.framework.interface import CycleState, FrameworkOptions, NodeToStatus
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import PodInfo, split_gang_key
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.pins import ANY_PIN
from ome_scheduler.plugins.gangpack.plugin import PIN_KEY, CyclePin, OMEGangPack
from ome_scheduler.plugins.registry import in_tree_registry
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.fakes import FakeHandle

DK = "topology.ome.io/domain"
ARGS = {
    "podGroupTopologyKeyAnnotation": "ome.io/topology-key",
    "unsupportedPlacementGroupLabel": "ome.io/placement-group",
    "defaultPermitTimeoutSeconds": 30,
    "gcIntervalSeconds": 60,
}


def gang_args(raw: dict[str, object] | None) -> OMEGangPackArgs:
    args = decode_plugin_args("OMEGangPack", raw)
    assert isinstance(args, OMEGangPackArgs)
    return args


def plugin(h: FakeHandle, **extra: object) -> tuple[OMEGangPack, Metrics]:
    m = Metrics()
    return OMEGangPack(gang_args({**ARGS, **extra}), h, m), m


def count(m: Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels or None)
    return float(v or 0.0)


def domains(h: FakeHandle, spec: dict[str, int], gpus: int = 4) -> None:
    for d, n in spec.items():
        for i in range(n):
            h.add_node(make_node(f"{d}{i + 1}", {DK: d}, alloc={"nvidia.com/gpu": str(gpus)}))


def members(h: FakeHandle, gang: str, n: int, gpu: str = "4", anti: bool = True) -> list[PodInfo]:
    return [
        h.add_pod(
            make_pod(
                f"{gang}-{i}",
                gang=gang,
                requests={"nvidia.com/gpu": gpu},
                anti_affinity_on="kubernetes.io/hostname" if anti else None,
            )
        )
        for i in range(n)
    ]


def prefilter(p: OMEGangPack, h: FakeHandle, pod: PodInfo) -> tuple[set[str] | None, Status | None, CycleState]:
    st = CycleState()
    r, s = p.pre_filter(st, pod, h.node_infos())
    return r, s, st


def schedule(p: OMEGangPack, h: FakeHandle, pod: PodInfo) -> tuple[str, CycleState, Status | None]:
    """PreFilter, take the first candidate, Reserve and Permit (the framework's order)."""
    r, s, st = prefilter(p, h, pod)
    assert s is None, s
    assert r
    node = sorted(r)[0]
    a = h.assume(pod, node)
    assert p.reserve(st, a, node) is None
    ps, _ = p.permit(st, a, node)
    return node, st, ps


# ---- arguments (design §12.2) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        (
            {"topologyKey": "not a label key/", "gcIntervalSeconds": 1},
            'topologyKey "not a label key/" is not a valid node label key: ',
        ),
        (
            {"topologyKey": "gpu clique", "gcIntervalSeconds": 1},
            'topologyKey "gpu clique" is not a valid node label key',
        ),
        (
            {"podGroupTopologyKeyAnnotation": "not a key/", "gcIntervalSeconds": 1},
            'podGroupTopologyKeyAnnotation "not a key/" is not a valid metadata key: ',
        ),
        (
            {"unsupportedPlacementGroupLabel": "not a key/", "gcIntervalSeconds": 1},
            'unsupportedPlacementGroupLabel "not a key/" is not a valid metadata key: ',
        ),
        ({"defaultPermitTimeoutSeconds": 0, "gcIntervalSeconds": 1}, "defaultPermitTimeoutSeconds must be positive"),
        ({"defaultPermitTimeoutSeconds": -1, "gcIntervalSeconds": 1}, "defaultPermitTimeoutSeconds must be positive"),
        (
            {"defaultPermitTimeoutSeconds": 9223372037, "gcIntervalSeconds": 1},
            "defaultPermitTimeoutSeconds is too large",
        ),
        ({"podGroupSyncTimeoutSeconds": 0, "gcIntervalSeconds": 1}, "podGroupSyncTimeoutSeconds must be positive"),
        ({"gcIntervalSeconds": 0}, "gcIntervalSeconds must be positive"),
        ({"gcIntervlSeconds": 45}, "gcIntervalSeconds must be configured"),
        ({}, "gcIntervalSeconds must be configured"),
        (None, "gcIntervalSeconds must be configured"),
        ({"gcIntervalSeconds": None}, "gcIntervalSeconds must be configured"),
        ({"topologyKey": "gpu clique"}, 'topologyKey "gpu clique" is not a valid node label key'),
        (
            {"gcIntervalSeconds": "60"},
            "decode OMEGangPack args: Expected `int | null`, got `str` - at `$.gcIntervalSeconds`",
        ),
        ({"topologyKey": None, "gcIntervalSeconds": 1}, "decode OMEGangPack args: Expected `str`, got `null`"),
    ],
)
def test_args_rejected(raw: dict[str, object] | None, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        gang_args(raw)
    assert str(e.value).startswith(msg)


def test_args_defaults_and_unknown_fields_ignored() -> None:
    a = gang_args({"gcIntervalSeconds": 5, "whatever": 1, "standaloneDomainPacking": None})
    assert a == OMEGangPackArgs(gc_interval_seconds=5)
    assert a.standalone_domain_packing is True and a.topology_key == ""
    assert gang_args({"gcIntervalSeconds": 5, "standaloneDomainPacking": False}).standalone_domain_packing is False
    with pytest.raises(ConfigError, match="gcIntervalSeconds must be configured"):
        in_tree_registry()["OMEGangPack"]({}, FakeHandle(), FrameworkOptions("x", Metrics()))


def test_split_gang_key() -> None:
    assert split_gang_key("ns/name") == ("ns", "name")
    assert split_gang_key("ns/a/b") == ("ns", "a/b")
    for bad in ("", "noslash", "/name", "ns/", "/"):
        assert split_gang_key(bad) is None


# ---- PreFilter validation (design §2.4) ------------------------------------------------------


def test_validation_messages_in_order() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    pod = members(h, "g", 1)[0]
    _, s, _ = prefilter(p, h, pod)
    assert s is not None and s.code == Code.UNSCHEDULABLE and s.message() == "PodGroup ns/g not resolvable yet"
    h.group_errors["ns/g"] = "Expected `int`, got `str` - at `$.spec.minMember`"
    _, s, _ = prefilter(p, h, pod)
    assert s is not None and s.code == Code.UNSCHEDULABLE
    assert s.message() == "PodGroup ns/g is invalid: Expected `int`, got `str` - at `$.spec.minMember`"
    del h.group_errors["ns/g"]
    h.groups["ns/g"] = make_pod_group("g", min_member=0, topology_key=DK)
    assert prefilter(p, h, pod)[1].message() == "PodGroup ns/g must declare a positive minMember"  # type: ignore[union-attr]
    h.groups["ns/g"] = make_pod_group("g", min_member=1)
    assert prefilter(p, h, pod)[1].message() == (  # type: ignore[union-attr]
        "PodGroup ns/g must declare ome.io/topology-key or the scheduler must configure topologyKey"
    )
    h.groups["ns/g"] = make_pod_group("g", min_member=1, topology_key=DK, labels={"ome.io/placement-group": ""})
    assert prefilter(p, h, pod)[1].message() == "partner placement groups are not supported"  # type: ignore[union-attr]
    h.groups["ns/g"] = make_pod_group("g", min_member=1, topology_key=DK, timeout=None)
    p2, _ = plugin(h, defaultPermitTimeoutSeconds=None)
    s2 = prefilter(p2, h, pod)[1]
    assert s2 is not None and s2.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert s2.message() == (
        "PodGroup ns/g must set scheduleTimeoutSeconds or the scheduler must configure defaultPermitTimeoutSeconds"
    )


def test_no_annotation_name_configured() -> None:
    h = FakeHandle()
    domains(h, {"a": 1})
    p, _ = plugin(h, podGroupTopologyKeyAnnotation="")
    h.groups["ns/g"] = make_pod_group("g", min_member=1, topology_key=DK)
    pod = members(h, "g", 1)[0]
    assert prefilter(p, h, pod)[1].message() == (  # type: ignore[union-attr]
        "scheduler must configure topologyKey or podGroupTopologyKeyAnnotation for gang pods"
    )


def test_fallback_topology_key_and_standalone_passes() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h, topologyKey=DK)
    h.groups["ns/g"] = make_pod_group("g", min_member=2)
    ms = members(h, "g", 2)
    r, s, _ = prefilter(p, h, ms[0])
    assert s is None and r == {"a1", "a2"}
    solo = h.add_pod(make_pod("solo", requests={"nvidia.com/gpu": "1"}))
    assert prefilter(p, h, solo)[:2] == (None, None)


# ---- planning, holds and the worked examples (design §3.8) -----------------------------------


def test_two_gangs_of_three_race_for_equal_domains() -> None:
    h = FakeHandle()
    domains(h, {"d": 3, "e": 3})
    p, m = plugin(h)
    for g in ("ga", "gb"):
        h.groups[f"ns/{g}"] = make_pod_group(g, min_member=3, topology_key=DK)
    a = members(h, "ga", 3)
    b = members(h, "gb", 3)
    ra, sa, _ = prefilter(p, h, a[0])
    assert sa is None and ra == {"d1", "d2", "d3"}
    rb, sb, _ = prefilter(p, h, b[0])
    assert sb is None and rb == {"e1", "e2", "e3"}
    assert count(m, "ome_scheduler_gang_pin_total", result="pinned") == 2
    assert count(m, "ome_scheduler_pinned_groups") == 2


def test_fitting_domain_held_by_forming_gang_is_reserved() -> None:
    h = FakeHandle()
    domains(h, {"d": 3})
    p, m = plugin(h)
    for g in ("ga", "gb"):
        h.groups[f"ns/{g}"] = make_pod_group(g, min_member=1 if g == "gb" else 3, topology_key=DK)
    a = members(h, "ga", 3)
    b = members(h, "gb", 1)
    assert prefilter(p, h, a[0])[1] is None
    s = prefilter(p, h, b[0])[1]
    assert s is not None and s.message() == (
        "no domain has room for gang ns/gb: every fitting domain is reserved for a forming gang"
    )
    assert count(m, "ome_scheduler_gang_pin_total", result="reserved") == 1
    h.groups["ns/gc"] = make_pod_group("gc", min_member=4, topology_key=DK)
    c = members(h, "gc", 4)
    assert prefilter(p, h, c[0])[1].message() == "no domain has room for gang ns/gc"  # type: ignore[union-attr]
    assert count(m, "ome_scheduler_gang_pin_total", result="no_fit") == 1


def test_standalone_pods_avoid_held_nodes_and_wake_on_drain() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 1})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    solo = h.add_pod(make_pod("solo", requests={"nvidia.com/gpu": "1"}))
    n0, st0, s0 = schedule(p, h, g[0])
    assert s0 is not None and s0.code == Code.WAIT
    assert count(m, "ome_scheduler_gang_gate_total", result="wait") == 1
    st = CycleState()
    rej = p.filter(st, solo, h.nodes["a1"])
    assert rej is not None and rej.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert rej.message() == "node is reserved for a forming gang"
    assert p.filter(st, solo, h.nodes["b1"]) is None
    nts = NodeToStatus()
    nts.set("a1", rej)
    assert p.post_filter(st, solo, nts) is not None  # the pod failed everywhere: parked by the hold
    h.activated.clear()
    waiting = h.wait(h.nodes[n0].pods[g[0].uid])
    node1, _, s1 = schedule(p, h, g[1])
    assert s1 is None  # the gang is complete: admit
    assert waiting.allowed == ["OMEGangPack"]
    assert ["solo"] in h.activated
    assert count(m, "ome_scheduler_gang_activation_total", trigger="reservation_released") == 1
    assert count(m, "ome_scheduler_gang_gate_total", result="admit") == 1
    assert p.filter(CycleState(), solo, h.nodes["a1"]) is None


def test_filter_rejects_nodes_outside_the_pinned_domain() -> None:
    h = FakeHandle()
    domains(h, {"a": 1, "b": 1})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=1, topology_key=DK)
    pod = members(h, "g", 1)[0]
    _, s, st = prefilter(p, h, pod)
    pin: CyclePin = st.read(PIN_KEY)
    other = "b1" if pin.domain == "a" else "a1"
    rej = p.filter(st, pod, h.nodes[other])
    assert rej is not None and rej.message() == f"node not in gang's pinned domain {pin.domain}"


def test_waiting_for_templates_then_templates_complete() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    first = members(h, "g", 1)[0]
    assert prefilter(p, h, first)[1].message() == "waiting for all PodGroup member templates for ns/g"  # type: ignore[union-attr]
    second = h.add_pod(make_pod("g-1", gang="g", requests={"nvidia.com/gpu": "4"}))
    assert prefilter(p, h, second)[1] is None
    assert ["g-0"] in h.activated
    assert count(m, "ome_scheduler_gang_activation_total", trigger="templates_complete") == 1


def test_postfilter_release_marks_failed_domain_and_rejects_waiters() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 3})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    r, s, st = prefilter(p, h, g[0])
    assert r == {"a1", "a2"}
    res = p.post_filter(st, g[0], NodeToStatus())
    assert res is not None and res.message() == "gang reservation released after all candidate nodes were filtered"
    assert count(m, "ome_scheduler_gang_unwind_total") == 1
    r2, _, _ = prefilter(p, h, g[0])
    assert r2 == {"b1", "b2", "b3"}  # the failed domain is tried last


def test_permit_timeout_unwind_releases_hold() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK, timeout=7)
    g = members(h, "g", 2)
    node, st, s = schedule(p, h, g[0])
    assert s is not None and s.code == Code.WAIT
    assert p.permit(st, g[0].with_node(node), node)[1] == 7.0
    p.unreserve(st, g[0], node)
    assert len(p.gangs.pins) == 0 and count(m, "ome_scheduler_gang_unwind_total") == 1


def test_the_operators_cap_bounds_every_permit_wait_and_hold() -> None:
    """``maxPermitTimeoutSeconds`` (issue 30): a PodGroup asking for decades waits and holds for
    the cap at most; one below the cap keeps its own; the oldest hold is a gauge."""
    h = FakeHandle()
    domains(h, {"a": 2, "b": 2})
    p, m = plugin(h, maxPermitTimeoutSeconds=120)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK, timeout=2147483647)
    h.groups["ns/k"] = make_pod_group("k", min_member=2, topology_key=DK, timeout=7)
    g, k = members(h, "g", 2), members(h, "k", 2)
    node, st, s = schedule(p, h, g[0])
    assert s is not None and s.code == Code.WAIT
    assert p.permit(st, g[0].with_node(node), node)[1] == 120.0
    pin = p.gangs.pins.get(g[0].gang_key)
    assert pin is not None and pin.hold_until - p.gangs.forming_since[g[0].gang_key] == pytest.approx(120)
    node, st, _ = schedule(p, h, k[0])
    assert p.permit(st, k[0].with_node(node), node)[1] == 7.0
    p.gangs.forming_since[g[0].gang_key] -= 30
    p.gangs.expire_holds()
    assert 29 < count(m, "ome_scheduler_gang_longest_hold_seconds") < 31


def test_split_gang_is_refused() -> None:
    h = FakeHandle()
    domains(h, {"a": 1, "b": 1})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    h.bind(make_pod("g-0", gang="g", requests={"nvidia.com/gpu": "1"}), "a1")
    h.bind(make_pod("g-1", gang="g", requests={"nvidia.com/gpu": "1"}), "b1")
    pod = h.add_pod(make_pod("g-2", gang="g", requests={"nvidia.com/gpu": "1"}))
    s = prefilter(p, h, pod)[1]
    assert s is not None and s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert s.message() == "gang ns/g already has members in multiple topology domains"


def test_adoption_after_restart_keeps_bound_domain() -> None:
    h = FakeHandle()
    domains(h, {"a": 3, "b": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    h.bind(make_pod("g-0", gang="g", requests={"nvidia.com/gpu": "4"}, anti_affinity_on="kubernetes.io/hostname"), "a1")
    rest = [
        h.add_pod(
            make_pod(f"g-{i}", gang="g", requests={"nvidia.com/gpu": "4"}, anti_affinity_on="kubernetes.io/hostname")
        )
        for i in (1, 2)
    ]
    r, s, _ = prefilter(p, h, rest[0])
    assert s is None and r == {"a2", "a3"}
    assert count(m, "ome_scheduler_gang_pin_total", result="adopted") == 1
    c = p.gangs.pins.get("ns/g")
    assert c is not None and c.remaining == 2
    assert h.events[-1][2:] == ("Adopted", f"adopted {DK}=a, where 1 members are already placed, holding it")
    # Past the gang's scheduleTimeoutSeconds an adopted pin holds nothing, and says so.
    p.gangs.release("ns/g", c.owner, ANY_PIN)
    p.gangs.forming_since["ns/g"] -= 10_000
    prefilter(p, h, rest[0])
    again = p.gangs.pins.get("ns/g")
    assert again is not None and not again.holding
    assert h.events[-1][3].endswith("already placed, without a hold (its holds expired)")


def test_adopted_domain_too_small() -> None:
    h = FakeHandle()
    domains(h, {"a": 1, "b": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    h.bind(make_pod("g-0", gang="g", requests={"nvidia.com/gpu": "4"}), "a1")
    rest = [h.add_pod(make_pod(f"g-{i}", gang="g", requests={"nvidia.com/gpu": "4"})) for i in (1, 2)]
    assert prefilter(p, h, rest[0])[1].message() == "adopted domain a cannot fit remaining gang members ns/g"  # type: ignore[union-attr]


def test_stale_pin_replans_when_domain_vanishes() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 3})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    assert prefilter(p, h, g[0])[0] == {"a1", "a2"}
    for n in ("a1", "a2"):
        del h.nodes[n]
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"b1", "b2", "b3"}
    assert count(m, "ome_scheduler_gang_pin_total", result="stale_replan") == 1


def test_pinned_domain_cannot_fit_rest() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    node, st, _ = schedule(p, h, g[0])
    other = "a2" if node == "a1" else "a1"
    h.bind(make_pod("intruder", requests={"nvidia.com/gpu": "4"}), other)
    assert prefilter(p, h, g[1])[1].message() == "pinned domain a cannot fit all remaining gang members ns/g"  # type: ignore[union-attr]


def test_podgroup_recreated_releases_old_commitment() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK, uid="old")
    g = members(h, "g", 2)
    node, st, _ = schedule(p, h, g[0])
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK, uid="new")
    s = prefilter(p, h, g[1])[1]
    assert s is not None and s.message() == "released commitment owned by a previous PodGroup instance ns/g"
    # No member failed: the waiter is told what happened (issue 30).
    assert waiting.rejected == [("OMEGangPack", "gang ns/g unwound: its PodGroup was re-created")]


def test_topology_key_change_replans() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    for i in range(2):
        h.add_node(make_node(f"r{i}", {"rack": "r"}, alloc={"nvidia.com/gpu": "4"}))
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    assert prefilter(p, h, g[0])[0] == {"a1", "a2"}
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key="rack", uid=h.groups["ns/g"].metadata.uid)
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"r0", "r1"}
    assert count(m, "ome_scheduler_gang_pin_total", result="topology_replan") == 1


def test_podgroup_missing_releases_pin() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    prefilter(p, h, g[0])
    del h.groups["ns/g"]
    assert prefilter(p, h, g[0])[1].message() == "PodGroup ns/g not resolvable yet"  # type: ignore[union-attr]
    assert len(p.gangs.pins) == 0 and count(m, "ome_scheduler_gang_unwind_total") == 1


def test_sibling_affinity_yield() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    h.groups["ns/lw"] = make_pod_group("lw", min_member=2, topology_key=DK)
    h.add_pod(make_pod("lw-leader", gang="lw", labels={"role": "leader"}, requests={"nvidia.com/gpu": "4"}))
    aff = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"role": "leader"}}, "topologyKey": DK}
            ]
        }
    }
    worker = h.add_pod(make_pod("lw-worker", gang="lw", requests={"nvidia.com/gpu": "4"}, spec={"affinity": aff}))
    s = prefilter(p, h, worker)[1]
    assert s is not None and s.message() == "waiting for gang sibling ns/lw-leader to be placed"
    assert len(p.gangs.pins) == 0


def test_gc_releases_dead_and_recreated_gangs() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    h.groups["ns/k"] = make_pod_group("k", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    k = members(h, "k", 2)
    prefilter(p, h, g[0])
    prefilter(p, h, k[0])
    assert len(p.gangs.pins) == 2
    for x in g:
        del h.pods[x.key]
    h.groups["ns/k"] = make_pod_group("k", min_member=2, topology_key=DK, uid="other")
    p.gangs.gc()
    assert len(p.gangs.pins) == 0
    assert count(m, "ome_scheduler_gang_unwind_total") == 2


def test_surplus_member_admitted_immediately() -> None:
    h = FakeHandle()
    domains(h, {"a": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 3)
    n0, _, _ = schedule(p, h, g[0])
    h.wait(h.nodes[n0].pods[g[0].uid])
    n1, _, s1 = schedule(p, h, g[1])
    assert s1 is None
    _, _, s2 = schedule(p, h, g[2])
    assert s2 is None


def test_permit_without_prefilter_state() -> None:
    h = FakeHandle()
    p, _ = plugin(h)
    pod = PodInfo(make_pod("x", gang="g"))
    s, _ = p.permit(CycleState(), pod, "n")
    assert s is not None and s.message() == "labeled gang pod reached Permit without validated PreFilter state"
    assert p.permit(CycleState(), PodInfo(make_pod("solo")), "n") == (None, 0.0)


# ---- standalone domain packing (design §8) ---------------------------------------------------


def pack_scores(free: dict[str, int], total: dict[str, int]) -> dict[str, int]:
    h = FakeHandle()
    for d, n in total.items():
        for i in range(n):
            busy = i >= free[d]
            pods = [make_pod(f"busy-{d}{i}", requests={"nvidia.com/gpu": "1"})] if busy else []
            h.add_node(make_node(f"{d}{i + 1}", {DK: d}, alloc={"nvidia.com/gpu": "1"}), pods)
    p, _ = plugin(h, topologyKey=DK)
    pod = PodInfo(make_pod("solo", requests={"nvidia.com/gpu": "1"}))
    st = CycleState()
    nodes = h.node_infos()
    assert p.pre_score(st, pod, nodes) is None
    scores = p.score(st, pod, nodes)
    p.normalize_score(st, pod, scores)
    return {n.name: s for n, s in zip(nodes, scores, strict=True)}


def test_packing_score_examples() -> None:
    s = pack_scores({"a": 1, "b": 2}, {"a": 2, "b": 2})
    assert s["a1"] == 100 and s["b1"] == 0 and s["b2"] == 0
    s = pack_scores({"a": 1, "b": 2, "c": 3}, {"a": 3, "b": 3, "c": 3})
    assert s["a1"] == 100 and s["b1"] == 50 and s["c1"] == 0
    s = pack_scores({"a": 2, "b": 2}, {"a": 2, "b": 2})
    assert set(s.values()) == {0}


def test_packing_skips_without_topology_key_or_for_gangs() -> None:
    h = FakeHandle()
    domains(h, {"a": 1})
    p, _ = plugin(h)
    s = p.pre_score(CycleState(), PodInfo(make_pod("solo")), h.node_infos())
    assert s is not None and s.code == Code.SKIP


def test_domain_gauges_show_fragmentation() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 2})
    h.bind(make_pod("busy", requests={"nvidia.com/gpu": "1"}), "a1")
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2, gpu="4")
    prefilter(p, h, g[0])
    p.gangs.refresh_domain_gauges()
    assert count(m, "ome_scheduler_domain_free_nodes", topology_key=DK, domain="a") == 1
    assert count(m, "ome_scheduler_domain_free_nodes", topology_key=DK, domain="b") == 2
    assert count(m, "ome_scheduler_domain_max_gang_size", topology_key=DK, domain="a") == 1
    assert count(m, "ome_scheduler_domain_max_gang_size", topology_key=DK, domain="b") == 2


def test_stale_replan_rejects_waiters_without_counting_unwind() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    node, _, _ = schedule(p, h, g[0])
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    for n in ("a1", "a2"):
        del h.nodes[n]
    r, s, _ = prefilter(p, h, g[1])
    assert s is None and r == {"b1", "b2"}
    assert waiting.rejected and waiting.rejected[0][1] == (
        "gang ns/g unwound: its domain changed and no longer fits the gang"
    )
    assert count(m, "ome_scheduler_gang_pin_total", result="stale_replan") == 1
    assert count(m, "ome_scheduler_gang_unwind_total") == 0


# ---- rules 8, 9 and 10: gangs that change while they form (issue 18) -------------------------


def test_gated_member_means_the_gang_holds_nothing() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    m0 = members(h, "g", 1)[0]
    h.add_pod(make_pod("g-1", gang="g", requests={"nvidia.com/gpu": "4"}, spec={"schedulingGates": [{"name": "x"}]}))
    _, s, _ = prefilter(p, h, m0)
    assert s is not None and s.message() == "waiting for scheduling-gated members of gang ns/g: g-1"
    assert len(p.gangs.pins) == 0  # no hold
    h.add_pod(make_pod("g-1", gang="g", requests={"nvidia.com/gpu": "4"}))  # the gate is lifted
    _, s1, _ = prefilter(p, h, h.pods["ns/g-1"])
    assert s1 is None and ["g-0"] in h.activated  # the parked sibling is woken (templates_complete)


def test_min_member_lowered_opens_the_gate_for_the_waiter() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, m = plugin(h)
    old = make_pod_group("g", min_member=2, topology_key=DK)
    h.groups["ns/g"] = old
    g = members(h, "g", 2)
    node, _, s = schedule(p, h, g[0])
    assert s is not None and s.code == Code.WAIT
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    new = make_pod_group("g", min_member=1, topology_key=DK, uid=old.metadata.uid)
    h.groups["ns/g"] = new
    for listener in h.listeners:
        listener(old, new)
    assert waiting.allowed == ["OMEGangPack"]
    assert count(m, "ome_scheduler_gang_gate_total", result="admit") == 1


def test_new_timeout_and_new_topology_key_reach_the_waiters() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, m = plugin(h)
    old = make_pod_group("g", min_member=2, topology_key=DK, timeout=600)
    h.groups["ns/g"] = old
    g = members(h, "g", 2)
    node, _, _ = schedule(p, h, g[0])
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    retimed = make_pod_group("g", min_member=2, topology_key=DK, timeout=5, uid=old.metadata.uid)
    p.gangs.on_pod_group_change(old, retimed)
    assert waiting.timeouts == [("OMEGangPack", 5.0)] and not waiting.rejected
    rekeyed = make_pod_group("g", min_member=2, topology_key="rack", timeout=5, uid=old.metadata.uid)
    p.gangs.on_pod_group_change(retimed, rekeyed)
    assert waiting.rejected and len(p.gangs.pins) == 0
    assert count(m, "ome_scheduler_gang_pin_total", result="topology_replan") == 1


def test_node_leaving_the_domain_rejects_the_member_waiting_on_it() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 2})
    p, m = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    node, _, _ = schedule(p, h, g[0])
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    before = h.nodes[node].node
    assert before is not None
    unrelated = make_node("x1", {DK: "b"})
    p.gangs.on_node_change(None, unrelated)  # another node joining changes nothing
    assert not waiting.rejected and len(p.gangs.pins) == 1
    moved = make_node(node, {DK: "z"}, alloc={"nvidia.com/gpu": "4"})
    p.gangs.on_node_change(before, moved)
    assert waiting.rejected and len(p.gangs.pins) == 0
    assert count(m, "ome_scheduler_gang_pin_total", result="stale_replan") == 1


def test_placed_members_outside_the_pin_release_it() -> None:
    h = FakeHandle()
    domains(h, {"a": 3, "b": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    g = members(h, "g", 3)
    node, _, _ = schedule(p, h, g[0])
    waiting = h.wait(h.nodes[node].pods[g[0].uid])
    domain = h.nodes[node].labels[DK]
    other = "b" if domain == "a" else "a"
    relabelled = make_node(node, {DK: other}, alloc={"nvidia.com/gpu": "4"})
    h.nodes[node].set_node(relabelled)  # the cache sees the new label; no listener call
    _, s, _ = prefilter(p, h, g[1])
    assert s is not None and "outside its pinned domain" in s.message()
    assert waiting.rejected and len(p.gangs.pins) == 0


def test_permit_does_not_activate_members_in_flight() -> None:
    h = FakeHandle()
    domains(h, {"a": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    g = members(h, "g", 3)
    node0, _, _ = schedule(p, h, g[0])
    h.wait(h.nodes[node0].pods[g[0].uid])
    h.activated.clear()
    schedule(p, h, g[1])
    assert h.activated == [["g-2"]]  # neither g-1 itself nor g-0 waiting at Permit


def test_forgotten_sibling_wakes_nobody_but_a_deleted_bound_one_does() -> None:
    h = FakeHandle()
    p, _ = plugin(h)
    target = make_pod("g-0", gang="g")
    assumed = make_pod("g-1", gang="g", node_name="n1")
    hint = p.hints.is_schedulable_after_pod_delete_or_scale_down
    assert hint(target, assumed, None) == 0  # QueueSkip: an assumption ended
    bound = msgspec.structs.replace(
        assumed,
        status=msgspec.structs.replace(
            assumed.status, conditions=[msgspec.convert({"type": "PodScheduled", "status": "True"}, PodCondition)]
        ),
    )
    assert hint(target, bound, None) == 1  # Queue: a bound sibling left


def test_hold_expires_at_the_gang_timeout_and_later_pins_do_not_hold() -> None:
    h = FakeHandle()
    domains(h, {"a": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK, timeout=60)
    g = members(h, "g", 2)
    solo = h.add_pod(make_pod("solo", requests={"nvidia.com/gpu": "1"}))
    schedule(p, h, g[0])
    pin = p.gangs.pins.get(g[0].gang_key)
    assert pin is not None and pin.holding
    assert p.filter(CycleState(), solo, h.nodes["a1"]) is not None  # held
    p.gangs.expire_holds()  # not yet due
    assert pin.holding
    pin.hold_until = 1.0  # long past (monotonic seconds)
    p.gangs.expire_holds()
    assert not pin.holding and pin.remaining == 1  # the gate still counts the missing member
    assert p.filter(CycleState(), solo, h.nodes["a1"]) is None  # usable by others now
    assert h.events and h.events[-1][:3] == ("g", "Warning", "HoldReleased")
    # the gang keeps trying, but a new pin made after its timeout holds nothing
    p.gangs.release(g[0].gang_key, pin.owner, ANY_PIN)
    p.gangs.forming_since[g[0].gang_key] -= 61
    schedule(p, h, g[1])
    again = p.gangs.pins.get(g[0].gang_key)
    assert again is not None and not again.holding
    assert p.filter(CycleState(), solo, h.nodes["a1"]) is None


def test_pod_group_events_tell_pinned_bound_and_released() -> None:
    h = FakeHandle()
    domains(h, {"a": 2, "b": 3})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    g = members(h, "g", 2)
    _, s, st = prefilter(p, h, g[0])
    assert s is None
    reasons = [e[2] for e in h.events]
    assert reasons == ["Pinned"] and "pinned to topology.ome.io/domain=a" in h.events[0][3]
    p.post_filter(st, g[0], NodeToStatus())
    assert h.events[-1][2] == "HoldReleased" and "member ns/g-0 fit no node of the domain" in h.events[-1][3]


# ---- what users are told: placement reports, and the scheduler's own writes wake nothing --------


def test_placement_is_reported_when_pinned_released_and_bound() -> None:
    from ome_scheduler.framework.types import GangPlacement

    h = FakeHandle()
    domains(h, {"d": 2})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=2, topology_key=DK)
    a = members(h, "g", 2)
    n0, st0, ps0 = schedule(p, h, a[0])
    assert h.placements["ns/g"] == GangPlacement(DK, "d", "Holding")
    assert ps0 is not None and ps0.is_wait()
    n1, st1, _ = schedule(p, h, a[1])
    for pod, node, st in ((a[0], n0, st0), (a[1], n1, st1)):
        h.bind(pod.pod, node)
        p.post_bind(st, pod, node)
    assert h.placements["ns/g"] == GangPlacement(DK, "d", "Bound")
    p.gangs.forget_missing_gang(a[0].gang_key)
    assert h.placements["ns/g"] is None  # released


def test_status_and_status_annotation_updates_wake_no_member() -> None:
    from ome_scheduler.api.scheduling import ANN_PLACEMENT, ANN_WAITING_REASON, PodGroupStatus
    from ome_scheduler.framework.events import QueueingHint

    h = FakeHandle()
    domains(h, {"d": 2})
    p, _ = plugin(h)
    pg = make_pod_group("g", min_member=3, topology_key=DK)
    h.groups["ns/g"] = pg
    a = members(h, "g", 2)
    assert prefilter(p, h, a[0])[1] is not None  # templates incomplete
    written = msgspec.structs.replace(
        pg,
        status=PodGroupStatus(phase="Pending"),
        metadata=msgspec.structs.replace(
            pg.metadata,
            resource_version="9",
            annotations={**pg.metadata.annotations, ANN_PLACEMENT: "Holding", ANN_WAITING_REASON: "x"},
        ),
    )
    hint = p.hints.is_schedulable_after_own_pod_group_change
    assert hint(a[0].pod, pg, written) == QueueingHint.QUEUE_SKIP
    resized = msgspec.structs.replace(written, spec=msgspec.structs.replace(pg.spec, min_member=2))
    assert hint(a[0].pod, written, resized) == QueueingHint.QUEUE
    retargeted = msgspec.structs.replace(
        written, metadata=msgspec.structs.replace(written.metadata, annotations={"ome.io/topology-key": "other"})
    )
    assert hint(a[0].pod, written, retargeted) == QueueingHint.QUEUE
    h.activated.clear()
    key = a[0].gang_key
    p.gangs.forming_since[key] = 1.0
    p.gangs.on_pod_group_change(pg, written)
    assert h.activated == [] and p.gangs.forming_since[key] == 1.0
    p.gangs.on_pod_group_change(written, resized)
    assert h.activated == [["g-0", "g-1"]] and key not in p.gangs.forming_since
