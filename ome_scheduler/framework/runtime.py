"""The framework runtime: builds a profile's plugins and runs its extension points.

Mirrors ``pkg/scheduler/framework/runtime/framework.go`` (v1.35.4): multiPoint expansion and
ordering, PreFilter result merging (``node(s) didn't satisfy plugin ...``), Filter stopping
at the first rejecting plugin, PostFilter message collection, weighted Score sums, Reserve
and Unreserve (in reverse), Permit with waiting pods, and Bind trying plugins in order
until one does not Skip. It also defines :class:`FitError`, whose text is byte-for-byte
upstream's ``0/N nodes are available: ...``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import add
from typing import Any, TypeVar

from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.types import PluginRef, Plugins, PluginSet, Profile
from ome_scheduler.framework.equivalence import EquivalenceCache, ShapeTable
from ome_scheduler.framework.events import ClusterEvent, ClusterEventWithHint
from ome_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    BindPlugin,
    CycleState,
    FilterPlugin,
    FrameworkOptions,
    Handle,
    NodeToStatus,
    PermitPlugin,
    Plugin,
    PluginFactory,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.framework.waiting_pods import WaitingPod, WaitingPodsMap
from ome_scheduler.logs import get_logger

log = get_logger()

P = TypeVar("P", bound=Plugin)

_POINTS: tuple[tuple[str, type[Plugin]], ...] = (
    ("preEnqueue", PreEnqueuePlugin),
    ("queueSort", QueueSortPlugin),
    ("preFilter", PreFilterPlugin),
    ("filter", FilterPlugin),
    ("postFilter", PostFilterPlugin),
    ("preScore", PreScorePlugin),
    ("score", ScorePlugin),
    ("reserve", ReservePlugin),
    ("permit", PermitPlugin),
    ("preBind", PreBindPlugin),
    ("bind", BindPlugin),
    ("postBind", PostBindPlugin),
)


def merge_plugin_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """``mergePluginSet`` (``apis/config/v1/default_plugins.go``): custom settings over defaults.

    Disabled names (or ``*``) drop defaults; a custom entry for a default plugin replaces it
    in place; remaining custom entries are appended in their order.
    """
    disabled = {p.name for p in custom.disabled} | {p.name for p in default.disabled}
    disabled_list = [PluginRef(name=p.name) for p in custom.disabled] + [
        PluginRef(name=p.name) for p in default.disabled
    ]
    custom_enabled = {p.name: (i, p) for i, p in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled:
        for d in default.enabled:
            if d.name in disabled:
                continue
            if d.name in custom_enabled:
                i, c = custom_enabled[d.name]
                enabled.append(c)
                replaced.add(i)
            else:
                enabled.append(d)
    for i, c in enumerate(custom.enabled):
        if i not in replaced:
            enabled.append(c)
    return PluginSet(enabled=enabled, disabled=disabled_list)


def merge_plugins(default: Plugins, custom: Plugins | None) -> Plugins:
    """``mergePlugins``: merge every extension point's set."""
    if custom is None:
        return default
    out: dict[str, PluginSet] = {"multi_point": merge_plugin_set(default.multi_point, custom.multi_point)}
    for camel, _ in _POINTS:
        snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
        out[snake] = merge_plugin_set(default.point(camel), custom.point(camel))
    return Plugins(**out)


@dataclass
class Diagnosis:
    """``framework.Diagnosis``: why a pod did not fit."""

    node_to_status: NodeToStatus = field(default_factory=NodeToStatus)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""

    def add_plugin_status(self, s: Status) -> None:
        """Count ``s``'s plugin among the rejectors (Unschedulable) or the pending plugins (Pending)."""
        if not s.plugin:
            return
        if s.is_rejected():
            self.unschedulable_plugins.add(s.plugin)
        if s.code == Code.PENDING:
            self.pending_plugins.add(s.plugin)


