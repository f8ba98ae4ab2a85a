"""``ome-scheduler explain``: the offline engine in dry run over hand-built snapshots.

Each scenario is checked against what the engine itself does with the same cluster:
``ome-scheduler simulate`` (the scheduler's loop on a simulated clock) must bind the gang in the
domain explain chose, or record the message explain printed. ``e2e/test_explain.py`` does the
same against the live scheduler.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import PersistentVolume, PersistentVolumeClaim
from ome_scheduler.api.snapshot import ClusterSnapshot, write_snapshot
from ome_scheduler.api.storage import CSINode
from ome_scheduler.config.load import parse_config
from ome_scheduler.tools.explainer import Explanation, explain, render_text
from ome_scheduler.tools.simulation import Simulation
from tests.support.manifests import HOSTNAME, chart_config, node, pod, pod_group
from tests.support.snapshots import snapshot

DK = "example.com/clique"
NS = "team"
CFG = parse_config(chart_config())


def nodes(spec: dict[str, int]) -> list[dict[str, Any]]:
    return [node(f"{d}-{i}", {DK: d}) for d, n in spec.items() for i in range(n)]


def snap(node_dicts: list[dict[str, Any]], objs: list[dict[str, Any]]) -> ClusterSnapshot:
    return snapshot(
        node_dicts, [o for o in objs if o["kind"] == "Pod"], [o for o in objs if o["kind"] == "PodGroup"], NS
    )


def gang(name: str, size: int, members: int | None = None, **kw: Any) -> list[dict[str, Any]]:
    out = [pod_group(name, NS, size, topology_key=DK)]
    out += [pod(f"{name}-{i}", NS, gang=name, anti_affinity_on=HOSTNAME, **kw) for i in range(members or size)]
    return out


def explained(s: ClusterSnapshot, name: str, kind: str = "podgroup") -> Explanation:
    ex = explain(CFG, s, kind, NS, name)
    assert isinstance(ex, Explanation), ex
    return ex


def simulated(s: ClusterSnapshot) -> dict[str, Any]:
    """Gang -> (status, domains, reason) after the scheduler's own loop ran on ``s``."""
    res = Simulation(CFG, s).run()
    return {g.gang: (g.status, g.domains, g.reason) for g in res.gangs}


def test_a_gang_that_fits_is_pinned_where_the_scheduler_binds_it() -> None:
    s = snap(nodes({"three": 3, "four": 4}), gang("g", 3))
    ex = explained(s, "g")
    assert [(d.name, d.room, d.fits) for d in ex.domains] == [("four", 4, True), ("three", 3, True)]
    assert (ex.decision.result, ex.decision.domain) == ("pinned", "three")  # best fit: least room that fits
    assert ex.decision.node.startswith("three-")
    assert [m.state for m in ex.members] == ["pending"] * 3
    assert simulated(s)[f"{NS}/g"][:2] == ("bound", ["three"])
    text = render_text(ex)
    assert f"Now: would pin {DK}=three and place g-0 on {ex.decision.node}." in text


def test_no_room_gives_the_schedulers_message_and_each_domains_reasons() -> None:
    s = snap(nodes({"a": 2, "b": 2}), gang("g", 3) + [pod("hog", NS, node_name="a-0")])
    ex = explained(s, "g")
    msg = f"0/4 nodes are available: no domain has room for gang {NS}/g. no new claims to deallocate"
    assert (ex.decision.result, ex.decision.message) == ("unschedulable", msg)
    assert simulated(s)[f"{NS}/g"] == ("pending", [], msg)
    a, b = ex.domains
    assert (a.name, a.room, a.fits, a.reasons, a.nodes_fitting) == (
        "a",
        1,
        False,
        {"Insufficient nvidia.com/gpu": 1},
        1,
    )
    assert (b.name, b.room, b.fits, b.reasons) == ("b", 2, False, {})
    text = render_text(ex)
    assert "a       2      1     -        1 Insufficient nvidia.com/gpu" in text
    assert "b       2      2     -        2 node(s) fit, room 2 < 3" in text


