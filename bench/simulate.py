"""``ome-scheduler simulate`` on the S2 benchmark state, without an API server.

``python -m bench.simulate`` writes S2's cluster as a snapshot (5,000 nodes with 8
``nvidia.com/gpu`` in 625 ``nvidia.com/gpu.clique`` domains of 8, the ``bench/run.py`` Node
objects) and S2's 625 PodGroups and 5,000 gang members (8 GPUs each, required anti-affinity on
the hostname) as one ``--add`` file, then times the real command line ``ome-scheduler simulate
--snapshot ... --add ... --output json --png ...`` end to end (process start, reading both
files, the simulation, the report and the domain map), ``--runs`` times. It checks that every
gang is bound in a clique of its own and writes ``bench/results/<date>-simulate.md`` and the
domain map PNG. ``--scale`` shrinks the cluster and the gangs alike.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench.common import NS, OME, SCHEDULER_NAME, node_obj
from bench.run import Sizes, scenario_objects
from ome_scheduler.api.core import Namespace, Node
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotMeta, write_snapshot

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
LIMIT_S = 60.0
"""Issue 16's bound for simulating S2."""


def write_inputs(sz: Sizes, work: Path) -> tuple[Path, Path]:
    """The S2 snapshot and the added PodGroups and pods; returns (snapshot, manifests)."""
    nodes = [msgspec.convert(node_obj(i, sz.clique), Node) for i in range(sz.nodes)]
    snap = ClusterSnapshot(
        metadata=SnapshotMeta(taken_at="2026-12-01T00:00:00Z", server="bench/simulate.py"),
        nodes=nodes,
        namespaces=[msgspec.convert({"metadata": {"name": NS}}, Namespace)],
    )
    write_snapshot(snap, work / "s2-snapshot.json")
    pgs, pods, _ = scenario_objects("S2", sz, SCHEDULER_NAME[OME])
    add = work / "s2-gangs.json"
    add.write_bytes(msgspec.json.encode({"apiVersion": "v1", "kind": "List", "items": pgs + pods}))
    return work / "s2-snapshot.json", add


def run_once(snapshot: Path, add: Path, png: Path) -> tuple[float, dict[str, Any]]:
    """One timed ``ome-scheduler simulate``; returns (wall seconds, its JSON report)."""
    argv = [sys.executable, "-m", "ome_scheduler", "simulate", "--snapshot", str(snapshot), "--add", str(add)]
    argv += ["--output", "json", "--png", str(png)]
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"ome-scheduler simulate failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return wall, json.loads(p.stdout)


def check(report: dict[str, Any], sz: Sizes) -> None:
    """Every gang bound, each in one clique, no clique shared.

    Raises:
        AssertionError: naming what is wrong.
    """
    gangs = report["gangs"]
    assert len(gangs) == sz.s2_gangs, f"{len(gangs)} gangs reported, {sz.s2_gangs} added"
    unbound = [g["gang"] for g in gangs if g["status"] != "bound"]
    assert not unbound, f"gangs not bound: {unbound[:5]}..."
    domains = [d for g in gangs for d in g["domains"]]
    assert all(len(g["domains"]) == 1 for g in gangs), "a gang spans two cliques"
    assert len(set(domains)) == len(domains), "two gangs share a clique"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    sz = Sizes() if args.scale == 1.0 else Sizes().scaled(args.scale)
    with tempfile.TemporaryDirectory() as tmp:
        return _measure(sz, args, Path(tmp))


def _measure(sz: Sizes, args: argparse.Namespace, work: Path) -> int:
    date = dt.date.today().isoformat()
    png = args.out / f"{date}-simulate-s2.png"
    snapshot, add = write_inputs(sz, work)
    load = os.getloadavg()[0]
    walls, sims = [], []
    report: dict[str, Any] = {}
    for i in range(args.runs):
        wall, report = run_once(snapshot, add, png)
        check(report, sz)
        walls.append(wall)
        sims.append(report["wallSeconds"])
        print(f"run {i + 1}: {wall:.2f} s end to end, {report['wallSeconds']:.2f} s simulating")
    med = statistics.median(walls)
    lines = [
        f"# ome-scheduler simulate on S2 ({date})",
        "",
        f"`python -m bench.simulate --runs {args.runs}`: {sz.nodes:,} nodes in {sz.nodes // sz.clique} "
        f"`nvidia.com/gpu.clique` domains of {sz.clique}, {sz.s2_gangs} gangs of {sz.gang_size} whole-node members "
        "(required anti-affinity on the hostname), simulated with the built-in (chart default) configuration; "
        "no API server. End to end is the whole `ome-scheduler simulate --output json --png` process; "
        "simulating is the engine's share (replaying the snapshot, scheduling to quiescence, the report). "
        f"Machine: {os.cpu_count()} cores, shared (load average {load:.1f} when the runs started).",
        "",
        "| run | end to end s | simulating s |",
        "|---|---|---|",
        *(f"| {i + 1} | {w:.2f} | {s:.2f} |" for i, (w, s) in enumerate(zip(walls, sims, strict=True))),
        f"| median | {med:.2f} | {statistics.median(sims):.2f} |",
        "",
        f"Result: {len(report['gangs'])}/{sz.s2_gangs} gangs bound, each in a clique of its own; "
        f"{report['simulatedSeconds']:g} simulated seconds. Limit: {LIMIT_S:.0f} s "
        f"({'met' if med < LIMIT_S else 'MISSED'}). Domain map: `{png.name}`.",
        "",
    ]
    md = args.out / f"{date}-simulate.md"
    md.write_text("\n".join(lines))
    print(md.read_text())
    return 0 if med < LIMIT_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
