"""pytest fixtures for the end-to-end tests: one real control plane per test session.

Run with ``.venv/bin/pytest e2e`` from the repository root (never under xdist). Set
``OME_CLUSTER_DIR`` to reuse a cluster started with ``python -m e2e.cluster up``; it is then left
running. Otherwise the fixture starts one and stops it at the end, keeping ``logs/`` when a test
failed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.cluster import Cluster
from e2e.helpers import Api


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A running local control plane with the PodGroup CRD and the 4 demo nodes Ready.

    Reuses the cluster in ``OME_CLUSTER_DIR`` (or the default state dir) if it answers; otherwise
    starts one (cold start takes about half a minute) and stops it after the session.
    """
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


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[Api]:
    """An API client for the test module (closed after it)."""
    a = Api(cluster)
    yield a
    a.close()