def test_a_hold_is_derived_from_a_member_waiting_at_permit() -> None:
    """Gang h waits at Permit on b-0 (nominated) for a member nobody schedules: its domain is held,
    so gang s (one member) finds every fitting domain reserved, as the live scheduler says."""
    held = gang("h", 2)
    held[1]["status"] = {"nominatedNodeName": "b-0"}
    held[2] = pod("h-1", NS, gang="h", anti_affinity_on=HOSTNAME, scheduler="nobody")
    s = snap(nodes({"a": 1, "b": 2}), held + gang("s", 1) + [pod("hog", NS, node_name="a-0")])
    ex = explained(s, "s")
    assert ex.decision.message == (
        f"0/3 nodes are available: no domain has room for gang {NS}/s: every fitting domain is reserved for a "
        "forming gang. no new claims to deallocate"
    )
    b = next(d for d in ex.domains if d.name == "b")
    assert b.held_by == [f"{NS}/h (1 more)"]
    assert b.reasons == {"Insufficient nvidia.com/gpu": 1, "node is reserved for a forming gang": 1}
    assert ex.holds == [f"{NS}/h holds {DK}=b for 1 more member(s) (1 member(s) waiting at Permit)"]
    h = explained(s, "h")
    assert [(m.name, m.state, m.node, m.domain) for m in h.members] == [
        ("h-0", "waiting", "b-0", "b"),
        ("h-1", "not-ours", "", ""),
    ]
    assert (h.decision.result, h.decision.domain) == ("waiting", "b")


def test_a_hold_is_derived_from_the_placement_annotation() -> None:
    objs = gang("h", 2, members=1) + gang("s", 1)
    objs[0]["metadata"]["annotations"].update(
        {"ome.io/placement": "Holding", "ome.io/placement-domain": "b", "ome.io/placement-topology-key": DK}
    )
    s = snap(nodes({"b": 2}), objs)
    ex = explained(s, "s")
    assert ex.decision.result == "unschedulable" and "reserved for a forming gang" in ex.decision.message
    assert ex.holds == [f"{NS}/h holds {DK}=b for 2 more member(s) (ome.io/placement: Holding)"]


def test_templates_incomplete_and_gated_members() -> None:
    s = snap(nodes({"a": 2}), gang("g", 3, members=2))
    ex = explained(s, "g")
    assert ex.decision.message == (
        f"0/2 nodes are available: waiting for all PodGroup member templates for {NS}/g. no new claims to deallocate"
    )
    roomy = explained(snap(nodes({"a": 4}), gang("g", 3, members=2)), "g")
    a = roomy.domains[0]  # room enough: what is missing is a member
    assert (a.room, a.fits, a.why_not()) == (4, False, "only 2 of the 3 unplaced members it needs exist")
    assert "only 2 of the 3 unplaced members it needs exist" in render_text(roomy)
    gated = snap(nodes({"a": 2, "b": 3}), gang("g", 2, gates=["example.com/hold"]))
    ex = explained(gated, "g")
    assert [m.state for m in ex.members] == ["gated", "gated"]
    assert (ex.decision.result, ex.decision.domain, ex.decision.if_ungated) == ("pinned", "a", True)
    assert "Now once ungated: would pin" in render_text(ex)


def test_a_member_that_fits_no_node_is_named_in_every_domain() -> None:
    """Mixed shapes: room is counted like the first member, so the domains' room suffices; the
    member asking for more GPUs than any node has is what keeps the gang out, and is named."""
    objs = [pod_group("g", NS, 2, topology_key=DK), pod("g-0", NS, gang="g"), pod("g-1", NS, gang="g", gpu=16)]
    ex = explained(snap(nodes({"a": 2, "b": 3}), objs), "g")
    assert [(d.name, d.room, d.fits) for d in ex.domains] == [("a", 2, False), ("b", 3, False)]
    assert ex.domains[0].why_not() == "g-1 fits no node here: 2 Insufficient nvidia.com/gpu"
    assert ex.domains[1].why_not() == "g-1 fits no node here: 3 Insufficient nvidia.com/gpu"
    text = render_text(ex)
    assert "g-1 fits no node here: 3 Insufficient nvidia.com/gpu" in text
    assert "Members differ in what they need" in text


