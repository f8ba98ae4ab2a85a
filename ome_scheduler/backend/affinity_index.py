"""Label indexes over the cache's pods, so InterPodAffinity's PreFilter avoids walking every pod.

Upstream's PreFilter (``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go``)
checks every existing pod with required anti-affinity against the incoming pod, and the
incoming pod's own terms against every existing pod: per cycle, work in proportion to the
cluster's pods, which Go spreads over 16 goroutines. We answer the same questions from two
indexes kept up to date as pods are accounted:

* **pods by label**: ``(key, value) -> {pod key: node}`` for every accounted pod. A term whose
  selector requires ``key=value`` (a ``matchLabels`` entry, or ``In`` with one value) can only
  match pods in that bucket; the caller still checks each candidate in full.
* **anti-affinity terms by label**: every required anti-affinity term of an accounted pod is
  filed under one ``key=value`` its selector requires (the first, in the selector's order);
  a term with no such requirement is filed under "always check". An incoming pod with labels
  L can only be matched by terms filed under a pair of L, or under "always check".
* **pods with scoring terms**: pods with required affinity or preferred (anti-)affinity terms,
  the only existing pods that add to InterPodAffinity's score of a pod without terms of its
  own (required anti-affinity never scores); upstream walks every pod with any affinity.

The answers are candidate supersets; results are identical to the full walk.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ome_scheduler.framework.types import AffinityTerm, PodInfo
from ome_scheduler.util.labels import Selector

Pair = tuple[str, str]
TermKey = tuple[str, int]
"""(pod cache key, index of the term in the pod's required anti-affinity terms)."""


class AffinityIndex:
    """See the module docstring; all methods cost O(labels or terms of one pod)."""

    __slots__ = ("pods_by_label", "anti_terms_by_label", "anti_terms_unindexed", "scoring_pods")

    def __init__(self) -> None:
        self.pods_by_label: dict[Pair, dict[str, str]] = {}
        self.anti_terms_by_label: dict[Pair, dict[TermKey, tuple[AffinityTerm, str]]] = {}
        self.anti_terms_unindexed: dict[TermKey, tuple[AffinityTerm, str]] = {}
        self.scoring_pods: dict[str, tuple[PodInfo, str]] = {}

    def add(self, key: str, info: PodInfo, node: str) -> None:
        """Index an accounted pod (``key`` is its cache key) on ``node``."""
        for label in info.pod.metadata.labels.items():
            bucket = self.pods_by_label.get(label)
            if bucket is None:
                bucket = self.pods_by_label[label] = {}
            bucket[key] = node
        if info.required_affinity_terms or info.preferred_affinity_terms or info.preferred_anti_affinity_terms:
            self.scoring_pods[key] = (info, node)
        # One required pair is enough to file a term under: a pod lacking that label cannot
        # match the term, whatever its other requirements say.
        for i, t in enumerate(info.required_anti_affinity_terms):
            pair = t.selector.required_pair()
            if pair is None:
                self.anti_terms_unindexed[(key, i)] = (t, node)
            else:
                tb = self.anti_terms_by_label.get(pair)
                if tb is None:
                    tb = self.anti_terms_by_label[pair] = {}
                tb[(key, i)] = (t, node)

    def remove(self, key: str, info: PodInfo) -> None:
        """Drop a pod indexed by :meth:`add` with the same ``info``."""
        for label in info.pod.metadata.labels.items():
            bucket = self.pods_by_label.get(label)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self.pods_by_label[label]
        self.scoring_pods.pop(key, None)
        # required_pair() is deterministic, so each term is found under the pair add() used;
        # this is why remove() needs the same ``info`` that was added.
        for i, t in enumerate(info.required_anti_affinity_terms):
            pair = t.selector.required_pair()
            if pair is None:
                self.anti_terms_unindexed.pop((key, i), None)
            else:
                tb = self.anti_terms_by_label.get(pair)
                if tb is not None:
                    tb.pop((key, i), None)
                    if not tb:
                        del self.anti_terms_by_label[pair]

    def anti_terms_for(self, labels: Mapping[str, str]) -> Iterator[tuple[AffinityTerm, str]]:
        """Existing pods' required anti-affinity terms that may match a pod with ``labels``,
        each once, with the node of the pod that carries it."""
        yield from self.anti_terms_unindexed.values()
        by_label = self.anti_terms_by_label
        for pair in labels.items():
            tb = by_label.get(pair)
            if tb is not None:
                yield from tb.values()

    def pods_for(self, selector: Selector) -> Mapping[str, str] | None:
        """Pods (cache key -> node) that may match ``selector``; None when the selector
        requires no ``key=value`` and every pod is a candidate."""
        if selector.is_nothing():
            return {}
        pair = selector.required_pair()
        if pair is None:
            return None
        return self.pods_by_label.get(pair, {})
