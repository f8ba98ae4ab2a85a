"""``ome-scheduler explain``: why a gang (or pod) is pending, and where it would go now.

``ome-scheduler explain podgroup NS/NAME``, ``ome-scheduler explain lws NS/NAME`` (each group of
a LeaderWorkerSet, as a gang: design §2.1) and ``ome-scheduler explain pod NS/NAME`` are
read-only and run with the user's own kubeconfig. They list the cluster exactly as
``ome-scheduler snapshot`` does (the informers' paths and decoders), build the scheduler's
engine offline as ``ome-scheduler simulate`` does (the same configuration file, cache, plugins
and OMEGangPack), and then, in dry run (no write to the API server, no Lease):

* list the gang's members and their state: ``bound`` (a node), ``waiting`` (at Permit:
  ``status.nominatedNodeName``), ``pending`` (its ``PodScheduled`` message), ``gated``, or
  ``not ours`` (another ``schedulerName``);
* for every domain under the gang's topology key: its room counted in members like the gang's
  (OMEGangPack's rule 1), the gangs holding it, and for a domain the gang does not fit, the
  reasons its nodes reject a member, aggregated as kube-scheduler's ``FitError`` does
  (``2 Insufficient nvidia.com/gpu, 1 node(s) didn't match pod anti-affinity rules``);
* run one real scheduling cycle for a pending member: the domain it would pin and the node it
  would take now, or the ``FailedScheduling`` message the scheduler would record, byte for byte.

The live scheduler's holds (pins of forming gangs) live in its memory, not in the API; they are
derived from what the cluster shows: members waiting at Permit are assumed on their nominated
node (``status.nominatedNodeName``), and a gang whose PodGroup says ``ome.io/placement:
Holding`` (or has members waiting at Permit) holds its domain for its remaining members. What
cannot be seen (domains a gang recently failed in, holds made in the last second) can make the
live answer differ; the output says which holds were derived and how.

Exit status: 0 explained, 1 the object is missing, the cluster cannot be read or the
configuration is invalid (message on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    """``ome-scheduler explain`` flags."""
    p = argparse.ArgumentParser(
        prog="ome-scheduler explain",
        description="Explain why a gang (or pod) is pending and where it would go now: its members, every domain's "
        "room, holds and per-node reasons, and the scheduler's decision in dry run (read-only).",
    )
    p.add_argument("kind", choices=("pod", "podgroup", "pg", "lws"), help="what to explain")
    p.add_argument("target", metavar="NS/NAME", help="namespace/name")
    p.add_argument("--config", help="KubeSchedulerConfiguration file (default: the built-in, the chart's default)")
    p.add_argument("--kubeconfig", help="kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--master", help="API server URL (overrides the kubeconfig)")
    p.add_argument("--snapshot", help="explain from a snapshot file instead of the live cluster")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text", help="report format")
    return p


def main(argv: Sequence[str]) -> int:
    """Run ``ome-scheduler explain``; returns the exit status."""
    args = parser().parse_args(list(argv))
    # The engine is imported only once the arguments parse: ``--help`` loads none of it.
    from ome_scheduler import logs
    from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotError, read_snapshot
    from ome_scheduler.config.errors import ConfigError
    from ome_scheduler.config.load import load_config
    from ome_scheduler.tools.explainer import explain, explain_lws, render_text
    from ome_scheduler.tools.inputs import check_snapshot
    from ome_scheduler.util.output import write_result

    logs.configure(0, "text")  # the offline engine's own log lines would only repeat the report
    ns, sep, name = args.target.partition("/")
    if not sep or not ns or not name:
        sys.stderr.write(f"Error: {args.target!r} is not NAMESPACE/NAME\n")
        return 2
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        sys.stderr.write(f"Error: invalid configuration: {exc}\n")
        return 1
    if args.snapshot:
        try:
            read = read_snapshot(Path(args.snapshot))
            check_snapshot(read, f"snapshot {args.snapshot}")
            snap: ClusterSnapshot | str = read
        except SnapshotError as exc:
            snap = str(exc)
    else:
        from ome_scheduler.tools.listing import take

        snap = asyncio.run(take(args.kubeconfig, args.master))
    if isinstance(snap, str):
        sys.stderr.write(f"Error: {snap}\n")
        return 1
    try:
        ex = explain_lws(cfg, snap, ns, name) if args.kind == "lws" else explain(cfg, snap, args.kind, ns, name)
    except ConfigError as exc:
        sys.stderr.write(f"Error: invalid configuration: {exc}\n")
        return 1
    if isinstance(ex, str):
        sys.stderr.write(f"Error: {ex}\n")
        return 1
    if isinstance(ex, list):
        groups = ex
        write_result(
            args.output,
            lambda: {"kind": "LeaderWorkerSet", "namespace": ns, "name": name, "groups": [g.to_json() for g in groups]},
            lambda: "\n".join(render_text(g) for g in groups),
        )
        return 0
    write_result(args.output, ex.to_json, lambda: render_text(ex))
    return 0
