"""Building one profile's framework: defaults merged, plugins built, each point's list ordered.

Lives here: :func:`merge_plugins` (``mergePlugins`` in ``pkg/scheduler/apis/config/v1/
default_plugins.go``: the profile's plugin sets over the defaults) and
:class:`FrameworkProfile`, whose constructor is the construction half of ``NewFramework`` and
``expandMultiPointPlugins`` in ``pkg/scheduler/framework/runtime/framework.go`` (v1.35.4):
it builds each enabled plugin once from the registry with its ``pluginConfig`` args, expands
``multiPoint`` into every extension point the plugin implements, checks the Score weights,
and creates the state the runtime keeps between cycles (waiting pods, equivalence tables).
``runtime.py``'s ``Framework`` derives from it and runs what it built.

Raises ConfigError with upstream's field paths when a plugin is unknown, registered twice at
one point, rejects its arguments, or is configured without being enabled.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.types import PluginRef, Plugins, PluginSet, Profile
from ome_scheduler.framework.equivalence import EquivalenceCache
from ome_scheduler.framework.interface import (
    BindPlugin,
    FilterPlugin,
    FrameworkOptions,
    Handle,
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
    SignPlugin,
)
from ome_scheduler.framework.scoring import Scorer
from ome_scheduler.framework.waiting_pods import WaitingPodsMap
from ome_scheduler.logs import get_logger

log = get_logger()

P = TypeVar("P", bound=Plugin)

POINTS: tuple[tuple[str, type[Plugin]], ...] = (
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
"""Every extension point a profile configures (camelCase) and the interface its plugins implement."""


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
    for camel, _ in POINTS:
        snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
        out[snake] = merge_plugin_set(default.point(camel), custom.point(camel))
    return Plugins(**out)


class FrameworkProfile:
    """One profile's plugins, each built once (by name), the ordered list at every point, and
    the runtime's state: ``NewFramework``'s construction. ``runtime.py``'s ``Framework`` is
    this plus the code that runs the lists.

    Raises ConfigError from the constructor: a plugin is unknown, registered twice at one point
    or rejects its arguments; a pluginConfig names a plugin not enabled; no or several
    QueueSort plugins, no Bind plugin, or a Score weight outside ``1..10000000``.
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
        """(extension point, code) -> its ``framework_extension_point_duration`` child."""
        plugins = merge_plugins(default_plugins.model_copy(deep=True), profile.plugins)
        args_by_name: dict[str, dict[str, Any] | None] = {}
        for i, pc in enumerate(profile.plugin_config):
            if pc.name in args_by_name:
                raise ConfigError(f"profiles[{profile_index}].pluginConfig[{i}]: Duplicate value: {pc.name!r}")
            args_by_name[pc.name] = pc.args
        needed: list[str] = []
        for p in plugins.multi_point.enabled:
            needed.append(p.name)
        for camel, _ in POINTS:
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
        """Score plugin name -> its weight (1 unless configured)."""
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
        for pl in self.score_plugins:
            w = self.score_weights.setdefault(pl.name, 1)
            if w <= 0 or w > 10_000_000:
                raise ConfigError(f"profiles[{profile_index}].plugins.score: Invalid value: {w}: weight of {pl.name}")
        self._token_plugins = [pl for pl in self.plugins.values() if type(pl).cache_token is not Plugin.cache_token]
        self.scorer = Scorer(self.score_plugins, self.score_weights)
        self.sign_plugins = self._batchable_plugins()
        """The plugins that sign pods (OpportunisticBatching), those that may refuse first; None
        when some PreFilter, Filter, PreScore or Score plugin cannot sign: the profile never
        batches and signs nothing."""

    def _batchable_plugins(self) -> list[SignPlugin] | None:
        """``computeBatchablePlugins``: every PreFilter, Filter, PreScore and Score plugin
        (each once), or None when one of them is no :class:`SignPlugin` (logged as upstream's
        ``Disabling signatures for profile because plugins do not support it.``, at V(2) rather
        than upstream's V(0), so the offline tools, which build the chart's profile, stay quiet)."""
        seen: dict[str, Plugin] = {}
        for pl in (*self.pre_filter_plugins, *self.filter_plugins, *self.pre_score_plugins, *self.score_plugins):
            seen.setdefault(pl.name, pl)
        unsupported = sorted(name for name, pl in seen.items() if not isinstance(pl, SignPlugin))
        if unsupported:
            log.info(
                "Disabling signatures for profile because plugins do not support it.",
                v=2,
                profile=self.profile_name,
                plugins=unsupported,
            )
            return None
        signers = [pl for pl in seen.values() if isinstance(pl, SignPlugin)]
        signers.sort(key=lambda pl: not pl.refuses_some)
        return signers

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
