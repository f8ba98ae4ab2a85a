"""``simulate --add`` workload expansion refuses counts it cannot hold (found by a new user:
``replicas: 1000000000`` used all the memory)."""

from __future__ import annotations

import pytest

from ome_scheduler.tools.workloads import MAX_COUNT, WorkloadError, expand


def deployment(replicas: int) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "big", "namespace": "ns"},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"labels": {"app": "big"}}, "spec": {"containers": [{"name": "c"}]}},
        },
    }


def test_a_count_over_the_bound_is_an_error_naming_the_field() -> None:
    msg = r"^add\.yaml: Deployment ns/big: spec\.replicas: Invalid value: 1000000000: simulate expands at most"
    with pytest.raises(WorkloadError, match=msg):
        expand(deployment(1_000_000_000), "add.yaml")


def test_a_count_at_the_bound_is_expanded() -> None:
    got = expand(deployment(3), "add.yaml")
    assert got is not None
    assert MAX_COUNT == 100_000
