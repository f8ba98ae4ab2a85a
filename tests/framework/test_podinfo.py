"""PodInfo's derived data: the parsed-request cache and reuse over a newer version of a pod."""

from __future__ import annotations

import msgspec
import pytest

from ome_scheduler.framework import types
from ome_scheduler.framework.types import PodInfo, pod_requests
from ome_scheduler.plugins.helper import default_normalize_score
from ome_scheduler.util.quantity import QuantityError
from tests.support.builders import make_pod


def test_parsed_request_lists_are_shared_but_never_mutated_through() -> None:
    pod = make_pod("a", requests={"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "1"})
    first = pod_requests(pod, {"cpu": 100, "memory": 200, "ephemeral-storage": 7})
    assert first == {"cpu": 1500, "memory": 1 << 30, "nvidia.com/gpu": 1, "ephemeral-storage": 7}
    # The defaults added to the first result must not leak into the cached parse.
    assert pod_requests(pod) == {"cpu": 1500, "memory": 1 << 30, "nvidia.com/gpu": 1}


def test_a_bad_quantity_is_raised_every_time_and_not_cached() -> None:
    pod = make_pod("bad", requests={"cpu": "lots"})
    for _ in range(2):
        with pytest.raises(QuantityError):
            pod_requests(pod)


def test_the_parse_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(types, "PARSED_LISTS_MAX", 3)
    monkeypatch.setattr(types, "_PARSED_LISTS", {})
    for i in range(10):
        assert pod_requests(make_pod(f"p{i}", requests={"cpu": f"{i + 1}"})) == {"cpu": 1000 * (i + 1)}
        assert len(types._PARSED_LISTS) <= 3


def test_rebase_over_the_bound_pod_shares_derived_data() -> None:
    pending = make_pod(
        "a", gang="g", requests={"cpu": "2", "nvidia.com/gpu": "1"}, anti_affinity_on="kubernetes.io/hostname"
    )
    assumed = PodInfo(pending).with_node("n1")
    bound = msgspec.structs.replace(
        pending,
        spec=msgspec.structs.replace(pending.spec, node_name="n1"),
        metadata=msgspec.structs.replace(pending.metadata, resource_version="99"),
    )
    pi = assumed.rebase(bound)
    assert pi is not None and pi.pod is bound
    fresh = PodInfo(bound)
    assert pi.required_anti_affinity_terms is assumed.required_anti_affinity_terms  # shared, not rebuilt
    for a, b in zip(pi.required_anti_affinity_terms, fresh.required_anti_affinity_terms, strict=True):
        assert (a.namespaces, a.topology_key, a.weight) == (b.namespaces, b.topology_key, b.weight)
    assert repr(pi.requests) == repr(fresh.requests)  # Resource has no __eq__
    for slot in ("key", "pod_key", "gang", "gang_key", "priority", "non0_cpu", "non0_mem", "host_ports", "parse_error"):
        assert getattr(pi, slot) == getattr(fresh, slot), slot
    assert pi.shape == fresh.shape


@pytest.mark.parametrize(
    "change",
    [
        {"spec": {"nodeName": "n2"}},  # bound elsewhere (by someone else)
        {"labels": {"app": "other"}},  # relabelled: the gang and affinity matches may differ
        {"requests": {"cpu": "3"}},  # resized
        {"uid": "other-uid"},  # deleted and re-created under the same name
    ],
)
def test_rebase_refuses_when_derived_data_could_differ(change: dict[str, dict[str, str] | str]) -> None:
    pending = make_pod("a", requests={"cpu": "2"})
    assumed = PodInfo(pending).with_node("n1")
    node = "n1"
    spec = pending.spec
    md = pending.metadata
    if "spec" in change:
        node = "n2"
    if "labels" in change:
        md = msgspec.structs.replace(md, labels=dict(change["labels"]))  # type: ignore[arg-type]
    if "uid" in change:
        md = msgspec.structs.replace(md, uid=str(change["uid"]))
    if "requests" in change:
        spec = make_pod("a", requests=change["requests"]).spec  # type: ignore[arg-type]
    bound = msgspec.structs.replace(pending, metadata=md, spec=msgspec.structs.replace(spec, node_name=node))
    assert assumed.rebase(bound) is None


@pytest.mark.parametrize("scores", [[0, 0, 0], [0, 3, 7, 7], [100, 50, 0], [5], [], [0, 200, 199]])
@pytest.mark.parametrize("reverse", [False, True])
def test_default_normalize_score_matches_upstream_arithmetic(scores: list[int], reverse: bool) -> None:
    # helper.DefaultNormalizeScore, element by element as upstream writes it.
    m = max(scores, default=0)
    want = [(100 if reverse else 0) if m == 0 else (100 - 100 * s // m if reverse else 100 * s // m) for s in scores]
    got = list(scores)
    default_normalize_score(got, reverse)
    assert got == want
