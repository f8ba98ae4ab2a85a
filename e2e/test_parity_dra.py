"""Differential test, DRA family: ome-scheduler against kube-scheduler 1.35 on generated pods
with ResourceClaims (``e2e/parity_gen_dra.py``; the runner and verdicts of ``parity_harness.py``).

``OME_PARITY_DRA_SEED`` picks the stream, ``OME_PARITY_DRA_CASES`` (default 100, what CI runs)
how many cases run, ``OME_PARITY_DRA_FIRST`` (default 0) the index of the first (a slice of a
longer run, case for case: ``parity_harness.stream_slice``), ``OME_PARITY_BATCH`` how many
share the cluster at once. Verdicts: both
bound or both unschedulable with byte-equal messages and events (after
``parity_gen_dra.neutral`` replaced the per-phase names of namespace, generated claim, driver
and class), and kube-scheduler accepts ome's node for a copy pinned there (upstream breaks ties
at random, so the node itself is compared only through that check). A failure writes
``<state dir>/parity-dra-report.txt``. Measured on a loaded 2-core machine: 100 cases in 207 s
with ``OME_PARITY_BATCH=50``; ``OME_PARITY_DRA_CASES=300`` (about 10 minutes) showed 0
mismatches on the default seed.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.scheduler import SchedulerProcess
from e2e.parity_gen_dra import DraParityRunner, generate_dra
from e2e.parity_harness import OME_PROFILE, CaseResult, KubeSchedulerProcess, coverage, stream_slice, write_report
from tests.support.manifests import chart_config

SEED = int(os.environ.get("OME_PARITY_DRA_SEED", 24_1354))
FIRST, CASES = stream_slice("OME_PARITY_DRA", 100)
BATCH = int(os.environ.get("OME_PARITY_BATCH", 25))


@pytest.fixture(scope="module")
def ome(cluster: Cluster) -> Iterator[SchedulerProcess]:
    with SchedulerProcess(cluster, chart_config(scheduler_name=OME_PROFILE), name="parity-dra-ome", v=2) as s:
        yield s


@pytest.mark.timeout(1500)  # above the 600 s default: 300 cases take about 10 minutes on a loaded machine
def test_generated_dra_cases_match_kube_scheduler(
    api: Api, cluster: Cluster, kube: KubeSchedulerProcess, ome: SchedulerProcess
) -> None:
    runner = DraParityRunner(api)
    run = uuid.uuid4().hex[:4]
    cases = generate_dra(SEED, CASES, run, first=FIRST)
    results: list[CaseResult] = []
    start = time.monotonic()
    try:
        for i in range(0, len(cases), BATCH):
            batch = runner.run_batch(cases[i : i + BATCH])
            results.extend(batch)
            print(
                f"batch {i // BATCH} (from case {FIRST + i}): {sum(1 for r in batch if r.problems)} mismatches of {len(batch)}",
                flush=True,
            )
            for r in batch:
                if r.problems:
                    print(r.describe(), flush=True)
    finally:
        runner.close()
    elapsed = time.monotonic() - start
    bad = [r for r in results if r.problems]
    bound = sum(1 for r in results if r.kube.bound)
    header = f"parity-dra: seed={SEED} first={FIRST} cases={len(results)} mismatches={len(bad)} kube-bound={bound} in {elapsed:.1f} s"
    print(header)
    print(coverage(results))
    report = cluster.state_dir / "parity-dra-report.txt"
    write_report(report, results, header + "\n" + coverage(results))
    # a stream that binds everything or nothing compares nothing worth comparing
    assert 0.2 * len(results) < bound < 0.9 * len(results), header
    if bad:
        shown = "\n\n".join(r.describe() for r in bad[:10])
        pytest.fail(
            f"{len(bad)} of {len(results)} DRA cases differ (OME_PARITY_DRA_SEED={SEED} OME_PARITY_DRA_FIRST={FIRST} OME_PARITY_DRA_CASES={CASES}; full report {report}):\n\n{shown}"
        )
