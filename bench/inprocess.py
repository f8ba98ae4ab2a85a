"""The scheduling engine alone, in process: CPU per pod of S1-S4 at 5,000 nodes, no I/O.

``python -m bench.inprocess`` builds a scenario's objects with ``bench.run.scenario_objects``
and its nodes with ``bench.common.node_obj`` (the same objects the end-to-end benchmark
creates), runs them through the offline :class:`~ome_scheduler.tools.simulation.Simulation`
with the chart's profile (the scheduling and binding cycles, a Binding confirmed in memory),
and reports the process CPU time per pod (``time.process_time()``, milliseconds) around the
simulation's run. Each scenario runs ``--runs`` times in this process; the median is printed.

This is how a change to the per-pod path is measured before and after (a refactor must not
move it beyond the run-to-run spread); the end-to-end runs in ``bench/run.py`` cannot resolve
a few per cent.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import msgspec

from bench.common import NS, OME, SCHEDULER_NAME, node_obj
from bench.run import Sizes, scenario_objects
from ome_scheduler import logs
from ome_scheduler.api.core import Namespace, Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotMeta
from ome_scheduler.config.load import load_config

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "examples" / "demo" / "config.yaml"
"""The chart's default profile, as the chart renders it."""


def measure(scenario: str, sz: Sizes) -> tuple[float, int]:
    """One run of ``scenario``: (CPU milliseconds per pod, pods bound).

    Raises:
        RuntimeError: a pod was left unbound (the measurement would be of a different run).
    """
    from ome_scheduler.tools.simulation import Simulation

    nodes_n, clique = (sz.s4_nodes, sz.s4_clique) if scenario == "S4" else (sz.nodes, sz.clique)
    nodes = [msgspec.convert(node_obj(i, clique), Node) for i in range(nodes_n)]
    snap = ClusterSnapshot(
        metadata=SnapshotMeta(taken_at="2026-12-01T00:00:00Z", server="bench/inprocess.py"),
        nodes=nodes,
        namespaces=[msgspec.convert({"metadata": {"name": NS}}, Namespace)],
    )
    pgs, pods, _ = scenario_objects(scenario, sz, SCHEDULER_NAME[OME])
    added: list[object] = [msgspec.convert(o, PodGroup) for o in pgs]
    added += [msgspec.convert(o, Pod) for o in pods]
    sim = Simulation(load_config(str(CONFIG)), snap, added)
    gc.collect()
    t0 = time.process_time()
    result = sim.run()
    cpu = time.process_time() - t0
    bound = sum(1 for p in result.pods if p.status == "bound")
    if bound != len(pods):
        raise RuntimeError(f"{scenario}: {bound} of {len(pods)} pods bound")
    return cpu * 1000.0 / len(pods), bound


def main(argv: list[str] | None = None) -> int:
    """Print the median CPU per pod of each scenario."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="S1,S2", help="comma list of limit, S1, S2, S3, S4 (default S1,S2)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="every count times this (1.0: 5,000 nodes)")
    p.add_argument("--v", type=int, default=0, help="scheduler log verbosity on stderr (the chart runs 2)")
    args = p.parse_args(argv)
    logs.configure(args.v, "text")
    sz = Sizes().scaled(args.scale) if args.scale != 1.0 else Sizes()
    for name in args.scenarios.split(","):
        runs = [measure(name.strip(), sz) for _ in range(args.runs)]
        per_pod = [r[0] for r in runs]
        print(
            f"{name}: {statistics.median(per_pod):.3f} ms CPU per pod (median of {len(runs)}: "
            + ", ".join(f"{v:.3f}" for v in per_pod)
            + f"), {runs[0][1]} pods"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
