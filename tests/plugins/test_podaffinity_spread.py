"""InterPodAffinity and PodTopologySpread through the chart's profile."""

from __future__ import annotations

from typing import Any

import pytest

from ome_scheduler.config.pluginargs import PodTopologySpreadArgs
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.podtopologyspread import PodTopologySpread
from tests.support.fakes import FakeHandle
from tests.support.plugins_env import Env, chart_config, node, pod

DRA = " no new claims to deallocate"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def zones_env(*spec: tuple[str, str | None]) -> Env:
    env = Env()
    env.add_namespace("default", {"team": "a"})
    env.add_namespace("other", {"team": "b"})
    for name, zone in spec:
        env.add_node(node(name, {ZONE: zone} if zone else {}))
    return env


def term(sel: dict[str, Any], key: str = ZONE, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": sel, "topologyKey": key, **extra}


def affinity(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}}


# ---- InterPodAffinity ---------------------------------------------------------------------


def test_required_affinity_follows_matching_pods_by_topology() -> None:
    env = zones_env(("a1", "a"), ("a2", "a"), ("b1", "b"), ("x", None))
    env.add_pod(pod("db", labels={"app": "db"}, node_name="a1"))
    p = pod("p", labels={"app": "web"}, spec=affinity("podAffinity", term({"matchLabels": {"app": "db"}})))
    assert env.feasible(p) == {"a1", "a2"}
    assert env.schedule(pod("q", spec=affinity("podAffinity", term({"matchLabels": {"app": "none"}})))) == (
        "0/4 nodes are available: 4 node(s) didn't match pod affinity rules." + DRA
    )


def test_first_pod_of_a_group_may_satisfy_its_own_affinity() -> None:
    env = zones_env(("a1", "a"), ("x", None))
    p = pod("p", labels={"app": "web"}, spec=affinity("podAffinity", term({"matchLabels": {"app": "web"}})))
    assert env.feasible(p) == {"a1"}  # x lacks the topology key


def test_required_anti_affinity_and_existing_pods_symmetry() -> None:
    env = zones_env(("a1", "a"), ("a2", "a"), ("b1", "b"))
    env.add_pod(pod("db", labels={"app": "db"}, node_name="a1"))
    anti = pod("p", spec=affinity("podAntiAffinity", term({"matchLabels": {"app": "db"}})))
    assert env.feasible(anti) == {"b1"}
    env.add_pod(
        pod(
            "guard",
            labels={"app": "g"},
            node_name="b1",
            spec=affinity("podAntiAffinity", term({"matchLabels": {"app": "web"}})),
        )
    )
    msg = env.schedule(
        pod("w", labels={"app": "web"}, spec=affinity("podAntiAffinity", term({"matchLabels": {"app": "db"}})))
    )
    assert msg == (
        "0/3 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "2 node(s) didn't match pod anti-affinity rules." + DRA
    )


def test_namespaces_and_namespace_selector() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_pod(pod("db", "other", labels={"app": "db"}, node_name="a1"))
    same_ns = pod("p", spec=affinity("podAffinity", term({"matchLabels": {"app": "db"}})))
    assert env.feasible(same_ns) == set()  # only the pod's own namespace by default... and no self match
    listed = pod("p", spec=affinity("podAffinity", term({"matchLabels": {"app": "db"}}, namespaces=["other"])))
    assert env.feasible(listed) == {"a1"}
    by_labels = pod(
        "p",
        spec=affinity(
            "podAffinity", term({"matchLabels": {"app": "db"}}, namespaceSelector={"matchLabels": {"team": "b"}})
        ),
    )
    assert env.feasible(by_labels) == {"a1"}
    all_ns = pod("p", spec=affinity("podAffinity", term({"matchLabels": {"app": "db"}}, namespaceSelector={})))
    assert env.feasible(all_ns) == {"a1"}


def test_namespace_selector_matching_empty_labels_selects_every_namespace() -> None:
    """Upstream resets a merged term's namespace selector only on a copy, then matches it
    against *no* labels: a selector that empty labels satisfy (DoesNotExist) selects pods of
    every namespace, whatever that namespace's labels are."""
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_pod(pod("db", "other", labels={"app": "db"}, node_name="a1"))  # "other" has team=b
    sel = {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}
    p = pod("p", spec=affinity("podAffinity", term({"matchLabels": {"app": "db"}}, namespaceSelector=sel)))
    assert env.feasible(p) == {"a1"}


