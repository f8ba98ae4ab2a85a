"""The local control plane's command line: ``python -m e2e.harness up|down|stop|status|env``.

Usage (from the repository root; ``--dir`` or ``OME_CLUSTER_DIR`` picks the state directory)::

    python -m e2e.harness up [--fresh] [--nodes FILE | --no-nodes]
    python -m e2e.harness status [--json]
    eval "$(python -m e2e.harness env)"
    python -m e2e.harness stop [ome-scheduler]   # stop the demo's scheduler, keep the cluster
    python -m e2e.harness down [--keep]

``up`` and ``env`` print shell ``export`` lines on stdout; progress and errors go to stderr. Exit
codes: 0 on success (``status``: the cluster is running), 1 on an error or no cluster (``status``:
not running). The cluster itself is :class:`e2e.harness.cluster.Cluster`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e2e.harness import cluster as cluster_module
from e2e.harness.cluster import Cluster, KubectlError
from e2e.harness.paths import DEMO_NODES_FILE
from e2e.harness.processes import ClusterError, proc_rss_bytes


def status_summary(cluster: Cluster) -> dict[str, Any]:
    """Return a JSON-able summary: server, health and per-component pid/alive/port/RSS (MiB)."""
    state = cluster.state
    if state is None:
        return {"state_dir": str(cluster.state_dir), "running": False, "components": {}}
    comps: dict[str, Any] = {}
    for name, rec in state.components.items():
        alive = rec.alive()
        rss = proc_rss_bytes(rec.pid) if alive else None
        comps[name] = {
            "pid": rec.pid,
            "alive": alive,
            "port": rec.port,
            "rss_mib": round(rss / 2**20, 1) if rss is not None else None,
            "log": rec.log,
        }
    return {
        "state_dir": str(cluster.state_dir),
        "status": state.status,
        "running": cluster.is_running(),
        "server": state.server,
        "kubeconfig": str(cluster.kubeconfig),
        "bin_dir": state.bin_dir,
        "started_at": state.started_at,
        "timings": state.timings,
        "components": comps,
    }


def env_lines(cluster: Cluster) -> list[str]:
    """Shell ``export`` lines: KUBECONFIG, OME_CLUSTER_DIR, OME_K8S_BIN_DIR and PATH (bin dir first)."""
    q = shlex.quote
    return [
        f"export KUBECONFIG={q(str(cluster.kubeconfig))}",
        f"export OME_CLUSTER_DIR={q(str(cluster.state_dir))}",
        f"export OME_K8S_BIN_DIR={q(str(cluster.bin_dir))}",
        f'export PATH={q(str(cluster.bin_dir))}:"$PATH"',
    ]


def _parser() -> argparse.ArgumentParser:
    description = (cluster_module.__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m e2e.harness", description=description)
    parser.add_argument("--dir", help="state directory (default: $OME_CLUSTER_DIR or <repo>/.local-cluster)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the control plane (no-op if already up)")
    p_up.add_argument("--fresh", action="store_true", help="stop and wipe a running cluster first")
    g = p_up.add_mutually_exclusive_group()
    g.add_argument("--nodes", default=str(DEMO_NODES_FILE), help="Node YAML to create (default: %(default)s)")
    g.add_argument("--no-nodes", action="store_true", help="create no nodes")
    p_down = sub.add_parser("down", help="stop the control plane and remove its state")
    p_down.add_argument("--keep", action="store_true", help="keep the state directory (logs, pki, etcd data)")
    p_stop = sub.add_parser("stop", help="stop one extra process (default: the demo's ome-scheduler)")
    p_stop.add_argument("name", nargs="?", default="ome-scheduler")
    p_status = sub.add_parser("status", help="show components, PIDs, ports and RSS")
    p_status.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("env", help="print export lines for KUBECONFIG and friends")
    return parser


def _run(cluster: Cluster, args: argparse.Namespace) -> int:
    if args.cmd == "up":
        t = time.monotonic()
        started = cluster.up(fresh=args.fresh, nodes=None if args.no_nodes else Path(args.nodes))
        if started:
            print(f"# cluster up in {time.monotonic() - t:.1f} s", file=sys.stderr)
        print("\n".join(env_lines(cluster)))
        return 0
    if args.cmd == "down":
        if cluster.state is None and not cluster.state_dir.exists():
            print(f"no cluster in {cluster.state_dir}", file=sys.stderr)
            return 0
        t = time.monotonic()
        cluster.down(keep=args.keep)
        print(f"# cluster down in {time.monotonic() - t:.1f} s", file=sys.stderr)
        return 0
    if args.cmd == "stop":
        if cluster.state is None:
            print(f"no cluster in {cluster.state_dir}", file=sys.stderr)
            return 0
        try:
            stopped = cluster.stop_process(args.name)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"{args.name}: {'stopped' if stopped else 'not running'}", file=sys.stderr)
        return 0
    if args.cmd == "status":
        st = status_summary(cluster)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            print(f"state dir: {st['state_dir']}")
            print(f"running:   {st['running']}")
            if "server" in st:
                print(f"server:    {st['server']}")
                print(f"kubeconfig: {st['kubeconfig']}")
            for name, c in st["components"].items():
                print(
                    f"  {name:24} pid={c['pid']:<8} alive={c['alive']!s:5} port={c['port']!s:6} rss={c['rss_mib']} MiB"
                )
        return 0 if st["running"] else 1
    if args.cmd == "env":
        if cluster.state is None:
            print(f"no cluster in {cluster.state_dir}; run: python -m e2e.harness up", file=sys.stderr)
            return 1
        print("\n".join(env_lines(cluster)))
        return 0
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m e2e.harness up|down|stop|status|env``; returns the exit code."""
    args = _parser().parse_args(argv)
    cluster = Cluster(args.dir)
    try:
        return _run(cluster, args)
    except (ClusterError, KubectlError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
