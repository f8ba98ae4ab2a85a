"""End-to-end: ``ome-scheduler simulate`` predicts what the live scheduler does (issue 16).

For the gang scenarios of ``e2e/test_gangs.py`` that do not change the cluster half-way, each
test snapshots the real cluster with ``ome-scheduler snapshot`` once the scenario's nodes are
Ready (before its pods exist), simulates the scenario's PodGroups and pods over that snapshot
with the module scheduler's own configuration file, then creates the same objects live and
waits until the live cluster shows what the simulation predicted: the same domain for every
gang that binds (or waits at Permit), and the same last ``FailedScheduling`` message for every
pending pod the scenario checks (as the live scheduler logged it: ``SchedulerProcess.last_failure``).

Scenarios whose outcome depends on a change made while the gang forms (a node deleted, the
PodGroup re-created or re-annotated) are left out: a snapshot plus added objects cannot express
them. Two are simulated as two phases instead: the PodGroup whose ``minMember`` is lowered (the
second snapshot holds the parked member, the lowered PodGroup is added as an update) and the
gang with a member bound before the scheduler saw it (adoption).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.gangs import HELD_SCHEDULER
from e2e.harness.paths import REPO
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_for
from tests.support.manifests import HOSTNAME, SCHEDULER_NAME, chart_config, domain_key, domain_nodes, pod, pod_group

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    """The chart's configuration with ``gcIntervalSeconds`` lowered to 2 s (as test_gangs.py)."""
    return chart_config(gang_args={"gcIntervalSeconds": 2})


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ome_scheduler", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


def take_snapshot(cluster: Cluster, path: Path, *extra: str) -> Path:
    r = cli("snapshot", str(path), f"--kubeconfig={cluster.kubeconfig}", *extra)
    assert r.returncode == 0, r.stderr
    return path


def simulate(snapshot: Path, objs: Sequence[Obj], config: Path, work: Path, *extra: str) -> dict[str, Any]:
    """Simulate ``objs`` over ``snapshot``; the report keeps the pods and gangs of the objects'
    namespace (the snapshot may hold pending pods of earlier tests, which are simulated too)."""
    add = work / f"add-{len(list(work.iterdir()))}.yaml"
    add.write_text(yaml.safe_dump_all(list(objs)))
    r = cli("simulate", "--snapshot", str(snapshot), "--add", str(add), "--config", str(config), "-o", "json", *extra)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    assert out["settled"], out
    ns = {o["metadata"]["namespace"] for o in objs if "namespace" in o["metadata"]}
    out["pods"] = [p for p in out["pods"] if p["namespace"] in ns]
    out["gangs"] = [g for g in out["gangs"] if g["gang"].split("/")[0] in ns]
    return out


def create(api: Api, objs: Sequence[Obj]) -> None:
    for o in objs:
        if o["kind"] == "PodGroup":
            api.create_pod_group(o)
        elif o["kind"] == "Pod":
            api.create_pod(o)
        else:
            raise AssertionError(f"unexpected kind {o['kind']}")


def live_domains(api: Api, ns: str, pods: Sequence[str], dk: str) -> set[str]:
    """Domains of the named pods' nodes, bound or (waiting at Permit) nominated."""
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in api.nodes()}
    out = set()
    for name in pods:
        p = api.pod(ns, name)
        n = p["spec"].get("nodeName") or p["status"].get("nominatedNodeName")
        if n:
            out.add(labels.get(n, {}).get(dk, ""))
    return out


def live_message(api: Api, sched: SchedulerProcess, ns: str, name: str) -> str:
    """The live scheduler's last FailedScheduling message for a pod still unbound, else ""."""
    if api.pod(ns, name)["spec"].get("nodeName"):
        return ""
    return sched.last_failure(ns, name)


