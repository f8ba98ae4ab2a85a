"""pytest fixtures for the end-to-end tests: one real control plane per test session.

Run with ``.venv/bin/pytest e2e`` from the repository root (never under xdist). Set
``OME_CLUSTER_DIR`` to reuse a cluster started with ``python -m e2e.harness up``; it is then left
running. Otherwise the fixture starts one and stops it at the end, keeping ``logs/`` when a test
failed.

Per module: ``scheduler`` runs one ome-scheduler with ``scheduler_config`` (the chart's defaults;
a module overrides that fixture to change it); ``mpi_operator`` and ``training_operator`` run a
job operator that creates PodGroups for ``ome-scheduler`` (``e2e/harness/operators.py``);
``lws_controller`` runs the LeaderWorkerSet controller and ``ome_manager`` OME's controller-manager
after it (``e2e/harness/serving.py``). Per test:
``ns`` is a namespace of its own; in a module marked ``pytest.mark.invariants_after_test`` the shared invariants (``assert_invariants``)
are checked on it after the test, before it is deleted; ``clean_release`` removes the chart's
release (``helm uninstall``, namespace ``ome``) before and after the test.

Per session: ``audit`` is the API server's audit log from the start of the session
(``e2e/harness/audit.py``). Tests marked ``pytest.mark.suite_end`` run after every other test of the
session (they check what the whole suite left behind, such as its logs).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.audit import AuditLog
from e2e.harness.cluster import Cluster
from e2e.harness.helm import remove_release
from e2e.harness.invariants import assert_invariants
from e2e.harness.measurements import MEASUREMENTS
from e2e.harness.operators import MPIOperator, TrainingOperator
from e2e.harness.scheduler import SchedulerProcess, failed_attempts_by_gang, worst_attempt_window
from e2e.harness.serving import LWSController, OMEManager
from e2e.parity_harness import OME_PROFILE, KubeSchedulerProcess
from tests.support.manifests import chart_config, unique

SUITE_START = pytest.StashKey[dt.datetime]()
"""When the session's first e2e test asked for the cluster (UTC)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "invariants_after_test: check assert_invariants on the test's ns before deleting it"
    )
    config.addinivalue_line("markers", "suite_end: run after every other test of the session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the ``suite_end`` tests to the end of the session, keeping every other order."""
    last = [i for i in items if i.get_closest_marker("suite_end") is not None]
    if last:
        items[:] = [i for i in items if i.get_closest_marker("suite_end") is None] + last


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the times the fault tests measured (``helpers.record_measurement``)."""
    if MEASUREMENTS:
        terminalreporter.write_sep("-", "measured fault recovery times")
        for what, seconds in MEASUREMENTS:
            terminalreporter.write_line(f"{what}: {seconds:.2f} s")


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A running local control plane with the PodGroup CRD and the 4 demo nodes Ready.

    Reuses the cluster in ``OME_CLUSTER_DIR`` (or the default state dir) if it answers; otherwise
    starts one (cold start takes about half a minute) and stops it after the session.
    """
    request.config.stash[SUITE_START] = dt.datetime.now(dt.UTC)
    existing = Cluster.attach_if_running()
    if existing is not None:
        yield existing
        return
    c = Cluster()
    c.up()  # on failure it stops what it started and keeps the state dir (logs) for inspection
    try:
        yield c
    finally:
        failed = request.session.testsfailed > 0
        c.down(keep_logs=failed)
        if failed:
            print(f"\ncontrol plane logs kept in {c.log_dir}")


@pytest.fixture(scope="session")
def audit(cluster: Cluster, request: pytest.FixtureRequest) -> AuditLog:
    """The API server's audit log from the start of this session (every request at Metadata level).

    A cluster started before the control plane audited (an older ``OME_CLUSTER_DIR``) has none:
    that is a failure, restart it with ``python -m e2e.harness up --fresh``."""
    if not cluster.audit_log.exists():
        pytest.fail(f"no audit log at {cluster.audit_log}: restart the cluster (python -m e2e.harness up --fresh)")
    return AuditLog(cluster.log_dir, request.config.stash[SUITE_START])


@pytest.fixture
def clean_release(cluster: Cluster) -> Iterator[None]:
    """No chart release before the test (an interrupted run may have left one) nor after it."""
    remove_release(cluster)
    yield
    remove_release(cluster)


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[Api]:
    """An API client for the test module (closed after it), once the apiserver serves requests
    (``Cluster.ensure_apiserver_serves``: one stuck after an earlier module's fault is restarted)."""
    cluster.ensure_apiserver_serves()
    a = Api(cluster)
    yield a
    a.close()


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    """The configuration of the module's ``scheduler``: what the chart renders by default."""
    return chart_config()


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster, scheduler_config: dict[str, Any]) -> Iterator[SchedulerProcess]:
    """One ome-scheduler process (scheduler name ``ome-scheduler``) for the module, stopped after it."""
    with SchedulerProcess(cluster, scheduler_config) as s:
        yield s


