"""Gang sources (design §2.1): LeaderWorkerSet groups as gangs, next to PodGroups (issue 25)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.api.meta import ObjectMeta
from ome_scheduler.api.workloads import LeaderWorkerSet, LeaderWorkerSetSpec
from ome_scheduler.framework import gangsource
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.gangpack.plugin import PIN_KEY, CyclePin
from tests.plugins.gangpack.test_plugin import DK, domains, plugin, prefilter, schedule
from tests.support.builders import make_pod, make_pod_group
from tests.support.fakes import FakeHandle

L = gangsource.LWS


@pytest.fixture(autouse=True)
def lws_gangs_on() -> Iterator[None]:
    """Every test starts and ends with LWS gangs on (the process-wide default)."""
    gangsource.configure(lws_gangs=True)
    yield
    gangsource.configure(lws_gangs=True)


def lws_pod(
    name: str, lws: str, group: int, worker: int, size: int = 4, ann: Mapping[str, str] | None = None, **kw: object
) -> Pod:
    """A pod as the LWS webhook labels it (group ``group``, worker ``worker``), four GPUs."""
    labels = {
        L + "name": lws,
        L + "group-index": str(group),
        L + "group-key": f"key-{lws}-{group}",
        L + "worker-index": str(worker),
    }
    extra = kw.pop("labels", {})
    assert isinstance(extra, dict)
    p = make_pod(name, labels={**labels, **extra}, requests={"nvidia.com/gpu": "4"}, **kw)  # type: ignore[arg-type]
    md = msgspec.structs.replace(p.metadata, annotations={L + "size": str(size), **(ann or {})})
    return msgspec.structs.replace(p, metadata=md)


def group(h: FakeHandle, lws: str, g: int, size: int = 4, **kw: object) -> list[PodInfo]:
    return [h.add_pod(lws_pod(f"{lws}-{g}" + (f"-{w}" if w else ""), lws, g, w, size, **kw)) for w in range(size)]


def test_gang_name_picks_the_pod_group_label_first_then_the_lws_group() -> None:
    lws = {L + "name": "web", L + "group-index": "1", L + "group-key": "abc"}
    assert gangsource.gang_name(ObjectMeta(labels=lws)) == "lws:web:1"
    assert gangsource.gang_name(ObjectMeta(labels={L + "group-key": "abc"})) == "lws:abc"
    both = {**lws, gangsource.POD_GROUP_LABEL: "pg"}
    assert gangsource.gang_name(ObjectMeta(labels=both)) == "pg"
    assert gangsource.gang_name(ObjectMeta(labels={L + "name": "web"})) == ""  # no group: standalone
    assert gangsource.source_of("lws:web:1") == "LeaderWorkerSet" and gangsource.source_of("pg") == "PodGroup"
    assert gangsource.lws_group("lws:web:1") == ("web", "1")
    assert gangsource.lws_group("lws:abc") is None and gangsource.lws_group("pg") is None
    gangsource.configure(lws_gangs=False)
    assert gangsource.gang_name(ObjectMeta(labels=lws)) == ""
    assert gangsource.gang_name(ObjectMeta(labels=both)) == "pg"


def test_size_and_topology_key_from_labels_and_annotations() -> None:
    assert gangsource.lws_size(ObjectMeta(annotations={L + "size": "4"})) == 4
    assert gangsource.lws_size(ObjectMeta(labels={L + "size": "3"}, annotations={L + "size": "4"})) == 3
    for bad in ("", "0", "-1", "x"):
        assert gangsource.lws_size(ObjectMeta(annotations={L + "size": bad})) is None
    ex, sub = L + "exclusive-topology", L + "subgroup-exclusive-topology"
    assert gangsource.lws_topology_key(ObjectMeta(annotations={ex: "a", sub: "b"})) == "a"
    assert gangsource.lws_topology_key(ObjectMeta(annotations={sub: "b"})) == "b"
    assert gangsource.lws_topology_key(ObjectMeta()) == ""


def test_podinfo_follows_the_switch() -> None:
    p = lws_pod("web-0", "web", 0, 0)
    assert PodInfo(p).gang_key == "ns/lws:web:0"
    gangsource.configure(lws_gangs=False)
    assert PodInfo(p).gang == ""


def test_an_lws_group_is_pinned_whole_to_the_domain_that_fits_it() -> None:
    """Size 4 from the annotation, fallback topologyKey: the 2-node domain is skipped, every
    member waits at Permit until the last one (LeaderCreated: all or nothing)."""
    h = FakeHandle()
    domains(h, {"small": 2, "big": 4})
    p, _ = plugin(h, topologyKey=DK)
    pods = group(h, "web", 0)
    verdicts = []
    for pi in pods:
        node, st, ps = schedule(p, h, pi)
        assert node.startswith("big"), node
        pin: CyclePin = st.read(PIN_KEY)
        assert pin.gang.source == "LeaderWorkerSet" and pin.gang.min_member == 4 and pin.gang.timeout == 30
        assert not pin.gang.leader_first
        verdicts.append(ps)
    assert all(v is not None and v.code == Code.WAIT for v in verdicts[:3])
    assert verdicts[3] is None


def test_exclusive_topology_annotation_names_the_domain_and_size_is_required() -> None:
    h = FakeHandle()
    domains(h, {"a": 4})
    p, _ = plugin(h)  # no fallback topologyKey
    (pi,) = group(h, "x", 0, size=1, ann={L + "exclusive-topology": DK})
    _, s, st = prefilter(p, h, pi)
    assert s is None and st.read(PIN_KEY).topology_key == DK
    bare = h.add_pod(lws_pod("y-0", "y", 0, 0))
    _, s, st = prefilter(p, h, bare)
    assert s is None and st.get(PIN_KEY) is None  # no domain to share: standalone
    nosize = lws_pod("z-0", "z", 0, 0, ann={L + "exclusive-topology": DK})
    no_size = {L + "exclusive-topology": DK}
    nosize = msgspec.structs.replace(nosize, metadata=msgspec.structs.replace(nosize.metadata, annotations=no_size))
    _, s, _ = prefilter(p, h, h.add_pod(nosize))
    assert s is not None and "has no positive leaderworkerset.sigs.k8s.io/size" in s.message()


def test_leader_ready_leader_binds_alone_and_its_room_stays_held() -> None:
    """LeaderReady: the leader is admitted at Permit at once; the domain stays held (other pods
    are kept off it) until its workers come, follow it there and complete the gang."""
    h = FakeHandle()
    domains(h, {"small": 2, "big": 4})
    h.lws[("ns", "ready")] = LeaderWorkerSet(
        metadata=ObjectMeta(name="ready", namespace="ns"), spec=LeaderWorkerSetSpec(startup_policy="LeaderReady")
    )
    p, _ = plugin(h, topologyKey=DK)
    leader = h.add_pod(lws_pod("ready-0", "ready", 0, 0))
    node, st, ps = schedule(p, h, leader)
    assert node.startswith("big") and ps is None
    assert st.read(PIN_KEY).gang.leader_first
    h.bind(leader.pod, node)
    assert p.gangs.pins.get(leader.gang_key).remaining == 3  # the workers' room is held
    other = h.add_pod(make_pod("solo", requests={"nvidia.com/gpu": "4"}))
    held = [n for n in h.node_infos() if n.name.startswith("big") and n.name != node]
    assert all(p.filter(prefilter(p, h, other)[2], other, n) is not None for n in held)
    workers = [h.add_pod(lws_pod(f"ready-0-{w}", "ready", 0, w)) for w in (1, 2, 3)]
    verdicts = [schedule(p, h, w) for w in workers]
    assert all(n.startswith("big") for n, _, _ in verdicts)
    assert [v is None for _, _, v in verdicts] == [False, False, True]


def test_the_pod_group_label_wins_over_the_lws_group() -> None:
    h = FakeHandle()
    domains(h, {"a": 4})
    h.groups["ns/pg"] = make_pod_group("pg", min_member=1, topology_key=DK)
    p, _ = plugin(h)
    pi = h.add_pod(lws_pod("web-0", "web", 0, 0, labels={gangsource.POD_GROUP_LABEL: "pg"}))
    assert pi.gang_key == "ns/pg"
    node, st, ps = schedule(p, h, pi)
    assert ps is None and st.read(PIN_KEY).gang.source == "PodGroup" and st.read(PIN_KEY).gang.min_member == 1


def test_lws_gangs_off_leaves_lws_pods_standalone() -> None:
    h = FakeHandle()
    domains(h, {"a": 4})
    p, _ = plugin(h, topologyKey=DK, lwsGangs=False)
    pi = h.add_pod(lws_pod("web-0", "web", 0, 0))
    assert not pi.gang
    r, s, st = prefilter(p, h, pi)
    assert r is None and s is None and st.get(PIN_KEY) is None


def test_a_re_created_group_is_planned_afresh_and_a_returning_worker_is_gated() -> None:
    """No UID tells a group's incarnations apart: once the old pods are gone (or terminating),
    the drained pin is released and the new group waits for all its members again; a single
    worker that comes back to a bound group is admitted as the last member."""
    h = FakeHandle()
    domains(h, {"big": 4})
    p, _ = plugin(h, topologyKey=DK)
    pods = group(h, "g", 0)
    placed = {}
    for pi in pods:
        node, _, _ = schedule(p, h, pi)
        placed[pi.name] = node
    for pi in pods:
        h.bind(pi.pod, placed[pi.name])
    key = pods[0].gang_key
    assert p.gangs.pins.get(key) is not None and p.gangs.pins.get(key).remaining == 0  # type: ignore[union-attr]
    # A worker comes back alone (restartPolicy None): 3 placed, it completes the gang.
    gone = pods[3]
    h.forget(h.nodes[placed[gone.name]].pods[gone.pod_key], placed[gone.name])
    back = h.add_pod(lws_pod("g-0-3", "g", 0, 3))
    _, _, ps = schedule(p, h, back)
    assert ps is None
    # The whole group is re-created under the same names: the old pods are gone, so the new
    # leader finds the drained pin with nothing placed, and waits for its whole group again.
    for ni in h.nodes.values():
        for pk in list(ni.pods):
            ni.remove_pod(pk)
    h.pods.clear()
    fresh = [h.add_pod(lws_pod("g-0" + (f"-{w}" if w else ""), "g", 0, w)) for w in range(4)]
    verdicts = [schedule(p, h, pi)[2] for pi in fresh]
    assert [v is None for v in verdicts] == [False, False, False, True]


def test_the_old_incarnations_workers_are_not_the_new_groups_members() -> None:
    """The controller re-creates the leader first; the old workers (their StatefulSet owned by
    the old leader) are still bound for a moment. They do not count for the new leader, whose
    group waits for its own workers."""
    h = FakeHandle()
    domains(h, {"big": 4})
    p, _ = plugin(h, topologyKey=DK)
    pods = group(h, "g", 0)
    for pi in pods:
        node, _, _ = schedule(p, h, pi)
        h.bind(pi.pod, node)
    old_leader = pods[0]
    for pi in pods[1:]:
        h.lws_leaders[pi.name] = old_leader.uid
    node = next(n for n in h.nodes.values() if old_leader.pod_key in n.pods)
    h.forget(node.pods[old_leader.pod_key], node.name)
    del h.pods[old_leader.key]
    new_leader = h.add_pod(lws_pod("g-0", "g", 0, 0))
    _, s, _ = prefilter(p, h, new_leader)
    assert s is not None and "waiting for all PodGroup member templates" in s.message()


def test_without_any_topology_key_an_lws_group_stays_standalone() -> None:
    """No ``exclusive-topology`` and no ``topologyKey``: nothing to share, so no gang."""
    h = FakeHandle()
    plugin(h)  # no topologyKey
    assert not h.add_pod(lws_pod("w-0", "w", 0, 0)).gang
    assert h.add_pod(lws_pod("x-0", "x", 0, 0, ann={L + "exclusive-topology": DK})).gang == "lws:x:0"