def expect_live(
    api: Api, sched: SchedulerProcess, ns: str, sim: dict[str, Any], dk: str, *, messages: Sequence[str] = ()
) -> None:
    """Wait (≤ 40 s) until the live cluster matches the simulation: each simulated gang that
    binds or waits has its members in the simulated domain, and each pod in ``messages`` has
    the simulated last FailedScheduling message (or, if the simulation placed it, none)."""
    pods = {p["name"]: p for p in sim["pods"]}
    want: dict[str, Any] = {}
    for g in sim["gangs"]:
        members = [p["name"] for p in sim["pods"] if p["gang"] == g["gang"]]
        if g["status"] in ("bound", "waiting"):
            want[f"domain {g['gang']}"] = set(g["domains"])
            if g["status"] == "bound":
                want[f"bound {g['gang']}"] = sorted(members)
    for name in messages:
        want[f"message {name}"] = pods[name]["lastFailure"] if pods[name]["status"] != "bound" else ""

    def observe() -> dict[str, Any]:
        got: dict[str, Any] = {}
        for g in sim["gangs"]:
            members = [p["name"] for p in sim["pods"] if p["gang"] == g["gang"]]
            if f"domain {g['gang']}" in want:
                got[f"domain {g['gang']}"] = live_domains(api, ns, members, dk)
            if f"bound {g['gang']}" in want:
                got[f"bound {g['gang']}"] = sorted(m for m in members if api.pod(ns, m)["spec"].get("nodeName"))
        for name in messages:
            got[f"message {name}"] = live_message(api, sched, ns, name)
        return got

    last: dict[str, Any] = {}

    def matches() -> bool:
        nonlocal last
        last = observe()
        return last == want

    try:
        wait_for("the live cluster to match the simulation", matches, timeout=40, interval=0.5)
    except AssertionError:
        diff = {k: (want[k], last.get(k)) for k in want if want[k] != last.get(k)}
        # What the live scheduler did with this namespace's pods, and whether it led meanwhile.
        trail = [ln for ln in sched.log().splitlines() if ns in ln or "lease" in ln.lower()][-60:]
        nodes = {
            n["metadata"]["name"]: [t["key"] for t in n["spec"].get("taints", [])]
            for n in api.nodes()
            if dk in n["metadata"].get("labels", {})
        }
        raise AssertionError(
            f"live differs from simulated (simulated, live): {diff}\ntaints of the domain nodes: {nodes}\n"
            + "\n".join(trail)
        ) from None


def gang_objs(
    ns: str, name: str, size: int, dk: str, *, held_last: bool = False, gated_last: bool = False, timeout: int = 300
) -> list[Obj]:
    """A PodGroup, then its members, the last one first (so it counts as a template when the
    others are tried): with ``held_last`` for :data:`HELD_SCHEDULER`, which nobody serves (as
    ``create_held_gang``), with ``gated_last`` behind a scheduling gate."""
    objs: list[Obj] = [pod_group(name, ns, size, topology_key=dk, timeout=timeout)]
    for i in [size - 1, *range(size - 1)]:
        last = i == size - 1
        gates = ["example.com/hold"] if gated_last and last else []
        sched = HELD_SCHEDULER if held_last and last else SCHEDULER_NAME
        objs.append(pod(f"{name}-{i}", ns, gang=name, anti_affinity_on=HOSTNAME, gates=gates, scheduler=sched))
    return objs


# ---- scenarios ---------------------------------------------------------------------------------


def test_race_for_two_domains_and_a_gang_that_does_not_fit(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simrace")
    with temp_nodes(api, domain_nodes(key, dk, {"three": 3, "four": 4})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        pgs = [pod_group(g, ns, 3, topology_key=dk) for g in ("ga", "gb", "gc")]
        pods = [pod(f"{g}-{i}", ns, gang=g, anti_affinity_on=HOSTNAME) for i in range(3) for g in ("ga", "gb", "gc")]
        sim = simulate(snap, pgs + pods, scheduler.config_path, tmp_path)
        status = {g["gang"]: (g["status"], g["domains"]) for g in sim["gangs"]}
        assert status == {
            f"{ns}/ga": ("bound", ["three"]),
            f"{ns}/gb": ("bound", ["four"]),
            f"{ns}/gc": ("pending", []),
        }
        assert f"no domain has room for gang {ns}/gc" in sim["gangs"][2]["reason"]
        # An anonymised snapshot predicts the same outcome under other names.
        anon = take_snapshot(cluster, tmp_path / "anon.json", "--anonymize")
        text = anon.read_text()
        assert f'"{key}-three0"' not in text and f'"{ns}"' not in text and '"three"' not in text
        anon_sim = simulate(anon, pgs + pods, scheduler.config_path, tmp_path)
        assert [g["status"] for g in anon_sim["gangs"]] == ["bound", "bound", "pending"]
        sizes = {r["domain"]: r["nodes"] for t in anon_sim["domains"] if t["topologyKey"] == dk for r in t["rows"]}
        assert [sizes[g["domains"][0]] for g in anon_sim["gangs"][:2]] == [3, 4]
        create(api, pgs + pods)
        expect_live(api, scheduler, ns, sim, dk, messages=["gc-0", "gc-1", "gc-2"])


@pytest.mark.parametrize("first", ["leader", "worker"])
def test_leader_worker_gang(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path, first: str
) -> None:
    key, dk = domain_key("simlw")
    with temp_nodes(api, domain_nodes(key, dk, {"small": 2, "big": 3})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        order = ["leader", "worker", "worker"] if first == "leader" else ["worker", "worker", "leader"]
        objs: list[Obj] = [pod_group("lw", ns, 3, topology_key=dk)]
        for i, role in enumerate(order):
            aff = None
            if role == "worker":
                aff = {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"role": "leader", "lws": "lw"}}, "topologyKey": dk}
                        ]
                    }
                }
            labels = {"role": role, "lws": "lw"}
            objs.append(pod(f"{role}-{i}", ns, gang="lw", labels=labels, anti_affinity_on=HOSTNAME, affinity=aff))
        sim = simulate(snap, objs, scheduler.config_path, tmp_path)
        assert [(g["status"], g["domains"]) for g in sim["gangs"]] == [("bound", ["big"])]
        create(api, objs)
        expect_live(api, scheduler, ns, sim, dk)


