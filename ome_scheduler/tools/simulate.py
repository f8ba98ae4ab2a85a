"""``ome-scheduler simulate``: where would these gangs go, offline.

The command line of :class:`~ome_scheduler.tools.simulation.Simulation`: reads the snapshot
(``ome-scheduler snapshot``) and the ``--add`` manifests (:mod:`ome_scheduler.tools.inputs`),
runs the real scheduler engine over them on a simulated clock, and prints the report
(:mod:`ome_scheduler.tools.report`) as text or JSON; ``--png`` draws the domain map
(:mod:`ome_scheduler.tools.domainmap`, matplotlib only when asked). Exit status 0, or 1 with a
message naming the file or argument for a bad snapshot, manifest or configuration; 2 usage.

The engine is imported only after the arguments parse, so ``--help`` loads nothing of it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_MAX_SECONDS = 3600.0
"""Simulated seconds after which a simulation that has not settled stops (``--max-seconds``);
the same default as :data:`ome_scheduler.tools.simulation.DEFAULT_MAX_SECONDS`."""


def parser() -> argparse.ArgumentParser:
    """``ome-scheduler simulate`` flags."""
    p = argparse.ArgumentParser(
        prog="ome-scheduler simulate",
        description="Run the scheduler engine offline over a snapshot (`ome-scheduler snapshot`) plus added "
        "PodGroups and pods, and print where each pod would bind, which gangs stay pending and why, and "
        "every domain's room before and after.",
    )
    p.add_argument("--snapshot", required=True, help="snapshot file written by `ome-scheduler snapshot`")
    p.add_argument(
        "--add",
        nargs="+",
        action="extend",
        default=[],
        metavar="MANIFEST",
        help="YAML/JSON files of Pods, PodGroups, Nodes, Namespaces or volumes to add, in order",
    )
    p.add_argument("--config", help="KubeSchedulerConfiguration file (default: the built-in, the chart's default)")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text", help="report format")
    p.add_argument("--png", metavar="FILE", help="draw the domain map before and after (needs ome-scheduler[plot])")
    p.add_argument("--topology-key", help="the domain label the PNG draws (default: the first one with gangs)")
    p.add_argument("--resource", help="what free capacity counts (default: the largest extended resource, else cpu)")
    p.add_argument(
        "--settle-seconds",
        type=float,
        default=0.0,
        help="simulated seconds to run at least (e.g. past Permit timeouts) before stopping when quiescent",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=DEFAULT_MAX_SECONDS,
        help="simulated seconds after which an unsettled simulation stops",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed for ties between equally scored nodes")
    p.add_argument("--v", type=int, default=0, help="scheduler log verbosity on stderr (4: gang placement trace)")
    return p


def main(argv: Sequence[str]) -> int:
    """Run ``ome-scheduler simulate``; returns the exit status (1: bad input, with a message)."""
    args = parser().parse_args(list(argv))
    from ome_scheduler import logs
    from ome_scheduler.api.snapshot import SnapshotError, read_snapshot
    from ome_scheduler.config.errors import ConfigError
    from ome_scheduler.config.load import load_config
    from ome_scheduler.tools.inputs import check_snapshot, read_manifests
    from ome_scheduler.tools.report import render_text
    from ome_scheduler.tools.simulation import Simulation
    from ome_scheduler.util.output import write_result

    logs.configure(args.v, "text")
    try:
        cfg = load_config(args.config)
        snap = read_snapshot(Path(args.snapshot))
        check_snapshot(snap, f"snapshot {args.snapshot}")
        manifests = read_manifests(args.add)
        sim = Simulation(
            cfg,
            snap,
            manifests.objects,
            later=manifests.later,
            settle_seconds=args.settle_seconds,
            max_seconds=args.max_seconds,
            resource=args.resource,
            seed=args.seed,
        )
        sim.warnings.extend(manifests.warnings)
        result = sim.run()
    except ConfigError as exc:
        sys.stderr.write(f"Error: invalid configuration: {exc}\n")
        return 1
    except SnapshotError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    if args.png:
        from ome_scheduler.tools.domainmap import PlotUnavailable, draw_domain_map  # matplotlib only when asked

        try:
            draw_domain_map(result, Path(args.png), topology_key=args.topology_key)
        except (PlotUnavailable, OSError) as exc:
            why = f"--png: cannot write {args.png}: {exc.strerror or exc}" if isinstance(exc, OSError) else exc
            sys.stderr.write(f"Error: {why}\n")
            return 1
    write_result(args.output, result.to_json, lambda: render_text(result))
    return 0
