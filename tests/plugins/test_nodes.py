"""TaintToleration, NodeUnschedulable, NodeName, NodeAffinity, NodePorts and ImageLocality."""

from __future__ import annotations

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.pluginargs import NodeAffinityArgs
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.types import HostPortInfo, PodInfo
from ome_scheduler.plugins.imagelocality import ImageLocality, calculate_priority, normalized_image_name
from ome_scheduler.plugins.nodeaffinity import NodeAffinity
from ome_scheduler.plugins.tainttoleration import TaintToleration
from tests.support.builders import node_info
from tests.support.fakes import FakeHandle
from tests.support.plugins_env import Env, chart_config, node, pod

DRA = " no new claims to deallocate"


def req_affinity(*terms: dict[str, object]) -> dict[str, object]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


# ---- TaintToleration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "ok"),
    [
        ([], False),
        ([{"key": "k", "operator": "Exists"}], True),
        ([{"key": "k", "operator": "Equal", "value": "v"}], True),
        ([{"key": "k", "value": "v", "effect": "NoExecute"}], False),
        ([{"key": "k", "operator": "Equal", "value": "w"}], False),
        ([{"operator": "Exists"}], True),
        ([{"key": "k", "operator": "Gt", "value": "1"}], False),  # comparison operators are alpha (off)
    ],
)
def test_taint_filter(tolerations: list[dict[str, str]], ok: bool) -> None:
    ni = node_info(node("n", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    st = TaintToleration().filter(CycleState(), PodInfo(pod("p", spec={"tolerations": tolerations})), ni)
    assert (st is None) == ok
    if st is not None:
        assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.reasons == ["node(s) had untolerated taint(s)"]


def test_prefer_no_schedule_is_not_filtered_but_scored_reversed() -> None:
    t = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}
    nodes = [
        node_info(node("a")),
        node_info(node("b", taints=[t])),
        node_info(node("c", taints=[t, {**t, "key": "x"}])),
    ]
    pl = TaintToleration()
    pi = PodInfo(pod("p"))
    state = CycleState()
    assert all(pl.filter(state, pi, n) is None for n in nodes)
    pl.pre_score(state, pi, nodes)
    scores = pl.score(state, pi, nodes)
    assert scores == [0, 1, 2]
    pl.normalize_score(state, pi, scores)
    assert scores == [100, 50, 0]
    tolerant = PodInfo(pod("p", spec={"tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}))
    pl.pre_score(state, tolerant, nodes)  # a NoSchedule toleration does not count for PreferNoSchedule
    assert pl.score(state, tolerant, nodes) == [0, 1, 2]


# ---- NodeUnschedulable / NodeName ---------------------------------------------------------


def test_cordoned_node_needs_the_unschedulable_toleration() -> None:
    env = Env()
    env.add_node(node("n", unschedulable=True))
    assert env.schedule(pod("p")) == "0/1 nodes are available: 1 node(s) were unschedulable." + DRA
    tol = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    assert env.schedule(pod("q", spec={"tolerations": [tol]})) == "n"


# ---- NodeAffinity -------------------------------------------------------------------------


def test_node_selector_and_required_terms_are_anded_terms_ored() -> None:
    env = Env()
    env.add_node(node("a", {"zone": "z1", "disk": "ssd"}))
    env.add_node(node("b", {"zone": "z2", "disk": "ssd"}))
    env.add_node(node("c", {"zone": "z2"}))
    aff = req_affinity(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
        {"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]},
    )
    assert env.feasible(pod("p", spec={"affinity": aff})) == {"a", "c"}
    assert env.feasible(pod("p", spec={"affinity": aff, "nodeSelector": {"zone": "z2"}})) == {"c"}


def test_empty_terms_match_nothing() -> None:
    env = Env()
    env.add_node(node("a"))
    assert env.feasible(pod("p", spec={"affinity": req_affinity({})})) == set()


@pytest.mark.parametrize(
    ("op", "value", "want"), [("Gt", "3", {"t5"}), ("Lt", "5", {"t3"}), ("Gt", "x", set()), ("Lt", "10", {"t3", "t5"})]
)
def test_gt_lt_compare_integers(op: str, value: str, want: set[str]) -> None:
    env = Env()
    env.add_node(node("t3", {"tier": "3"}))
    env.add_node(node("t5", {"tier": "5"}))
    env.add_node(node("tu", {"tier": "5_0"}))  # not a Go integer
    env.add_node(node("tn"))
    aff = req_affinity({"matchExpressions": [{"key": "tier", "operator": op, "values": [value]}]})
    assert env.feasible(pod("p", spec={"affinity": aff})) == want


def test_match_fields_narrow_in_prefilter_and_conflict() -> None:
    env = Env()
    for n in ("a", "b", "c"):
        env.add_node(node(n))
    aff = req_affinity(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]},
    )
    fw = env.s.frameworks["ome-scheduler"]
    result, st, plugins = fw.run_pre_filter(CycleState(), PodInfo(pod("p", spec={"affinity": aff})), env.s.node_infos())
    assert result == {"a", "b"} and st is None and plugins == {"NodeAffinity"}
    aff2 = req_affinity(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]},
    )
    result, st, _ = fw.run_pre_filter(CycleState(), PodInfo(pod("p", spec={"affinity": aff2})), env.s.node_infos())
    assert result is None


def test_preferred_terms_scored_and_normalized() -> None:
    pl = NodeAffinity(NodeAffinityArgs())
    nodes = [node_info(node("a", {"zone": "z1"})), node_info(node("b", {"zone": "z2"})), node_info(node("c"))]
    pref = [
        {"weight": 30, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}},
        {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
        {"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
        {"weight": 50, "preference": {}},
    ]
    pi = PodInfo(
        pod("p", spec={"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": pref}}})
    )
    state = CycleState()
    assert pl.pre_score(state, pi, nodes) is None
    scores = pl.score(state, pi, nodes)
    assert scores == [40, 10, 0]
    pl.normalize_score(state, pi, scores)
    assert scores == [100, 25, 0]


