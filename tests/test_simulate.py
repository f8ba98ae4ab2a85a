"""``ome-scheduler simulate``: the real engine over a snapshot, on a simulated clock.

Scenarios mirror e2e/test_gangs.py (the e2e test ``e2e/test_simulate.py`` compares the two on
a live cluster); here they run in-process against hand-built snapshots.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotError, decode_manifests, write_snapshot
from ome_scheduler.config.load import parse_config
from ome_scheduler.tools.report import SimulationResult, render_text
from ome_scheduler.tools.simulation import Simulation
from ome_scheduler.tools.virtualtime import VirtualTimeLoop
from tests.support.manifests import HOSTNAME, chart_config, node, pod, pod_group
from tests.support.snapshots import snapshot

DK = "example.com/clique"
NS = "team"


def nodes(spec: dict[str, int], **kw: Any) -> list[dict[str, Any]]:
    return [node(f"{d}-{i}", {DK: d}, **kw) for d, n in spec.items() for i in range(n)]


def snap(
    node_dicts: list[dict[str, Any]], pods: Sequence[dict[str, Any]] = (), pgs: Sequence[dict[str, Any]] = ()
) -> ClusterSnapshot:
    return snapshot(node_dicts, pods, pgs, NS)


def typed(objs: list[dict[str, Any]]) -> list[Any]:
    kinds = {"Pod": Pod, "PodGroup": PodGroup, "Node": Node}
    return [msgspec.convert(o, kinds[o["kind"]]) for o in objs]


def run(s: ClusterSnapshot, added: list[dict[str, Any]], **kw: Any) -> SimulationResult:
    cfg = parse_config(kw.pop("config", None) or chart_config())
    return Simulation(cfg, s, typed(added), **kw).run()


HELD = "held-elsewhere"
"""A scheduler name the configuration does not serve: a member created with it is a gang
template that never reaches Reserve (as e2e's ``HELD_SCHEDULER``)."""


def gang(
    name: str, size: int, *, timeout: int = 300, held: bool = False, gated: bool = False, **kw: Any
) -> list[dict[str, Any]]:
    """A PodGroup and its members (one node each); the last member is created first and, with
    ``held``, for a scheduler nobody serves, or with ``gated``, behind a scheduling gate."""
    out = [pod_group(name, NS, size, topology_key=DK, timeout=timeout)]
    for i in [size - 1, *range(size - 1)]:
        last = i == size - 1
        extra = dict(kw)
        if last and held:
            extra["scheduler"] = HELD
        if last and gated:
            extra["gates"] = ["example.com/hold"]
        out.append(pod(f"{name}-{i}", NS, gang=name, anti_affinity_on=HOSTNAME, **extra))
    return out


def by_name(r: SimulationResult) -> dict[str, Any]:
    return {p.name: p for p in r.pods}


def test_two_gangs_take_the_two_domains_and_a_third_stays_pending_with_its_reason() -> None:
    added = [o for g in ("ga", "gb", "gc") for o in gang(g, 3)]
    r = run(snap(nodes({"three": 3, "four": 4})), added)
    assert r.settled
    g = {x.gang: x for x in r.gangs}
    # Best fit: the first gang takes the smallest domain that fits, the second the other one.
    assert g[f"{NS}/ga"].domains == ["three"] and g[f"{NS}/ga"].status == "bound"
    assert g[f"{NS}/gb"].domains == ["four"] and g[f"{NS}/gb"].status == "bound"
    assert g[f"{NS}/gc"].status == "pending" and g[f"{NS}/gc"].bound == 0
    assert g[f"{NS}/gc"].reason == (
        f"0/7 nodes are available: no domain has room for gang {NS}/gc. no new claims to deallocate"
    )
    pods = by_name(r)
    assert {pods[f"ga-{i}"].node for i in range(3)} == {"three-0", "three-1", "three-2"}
    assert pods["gc-0"].status == "pending" and pods["gc-0"].node == ""
    rows = {d.domain: d for d in r.domains[0].rows}
    assert (rows["three"].free_nodes_before, rows["three"].free_nodes_after) == (3, 0)
    assert (rows["four"].room_before, rows["four"].room_after) == (4, 1)
    assert r.domains[0].resource == "nvidia.com/gpu" and r.domains[0].shape_of == f"{NS}/ga"


def test_a_gang_that_cannot_complete_waits_at_permit_holding_its_domain() -> None:
    r = run(snap(nodes({"a": 3})), gang("g", 3, held=True))
    assert r.settled and r.simulated_seconds == 0
    pods = by_name(r)
    assert pods["g-0"].status == pods["g-1"].status == "waiting"
    assert pods["g-0"].domain == "a" and pods["g-0"].message.startswith("waiting at Permit on a-")
    assert "g-2" not in pods  # another scheduler's pod
    assert r.warnings == [
        f"pod {NS}/g-2 has schedulerName '{HELD}', which this configuration does not serve: it is not scheduled"
    ]
    (g,) = r.gangs
    assert g.status == "waiting" and g.waiting == 2 and g.domains == ["a"]
    assert g.events == [f"Pinned: pinned to {DK}=a (room for 3 members, the gang needs 3), holding it"]


def test_a_member_is_nominated_only_once_it_has_waited_at_permit_for_a_second() -> None:
    """NominatedNodeNameForExpectation with NOMINATE_AFTER_S: a gang that forms at once costs
    no nominatedNodeName patch; a member still waiting after a second shows where it goes."""
    cfg = parse_config(chart_config())
    quick = Simulation(cfg, snap(nodes({"a": 3})), typed(gang("q", 3)), settle_seconds=5)
    r = quick.run()
    assert {p.status for p in r.pods} == {"bound"}
    assert all(n.nominated == "" for n in quick.recorder.notes.values()) and len(quick.recorder.notes) == 3

    for settle, nominated in ((0.0, False), (1.5, True)):
        sim = Simulation(cfg, snap(nodes({"a": 3})), typed(gang("w", 3, held=True)), settle_seconds=settle)
        pods = by_name(sim.run())
        for i in range(2):
            assert pods[f"w-{i}"].status == "waiting"
            notes = sim.recorder.notes.get(f"{NS}/w-{i}")
            got = notes.nominated if notes is not None else ""
            assert (got == pods[f"w-{i}"].node) if nominated else (got == ""), (settle, i, got)


def test_a_gated_member_keeps_its_gang_from_holding() -> None:
    r = run(snap(nodes({"a": 3})), gang("g", 3, gated=True))
    pods = by_name(r)
    assert pods["g-2"].status == "gated" and pods["g-2"].message == "scheduling gates: example.com/hold"
    gated = f"0/3 nodes are available: waiting for scheduling-gated members of gang {NS}/g: g-2. no new claims to deallocate"
    assert pods["g-0"].status == "pending" and pods["g-0"].message == gated
    (g,) = r.gangs
    assert g.status == "pending" and g.reason == gated


def test_settle_seconds_let_permit_time_out_on_the_simulated_clock() -> None:
    t0 = time.perf_counter()
    r = run(snap(nodes({"a": 3})), gang("g", 3, held=True, timeout=3), settle_seconds=5)
    assert time.perf_counter() - t0 < 10  # simulated seconds, not wall seconds
    assert r.settled and r.simulated_seconds >= 5
    (g,) = r.gangs
    timed_out = "0/1 nodes are available: 1 rejected due to timeout after waiting 3s at plugin OMEGangPack."
    assert g.reason == timed_out
    assert g.events[:2] == [
        f"Pinned: pinned to {DK}=a (room for 3 members, the gang needs 3), holding it",
        f"HoldReleased: released the hold on {DK}=a: member {NS}/g-1 failed after Reserve",
    ]
    for name in ("g-0", "g-1"):  # timed out; nothing wakes them until the gang can complete
        p = by_name(r)[name]
        assert (p.status, p.attempts, p.last_failure) == ("pending", 1, timed_out)


def test_standalone_pod_is_kept_off_a_forming_gangs_domain() -> None:
    solo = pod("solo", NS, node_selector={DK: "a"})
    r = run(snap(nodes({"a": 3})), [*gang("g", 2, held=True), solo])
    assert by_name(r)["solo"].status == "pending"
    assert "node is reserved for a forming gang" in by_name(r)["solo"].message


def test_bound_members_in_the_snapshot_pin_the_rest_of_their_gang() -> None:
    bound = pod("m0", NS, gang="g", anti_affinity_on=HOSTNAME, node_name="big-0")
    s = snap(nodes({"small": 3, "big": 4}), pods=[bound], pgs=[pod_group("g", NS, 3, topology_key=DK)])
    r = run(s, [pod(f"m{i}", NS, gang="g", anti_affinity_on=HOSTNAME) for i in (1, 2)])
    (g,) = r.gangs
    assert g.status == "bound" and g.already_bound == 1 and g.bound == 2 and g.domains == ["big"]
    rows = {d.domain: d for d in r.domains[0].rows}
    assert (rows["big"].free_nodes_before, rows["big"].free_nodes_after) == (3, 1)


def test_pending_pods_of_the_snapshot_are_scheduled_too() -> None:
    waiting = pod("early", NS)
    r = run(snap(nodes({"a": 1}), pods=[waiting]), [])
    assert [(p.name, p.status, p.node) for p in r.pods] == [("early", "bound", "a-0")]


def test_added_pod_without_scheduler_name_is_reported_not_scheduled() -> None:
    p = pod("plain", NS)
    del p["spec"]["schedulerName"]
    r = run(snap(nodes({"a": 1})), [p])
    assert r.pods == [] and "default-scheduler" in r.warnings[0]


def test_added_pod_that_exists_is_an_error() -> None:
    s = snap(nodes({"a": 1}), pods=[pod("p", NS)])
    with pytest.raises(SnapshotError, match="already exists"):
        run(s, [pod("p", NS)])


def test_a_simulation_that_never_settles_stops_at_max_seconds(tmp_path: Path) -> None:
    # A claim that needs provisioning fails PreBind (volumes are not bound here) and is retried
    # with backoff forever: the run stops at the limit and says so.
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local"}}
    sc |= {"provisioner": "example.com/csi", "volumeBindingMode": "WaitForFirstConsumer"}
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": NS},
        "spec": {
            "storageClassName": "local",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    p = pod("db", NS)
    p["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    path = tmp_path / "volumes.yaml"
    path.write_text(yaml.safe_dump_all([sc, claim, p]))
    added = decode_manifests(path)
    cfg = parse_config(chart_config())
    r = Simulation(cfg, snap(nodes({"a": 1})), added, max_seconds=60).run()
    assert not r.settled and 55 <= r.simulated_seconds <= 60
    (db,) = r.pods
    assert db.status == "pending" and "simulate does not bind volumes" in db.message and db.attempts > 3


def test_virtual_time_loop_jumps_over_timers() -> None:
    loop = VirtualTimeLoop()
    fired: list[float] = []

    async def main() -> float:
        loop.call_later(600, lambda: fired.append(loop.time()))
        await asyncio.sleep(900)
        return loop.time()

    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=lambda: loop) as r:
        end = r.run(main())
    assert fired == [600.0] and end == 900.0
    assert time.perf_counter() - t0 < 2


def test_same_seed_same_nodes() -> None:
    added = [o for g in ("ga", "gb") for o in gang(g, 3)]
    s = snap(nodes({"three": 3, "four": 4}))
    a, b = run(s, added, seed=7), run(s, added, seed=7)
    assert [(p.name, p.node) for p in a.pods] == [(p.name, p.node) for p in b.pods]


def test_text_report_names_gangs_pods_and_domains() -> None:
    added = [o for g in ("ga", "gb", "gc") for o in gang(g, 3)]
    text = render_text(run(snap(nodes({"three": 3, "four": 4})), added))
    assert "Gangs: 2 bound, 1 pending" in text
    assert f"{NS}/gc  3    0/3    pending  -       0/7 nodes are available: no domain has room" in text
    assert (
        "Domains under example.com/clique: 2 (2 changed; nvidia.com/gpu free; room counted in members like team/ga's)"
        in text
    )
    assert "four    4      4 -> 1      4 -> 1 of 4" in text


# ---- the command ----------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ome_scheduler", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_command_json_output_and_png(tmp_path: Path) -> None:
    write_snapshot(snap(nodes({"three": 3, "four": 4})), tmp_path / "snap.yaml")
    added = [o for g in ("ga", "gb") for o in gang(g, 3)]
    # YAML as people write it: quantities as numbers.
    for o in added:
        if o["kind"] == "Pod":
            o["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 1
    (tmp_path / "add.yaml").write_text(yaml.safe_dump_all(added))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(chart_config()))
    png = tmp_path / "map.png"
    r = cli(
        "simulate", "--snapshot", str(tmp_path / "snap.yaml"), "--add", str(tmp_path / "add.yaml"),
        "--config", str(cfg), "--output", "json", "--png", str(png),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["settled"] is True
    assert {g["gang"]: g["domains"] for g in out["gangs"]} == {f"{NS}/ga": ["three"], f"{NS}/gb": ["four"]}
    assert out["domains"][0]["rows"][0]["freeNodesBefore"] == 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--snapshot", "/nonexistent.json"], "cannot read snapshot /nonexistent.json"),
        (["--snapshot", "{snap}", "--add", "{bad}"], "kind CronJob web is not one of"),
        (["--snapshot", "{snap}", "--add", "{baddeploy}"], "Deployment team/web: spec.template: Required value"),
        (["--snapshot", "{garbage}"], 'metadata.takenAt: "garbage" is not an RFC 3339 time'),
        (["--snapshot", "{twice}"], "node a-0 is listed twice"),
        (["--snapshot", "{snap}", "--config", "{badcfg}"], "invalid configuration: "),
        (["--snapshot", "{snap}", "--add", "{badqty}"], 'pod team/x: spec.containers[c].resources.requests "cpu": '),
        (["--snapshot", "{badsnap}"], 'node a-0: status.allocatable "cpu": quantities must match'),
        (
            ["--snapshot", "{snap}", "--add", "{gang}", "--png", "/nonexistent/map.png"],
            "--png: cannot write /nonexistent/map.png",
        ),
    ],
)
def test_command_bad_input_exits_1_naming_it(tmp_path: Path, args: list[str], needle: str) -> None:
    write_snapshot(snap(nodes({"a": 1})), tmp_path / "snap.json")
    (tmp_path / "bad.yaml").write_text("kind: CronJob\nmetadata: {name: web}\n")
    (tmp_path / "baddeploy.yaml").write_text("kind: Deployment\nmetadata: {name: web, namespace: team}\n")
    garbage = snap(nodes({"a": 1}))
    garbage.metadata.taken_at = "garbage"
    write_snapshot(garbage, tmp_path / "garbage.json")
    twice = snap(nodes({"a": 1}))
    twice.nodes = [*twice.nodes, *twice.nodes]
    write_snapshot(twice, tmp_path / "twice.json")
    bad = chart_config()
    bad["profiles"][0]["pluginConfig"][0]["args"]["gcIntervalSeconds"] = 0
    (tmp_path / "badcfg.yaml").write_text(yaml.safe_dump(bad))
    (tmp_path / "badqty.yaml").write_text(
        "kind: Pod\nmetadata: {name: x, namespace: team}\n"
        "spec: {containers: [{name: c, image: i, resources: {requests: {cpu: lots}}}]}\n"
    )
    bad_node = node("a-0", {DK: "a"})
    bad_node["status"]["allocatable"]["cpu"] = "lots"
    write_snapshot(snap([bad_node]), tmp_path / "badsnap.json")
    paths = {
        "snap": tmp_path / "snap.json",
        "bad": tmp_path / "bad.yaml",
        "baddeploy": tmp_path / "baddeploy.yaml",
        "garbage": tmp_path / "garbage.json",
        "twice": tmp_path / "twice.json",
        "badcfg": tmp_path / "badcfg.yaml",
        "badqty": tmp_path / "badqty.yaml",
        "badsnap": tmp_path / "badsnap.json",
        "gang": tmp_path / "gang.yaml",
    }
    (tmp_path / "gang.yaml").write_text(yaml.safe_dump_all(gang("g", 1)))
    r = cli("simulate", *[a.format(**paths) for a in args])
    assert r.returncode == 1 and needle in r.stderr, r.stderr


def test_scheduler_flags_still_parse_without_a_subcommand() -> None:
    r = cli("--secure-port=abc")
    assert r.returncode == 2 and '"--secure-port"' in r.stderr


def test_the_what_if_example_prints_what_the_docs_show() -> None:
    repo = Path(__file__).resolve().parent.parent
    r = cli(
        "simulate",
        "--snapshot",
        str(repo / "examples/simulate/snapshot.json"),
        "--add",
        str(repo / "examples/simulate/replicas.yaml"),
    )
    assert r.returncode == 0, r.stderr
    page = (repo / "docs/what-if.md").read_text()
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Simulated 33 added object(s) on a snapshot of 52 nodes, 24 pods and 3 PodGroups")
    for line in lines[1:]:  # the first line carries the wall time
        assert line in page, line


def test_the_user_guides_deployment_is_simulated_as_the_pods_it_creates() -> None:
    """``simulate --add examples/demo/gang.yaml`` (a Deployment): its two replicas, named and
    labelled as the ReplicaSet controller names them, bind as the gang they form (issue 30)."""
    repo = Path(__file__).resolve().parent.parent
    r = cli(
        "simulate", "--snapshot", str(repo / "examples/simulate/snapshot.json"),
        "--add", str(repo / "examples/demo/podgroup.yaml"), str(repo / "examples/demo/gang.yaml"), "-o", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (g,) = out["gangs"]
    assert (g["gang"], g["status"], g["bound"]) == ("gang-demo/gang-demo", "bound", 2)
    names = sorted(p["name"] for p in out["pods"])
    assert len(names) == 2 and all(re.fullmatch(r"gang-demo-[a-z0-9]{10}-[a-z0-9]{5}", n) for n in names), names


def test_workloads_create_their_pods_in_their_controllers_order(tmp_path: Path) -> None:
    """A StatefulSet (OrderedReady) makes pod i+1 once pod i is bound: its gang never forms, and
    the simulation says why; a LeaderWorkerSet with LeaderReady makes its workers once the leader
    is bound; an Indexed Job makes min(parallelism, completions) indexed pods."""
    write_snapshot(snap(nodes({"a": 4})), tmp_path / "snap.json")
    tmpl = {
        "schedulerName": "ome-scheduler",
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
    }
    pg = pod_group("db", NS, 2, topology_key=DK)
    docs = [
        pg,
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
         "spec": {"replicas": 2, "template": {"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "db"}}, "spec": tmpl}}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": NS},
         "spec": {"replicas": 3, "template": {"spec": tmpl}}},
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l", "namespace": NS},
         "spec": {"startupPolicy": "LeaderReady", "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": tmpl}}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS},
         "spec": {"parallelism": 3, "completions": 2, "completionMode": "Indexed", "template": {"spec": tmpl}}},
    ]  # fmt: skip
    (tmp_path / "add.yaml").write_text(yaml.safe_dump_all(docs))
    r = cli("simulate", "--snapshot", str(tmp_path / "snap.json"), "--add", str(tmp_path / "add.yaml"), "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    status = {p["name"]: p["status"] for p in out["pods"]}
    assert status["db-0"] == "pending" and "db-1" not in status
    assert [status[f"web-{i}"] for i in range(3)] == ["bound"] * 3
    assert [status[n] for n in ("l-0", "l-0-1", "l-0-2")] == ["bound"] * 3
    assert sorted(n.rsplit("-", 1)[0] for n in status if n.startswith("j-")) == ["j-0", "j-1"]
    assert any("db-1 never created: its controller waits for team/db-0 to run" in w for w in out["warnings"])
    assert any("OrderedReady" in w for w in out["warnings"])


def prioritized(p: dict[str, Any], priority: int, grace: int | None = None) -> dict[str, Any]:
    p["spec"]["priority"] = priority
    if grace is not None:
        p["spec"]["terminationGracePeriodSeconds"] = grace
    return p


def preemption_config(gang_preemption: bool = False) -> dict[str, Any]:
    """The chart's configuration with DefaultPreemption on (the chart's
    ``scheduler.disablePreemption: false``) and, with ``gang_preemption``, OMEGangPack's."""
    cfg = chart_config(topology_key=DK, gang_args={"preemption": True} if gang_preemption else None)
    mp = cfg["profiles"][0]["plugins"]["multiPoint"]
    mp["disabled"] = [d for d in mp["disabled"] if d["name"] != "DefaultPreemption"]
    return cfg


def test_a_standalone_pod_preempts_a_lower_priority_one_on_the_simulated_clock() -> None:
    low = prioritized(pod("low", NS, node_name="a-0"), 10, grace=30)
    s = snap(nodes({"a": 1}), pods=[low])
    r = run(s, [prioritized(pod("high", NS), 100)], config=preemption_config())
    assert [(e.pod, e.node, e.deleted_at, e.gone_at) for e in r.preempted] == [(f"{NS}/low", "a-0", 0.0, 30.0)]
    assert [(p.name, p.status, p.node) for p in r.pods] == [("high", "bound", "a-0")]
    assert r.settled and r.simulated_seconds >= 30
    assert "Preempted: 1 pod(s)" in render_text(r)
    assert r.to_json()["preempted"] == [{"pod": f"{NS}/low", "node": "a-0", "deletedAt": 0.0, "goneAt": 30.0}]


def test_without_preemption_enabled_nothing_is_evicted() -> None:
    low = prioritized(pod("low", NS, node_name="a-0"), 10)
    r = run(snap(nodes({"a": 1}), pods=[low]), [prioritized(pod("high", NS), 100)])
    assert r.preempted == [] and by_name(r)["high"].status == "pending"
    assert "Preempted" not in render_text(r)


def test_a_gang_preempts_the_cheaper_domain_whole_and_binds_there() -> None:
    # a: two low-priority pods (priority 5); b: one of priority 50. The gang of 3 (priority 100)
    # fits neither as it stands; freeing a costs the lower highest victim priority.
    running = [
        prioritized(pod("a-low-0", NS, node_name="a-0"), 5),
        prioritized(pod("a-low-1", NS, node_name="a-1"), 5),
        prioritized(pod("b-mid", NS, node_name="b-0"), 50),
    ]
    s = snap(nodes({"a": 3, "b": 3}), pods=running)
    members = [prioritized(o, 100) if o["kind"] == "Pod" else o for o in gang("g", 3)]
    r = run(s, members, config=preemption_config(gang_preemption=True))
    assert sorted(e.pod for e in r.preempted) == [f"{NS}/a-low-0", f"{NS}/a-low-1"]
    (g,) = r.gangs
    assert (g.status, g.domains) == ("bound", ["a"])
    assert any(e.startswith("Preempting: preempting 2 pod(s) in example.com/clique=a") for e in g.events), g.events


def test_an_added_pod_with_a_priority_class_but_no_priority_is_warned_about() -> None:
    p = pod("classy", NS)
    p["spec"]["priorityClassName"] = "serving"
    r = run(snap(nodes({"a": 1})), [p])
    assert any("priorityClassName 'serving' without spec.priority" in w for w in r.warnings), r.warnings
    assert by_name(r)["classy"].status == "bound"