def test_preferred_affinity_scores_min_max_normalized() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"), ("c1", "c"))
    env.add_pod(pod("db", labels={"app": "db"}, node_name="a1"))
    env.add_pod(pod("cache", labels={"app": "cache"}, node_name="b1"))
    pref = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 80, "podAffinityTerm": term({"matchLabels": {"app": "db"}})}
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 20, "podAffinityTerm": term({"matchLabels": {"app": "cache"}})}
            ]
        },
    }
    fw = env.s.frameworks["ome-scheduler"]
    pl = fw.plugins["InterPodAffinity"]
    pi = PodInfo(pod("p", spec={"affinity": pref}))
    state = CycleState()
    nodes = env.s.node_infos()
    assert pl.pre_score(state, pi, nodes) is None  # type: ignore[attr-defined]
    scores = pl.score(state, pi, nodes)  # type: ignore[attr-defined]
    assert scores == [80, -20, 0]
    pl.normalize_score(state, pi, scores)  # type: ignore[attr-defined]
    assert scores == [100, 0, 20]


# ---- PodTopologySpread --------------------------------------------------------------------


def spread(**c: Any) -> dict[str, Any]:
    base = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    base.update(c)
    return {"topologySpreadConstraints": [base]}


def web(name: str, node_name: str, ns: str = "default") -> Any:
    return pod(name, ns, labels={"app": "web"}, node_name=node_name)


def test_skew_filter() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"), ("c1", "c"))
    env.add_pod(web("w1", "a1"))
    env.add_pod(web("w2", "b1"))
    p = pod("p", labels={"app": "web"}, spec=spread())
    assert env.feasible(p) == {"c1"}
    assert env.schedule(pod("q", labels={"app": "web"}, spec=spread(topologyKey="rack"))) == (
        "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints (missing required label)."
        + DRA
    )


def test_other_namespaces_and_deleting_pods_do_not_count() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_pod(web("w1", "a1", "other"))
    assert env.feasible(pod("p", labels={"app": "web"}, spec=spread())) == {"a1", "b1"}


def test_min_domains_treats_missing_domains_as_zero() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_pod(web("w1", "a1"))
    env.add_pod(web("w2", "b1"))
    assert env.feasible(pod("p", labels={"app": "web"}, spec=spread())) == {"a1", "b1"}
    assert env.feasible(pod("p", labels={"app": "web"}, spec=spread(minDomains=3))) == set()
    assert env.schedule(pod("p", labels={"app": "web"}, spec=spread(minDomains=3))) == (
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints." + DRA
    )


def test_node_affinity_and_taints_policies() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_node(node("c1", {ZONE: "c", "pool": "x"}, taints=[{"key": "t", "effect": "NoSchedule"}]))
    env.add_pod(web("w1", "a1"))
    sel = {"nodeSelector": {}}
    # Honor (default) node affinity: c1 is a domain (no selector); Ignore taints (default): c1 counts.
    assert env.feasible(pod("p", labels={"app": "web"}, spec={**spread(), **sel})) == {"b1"}
    # Honor taints: c1 is not a domain; min over {a:1, b:0} is 0.
    assert env.feasible(pod("p", labels={"app": "web"}, spec=spread(nodeTaintsPolicy="Honor"))) == {"b1"}
    # The pod's node selector excludes b1 and c1 from the domains with Honor, not with Ignore.
    only_a = {"nodeSelector": {ZONE: "a"}}
    assert env.feasible(pod("p", labels={"app": "web"}, spec={**spread(), **only_a})) == {"a1"}
    assert (
        env.feasible(pod("p", labels={"app": "web"}, spec={**spread(nodeAffinityPolicy="Ignore"), **only_a})) == set()
    )


def test_match_label_keys_and_empty_selector() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_pod(pod("v1", labels={"app": "web", "ver": "1"}, node_name="a1"))
    env.add_pod(pod("v1b", labels={"app": "web", "ver": "1"}, node_name="a1"))
    env.add_pod(pod("v2", labels={"app": "web", "ver": "2"}, node_name="b1"))
    p = pod("p", labels={"app": "web", "ver": "2"}, spec=spread(matchLabelKeys=["ver"]))
    assert env.feasible(p) == {"a1"}  # ver=2: a has 0, b has 1
    # labelSelector {} counts no pods (Empty selector), the pod itself matches: skew 1 everywhere.
    assert env.feasible(pod("p", labels={"app": "web"}, spec=spread(labelSelector={}))) == {"a1", "b1"}
    # no labelSelector at all: nothing matches, not even the pod.
    s = spread()
    del s["topologySpreadConstraints"][0]["labelSelector"]
    assert env.feasible(pod("p", labels={"app": "web"}, spec=s)) == {"a1", "b1"}


