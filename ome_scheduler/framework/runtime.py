"""The framework runtime: runs a profile's plugins at each extension point.

Mirrors ``pkg/scheduler/framework/runtime/framework.go`` (v1.35.4): PreFilter result merging
(``node(s) didn't satisfy plugin ...``), Filter stopping at the first rejecting plugin,
PostFilter message collection, weighted Score sums (``scoring.py``), Reserve and Unreserve (in
reverse), Permit with waiting pods, and Bind trying plugins in order until one does not Skip.
The plugins themselves are built, expanded from ``multiPoint`` and weighed in ``profile.py``.
It also defines :class:`FitError`, whose text is byte-for-byte upstream's
``0/N nodes are available: ...``.

One rule for plugin exceptions, at every extension point: **an exception raised by a plugin is
that plugin's Error status** (``Status.as_error(exc)``, attributed to the plugin), and the
extension point then proceeds exactly as upstream proceeds for an Error status there, with
upstream's wrapping message:

* PreEnqueue: the pod is gated by that plugin (logged ``Unexpected error running PreEnqueue
  plugin``) and retried on its events, like any gated pod.
* PreFilter: ``running PreFilter plugin "X": ...``; Filter: ``running "X" filter plugin: ...``;
  PreScore: ``running PreScore plugin "X": ...``; Score: ``running Score plugins: plugin "X"
  failed with: ...``; NormalizeScore: ``running Normalize on Score plugins: plugin "X" failed
  with: ...``. The first such Error ends the point (no later plugin runs) and fails the
  scheduling cycle with Error: ``FailedScheduling``, ``PodScheduled=False`` reason
  ``SchedulerError``, a retry after backoff.
* PreFilter extensions (preemption, nominated pods): ``running AddPod on PreFilter plugin "X":
  ...`` / ``running RemovePod on PreFilter plugin "X": ...`` ends the point; the node is then
  no preemption candidate (or Filter fails there) with that Error.
* PostFilter: the Error (its text unwrapped) ends the point; the pod still fails as
  Unschedulable with that text as the PostFilter message, as upstream's ``schedulingCycle``.
* Reserve: ``running Reserve plugin "X": ...``; Permit: ``running Permit plugin "X": ...``.
  The point stops there; every Reserve plugin is unreserved and the pod retried with backoff.
* PreBindPreFlight: ``running PreBindPreFlight "X": ...``; PreBind: ``running PreBind plugin
  "X": ...``; Bind: ``running Bind plugin "X": ...``. The binding cycle fails: the pod is
  unreserved, forgotten and requeued.
* Unreserve and PostBind cannot fail upstream: the exception is logged and the other plugins
  still run.

Upstream plugins do not raise; a Go panic there is not recovered into a status (the
parallelizer's ``HandleCrashWithContext`` re-panics, ``ReallyCrash`` is true), so it ends the
process. Here one plugin's bug costs the pod's attempt, not the scheduler. Returned statuses
keep today's handling (a PreBind or Bind plugin's own Error status keeps its message).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ome_scheduler.framework.batch import OpportunisticBatch
from ome_scheduler.framework.equivalence import ShapeTable
from ome_scheduler.framework.events import ClusterEvent, ClusterEventWithHint
from ome_scheduler.framework.interface import (
    CycleState,
    FilterPlugin,
    NodeToStatus,
    PermitPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    ReservePlugin,
)
from ome_scheduler.framework.profile import FrameworkProfile
from ome_scheduler.framework.signers import PodSigner
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.framework.waiting_pods import WaitingPod
from ome_scheduler.logs import get_logger

log = get_logger()


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


class Framework(FrameworkProfile):
    """One profile's plugins, ordered per extension point (built by :class:`FrameworkProfile`:
    ``Framework(profile, default_plugins, registry, handle, options, profile_index)``), and
    the code that runs them.

    Raises ConfigError from the constructor when a plugin is unknown, registered twice at
    one point, or rejects its arguments.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch: OpportunisticBatch | None = None
        """OpportunisticBatching's kept ranking (``batch.py``); None when the profile cannot
        sign (``sign_plugins`` is None), and then nothing is signed or kept."""
        self.signer: PodSigner | None = None
        if self.sign_plugins is not None:
            self.signer = PodSigner(self.sign_plugins, self._plugin_metric, self._observe)
            self.batch = OpportunisticBatch(
                self.profile_name, self.metrics, self.signer.sign, self.run_filter, self.handle.get_node_info
            )

    def sign_pod(self, state: CycleState, pod: PodInfo) -> bytes | None:
        """``SignPod`` (``signers.PodSigner.sign``); None when the profile cannot sign."""
        return self.signer.sign(state, pod) if self.signer is not None else None

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

    def run_filter_with_nominated_pods(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``RunFilterPluginsWithNominatedPods``: Filter on ``node`` with the pods nominated to it
        of equal or higher priority counted (a copy of the node and the state), then, when some
        were added and it passed, once more without them (for affinity to a nominated pod that
        may never come). Raises nothing: an AddPod Error is returned as the status."""
        added, state2, node2, err = self._add_nominated_pods(state, pod, node)
        if err is not None:
            return err
        st = self.run_filter(state2, pod, node2)
        if not added or st is not None:
            return st
        return self.run_filter(state, pod, node)

    def _add_nominated_pods(
        self, state: CycleState, pod: PodInfo, node: NodeInfo
    ) -> tuple[bool, CycleState, NodeInfo, Status | None]:
        """``addGENominatedPods``: (added any, state, node, AddPod error) with the nominated pods
        of priority >= ``pod``'s (not ``pod`` itself) on a snapshot of ``node``."""
        nominated = self.handle.nominated_pods_for_node(node.name)
        if not nominated:
            return False, state, node, None
        node_out: NodeInfo | None = None
        state_out = state
        for pi in nominated:
            if pi.priority >= pod.priority and pi.uid != pod.uid:
                if node_out is None:
                    node_out, state_out = node.snapshot(), state.clone()
                node_out.add_pod(pi)
                st = self.run_pre_filter_extension_add_pod(state_out, pod, pi, node_out)
                if st is not None:
                    return False, state, node, st
        if node_out is None:
            return False, state, node, None
        return True, state_out, node_out, None

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo
    ) -> Status | None:
        """``RunPreFilterExtensionAddPod``: every PreFilter plugin with extensions that took part
        in this cycle; the first failure as ``running AddPod on PreFilter plugin "X": ...``."""
        return self._run_extension(state, pod, to_add, node, add=True)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo
    ) -> Status | None:
        """``RunPreFilterExtensionRemovePod``: as :meth:`run_pre_filter_extension_add_pod`
        (``running RemovePod on PreFilter plugin "X": ...``)."""
        return self._run_extension(state, pod, to_remove, node, add=False)

    def _run_extension(
        self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, *, add: bool
    ) -> Status | None:
        skip = state.skip_filter_plugins
        for pl in self.pre_filter_plugins:
            if not isinstance(pl, PreFilterExtensions) or pl.name in skip:
                continue
            try:
                s = pl.add_pod(state, pod, other, node) if add else pl.remove_pod(state, pod, other, node)
            except Exception as exc:
                s = Status.as_error(exc)
            if s is not None and not s.is_success():
                what = "AddPod" if add else "RemovePod"
                return Status(
                    Code.ERROR, f'running {what} on PreFilter plugin "{pl.name}": {s.message()}', plugin=pl.name
                )
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
            try:
                s = pl.pre_score(state, pod, nodes)
            except Exception as exc:
                s = Status.as_error(exc)
            self._plugin_metric(state, pl.name, "PreScore", s, t0)
            if s is not None and s.is_skip():
                state.skip_score_plugins.add(pl.name)
                continue
            if s is not None and not s.is_success():
                ret = Status(Code.ERROR, f'running PreScore plugin "{pl.name}": {s.message()}', plugin=pl.name)
                break
        self._observe("PreScore", ret, start)
        return ret

    def run_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int] | Status:
        """``RunScorePlugins``: per node, the sum over plugins of normalised score x weight, or
        the Error of a Score or NormalizeScore plugin that raised (``scoring.py``).

        Raises:
            ValueError: a plugin returned a score outside ``0..100`` after normalising.
        """
        start = time.perf_counter()
        out = self.scorer.score(state, pod, nodes, self._plugin_metric)
        self._observe("Score", out if isinstance(out, Status) else None, start)
        return out

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
    ) -> list[int] | Status:
        """``run_score`` reusing scores kept in ``table`` (node-local plugins only; ``nodes[k]``
        is ``table.nodes[positions[k]]``; see ``scoring.Scorer.score_cached``).

        Raises:
            ValueError: a plugin returned a score outside ``0..100`` after normalising.
        """
        start = time.perf_counter()
        out = self.scorer.score_cached(state, pod, positions, table)
        self._observe("Score", out if isinstance(out, Status) else None, start)
        return out

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

    def run_pre_bind_pre_flights(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunPreBindPreFlights``: None (Success) when some PreBind plugin has work for ``pod``
        on ``node``, Skip when none has (those plugins go to ``state.skip_pre_bind_plugins``,
        which PreBind skips), else an Error (:func:`_pre_flight_error`)."""
        start = time.perf_counter()
        ret: Status | None = Status(Code.SKIP)
        skip: set[str] = set()
        for pl in self.pre_bind_plugins:
            t0 = time.perf_counter()
            try:
                s = pl.pre_bind_pre_flight(state, pod, node)
            except Exception as exc:
                s = Status.as_error(exc)
            self._plugin_metric(state, pl.name, "PreBindPreFlight", s, t0)
            if s is None or s.is_success():
                ret = None
            elif s.is_skip():
                skip.add(pl.name)
            else:
                ret = _pre_flight_error(pl.name, pod, node, s)
                break
        else:
            state.skip_pre_bind_plugins = skip
        self._observe("PreBindPreFlight", ret, start)
        return ret

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunPreBindPlugins``: the first failing plugin's status, or None (Skip continues).
        Plugins whose PreBindPreFlight returned Skip are not run."""
        start = time.perf_counter()
        ret: Status | None = None
        skip = state.skip_pre_bind_plugins
        for pl in self.pre_bind_plugins:
            if skip and pl.name in skip:
                continue
            s = await _guarded(pl.pre_bind(state, pod, node), pl.name)
            if s is not None and s.is_skip():
                continue
            if s is not None and not s.is_success():
                ret = _wrapped(s, f'running PreBind plugin "{pl.name}"', pl.name)
                break
        self._observe("PreBind", ret, start)
        return ret

    async def run_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``RunBindPlugins``: plugins in order until one does not Skip; its status (None: bound)."""
        start = time.perf_counter()
        ret: Status | None = Status(Code.SKIP)
        for pl in self.bind_plugins:
            s = await _guarded(pl.bind(state, pod, node), pl.name)
            if s is not None and s.is_skip():
                continue
            ret = _wrapped(s, f'running Bind plugin "{pl.name}"', pl.name) if s is not None else None
            break
        self._observe("Bind", ret, start)
        return ret

    def run_post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """``RunPostBindPlugins``: every plugin, in order."""
        start = time.perf_counter()
        for pl in self.post_bind_plugins:
            # PostBind cannot fail upstream; a plugin that raises must not keep the others from
            # running, nor fail a pod that is bound already.
            try:
                pl.post_bind(state, pod, node)
            except Exception as exc:
                log.error("PostBind plugin failed", plugin=pl.name, pod=pod.key, node=node, err=repr(exc), exc_info=exc)
        self._observe("PostBind", None, start)


def _pre_flight_error(plugin: str, pod: PodInfo, node: str, s: Status) -> Status:
    """A PreBindPreFlight that neither succeeded nor skipped: an Error as
    ``running PreBindPreFlight "X": ...``, any other code as ``PreBindPreFlight X returned "C",
    which is unsupported. ...`` (Unschedulable included: it is no answer there)."""
    if s.code == Code.ERROR:
        log.error("Plugin failed", plugin=plugin, pod=pod.key, node=node, err=s.message())
        return Status(Code.ERROR, f'running PreBindPreFlight "{plugin}": {s.message()}', plugin=plugin)
    msg = (
        f'PreBindPreFlight {plugin} returned "{s.code.label()}", which is unsupported. '
        "It is supposed to return Success, Skip, or Error status"
    )
    return Status(Code.ERROR, msg, plugin=plugin)


def _wrapped(s: Status, what: str, plugin: str) -> Status:
    """A failed PreBind or Bind status as ``RunPreBindPlugins``/``RunBindPlugins`` return it
    (``pkg/scheduler/framework/runtime/framework.go``, v1.35.4): a rejection keeps its message
    with the plugin set; any other failure (an exception :func:`_guarded` caught included)
    becomes an Error ``what: <its message>``."""
    if s.is_rejected() or s.is_success():
        return s.with_plugin(plugin)
    return Status(Code.ERROR, f"{what}: {s.message()}", plugin=plugin, error=s.error)


async def _guarded(call: Awaitable[Status | None], plugin: str) -> Status | None:
    """Await a PreBind or Bind plugin: an exception is its Error status (:func:`_wrapped` then
    wraps it like any other Error)."""
    try:
        return await call
    except Exception as exc:
        return Status(Code.ERROR, str(exc), plugin=plugin, error=exc)
