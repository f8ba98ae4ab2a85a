"""Differential test of the families of ``e2e/parity_gen_volumes.py`` (CSI attach limits and
existing VolumeAttachments, in-tree EBS volumes, pods mid-resize, priorities) against the
stock kube-scheduler 1.35.4, with the runner of ``e2e/test_parity.py``.

``OME_PARITY_SEED`` picks the stream (default below, another than ``e2e/test_parity.py``'s),
``OME_PARITY_CASES`` how many cases run (default 50 here; the 500-case run and its time are
in ``docs/plugins.md``) and ``OME_PARITY_FIRST`` (default 0) the index of the first: cases are
keyed by their index, so ``OME_PARITY_FIRST=225 OME_PARITY_CASES=25`` reruns cases 225-249 of
a longer run unchanged (``parity_harness.stream_slice``).
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
from e2e.parity_gen_volumes import FamilyRunner, generate
from e2e.parity_harness import CaseResult, KubeSchedulerProcess, coverage, stream_slice, write_report

DEFAULT_SEED = 27_1354
SEED = int(os.environ.get("OME_PARITY_SEED", DEFAULT_SEED))
FIRST, CASES = stream_slice("OME_PARITY", 50)
BATCH = int(os.environ.get("OME_PARITY_BATCH", 25))


@pytest.fixture(scope="module")
def runner(api: Api, kube: KubeSchedulerProcess, ome: SchedulerProcess) -> Iterator[FamilyRunner]:
    r = FamilyRunner(api)
    r.ensure_runtime_class()
    r.ensure_priority_classes()
    yield r
    r.close()


@pytest.mark.timeout(max(600, 10 * CASES))
def test_generated_volume_resize_priority_cases_match_kube_scheduler(cluster: Cluster, runner: FamilyRunner) -> None:
    cases = generate(SEED, CASES, uuid.uuid4().hex[:4], first=FIRST)
    results: list[CaseResult] = []
    start = time.monotonic()
    for i in range(0, len(cases), BATCH):
        results.extend(runner.run_batch(cases[i : i + BATCH], upcoming=cases[i + BATCH : i + 2 * BATCH]))
        bad_so_far = [r.case.index for r in results if r.problems]
        print(
            f"parity progress: cases {FIRST}-{FIRST + len(results) - 1}, {len(bad_so_far)} mismatches "
            f"(cases {bad_so_far}), {time.monotonic() - start:.0f} s",
            flush=True,
        )
    elapsed = time.monotonic() - start
    bad = [r for r in results if r.problems]
    csi = sum(1 for c in cases if c.csinodes)
    resized = sum(1 for c in cases if c.resizes)
    limited = sum(1 for r in results if "exceed max volume count" in r.kube.message)
    header = (
        f"parity (volumes, resize, priorities): seed={SEED} first={FIRST} cases={len(results)} mismatches={len(bad)} "
        f"csi={csi} resized={resized} volume-limited={limited} kube-bound={sum(1 for r in results if r.kube.bound)} "
        f"in {elapsed:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in sorted(runner.timings.items()))})"
    )
    print(header)
    print(coverage(results))
    report = cluster.state_dir / "parity-volumes-report.txt"
    write_report(report, results, header + "\n" + coverage(results))
    assert csi and resized, header
    if bad:
        shown = "\n\n".join(r.describe() for r in bad[:10])
        pytest.fail(
            f"{len(bad)} of {len(results)} cases differ (OME_PARITY_SEED={SEED} OME_PARITY_FIRST={FIRST} "
            f"OME_PARITY_CASES={CASES}; report {report}):\n\n{shown}"
        )