def test_added_affinity_arg() -> None:
    cfg = chart_config()
    cfg["profiles"][0]["pluginConfig"].append(
        {
            "name": "NodeAffinity",
            "args": {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
                        ]
                    }
                }
            },
        }
    )
    env = Env(cfg)
    env.add_node(node("a", {"pool": "gpu"}))
    env.add_node(node("b"))
    assert env.feasible(pod("p")) == {"a"}
    env2 = Env(cfg)
    env2.add_node(node("b"))
    assert env2.schedule(pod("p")) == (
        "0/1 nodes are available: 1 node(s) didn't match scheduler-enforced node affinity." + DRA
    )
    bad = chart_config()
    bad["profiles"][0]["pluginConfig"].append(
        {"name": "NodeAffinity", "args": {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}
    )
    with pytest.raises(ConfigError, match="at least one node selector term"):
        Env(bad)


# ---- NodePorts ----------------------------------------------------------------------------


def test_regression_host_ip_decoded_from_api_json() -> None:
    """Mismatch #2 of the differential test: ``hostIP`` is not the camel case of ``host_ip``
    (``hostIp``), so the field was never decoded and every host port looked bound to 0.0.0.0,
    which conflicts with all addresses."""
    raw = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 8080, "hostIP": "10.0.0.1"}]}]
        },
    }
    p = msgspec.json.decode(msgspec.json.encode(raw), type=Pod)
    assert PodInfo(p).host_ports == (("10.0.0.1", "TCP", 8080),)
    env = Env()
    env.add_node(node("n"))
    env.add_pod(
        pod(
            "x",
            node_name="n",
            spec={
                "containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 8080, "hostIP": "127.0.0.1"}]}]
            },
        )
    )
    assert (
        env.schedule(
            pod(
                "p",
                spec={
                    "containers": [
                        {"name": "c", "ports": [{"containerPort": 1, "hostPort": 8080, "hostIP": "10.0.0.1"}]}
                    ]
                },
            )
        )
        == "n"
    )


def test_host_port_conflicts() -> None:
    used = HostPortInfo()
    used.add("127.0.0.1", "TCP", 80)
    assert used.conflicts("0.0.0.0", "TCP", 80)
    assert used.conflicts("", "TCP", 80)
    assert used.conflicts("127.0.0.1", "TCP", 80)
    assert not used.conflicts("10.0.0.1", "TCP", 80)
    assert not used.conflicts("127.0.0.1", "UDP", 80)
    used.add("0.0.0.0", "UDP", 53)
    assert used.conflicts("10.0.0.1", "UDP", 53)
    assert not used.conflicts("10.0.0.1", "TCP", 0)


def test_host_ports_are_a_set_like_upstream() -> None:
    used = HostPortInfo()
    used.add("", "TCP", 80)
    used.add("", "TCP", 80)
    used.remove("", "TCP", 80)
    assert not used.conflicts("", "TCP", 80)


def test_sidecar_host_ports_count_but_init_container_ports_do_not() -> None:
    p = pod(
        "p",
        spec={
            "initContainers": [
                {"name": "i", "ports": [{"containerPort": 1, "hostPort": 1000}]},
                {"name": "s", "restartPolicy": "Always", "ports": [{"containerPort": 1, "hostPort": 2000}]},
            ]
        },
    )
    assert PodInfo(p).host_ports == (("0.0.0.0", "TCP", 2000),)
    env = Env()
    env.add_node(node("n"))
    env.add_pod(
        pod("x", node_name="n", spec={"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 2000}]}]})
    )
    assert env.schedule(p) == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports." + DRA
    )


# ---- ImageLocality ------------------------------------------------------------------------


def test_image_locality() -> None:
    assert normalized_image_name("nginx") == "nginx:latest"
    assert normalized_image_name("reg:5000/nginx") == "reg:5000/nginx:latest"
    assert normalized_image_name("nginx:1.2") == "nginx:1.2"
    mb = 1024 * 1024
    assert calculate_priority(10 * mb, 1) == 0
    assert calculate_priority(2000 * mb, 1) == 100
    assert calculate_priority(500 * mb, 1) == 100 * (500 - 23) // (1000 - 23)
    env = Env()
    env.add_node(node("a", images=[("big:latest", 600 * mb)]))
    env.add_node(node("b", images=[("big:latest", 600 * mb), ("other:1", 10)]))
    env.add_node(node("c"))
    h = FakeHandle()
    for n in env.s.node_infos():
        h.nodes[n.name] = n
    pl = ImageLocality(h)
    p = PodInfo(pod("p", spec={"containers": [{"name": "c", "image": "big"}]}))
    scores = pl.score(CycleState(), p, env.s.node_infos())
    # size 600 MiB spread over 2 of 3 nodes: 400 MiB each where present
    assert scores == [100 * (400 - 23) // (1000 - 23)] * 2 + [0]
    assert env.s.cache.image_states["big:latest"].num_nodes == 2
    env.s.handlers.on_node_delete(env.s.cache.nodes["a"].node)  # type: ignore[arg-type]
    assert env.s.cache.image_states["big:latest"].num_nodes == 1