def test_a_key_no_node_carries_and_a_missing_podgroup_are_said_plainly() -> None:
    objs = [pod_group("g", NS, 2, topology_key="example.com/no-such-label")]
    objs += [pod(f"g-{i}", NS, gang="g") for i in range(2)]
    text = render_text(explained(snap(nodes({"a": 2}), objs), "g"))
    assert "No node has the label example.com/no-such-label, so the gang has no domain" in text
    orphan = render_text(explained(snap(nodes({"a": 2}), [pod("o", NS, gang="gone")]), "o", kind="pod"))
    assert "None" not in orphan and "Members: 1 exist" in orphan


def test_a_bound_gang_and_explain_pod() -> None:
    objs = gang("g", 2)
    objs[1]["spec"]["nodeName"] = "a-0"
    objs[2]["spec"]["nodeName"] = "a-1"
    s = snap(nodes({"a": 2, "b": 2}), objs + [pod("solo", NS)])
    ex = explained(s, "g-1", kind="pod")
    assert (ex.kind, ex.name, ex.decision.result, ex.decision.domain) == ("PodGroup", "g", "bound", "a")
    assert ex.domains == []
    solo = explained(s, "solo", kind="pod")
    assert solo.kind == "Pod" and solo.decision.result == "schedulable" and solo.decision.node.startswith("b-")
    assert explain(CFG, s, "pod", NS, "nope") == f"pod {NS}/nope not found (or it has finished)"
    assert explain(CFG, s, "podgroup", NS, "nope") == f"podgroup {NS}/nope not found, and no pod names it"


def test_a_gang_bound_across_two_domains_is_called_split() -> None:
    """Pods bound by ``spec.nodeName`` skip the scheduler: explain says where they are, not
    ``Bound on .`` (issue 30)."""
    objs = gang("g", 2)
    objs[1]["spec"]["nodeName"] = "a-0"
    objs[2]["spec"]["nodeName"] = "b-0"
    ex = explained(snap(nodes({"a": 2, "b": 2}), objs), "g")
    assert (ex.decision.result, ex.decision.domain) == ("bound", "")
    assert f"Bound, but split: {DK}=a, {DK}=b." in render_text(ex)


def test_a_hold_under_another_topology_key_shows_in_the_held_by_column() -> None:
    """A gang holding a rack whose nodes are also clique ``a``'s holds ``a`` for every gang of the
    clique key too; the table says by whom, as the verdict does (issue 30)."""
    rack = "example.com/rack"
    ns = [node(f"a-{i}", {DK: "a", rack: "r1"}) for i in range(2)] + [node(f"b-{i}", {DK: "b"}) for i in range(2)]
    holder = pod_group("h", NS, 3, topology_key=rack)
    holder["metadata"]["annotations"].update(
        {"ome.io/placement": "Holding", "ome.io/placement-domain": "r1", "ome.io/placement-topology-key": rack}
    )
    objs = [holder, pod("h-0", NS, gang="h"), *gang("g", 2)]
    ex = explained(snap(ns, objs), "g")
    held = {d.name: d.held_by for d in ex.domains}
    assert held["a"] == [f"{NS}/h under {rack}=r1 (3 more)"] and held["b"] == []


def test_nodes_without_a_value_for_the_key_are_counted_and_said_to_be_in_no_domain() -> None:
    ns = [*nodes({"a": 2}), node("loose-0", {}), node("empty-0", {DK: ""})]
    ex = explained(snap(ns, gang("g", 2)), "g")
    assert ex.nodes_without_domain == 2 and [d.name for d in ex.domains] == ["a"]
    assert f"2 of 4 node(s) have no {DK} label or an empty value: they belong to no domain" in render_text(ex)
    assert ex.to_json()["nodesWithoutDomain"] == 2


