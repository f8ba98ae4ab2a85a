"""Seeded generator of preemption cases for ``e2e/test_parity_preemption.py``.

A case is 1 to 4 nodes (4 cpu each), victims bound to them (cpu in half cores, priorities
1..9 from the classes ``pp-p1`` .. ``pp-p9``, distinct on each node so that the reprieve order
never depends on start times), at most one PodDisruptionBudget (``minAvailable`` as many as
it selects, so no disruption is allowed whenever the disruption controller looks) over the victims labelled ``app=db``, and a
preemptor of class ``pp-high`` (sometimes ``pp-p5``, so that only some victims qualify, or
``pp-high-never``).

Upstream breaks a tie left after the node pick's criteria by Go map order (at random), and
the last criterion reads start times kwok sets at second precision; so only cases whose winner
is unique after the first four criteria are kept (checked offline with ome-scheduler's
evaluator on an in-memory scheduler, ``unique_winner``). The generator is pure:
``generate(seed, n)`` always returns the same cases.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import msgspec

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.workloads import PodDisruptionBudget
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.preemption import Candidate
from ome_scheduler.framework.runtime import FitError
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import DiscardRecorder, Scheduler

PRIORITIES = {f"pp-p{i}": i for i in range(1, 10)}
HIGH = 1000
CPUS = ["500m", "1", "1500m", "2", "3"]


@dataclass
class Victim:
    """A pod bound to node ``node`` (an index) requesting ``cpu``, of PriorityClass ``cls``."""

    name: str
    node: int
    cpu: str
    cls: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class PCase:
    """``nodes`` 4-cpu nodes; the victims; the preemptor's cpu and class; PDBs (``name``,
    ``app``: a budget over ``app=<app>`` that allows no disruption) in the phase's namespace."""

    nodes: int
    victims: list[Victim]
    cpu: str
    cls: str
    pdbs: list[dict[str, str]] = field(default_factory=list)


def _milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


def generate(seed: int, n: int) -> list[PCase]:
    """``n`` cases with a unique winner (or no preemption at all) from ``seed``."""
    rng = random.Random(seed)
    out: list[PCase] = []
    while len(out) < n:
        c = _one(rng)
        if unique_winner(c):
            out.append(c)
    return out


def _one(rng: random.Random) -> PCase:
    nodes = rng.randint(1, 4)
    victims: list[Victim] = []
    use_pdb = rng.random() < 0.4
    for i in range(nodes):
        room = 4000
        prios = rng.sample(range(1, 10), k=rng.randint(1, 4))
        for j, p in enumerate(prios):
            cpu = rng.choice([c for c in CPUS if _milli(c) <= room] or ["500m"])
            if _milli(cpu) > room:
                break
            room -= _milli(cpu)
            labels = {"app": "db"} if use_pdb and rng.random() < 0.5 else {}
            victims.append(Victim(f"v{i}-{j}", i, cpu, f"pp-p{p}", labels))
    r = rng.random()
    cls = "pp-high" if r < 0.8 else "pp-p5" if r < 0.92 else "pp-high-never"
    cpu = rng.choice(["1", "2", "3", "4"])
    return PCase(nodes, victims, cpu, cls, [{"name": "db", "app": "db"}] if use_pdb else [])


def _node(name: str) -> Node:
    res = {"cpu": "4", "memory": "8Gi", "pods": "10"}
    raw = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "status": {"allocatable": res}}
    return msgspec.convert(raw, Node)


def _pod(name: str, cpu: str, prio: int, node: str = "", labels: dict[str, str] | None = None) -> Pod:
    spec = {
        "schedulerName": "check",
        "priority": prio,
        "nodeName": node,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    raw = {"metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels or {}}, "spec": spec}
    return msgspec.convert(raw, Pod)


def unique_winner(case: PCase) -> bool:
    """Whether the preemptor fits nowhere and ome-scheduler's dry run leaves one node after the
    first four pick criteria (or finds no candidate)."""
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "check"}],
    }
    s = Scheduler(parse_config(cfg, "check"), metrics=Metrics(), binder=None, recorder=DiscardRecorder())
    for i in range(case.nodes):
        s.handlers.on_node_add(_node(f"n{i}"))
    for v in case.victims:
        s.handlers.on_pod_add(_pod(v.name, v.cpu, PRIORITIES[v.cls], f"n{v.node}", v.labels))
    for b in case.pdbs:
        raw = {
            "metadata": {"name": b["name"], "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": b["app"]}}},
            "status": {"disruptionsAllowed": 0},
        }
        s.workloads.on_pdb_add(msgspec.convert(raw, PodDisruptionBudget))
    fw = s.frameworks["check"]
    pi = PodInfo(_pod("preemptor", case.cpu, HIGH if case.cls.startswith("pp-high") else PRIORITIES[case.cls]))
    s.handlers.on_pod_add(pi.pod)
    pi = s.pods["ns/preemptor"]
    state = CycleState()
    try:
        s.cycles.algorithm.schedule_pod(fw, state, pi)
        return False  # fits without preemption: the node would be a score tie-break, not a preemption
    except FitError as fe:
        plugin = fw.plugins["DefaultPreemption"]
        ev = plugin.evaluator  # type: ignore[attr-defined]
        cands, _ = ev.find_candidates(state, s.cache.node_infos(), pi, fe.diagnosis.node_to_status)
        return _unique(cands)


def _unique(cands: list[Candidate]) -> bool:
    if len(cands) <= 1:
        return True
    keys = [
        (-c.num_pdb_violations, -c.victims[0].priority, -sum(p.priority + 2**31 for p in c.victims), -len(c.victims))
        for c in cands
    ]
    best = max(keys)
    return keys.count(best) == 1
