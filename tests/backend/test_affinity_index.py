"""The cache's AffinityIndex answers InterPodAffinity's questions like a walk over every pod."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from ome_scheduler.api.meta import LabelSelector
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.util.labels import Selector
from tests.support.builders import make_node, make_pod

KEYS = ("app", "tier", "team")
VALUES = ("a", "b", "c")


def _selector(rng: random.Random) -> dict[str, Any]:
    kind = rng.randrange(4)
    if kind == 0:
        return {"matchLabels": {rng.choice(KEYS): rng.choice(VALUES)}}
    if kind == 1:
        return {"matchExpressions": [{"key": rng.choice(KEYS), "operator": "In", "values": [rng.choice(VALUES)]}]}
    if kind == 2:
        return {"matchExpressions": [{"key": rng.choice(KEYS), "operator": "Exists"}]}
    return {
        "matchLabels": {rng.choice(KEYS): rng.choice(VALUES)},
        "matchExpressions": [{"key": rng.choice(KEYS), "operator": "NotIn", "values": ["c"]}],
    }


def _pod(rng: random.Random, i: int, node: str) -> PodInfo:
    labels = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.6}
    spec: dict[str, Any] = {}
    if rng.random() < 0.5:
        terms = [
            {"labelSelector": _selector(rng), "topologyKey": "kubernetes.io/hostname"} for _ in range(rng.randint(1, 2))
        ]
        spec = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}}
    return PodInfo(make_pod(f"p{i}", labels=labels, spec=spec, node_name=node))


def test_index_candidates_cover_every_match_through_adds_and_removes() -> None:
    rng = random.Random(7)
    cache = SchedulerCache()
    for n in range(6):
        cache.add_or_update_node(make_node(f"n{n}"))
    live: dict[str, PodInfo] = {}
    for step in range(400):
        if live and rng.random() < 0.35:
            key = rng.choice(sorted(live))
            cache.remove_pod(key)
            del live[key]
        else:
            pi = _pod(rng, step, f"n{rng.randrange(6)}")
            cache.add_pod(pi)
            live[pi.uid] = pi
        probe = _pod(rng, 10_000 + step, "")
        labels = probe.pod.metadata.labels
        # existing pods' anti-affinity terms that match the probe, found by brute force
        want = {
            (k, i)
            for k, p in live.items()
            for i, t in enumerate(p.required_anti_affinity_terms)
            if t.selector.matches(labels)
        }
        got = {
            (k, i)
            for k, p in live.items()
            for i, t in enumerate(p.required_anti_affinity_terms)
            if any(t is c for c, _ in cache.affinity_index.anti_terms_for(labels))
        }
        assert want <= got
        sel = Selector.from_label_selector(msgspec_selector(_selector(rng)))
        cands = cache.affinity_index.pods_for(sel)
        matching = {k for k, p in live.items() if sel.matches(p.pod.metadata.labels)}
        if cands is None:
            assert sel.required_pair() is None
        else:
            assert matching <= set(cands)
            assert all(cands[k] == live[k].pod.spec.node_name for k in matching)
    for key in list(live):
        cache.remove_pod(key)
    idx = cache.affinity_index
    assert not idx.pods_by_label and not idx.anti_terms_by_label and not idx.anti_terms_unindexed


def msgspec_selector(raw: dict[str, Any]) -> LabelSelector:
    return msgspec.convert(raw, LabelSelector)
