"""``ome-scheduler snapshot``: write the cluster state the scheduler sees to one file.

Lists what the scheduler's informers list (:mod:`ome_scheduler.tools.listing`: nodes, pods that are not
finished, namespaces, PodGroups, PersistentVolumes, PersistentVolumeClaims and
StorageClasses; never Secrets or ConfigMaps), decodes each object into the scheduler's typed
record (so only the fields the scheduler reads are kept) and writes one
:class:`~ome_scheduler.api.snapshot.ClusterSnapshot`. ``ome-scheduler simulate`` reads it.

``--anonymize`` replaces names consistently (:mod:`ome_scheduler.tools.anonymize`): node, namespace, pod,
PodGroup, volume, claim and storage class names, label and taint values, images and owner
names each become a stable placeholder (``node-00001``, ``ns-0001``, ``gang-0001``,
``value-0001``...), the same original string always giving the same placeholder, so label
selectors, node names and PodGroup labels still match what they matched. Label keys,
annotation keys that name labels (the PodGroup topology-key annotation), numbers (for
``Gt``/``Lt`` node affinity), quantities and scheduler names are kept. Annotations of pods,
nodes and namespaces are dropped, and so are condition messages.

Exit status: 0 written, 1 the API server could not be read (message on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    """``ome-scheduler snapshot`` flags."""
    p = argparse.ArgumentParser(
        prog="ome-scheduler snapshot",
        description="Write the cluster state the scheduler sees (nodes, pods, PodGroups, namespaces, volumes; "
        "never Secrets) to one file for `ome-scheduler simulate`.",
    )
    p.add_argument("file", help="output file: .yaml/.yml for YAML, anything else JSON; - for JSON on stdout")
    p.add_argument("--kubeconfig", help="kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--master", help="API server URL (overrides the kubeconfig)")
    p.add_argument("--anonymize", action="store_true", help="replace names and label values consistently")
    return p


def main(argv: Sequence[str]) -> int:
    """Run ``ome-scheduler snapshot``; returns the exit status."""
    args = parser().parse_args(list(argv))
    # The API client is imported only once the arguments parse: ``--help`` loads none of it.
    from ome_scheduler.api.snapshot import encode_snapshot
    from ome_scheduler.tools.anonymize import Anonymizer
    from ome_scheduler.tools.listing import take

    snap = asyncio.run(take(args.kubeconfig, args.master))
    if isinstance(snap, str):
        sys.stderr.write(f"Error: {snap}\n")
        return 1
    if args.anonymize:
        snap = Anonymizer().snapshot(snap)
    if args.file == "-":
        sys.stdout.buffer.write(encode_snapshot(snap, Path("stdout.json")))
        return 0
    path = Path(args.file)
    try:
        path.write_bytes(encode_snapshot(snap, path))
    except OSError as exc:
        sys.stderr.write(f"Error: cannot write {path}: {exc.strerror or exc}\n")
        return 1
    sys.stderr.write(
        f"wrote {path}: {len(snap.nodes)} nodes, {len(snap.pods)} pods, {len(snap.pod_groups)} PodGroups, "
        f"{len(snap.namespaces)} namespaces\n"
    )
    return 0