class FitError(Exception):
    """``framework.FitError``: no node fits; ``str()`` is the FailedScheduling message."""

    def __init__(self, pod: PodInfo, num_all_nodes: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.pod = pod
        self.num_all_nodes = num_all_nodes
        self.diagnosis = diagnosis

    def __str__(self) -> str:
        d = self.diagnosis
        msg = f"0/{self.num_all_nodes} nodes are available:"
        if d.pre_filter_msg:
            msg += f" {d.pre_filter_msg}."
        else:
            reasons: dict[str, int] = {}
            for st in d.node_to_status.statuses.values():
                for r in st.reasons:
                    reasons[r] = reasons.get(r, 0) + 1
            n = len(d.node_to_status)
            if n < self.num_all_nodes:
                for r in d.node_to_status.absent.reasons:
                    reasons[r] = reasons.get(r, 0) + self.num_all_nodes - n
            hist = sorted(f"{v} {k}" for k, v in reasons.items())
            if hist:
                msg += " " + ", ".join(hist) + "."
        if d.post_filter_msg:
            msg += f" {d.post_filter_msg}"
        return msg


class Framework:
    """One profile's plugins, ordered per extension point, and the code that runs them.

    Raises ConfigError from the constructor when a plugin is unknown, registered twice at
    one point, or rejects its arguments.
    """

    def __init__(
        self,
        profile: Profile,
        default_plugins: Plugins,
        registry: dict[str, PluginFactory],
        handle: Handle,
        options: FrameworkOptions,
        profile_index: int = 0,
    ) -> None:
        self.profile_name = profile.scheduler_name
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score
        self.metrics = options.metrics
        self.handle = handle
        self.waiting_pods = WaitingPodsMap()
        self.fence = options.fence
        self.equivalence = EquivalenceCache()
        self._point_children: dict[tuple[str, str], Any] = {}
        plugins = merge_plugins(default_plugins.model_copy(deep=True), profile.plugins)
        args_by_name: dict[str, dict[str, Any] | None] = {}
        for i, pc in enumerate(profile.plugin_config):
            if pc.name in args_by_name:
                raise ConfigError(f"profiles[{profile_index}].pluginConfig[{i}]: Duplicate value: {pc.name!r}")
            args_by_name[pc.name] = pc.args
        needed: list[str] = []
        for p in plugins.multi_point.enabled:
            needed.append(p.name)
        for camel, _ in _POINTS:
            needed.extend(p.name for p in plugins.point(camel).enabled)
        self.plugins: dict[str, Plugin] = {}
        for name in needed:
            if name in self.plugins:
                continue
            factory = registry.get(name)
            if factory is None:
                raise ConfigError(
                    f'profiles[{profile_index}].plugins: Invalid value: "{name}": plugin "{name}" does not exist'
                )
            try:
                self.plugins[name] = factory(args_by_name.get(name), handle, options)
            except ConfigError as exc:
                raise ConfigError(f"profiles[{profile_index}].pluginConfig[{name}].args: {exc}") from exc
        for name in args_by_name:
            if name not in self.plugins:
                raise ConfigError(
                    f"profiles[{profile_index}].pluginConfig: Invalid value: {name!r}: "
                    "plugin config for a plugin that is not enabled"
                )
        self.score_weights: dict[str, int] = {}
        for p in plugins.multi_point.enabled:
            if p.weight:
                self.score_weights[p.name] = p.weight
        for p in plugins.score.enabled:
            if p.weight:
                self.score_weights[p.name] = p.weight
        self.pre_enqueue_plugins = self._expand("preEnqueue", PreEnqueuePlugin, plugins)
        qs = self._expand("queueSort", QueueSortPlugin, plugins)
        if len(qs) != 1:
            raise ConfigError(
                f"profiles[{profile_index}].plugins.queueSort: Invalid value: {len(qs)}: "
                "only one queue sort plugin required for profile"
            )
        self.queue_sort = qs[0]
        self.pre_filter_plugins = self._expand("preFilter", PreFilterPlugin, plugins)
        self.filter_plugins = self._expand("filter", FilterPlugin, plugins)
        self.post_filter_plugins = self._expand("postFilter", PostFilterPlugin, plugins)
        self.pre_score_plugins = self._expand("preScore", PreScorePlugin, plugins)
        self.score_plugins = self._expand("score", ScorePlugin, plugins)
        self.reserve_plugins = self._expand("reserve", ReservePlugin, plugins)
        self.permit_plugins = self._expand("permit", PermitPlugin, plugins)
        self.pre_bind_plugins = self._expand("preBind", PreBindPlugin, plugins)
        self.bind_plugins = self._expand("bind", BindPlugin, plugins)
        if not self.bind_plugins:
            raise ConfigError(
                f"profiles[{profile_index}].plugins.bind: Invalid value: at least one bind plugin is needed"
            )
        self.post_bind_plugins = self._expand("postBind", PostBindPlugin, plugins)
        self._token_plugins = [pl for pl in self.plugins.values() if type(pl).cache_token is not Plugin.cache_token]
        for pl in self.score_plugins:
            w = self.score_weights.setdefault(pl.name, 1)
            if w <= 0 or w > 10_000_000:
                raise ConfigError(f"profiles[{profile_index}].plugins.score: Invalid value: {w}: weight of {pl.name}")

    def _expand(self, camel: str, base: type[P], plugins: Plugins) -> list[P]:
        """``expandMultiPointPlugins`` for one extension point."""
        ps = plugins.point(camel)
        enabled = [p.name for p in ps.enabled]
        disabled = {p.name for p in ps.disabled}
        for n in enabled:
            if not isinstance(self.plugins[n], base):
                raise ConfigError(f"plugin {n!r} does not extend {camel} plugin")
        if "*" in disabled:
            return [self._as(n, base) for n in enabled]
        multi: list[str] = []
        overrides: list[str] = []
        for p in plugins.multi_point.enabled:
            pl = self.plugins[p.name]
            if not isinstance(pl, base) or p.name in disabled:
                continue
            if p.name in enabled:
                overrides.append(p.name)
                continue
            if p.name in multi:
                raise ConfigError(f"plugin {p.name!r} already registered as {camel!r}")
            multi.append(p.name)
        # expandMultiPointPlugins: overrides (in multiPoint order), multiPoint-only plugins, then the rest.
        order = overrides + multi + [n for n in enabled if n not in overrides]
        seen: list[str] = []
        for n in order:
            if n not in seen:
                seen.append(n)
        return [self._as(n, base) for n in seen]

    def _as(self, name: str, base: type[P]) -> P:
        pl = self.plugins[name]
        assert isinstance(pl, base)  # checked by _expand before
        return pl

    # ---- queueing -------------------------------------------------------------------

    def events_to_register(self) -> dict[ClusterEvent, list[tuple[str, ClusterEventWithHint[Any]]]]:
        """Every plugin's registered events, as the queue's queueing-hint map."""
        out: dict[ClusterEvent, list[tuple[str, ClusterEventWithHint[Any]]]] = {}
        for name, pl in self.plugins.items():
            if not isinstance(pl, PreEnqueuePlugin | PreFilterPlugin | FilterPlugin | ReservePlugin | PermitPlugin):
                continue
            for ev in pl.events_to_register():
                out.setdefault(ev.event, []).append((name, ev))
        return out

    def run_pre_enqueue(self, pod: PodInfo) -> Status | None:
        """``RunPreEnqueuePlugins``: the first gating plugin's status (with its name), or None.

        A plugin that raises gates the pod with an Error status, as upstream treats a PreEnqueue
        error (``Unexpected error running PreEnqueue plugin``); the pod is retried on the
        plugin's events like any gated pod.
        """
        for pl in self.pre_enqueue_plugins:
            try:
                s = pl.pre_enqueue(pod)
            except Exception as exc:
                log.error("Unexpected error running PreEnqueue plugin", plugin=pl.name, pod=pod.key, err=repr(exc))
                s = Status.as_error(exc)
            if s is not None and not s.is_success():
                return s.with_plugin(pl.name)
        return None

    # ---- scheduling cycle -----------------------------------------------------------

    def _observe(self, point: str, status: Status | None, start: float) -> None:
        code = "Success" if status is None else status.code.label()
        key = (point, code)
        child = self._point_children.get(key)
        if child is None:
            child = self._point_children[key] = self.metrics.framework_extension_point_duration.labels(
                point, code, self.profile_name
            )
        child.observe(time.perf_counter() - start)

    def _plugin_metric(self, state: CycleState, plugin: str, point: str, status: Status | None, start: float) -> None:
        if state.record_plugin_metrics:
            code = "Success" if status is None else status.code.label()
            self.metrics.plugin_execution_duration.labels(plugin, point, code).observe(time.perf_counter() - start)

    def run_pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None, set[str]]:
        """``RunPreFilterPlugins``: (node names or None for all, status, plugins that narrowed)."""
        start = time.perf_counter()
        result: set[str] | None = None
        with_nodes: set[str] = set()
        ret: Status | None = None
        try:
            for pl in self.pre_filter_plugins:
                t0 = time.perf_counter()
                try:
                    r, s = pl.pre_filter(state, pod, nodes)
                except Exception as exc:  # a plugin bug must not kill the loop
                    r, s = None, Status.as_error(exc)
                self._plugin_metric(state, pl.name, "PreFilter", s, t0)
                if s is not None and s.is_skip():
                    state.skip_filter_plugins.add(pl.name)
                    continue
                if s is not None and not s.is_success():
                    s.plugin = pl.name
                    if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                        ret = s
                        return None, s, set()
                    if s.code == Code.UNSCHEDULABLE:
                        ret = s
                        continue
                    ret = Status(Code.ERROR, f'running PreFilter plugin "{pl.name}": {s.message()}', plugin=pl.name)
                    return None, ret, set()
                if r is not None:
                    with_nodes.add(pl.name)
                    result = set(r) if result is None else result & r
                    if not result:
                        names = sorted(with_nodes)
                        msg = (
                            f"node(s) didn't satisfy plugin {names[0]}"
                            if len(names) == 1
                            else f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously"
                        )
                        ret = Status.unresolvable(msg)
                        return result, ret, with_nodes
            return result, ret, with_nodes
        finally:
            self._observe("PreFilter", ret, start)

    def run_filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``RunFilterPlugins``: the first rejecting plugin's status, or None."""
        skip = state.skip_filter_plugins
        for pl in self.filter_plugins:
            if skip and pl.name in skip:
                continue
            try:
                s = pl.filter(state, pod, node)
            except Exception as exc:
                s = Status.as_error(exc)
            if s is not None and not s.is_success():
                if not s.is_rejected():
                    s = Status(Code.ERROR, f'running "{pl.name}" filter plugin: {s.message()}', error=s.error)
                s.plugin = pl.name
                return s
        return None

    def run_post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status:
        """``RunPostFilterPlugins``: Unschedulable with every plugin's reasons unless one succeeds."""
        start = time.perf_counter()
        reasons: list[str] = []
        rejector = ""
        result: Status
        for pl in self.post_filter_plugins:
            try:
                s = pl.post_filter(state, pod, statuses)
            except Exception as exc:
                s = Status.as_error(exc)
            if s is None or s.is_success():
                result = s or Status(Code.SUCCESS)
                self._observe("PostFilter", result, start)
                return result
            if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                self._observe("PostFilter", s, start)
                return s.with_plugin(pl.name)
            if not s.is_rejected():
                result = Status(Code.ERROR, s.message(), plugin=pl.name)
                self._observe("PostFilter", result, start)
                return result
            reasons.extend(s.reasons)
            rejector = rejector or pl.name
        result = Status(Code.UNSCHEDULABLE, *reasons, plugin=rejector)
        self._observe("PostFilter", result, start)
        return result

    def has_score_plugins(self) -> bool:
        """Whether this profile scores at all (otherwise the first feasible node wins)."""
        return bool(self.score_plugins)

    def run_pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """``RunPreScorePlugins``: None, or an Error naming the failing plugin; Skip marks a plugin's Score skipped."""
        start = time.perf_counter()
        ret: Status | None = None
        for pl in self.pre_score_plugins:
            t0 = time.perf_counter()
            s = pl.pre_score(state, pod, nodes)
            self._plugin_metric(state, pl.name, "PreScore", s, t0)
            if s is not None and s.is_skip():
                state.skip_score_plugins.add(pl.name)
                continue
            if s is not None and not s.is_success():
                ret = Status(Code.ERROR, f'running PreScore plugin "{pl.name}": {s.message()}', plugin=pl.name)
                break
        self._observe("PreScore", ret, start)
        return ret

    def run_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """``RunScorePlugins``: per node, the sum over plugins of normalised score x weight.

        Raises:
            ValueError: a plugin returned a score outside ``0..100`` after normalising.
        """
        start = time.perf_counter()
        totals = [0] * len(nodes)
        skip = state.skip_score_plugins
        for pl in self.score_plugins:
            if pl.name in skip:
                continue
            t0 = time.perf_counter()
            scores = pl.score(state, pod, nodes)
            pl.normalize_score(state, pod, scores)
            self._plugin_metric(state, pl.name, "Score", None, t0)
            w = self.score_weights.get(pl.name, 1)
            for i, sc in enumerate(scores):
                if sc > MAX_NODE_SCORE or sc < 0:
                    raise ValueError(
                        f'plugin "{pl.name}" returns an invalid score {sc}, it should in the range of '
                        f"[0, {MAX_NODE_SCORE}] after normalizing"
                    )
                totals[i] += sc * w
        self._observe("Score", None, start)
        return totals

    def filters_node_local(self, state: CycleState) -> bool:
        """Whether every Filter plugin taking part in this cycle is node-local."""
        skip = state.skip_filter_plugins
        return all(pl.node_local_filter or pl.name in skip for pl in self.filter_plugins)

    def scores_node_local(self, state: CycleState) -> bool:
        """Whether every Score plugin taking part in this cycle is node-local."""
        skip = state.skip_score_plugins
        return all(pl.node_local_score or pl.name in skip for pl in self.score_plugins)

    def cache_version(self, state: CycleState, pod: PodInfo) -> tuple[Any, ...]:
        """The node-local plugins' state tokens for this cycle (``cache_token``, if any)."""
        return tuple(pl.cache_token(state, pod) for pl in self._token_plugins)

    def run_score_cached(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo], positions: Sequence[int], table: ShapeTable
    ) -> list[int]:
        """``run_score`` reusing scores kept in ``table`` (node-local plugins only).

        ``nodes[k]`` is ``table.nodes[positions[k]]``. Plugins that keep the default
        NormalizeScore contribute one kept weighted sum per node; the others keep raw scores,
        normalised over this cycle's nodes. Only nodes the table has no score for are scored.

        Raises:
            ValueError: a plugin returned a score outside ``0..100`` after normalising.
        """
        start = time.perf_counter()
        skip = state.skip_score_plugins
        active = [pl for pl in self.score_plugins if pl.name not in skip]
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
                    w = self.score_weights.get(pl.name, 1)
                    scores = pl.score(state, pod, sub)
                    self._check_scores(pl.name, scores)
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
                fresh = pl.score(state, pod, list(map(table.nodes.__getitem__, missing)))
                for i, v in zip(missing, fresh, strict=True):
                    raw_all[i] = v
                    raw_stale[i] = 0
            raw = list(map(raw_all.__getitem__, positions))
            pl.normalize_score(state, pod, raw)
            self._check_scores(name, raw)
            w = self.score_weights.get(name, 1)
            totals = list(map(add, totals, map(w.__mul__, raw)))
        self._observe("Score", None, start)
        return totals

    @classmethod
    def _check_scores(cls, name: str, scores: Sequence[int]) -> None:
        """Every score in [0, MAX_NODE_SCORE], checked at C speed, else :meth:`_check_score`'s error."""
        if scores and (max(scores) > MAX_NODE_SCORE or min(scores) < 0):
            for sc in scores:
                cls._check_score(name, sc)

    @staticmethod
    def _check_score(name: str, sc: int) -> None:
        if sc > MAX_NODE_SCORE or sc < 0:
            raise ValueError(
                f'plugin "{name}" returns an invalid score {sc}, it should in the range of [0, {MAX_NODE_SCORE}] '
                "after normalizing"
            )

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunReservePluginsReserve``: the first failing plugin's status (rejections keep their
        code, others become Error), or None."""
        start = time.perf_counter()
        ret: Status | None = None
        for pl in self.reserve_plugins:
            try:
                s = pl.reserve(state, pod, node)
            except Exception as exc:
                s = Status.as_error(exc)
            if s is not None and not s.is_success():
                if s.is_rejected():
                    ret = s.with_plugin(pl.name)
                else:
                    ret = Status(Code.ERROR, f'running Reserve plugin "{pl.name}": {s.message()}', plugin=pl.name)
                break
        self._observe("Reserve", ret, start)
        return ret

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """``RunReservePluginsUnreserve``: every reserve plugin, in reverse order."""
        start = time.perf_counter()
        for pl in reversed(self.reserve_plugins):
            # Unreserve cannot fail upstream; a plugin that raises must not keep the others from
            # releasing what they hold.
            try:
                pl.unreserve(state, pod, node)
            except Exception as exc:
                log.error("Unreserve plugin failed", plugin=pl.name, pod=pod.key, node=node, err=repr(exc))
        self._observe("Unreserve", None, start)

    def run_permit(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunPermitPlugins``: Wait parks the pod in :attr:`waiting_pods`."""
        start = time.perf_counter()
        waits: dict[str, float] = {}
        ret: Status | None = None
        for pl in self.permit_plugins:
            try:
                s, timeout = pl.permit(state, pod, node)
            except Exception as exc:
                s, timeout = Status.as_error(exc), 0.0
            if s is None or s.is_success():
                continue
            if s.is_rejected():
                ret = s.with_plugin(pl.name)
                self._observe("Permit", ret, start)
                return ret
            if s.is_wait():
                waits[pl.name] = timeout
            else:
                ret = Status(Code.ERROR, f'running Permit plugin "{pl.name}": {s.message()}', plugin=pl.name)
                self._observe("Permit", ret, start)
                return ret
        if waits:
            self.waiting_pods.add(WaitingPod(pod, node, waits))
            ret = Status(Code.WAIT, f'one or more plugins asked to wait and no plugin rejected pod "{pod.name}"')
        self._observe("Permit", ret, start)
        return ret

    async def wait_on_permit(self, pod: PodInfo) -> Status | None:
        """``WaitOnPermit``: block until the waiting pod is allowed or rejected.

        An allowed pod is released to its binding cycle only through the fence
        (``framework/fence.py``): on a leader whose lease may have passed to another, the wait
        ends with an Error status instead, and the pod is unreserved and requeued.
        """
        wp = self.waiting_pods.get(pod.pod_key)
        if wp is None:
            return None
        start = time.perf_counter()
        try:
            s = await wp.wait()
        finally:
            self.waiting_pods.remove(pod.pod_key)
        if s is None and self.fence is not None and (why := self.fence.reason()) is not None:
            log.error("Permit allowed a pod on a fenced leader; not binding it", pod=pod.key, reason=why)
            s = Status(Code.ERROR, f"not released from Permit: fenced: {why}")
        code = "Success" if s is None else s.code.label()
        self.metrics.permit_wait_duration.labels(code).observe(time.perf_counter() - start)
        return s

    def iterate_waiting_pods(self) -> Iterable[WaitingPod]:
        """Pods of this profile waiting at Permit."""
        return self.waiting_pods.values()

    # ---- binding cycle --------------------------------------------------------------

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunPreBindPlugins``: the first failing plugin's status, or None (Skip continues)."""
        start = time.perf_counter()
        ret: Status | None = None
        for pl in self.pre_bind_plugins:
            s = await pl.pre_bind(state, pod, node)
            if s is not None and s.is_skip():
                continue
            if s is not None and not s.is_success():
                ret = s.with_plugin(pl.name)
                break
        self._observe("PreBind", ret, start)
        return ret

    async def run_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunBindPlugins``: plugins in order until one does not Skip; its status (None: bound)."""
        start = time.perf_counter()
        ret: Status | None = Status(Code.SKIP)
        for pl in self.bind_plugins:
            s = await pl.bind(state, pod, node)
            if s is not None and s.is_skip():
                continue
            ret = s.with_plugin(pl.name) if s is not None else None
            break
        self._observe("Bind", ret, start)
        return ret

    def run_post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """``RunPostBindPlugins``: every plugin, in order."""
        start = time.perf_counter()
        for pl in self.post_bind_plugins:
            pl.post_bind(state, pod, node)
        self._observe("PostBind", None, start)
