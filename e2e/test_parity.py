"""Differential test: ome-scheduler against the stock kube-scheduler 1.35 on generated cases.

``OME_PARITY_SEED`` (default below) picks the case stream, ``OME_PARITY_CASES`` (default
300) how many cases run and ``OME_PARITY_FIRST`` (default 0) the index of the first (a slice
of a longer run, case for case: ``parity_harness.stream_slice``); ``OME_PARITY_BATCH`` sets
how many cases share the cluster at once.
A failure prints the seed, every mismatching case (pod, nodes, existing pods) and writes the
same report to ``<cluster state dir>/parity-report.txt``. See ``e2e/parity_harness.py`` for
the design.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.scheduler import SchedulerProcess
from e2e.parity_gen import CASE_LABEL, Case, VolumeSpec, generate, storage_class
from e2e.parity_harness import CaseResult, KubeSchedulerProcess, ParityRunner, coverage, stream_slice, write_report

DEFAULT_SEED = 135_4
SEED = int(os.environ.get("OME_PARITY_SEED", DEFAULT_SEED))
FIRST, CASES = stream_slice("OME_PARITY", 300)
BATCH = int(os.environ.get("OME_PARITY_BATCH", 25))


@pytest.fixture(scope="module")
def runner(api: Api, kube: KubeSchedulerProcess, ome: SchedulerProcess) -> Iterator[ParityRunner]:
    r = ParityRunner(api)
    r.ensure_runtime_class()
    yield r
    r.close()


def small_case(prefix: str, nodes: int, app: str, **pod_spec: Any) -> Case:
    """A hand-written case ``<prefix><6 hex>``: namespace ``<id>-a``, ``nodes`` untainted nodes
    ``<id>-n<i>`` (4 CPUs, 8 GiB, 10 pods) and a pause pod labelled ``app`` selecting them, with
    ``pod_spec`` added to its spec."""
    cid = f"{prefix}{uuid.uuid4().hex[:6]}"
    case = Case(id=cid, index=0)
    case.namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{cid}-a", "labels": {CASE_LABEL: cid}}}
    ]
    res = {"cpu": "4", "memory": "8Gi", "pods": "10"}
    case.nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"{cid}-n{i}", "labels": {CASE_LABEL: cid, "kubernetes.io/hostname": f"{cid}-n{i}"}},
            "spec": {"taints": []},
            "status": {"capacity": res, "allocatable": res},
        }
        for i in range(nodes)
    ]
    case.pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": f"{cid}-a", "labels": {"app": app}},
        "spec": {
            "nodeSelector": {CASE_LABEL: cid},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            **pod_spec,
        },
    }
    return case


def test_generated_cases_match_kube_scheduler(cluster: Cluster, runner: ParityRunner) -> None:
    run = uuid.uuid4().hex[:4]
    cases = generate(SEED, CASES, run, first=FIRST)
    results: list[CaseResult] = []
    start = time.monotonic()
    for i in range(0, len(cases), BATCH):
        results.extend(runner.run_batch(cases[i : i + BATCH], upcoming=cases[i + BATCH : i + 2 * BATCH]))
    elapsed = time.monotonic() - start
    bad = [r for r in results if r.problems]
    bound = sum(1 for r in results if r.kube.bound)
    gated = sum(1 for r in results if r.case.gated)
    header = (
        f"parity: seed={SEED} first={FIRST} cases={len(results)} mismatches={len(bad)} kube-bound={bound} gated={gated} "
        f"in {elapsed:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in sorted(runner.timings.items()))})"
    )
    print(header)
    print(coverage(results))
    report = cluster.state_dir / "parity-report.txt"
    write_report(report, results, header + "\n" + coverage(results))
    if bad:
        shown = "\n\n".join(r.describe() for r in bad[:10])
        pytest.fail(
            f"{len(bad)} of {len(results)} cases differ (OME_PARITY_SEED={SEED} OME_PARITY_FIRST={FIRST} "
            f"OME_PARITY_CASES={CASES}; full report {report}):\n\n{shown}"
        )


def test_gated_pod_gets_no_event_from_either_scheduler(runner: ParityRunner) -> None:
    """A pod with scheduling gates is not attempted by either scheduler (no event, no
    binding); once the gate is removed both schedule it."""
    gates = [{"name": "parity.ome.io/hold"}, {"name": "parity.ome.io/second"}]
    case = small_case("pg", 2, "gated", schedulingGates=gates)
    [result] = runner.run_batch([case])
    assert not result.kube.gated_events and not result.ome.gated_events
    assert result.kube.bound and result.ome.bound, result.problems
    assert not result.problems, result.problems


def test_wait_for_first_consumer_claim_binds_to_a_local_pv(api: Api, runner: ParityRunner) -> None:
    """VolumeBinding end to end: the pod goes to the only node with a fitting local PV, PreBind
    binds the claim to it (the PV controller completes the binding), then the pod binds."""
    case = small_case("pw", 3, "db", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    cid = case.id
    vs = VolumeSpec(cid)
    vs.classes = [storage_class("wffc", "WaitForFirstConsumer")]
    for j, (host, size) in enumerate([(f"{cid}-n0", "1Gi"), (f"{cid}-n2", "5Gi")]):
        vs.pvs.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"pv{j}"},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "wffc",
                    "hostPath": {"path": f"/tmp/{cid}/{j}"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )
    vs.pvcs = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "wffc",
                "resources": {"requests": {"storage": "2Gi"}},
            },
        }
    ]
    case.volumes = vs
    [result] = runner.run_batch([case])
    assert not result.problems, result.problems
    assert result.kube.node == result.ome.node == f"{cid}-n2"
    claim = api.try_get(f"/api/v1/namespaces/{cid}-vo/persistentvolumeclaims/data")
    assert claim is None or claim["spec"].get("volumeName") == f"{cid}-pv1-o"