def test_a_member_no_node_can_take_is_named_and_the_gang_holds_nothing() -> None:
    """Rule 12 (issue 30): a member whose claim does not exist (VolumeBinding's PreFilter says
    UnschedulableAndUnresolvable) keeps the gang from pinning; explain names it, as the
    scheduler's message to its sibling does."""
    objs = gang("g", 2)
    objs[2]["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}]
    s = snap(nodes({"a": 2, "b": 2}), objs)
    ex = explained(s, "g-0", kind="pod")
    assert ex.decision.result == "unschedulable" and ex.decision.pod == "g-0"
    assert f"gang {NS}/g cannot be placed: member {NS}/g-1 cannot be scheduled" in ex.decision.message
    text = render_text(ex)
    assert 'g-1 can never be scheduled as the cluster stands (persistentvolumeclaim "nope" not found)' in text
    assert simulated(s)[f"{NS}/g"][0] == "pending"


@pytest.mark.parametrize("output", ["text", "json"])
def test_the_command_reads_a_snapshot_file(tmp_path: Path, output: str) -> None:
    s = snap(nodes({"three": 3, "four": 4}), gang("g", 3))
    path = tmp_path / "snap.json"
    write_snapshot(s, path)
    cmd = [
        sys.executable,
        "-m",
        "ome_scheduler",
        "explain",
        "podgroup",
        f"{NS}/g",
        "--snapshot",
        str(path),
        "-o",
        output,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    if output == "json":
        doc = json.loads(r.stdout)
        assert doc["decision"]["result"] == "pinned" and doc["decision"]["domain"] == "three"
        assert [d["domain"] for d in doc["domains"]] == ["four", "three"]
    else:
        assert r.stdout.startswith(f"PodGroup {NS}/g: minMember 3, scheduleTimeoutSeconds 300, topology key {DK}\n")
    bad = subprocess.run(
        [sys.executable, "-m", "ome_scheduler", "explain", "podgroup", f"{NS}/x", "--snapshot", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and bad.stderr == f"Error: podgroup {NS}/x not found, and no pod names it\n"


def lws_group(name: str, group: int, size: int) -> list[dict[str, Any]]:
    """The pods of one LeaderWorkerSet group as the LWS webhook labels them (no PodGroup)."""
    lws = "leaderworkerset.sigs.k8s.io/"
    out = []
    for w in range(size):
        labels = {lws + "name": name, lws + "group-index": str(group), lws + "worker-index": str(w)}
        p = pod(f"{name}-{group}" + (f"-{w}" if w else ""), NS, labels=labels, anti_affinity_on=HOSTNAME)
        p["metadata"]["annotations"] = {lws + "size": str(size), lws + "exclusive-topology": DK}
        out.append(p)
    return out


def test_explain_lws_reports_each_group_as_a_gang() -> None:
    """``explain lws``: one report per group, its size and domain label from its pods (design
    §2.1), the domains' room and the decision the scheduler's own loop then makes."""
    from ome_scheduler.tools.explainer import explain_lws

    s = snap(nodes({"three": 3, "four": 4}), lws_group("web", 0, 3) + lws_group("web", 1, 4))
    groups = explain_lws(CFG, s, NS, "web")
    assert isinstance(groups, list)
    assert [(g.name, g.kind, g.min_member, g.topology_key) for g in groups] == [
        ("lws:web:0", "LeaderWorkerSet group", 3, DK),
        ("lws:web:1", "LeaderWorkerSet group", 4, DK),
    ]
    g0, g1 = groups
    assert [(d.name, d.room, d.fits) for d in g0.domains] == [("four", 4, True), ("three", 3, True)]
    assert (g0.decision.result, g0.decision.domain) == ("pinned", "three")
    assert (g1.decision.result, g1.decision.domain) == ("pinned", "four")
    assert [m.state for m in g1.members] == ["pending"] * 4
    assert simulated(s)[f"{NS}/lws:web:0"][:2] == ("bound", ["three"])
    assert f"LeaderWorkerSet group {NS}/lws:web:0: size 3" in render_text(g0)
    assert isinstance(explain_lws(CFG, s, NS, "nothing"), str)


def test_preferred_levels_are_explained_per_level() -> None:
    """§3.9: the clique level's best fit (or its relaxation) is a note; the decision follows it."""
    bk = "example.com/block"
    fabric = {("b1", "c1"): 3, ("b1", "c2"): 3, ("b2", "c3"): 4}
    node_dicts = [node(f"{b}{c}-{i}", {bk: b, DK: c}) for (b, c), n in fabric.items() for i in range(n)]
    for size, note in (
        (
            3,
            f"Preferred level {DK}: 3 domain(s); the tightest with room for the 3 member(s) left is {bk}=b1,{DK}=c1 (room 3)",
        ),
        (
            5,
            f"Preferred level {DK}: no domain has room for the 5 member(s) left (largest: {bk}=b2,{DK}=c3 with room 4)",
        ),
    ):
        objs = gang("g", size)
        objs[0]["metadata"]["annotations"] = {"ome.io/topology-key": bk, "ome.io/topology-preferred-keys": DK}
        ex = explained(snap(node_dicts, objs), "g")
        assert any(n.startswith(note) for n in ex.notes), ex.notes
        assert ex.decision.result == "pinned", ex.decision
        assert ex.decision.node.startswith("b1c1-" if size == 3 else "b1"), ex.decision


def test_sub_gangs_are_explained_per_domain() -> None:
    """§3.10: how many whole sub-gangs each block takes."""
    bk = "example.com/block"
    fabric = {("b1", "c1"): 3, ("b1", "c2"): 3, ("b2", "c3"): 4, ("b2", "c4"): 4}
    node_dicts = [node(f"{b}{c}-{i}", {bk: b, DK: c}) for (b, c), n in fabric.items() for i in range(n)]
    objs = gang("g", 8)
    objs[0]["metadata"]["annotations"] = {
        "ome.io/topology-key": bk,
        "ome.io/subgroup-size": "4",
        "ome.io/subgroup-topology-key": DK,
    }
    ex = explained(snap(node_dicts, objs), "g")
    note = f"Sub-gangs of 4 members, each inside one {DK} domain: b2 takes 2 of 2, b1 takes 0 of 2"
    assert any(n.startswith(note) for n in ex.notes), ex.notes
    assert (ex.decision.result, ex.decision.domain) == ("pinned", "b2"), ex.decision


def test_attach_limits_cutting_a_domains_room_are_named() -> None:
    """Each member mounts its own claim of a CSI driver whose CSINode limit is 2 on a-0: by GPUs
    domain a (one node of 8) is the best fit for 3 members, but it attaches only 2 of their volumes,
    so explain (like the scheduler's own loop) picks b and says why a was passed over (§3.1)."""
    driver = "ebs.csi.aws.com"
    objs: list[dict[str, Any]] = [pod_group("g", NS, 3, topology_key=DK)]
    pvs, pvcs = [], []
    for i in range(3):
        p = pod(f"g-{i}", NS, gang="g")
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}]
        objs.append(p)
        csi_src = {"driver": driver, "volumeHandle": f"vol-{i}"}
        ref = {"namespace": NS, "name": f"data-{i}"}
        pvs.append(
            {"metadata": {"name": f"pv-{i}"}, "spec": {"csi": csi_src, "claimRef": ref}, "status": {"phase": "Bound"}}
        )
        bound = {"name": f"data-{i}", "namespace": NS, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}}
        pvcs.append({"metadata": bound, "spec": {"volumeName": f"pv-{i}"}, "status": {"phase": "Bound"}})
    gpus = [node("a-0", {DK: "a"}, gpu=8), node("b-0", {DK: "b"}, gpu=8), node("b-1", {DK: "b"}, gpu=8)]
    csi = [
        {"metadata": {"name": n}, "spec": {"drivers": [{"name": driver, "nodeID": n, "allocatable": {"count": 2}}]}}
        for n in ("a-0", "b-0", "b-1")
    ]
    s = snap(gpus, objs)
    s = msgspec.structs.replace(
        s,
        persistent_volumes=[msgspec.convert(v, PersistentVolume) for v in pvs],
        persistent_volume_claims=[msgspec.convert(c, PersistentVolumeClaim) for c in pvcs],
        csi_nodes=[msgspec.convert(c, CSINode) for c in csi],
    )
    ex = explained(s, "g")
    a, b = ex.domains
    assert (a.name, a.room, a.fits) == ("a", 2, False)
    assert a.attach_limit == f"CSI attach limits cut room 8 -> 2 ({driver}: 2 free on a-0, 1 per member)"
    assert (b.name, b.room, b.fits, b.attach_limit) == (
        "b",
        4,
        True,
        f"CSI attach limits cut room 16 -> 4 ({driver}: 2 free on b-0, 1 per member)",
    )
    assert (ex.decision.result, ex.decision.domain) == ("pinned", "b")
    assert simulated(s)[f"{NS}/g"][:2] == ("bound", ["b"])
    assert "a       1      2     -        1 node(s) fit, room 2 < 3; CSI attach limits cut room 8 -> 2" in render_text(
        ex
    )


def test_a_huge_min_member_with_preferred_levels_is_explained_in_bounded_memory() -> None:
    """Found by a new user: minMember 2**31 - 1 (the API accepts it) must not build a planner of
    that many templates."""
    bk = "example.com/block"
    node_dicts = [node(f"b1c1-{i}", {bk: "b1", DK: "c1"}) for i in range(2)]
    objs = gang("g", 2**31 - 1, members=1)
    objs[0]["metadata"]["annotations"] = {"ome.io/topology-key": bk, "ome.io/topology-preferred-keys": DK}
    ex = explained(snap(node_dicts, objs), "g")
    assert ex.min_member == 2**31 - 1


def _preemption_cfg(gang_preemption: bool) -> Any:
    cfg = chart_config(topology_key=DK, gang_args={"preemption": True} if gang_preemption else None)
    mp = cfg["profiles"][0]["plugins"]["multiPoint"]
    mp["disabled"] = [d for d in mp["disabled"] if d["name"] != "DefaultPreemption"]
    return parse_config(cfg)


def _priority(objs: list[dict[str, Any]], value: int) -> list[dict[str, Any]]:
    for o in objs:
        if o["kind"] == "Pod":
            o["spec"]["priority"] = value
    return objs


def test_explain_shows_the_gang_preemption_it_would_make_now_and_evicts_nothing() -> None:
    running = _priority([pod("a-low-0", NS, node_name="a-0"), pod("a-low-1", NS, node_name="a-1")], 5)
    running += _priority([pod("b-mid", NS, node_name="b-0")], 50)
    s = snap(nodes({"a": 3, "b": 3}), [*running, *_priority(gang("g", 3), 100)])
    ex = explain(_preemption_cfg(True), s, "podgroup", NS, "g")
    assert isinstance(ex, Explanation), ex
    assert sorted(ex.victims) == [f"{NS}/a-low-0 on a-0", f"{NS}/a-low-1 on a-1"]
    assert ex.preempting.startswith(f"preempting 2 pod(s) in {DK}=a for gang {NS}/g"), ex.preempting
    text = render_text(ex)
    assert "Preemption would evict 2 pod(s) for it (dry run: nothing is evicted)" in text
    assert ex.to_json()["preemption"]["victims"] == ex.victims
    # the snapshot is untouched: the same question has the same answer
    again = explain(_preemption_cfg(True), s, "podgroup", NS, "g")
    assert isinstance(again, Explanation) and sorted(again.victims) == sorted(ex.victims)


def test_explain_shows_a_standalone_pods_victims_and_none_with_preemption_off() -> None:
    s = snap(nodes({"a": 1}), [*_priority([pod("low", NS, node_name="a-0")], 10), *_priority([pod("high", NS)], 100)])
    ex = explain(_preemption_cfg(False), s, "pod", NS, "high")
    assert isinstance(ex, Explanation) and ex.victims == [f"{NS}/low on a-0"] and ex.preempting == ""
    off = explained(s, "high", kind="pod")
    assert off.decision.result == "unschedulable" and off.victims == []
    assert "Preemption would evict" not in render_text(off)