LIVELOCK_WINDOW = 10.0
LIVELOCK_LIMIT = 50
"""No gang may fail more than this many scheduling attempts within any LIVELOCK_WINDOW seconds
(spec rule 10: a waiting gang's failed attempts stay below a few per second)."""


@pytest.fixture(autouse=True)
def no_livelock(request: pytest.FixtureRequest) -> Iterator[None]:
    """In every test that uses the module's ``scheduler``: fail when one gang's failed attempts
    (from the scheduler's log) exceed :data:`LIVELOCK_LIMIT` per :data:`LIVELOCK_WINDOW` seconds."""
    if "scheduler" not in request.fixturenames:
        yield
        return
    sched: SchedulerProcess = request.getfixturevalue("scheduler")
    mine = request.getfixturevalue("ns") if "ns" in request.fixturenames else None
    start = len(sched.log())
    yield
    attempts = failed_attempts_by_gang(sched.log()[start:])
    if mine is not None:  # gangs of this test only: a leftover of an earlier test is not its doing
        attempts = {g: ts for g, ts in attempts.items() if g.startswith(f"{mine}/")}
    worst = {g: worst_attempt_window(ts, LIVELOCK_WINDOW) for g, ts in attempts.items()}
    over = {g: n for g, n in worst.items() if n > LIVELOCK_LIMIT}
    assert not over, f"failed scheduling attempts per {LIVELOCK_WINDOW:g} s above {LIVELOCK_LIMIT}: {over}"


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Iterator[KubeSchedulerProcess]:
    """The oracle for the module: the stock kube-scheduler 1.35.4 with profile ``parity-kube``
    (``e2e/parity_harness.py``)."""
    with KubeSchedulerProcess(cluster) as k:
        yield k


@pytest.fixture(scope="module")
def ome(cluster: Cluster) -> Iterator[SchedulerProcess]:
    """ome-scheduler with the chart's configuration under the parity profile's name, for the
    module (a module that needs another ``ome`` defines its own)."""
    with SchedulerProcess(cluster, chart_config(scheduler_name=OME_PROFILE), name="parity-ome", v=2) as s:
        yield s


@pytest.fixture(scope="module")
def mpi_operator(cluster: Cluster) -> Iterator[MPIOperator]:
    """mpi-operator (MPIJob CRD installed) with ``--gang-scheduling=ome-scheduler``, stopped after the module."""
    with MPIOperator(cluster) as op:
        yield op


@pytest.fixture(scope="module")
def training_operator(cluster: Cluster) -> Iterator[TrainingOperator]:
    """The training-operator for PyTorchJobs (CRD installed) with ``--gang-scheduler-name=ome-scheduler``."""
    with TrainingOperator(cluster) as op:
        yield op


@pytest.fixture(scope="module")
def lws_controller(cluster: Cluster) -> Iterator[LWSController]:
    """The LeaderWorkerSet controller (CRD and webhooks installed), stopped after the module."""
    with LWSController(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def ome_manager(cluster: Cluster, lws_controller: LWSController) -> Iterator[OMEManager]:
    """OME's controller-manager (CRDs and its ConfigMap installed), started after the LWS
    controller, whose CRD it probes for once at start; stopped after the module."""
    with OMEManager(cluster) as m:
        yield m


@pytest.fixture
def ns(api: Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted after it (invariants first if the module asks)."""
    name = unique("e2e")
    api.create_namespace(name)
    yield name
    if request.node.get_closest_marker("invariants_after_test") is not None:
        assert_invariants(api, name)
    api.delete_namespace(name, wait=60.0)