def test_schedule_anyway_constraints_do_not_filter() -> None:
    env = zones_env(("a1", "a"), ("b1", "b"))
    env.add_pod(web("w1", "a1"))
    env.add_pod(web("w2", "a1"))
    p = pod("p", labels={"app": "web"}, spec=spread(whenUnsatisfiable="ScheduleAnyway"))
    assert env.feasible(p) == {"a1", "b1"}


def test_spread_score_prefers_emptier_domains() -> None:
    h = FakeHandle()
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        h.add_node(node(name, {ZONE: zone}))
    h.bind(web("w1", "a1"), "a1")
    h.bind(web("w2", "a2"), "a2")
    pl = PodTopologySpread(h, PodTopologySpreadArgs())
    pi = PodInfo(pod("p", labels={"app": "web"}, spec=spread(whenUnsatisfiable="ScheduleAnyway", maxSkew=2)))
    nodes = h.node_infos()
    state = CycleState()
    assert pl.pre_score(state, pi, nodes) is None
    scores = pl.score(state, pi, nodes)
    # weight log(2 domains + 2); zone a has 2 pods: 2*log4 + 1 = 3.77 -> 4; zone b: 0 + 1 = 1
    assert scores == [4, 4, 1]
    pl.normalize_score(state, pi, scores)
    assert scores == [100 * (4 + 1 - 4) // 4, 25, 100]


def test_spread_score_enabled_in_a_profile_end_to_end() -> None:
    cfg = chart_config()
    cfg["profiles"][0]["plugins"]["score"]["disabled"] = []
    env = Env(cfg)
    for name, zone in (("a1", "a"), ("b1", "b")):
        env.add_node(node(name, {ZONE: zone}))
    env.add_pod(web("w1", "a1"))
    p = pod("p", labels={"app": "web"}, spec=spread(whenUnsatisfiable="ScheduleAnyway"))
    assert env.schedule(p) == "b1"


def test_system_default_constraints_need_a_workload_selector() -> None:
    h = FakeHandle()
    h.add_node(node("a1", {ZONE: "a"}))
    pl = PodTopologySpread(h, PodTopologySpreadArgs())
    assert pl.constraints(pod("p", labels={"app": "web"}), "ScheduleAnyway") == []
    assert [c.max_skew for c in pl.constraints(pod("p", labels={"app": "web"}), "DoNotSchedule")] == []


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        ({"defaultingType": "X"}, "Unsupported value"),
        (
            {"defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]},
            "when .defaultConstraints",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
            },
            "maxSkew",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
                ],
            },
            "Forbidden",
        ),
    ],
)
def test_spread_args_validation(args: dict[str, Any], msg: str) -> None:
    from ome_scheduler.config.errors import ConfigError

    cfg = chart_config()
    cfg["profiles"][0]["pluginConfig"].append({"name": "PodTopologySpread", "args": args})
    with pytest.raises(ConfigError, match=msg):
        Env(cfg)


def test_list_default_constraints_use_the_handle_selector() -> None:
    from ome_scheduler.util.labels import Selector

    class H(FakeHandle):
        def default_spread_selector(self, p: Any) -> Selector:
            return Selector.from_map({"app": p.metadata.labels.get("app", "")})

    h = H()
    for name, zone in (("a1", "a"), ("b1", "b")):
        h.add_node(node(name, {ZONE: zone}))
    h.bind(web("w1", "a1"), "a1")
    from ome_scheduler.api.core import TopologySpreadConstraint

    constraint = TopologySpreadConstraint(max_skew=1, topology_key=ZONE, when_unsatisfiable="DoNotSchedule")
    pl = PodTopologySpread(h, PodTopologySpreadArgs(default_constraints=(constraint,), defaulting_type="List"))
    pi = PodInfo(pod("p", labels={"app": "web"}))
    state = CycleState()
    assert pl.pre_filter(state, pi, h.node_infos()) == (None, None)
    assert [n.name for n in h.node_infos() if pl.filter(state, pi, n) is None] == ["b1"]
