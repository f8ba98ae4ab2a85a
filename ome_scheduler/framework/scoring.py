"""Running the Score plugins: per node, the weighted sum of every plugin's normalised score.

Lives here: :class:`Scorer`, whose :meth:`~Scorer.score` is the Score, NormalizeScore, range
check and weights of ``RunScorePlugins`` in ``pkg/scheduler/framework/runtime/framework.go``
(v1.35.4), and whose :meth:`~Scorer.score_cached` makes the same sums reusing the scores an
equivalence :class:`~ome_scheduler.framework.equivalence.ShapeTable` keeps for node-local
plugins (no upstream counterpart). ``runtime.py``'s ``Framework.run_score`` and
``run_score_cached`` call them and observe the extension point.

A plugin that raises is that plugin's Error status (the rule in ``runtime.py``'s docstring):
both methods then return it instead of the totals, with upstream's messages,
``running Score plugins: plugin "X" failed with: ...`` for Score and
``running Normalize on Score plugins: plugin "X" failed with: ...`` for NormalizeScore; the
cycle fails with that Error and the pod is retried after backoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import compress
from operator import add

from ome_scheduler.framework.equivalence import ShapeTable
from ome_scheduler.framework.interface import MAX_NODE_SCORE, CycleState, ScorePlugin
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo

PluginMetric = Callable[[CycleState, str, str, Status | None, float], None]
"""Observes one plugin's duration: (state, plugin, extension point, status, start)."""


def score_failed(name: str, exc: Exception) -> Status:
    """``running Score plugins: plugin "X" failed with: ...``: a Score plugin raised."""
    return Status(Code.ERROR, f'running Score plugins: plugin "{name}" failed with: {exc}', plugin=name, error=exc)


def normalize_failed(name: str, exc: Exception) -> Status:
    """``running Normalize on Score plugins: plugin "X" failed with: ...``: NormalizeScore raised."""
    msg = f'running Normalize on Score plugins: plugin "{name}" failed with: {exc}'
    return Status(Code.ERROR, msg, plugin=name, error=exc)


class Scorer:
    """One profile's Score plugins (in order) and their weights."""

    def __init__(self, plugins: Sequence[ScorePlugin], weights: dict[str, int]) -> None:
        self.plugins = plugins
        self.weights = weights
        """Plugin name -> weight (shared with the framework, which set them)."""

    def score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo], metric: PluginMetric
    ) -> list[int] | Status:
        """Per node, the sum over the plugins not skipped of normalised score x weight, or the
        Error of the first plugin that raised.

        Raises:
            ValueError: a plugin returned a score outside ``0..100`` after normalising.
        """
        totals = [0] * len(nodes)
        skip = state.skip_score_plugins
        for pl in self.plugins:
            if pl.name in skip:
                continue
            t0 = time.perf_counter()
            try:
                scores = pl.score(state, pod, nodes)
            except Exception as exc:
                return score_failed(pl.name, exc)
            try:
                pl.normalize_score(state, pod, scores)
            except Exception as exc:
                return normalize_failed(pl.name, exc)
            metric(state, pl.name, "Score", None, t0)
            w = self.weights.get(pl.name, 1)
            for i, sc in enumerate(scores):
                if sc > MAX_NODE_SCORE or sc < 0:
                    raise ValueError(
                        f'plugin "{pl.name}" returns an invalid score {sc}, it should in the range of '
                        f"[0, {MAX_NODE_SCORE}] after normalizing"
                    )
                totals[i] += sc * w
        return totals

    def score_cached(
        self, state: CycleState, pod: PodInfo, positions: Sequence[int], table: ShapeTable
    ) -> list[int] | Status:
        """:meth:`score` reusing scores kept in ``table`` (node-local plugins only).

        The cycle's nodes are ``table.nodes[positions[k]]``. Plugins that keep the default
        NormalizeScore contribute one kept weighted sum per node; the others keep raw scores,
        normalised over this cycle's nodes. Only nodes the table has no score for are scored.

        Raises:
            ValueError: a plugin returned a score outside ``0..100`` after normalising.
        """
        skip = state.skip_score_plugins
        active = [pl for pl in self.plugins if pl.name not in skip]
        plain = [pl for pl in active if type(pl).normalize_score is ScorePlugin.normalize_score]
        normed = [pl for pl in active if type(pl).normalize_score is not ScorePlugin.normalize_score]
        if plain:
            table.set_plain_key(tuple(pl.name for pl in plain))
            sums = table.plain
            stale = table.plain_stale
            missing = list(compress(positions, map(stale.__getitem__, positions)))
            if missing:
                sub = list(map(table.nodes.__getitem__, missing))
                part = [0] * len(sub)
                for pl in plain:
                    w = self.weights.get(pl.name, 1)
                    try:
                        scores = pl.score(state, pod, sub)
                    except Exception as exc:
                        return score_failed(pl.name, exc)
                    check_scores(pl.name, scores)
                    part = list(map(add, part, map(w.__mul__, scores)))
                for i, v in zip(missing, part, strict=True):
                    sums[i] = v
                    stale[i] = 0
            totals = list(map(sums.__getitem__, positions))
        else:
            totals = [0] * len(positions)
        for pl in normed:
            name = pl.name
            raw_all, raw_stale = table.raw_of(name)
            missing = list(compress(positions, map(raw_stale.__getitem__, positions)))
            if missing:
                try:
                    fresh = pl.score(state, pod, list(map(table.nodes.__getitem__, missing)))
                except Exception as exc:
                    return score_failed(name, exc)
                for i, v in zip(missing, fresh, strict=True):
                    raw_all[i] = v
                    raw_stale[i] = 0
            raw = list(map(raw_all.__getitem__, positions))
            try:
                pl.normalize_score(state, pod, raw)
            except Exception as exc:
                return normalize_failed(name, exc)
            check_scores(name, raw)
            w = self.weights.get(name, 1)
            totals = list(map(add, totals, map(w.__mul__, raw)))
        return totals


def check_scores(name: str, scores: Sequence[int]) -> None:
    """Every score in [0, MAX_NODE_SCORE], checked at C speed.

    Raises:
        ValueError: upstream's ``plugin "X" returns an invalid score ...`` for the first one out.
    """
    if scores and (max(scores) > MAX_NODE_SCORE or min(scores) < 0):
        for sc in scores:
            if sc > MAX_NODE_SCORE or sc < 0:
                raise ValueError(
                    f'plugin "{name}" returns an invalid score {sc}, it should in the range of [0, {MAX_NODE_SCORE}] '
                    "after normalizing"
                )