def test_member_times_out_at_permit(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simtimeout")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        objs = gang_objs(ns, "g", 3, dk, held_last=True, timeout=3)
        sim = simulate(snap, objs, scheduler.config_path, tmp_path, "--settle-seconds=5")
        pods = {p["name"]: p for p in sim["pods"]}
        assert "g-2" not in pods  # another scheduler's member
        assert "rejected due to timeout after waiting 3s at plugin OMEGangPack" in pods["g-0"]["lastFailure"]
        timed_out = pods["g-0"]["lastFailure"]
        assert pods["g-1"]["lastFailure"] == timed_out  # both timers are due at the same simulated instant
        create(api, objs)
        # Live, the member that reached Permit first times out and the other is unwound with it;
        # which one depends on arrival timing. Both stay unbound, one with the simulated message.
        members = ("g-0", "g-1")
        wait_for(
            "a member timed out as simulated",
            lambda: any(scheduler.last_failure(ns, m) == timed_out for m in members),
            timeout=30,
        )
        assert not any(api.pod(ns, m)["spec"].get("nodeName") for m in members)


def test_gated_member_keeps_its_gang_from_holding(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simgated")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        objs = gang_objs(ns, "g", 3, dk, gated_last=True)
        sim = simulate(snap, objs, scheduler.config_path, tmp_path)
        pods = {p["name"]: p for p in sim["pods"]}
        assert pods["g-2"]["status"] == "gated"
        assert f"waiting for scheduling-gated members of gang {ns}/g: g-2" in pods["g-0"]["lastFailure"]
        create(api, objs)
        # Live, g-0 is tried before g-1 exists ("waiting for all PodGroup member templates") and
        # nothing wakes it when g-1 arrives; the simulation adds all three at once. g-1, created
        # last, sees the whole gang in both.
        expect_live(api, scheduler, ns, sim, dk, messages=["g-1", "g-2"])


def test_min_member_lowered_while_the_lone_member_waits(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simlower")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        pg = pod_group("g", ns, 2, topology_key=dk)
        m0 = pod("m0", ns, gang="g")
        sim = simulate(snap, [pg, m0], scheduler.config_path, tmp_path)
        assert f"waiting for all PodGroup member templates for {ns}/g." in sim["pods"][0]["lastFailure"]
        create(api, [pg, m0])
        expect_live(api, scheduler, ns, sim, dk, messages=["m0"])
        # Phase 2: the snapshot holds the parked member; the lowered PodGroup is an update.
        snap2 = take_snapshot(cluster, tmp_path / "snap2.json")
        lowered = pod_group("g", ns, 1, topology_key=dk)
        sim2 = simulate(snap2, [lowered], scheduler.config_path, tmp_path)
        assert [(p["name"], p["status"], p["domain"]) for p in sim2["pods"]] == [("m0", "bound", "a")]
        api.patch_pod_group(ns, "g", {"spec": {"minMember": 1}})
        expect_live(api, scheduler, ns, sim2, dk, messages=["m0"])


def test_cordoned_domain_is_avoided(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simcordon")
    nodes = domain_nodes(key, dk, {"small": 2}) + domain_nodes(key, dk, {"big": 3})
    for n in nodes[:2]:
        n["spec"]["unschedulable"] = True
    with temp_nodes(api, nodes):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        objs = gang_objs(ns, "g", 2, dk)
        sim = simulate(snap, objs, scheduler.config_path, tmp_path)
        assert [(g["status"], g["domains"]) for g in sim["gangs"]] == [("bound", ["big"])]
        create(api, objs)
        expect_live(api, scheduler, ns, sim, dk)


def test_member_bound_before_the_scheduler_saw_it_pins_its_gang(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simadopt")
    with temp_nodes(api, domain_nodes(key, dk, {"small": 3, "big": 4})):
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk))
        api.create_pod(pod("m0", ns, gang="g", anti_affinity_on=HOSTNAME, node_name=f"{key}-big0"))
        wait_for("m0 in the API", lambda: api.pod(ns, "m0")["spec"].get("nodeName"))
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        rest = [pod(f"m{i}", ns, gang="g", anti_affinity_on=HOSTNAME) for i in (1, 2)]
        sim = simulate(snap, rest, scheduler.config_path, tmp_path)
        (g,) = sim["gangs"]
        assert (g["status"], g["alreadyBound"], g["domains"]) == ("bound", 1, ["big"])
        create(api, rest)
        expect_live(api, scheduler, ns, sim, dk)


def test_standalone_pod_kept_off_a_forming_gangs_domain(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simhold")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        solo = pod("solo", ns, node_selector={dk: "a"})
        objs = [*gang_objs(ns, "g", 2, dk, held_last=True, timeout=600), solo]
        sim = simulate(snap, objs, scheduler.config_path, tmp_path)
        pods = {p["name"]: p for p in sim["pods"]}
        assert pods["g-0"]["status"] == "waiting" and pods["g-0"]["domain"] == "a"
        assert "node is reserved for a forming gang" in pods["solo"]["lastFailure"]
        create(api, objs)
        expect_live(api, scheduler, ns, sim, dk, messages=["solo"])


def test_burst_of_sixteen_gangs_pods_before_podgroups(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simburst")
    with temp_nodes(api, domain_nodes(key, dk, {f"d{i:02d}": 2 for i in range(16)}), ready_timeout=60):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        pods = [pod(f"g{g}-{i}", ns, gang=f"g{g}", anti_affinity_on=HOSTNAME) for g in range(16) for i in range(2)]
        pgs = [pod_group(f"g{g}", ns, 2, topology_key=dk) for g in range(16)]
        sim = simulate(snap, pods + pgs, scheduler.config_path, tmp_path)
        assert all(g["status"] == "bound" and len(g["domains"]) == 1 for g in sim["gangs"])
        assert len({g["domains"][0] for g in sim["gangs"]}) == 16
        create(api, pods + pgs)
        # Which gang gets which (identical) domain depends on arrival timing: compare the
        # outcome that does not, every gang bound in one domain of its own.
        names = [p["metadata"]["name"] for p in pods]
        wait_for("every gang bound", lambda: all(api.pod(ns, n)["spec"].get("nodeName") for n in names), timeout=60)
        live = {g: live_domains(api, ns, [f"g{g}-0", f"g{g}-1"], dk) for g in range(16)}
        assert all(len(d) == 1 for d in live.values()) and len(set().union(*live.values())) == 16


def test_held_domain_reports_reserved(
    cluster: Cluster, api: Api, scheduler: SchedulerProcess, ns: str, tmp_path: Path
) -> None:
    key, dk = domain_key("simheld")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2})):
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        gb = pod_group("gb", ns, 1, topology_key=dk)
        objs = [gb, *gang_objs(ns, "ga", 2, dk, held_last=True, timeout=600), pod("gb-0", ns, gang="gb")]
        sim = simulate(snap, objs, scheduler.config_path, tmp_path)
        pods = {p["name"]: p for p in sim["pods"]}
        assert pods["gb-0"]["lastFailure"].endswith(
            f"no domain has room for gang {ns}/gb: every fitting domain is reserved for a forming gang. "
            "no new claims to deallocate"
        )
        create(api, objs)
        expect_live(api, scheduler, ns, sim, dk, messages=["gb-0"])


def test_standalone_packing_prefers_partly_used_domain(cluster: Cluster, api: Api, ns: str, tmp_path: Path) -> None:
    key, dk = domain_key("simpack")
    cfg = chart_config(scheduler_name="ome-sim-packing", topology_key=dk, percentage=100)
    with temp_nodes(api, domain_nodes(key, dk, {"a": 2, "b": 2, "c": 2})), SchedulerProcess(cluster, cfg) as packing:
        api.create_pod(pod("busy", ns, node_name=f"{key}-b0", scheduler="default-scheduler"))
        wait_for("busy in the API", lambda: api.pod(ns, "busy")["spec"].get("nodeName"))
        snap = take_snapshot(cluster, tmp_path / "snap.json")
        exists = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": dk, "operator": "Exists"}]}]}}}  # fmt: skip
        solo = pod("solo", ns, scheduler="ome-sim-packing", node_selector={"type": "kwok"}, affinity=exists)
        sim = simulate(snap, [solo], packing.config_path, tmp_path)
        assert [(p["name"], p["node"]) for p in sim["pods"]] == [("solo", f"{key}-b1")]
        create(api, [solo])
        wait_for("solo bound", lambda: api.pod(ns, "solo")["spec"].get("nodeName"), timeout=30)
        assert api.pod(ns, "solo")["spec"]["nodeName"] == f"{key}-b1"
