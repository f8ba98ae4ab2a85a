"""End-to-end: pods with ResourceClaims on the real control plane (issue 24's acceptance).

kube-apiserver 1.35 serves ``resource.k8s.io/v1``; kube-controller-manager runs every
controller (``--controllers=*``), the resourceclaim controller among them (DRA is GA and on by
default in 1.35), so claims from templates are made by it, not by the test. No DRA driver runs:
the ResourceSlices are hand-written (``e2e/dra_objects.py``), published for kwok nodes with the
devices' shapes of the NVIDIA driver. Each test has its own driver name, classes and nodes.

Where kube-scheduler 1.35.4 can run the same objects it is the oracle: a second stock
kube-scheduler (profile ``parity-kube``, the chart's plugins minus OMEGangPack, as in
``test_parity.py``) schedules a copy of the case on its own copy of the nodes and devices, and the
FitError text and feasibility must be the same (node counts included: both copies are created
before either pod is).
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from e2e import dra_objects as d
from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import node_of, scheduled_condition, temp_nodes, wait_bound, wait_for, wait_message
from e2e.parity_harness import KUBE_PROFILE, KubeSchedulerProcess
from e2e.test_explain import explain
from tests.support.manifests import CLIQUE, POD_GROUP_LABEL, pod_group, unique

pytestmark = pytest.mark.invariants_after_test


class Setup:
    """One test's DRA world (created on enter, deleted on exit): driver ``<id>.e2e.ome.io``, class
    ``<id>-gpu`` selecting all its devices, ``n_nodes`` kwok nodes labelled ``e2e.ome.io/dra=<id>``
    (and ``nvidia.com/gpu.clique`` from ``cliques``), each with one slice of ``per_node`` GPUs in a
    pool named after the node, or ``devices(node index, node name)`` when given."""

    def __init__(
        self,
        api: Api,
        prefix: str,
        n_nodes: int,
        per_node: int,
        cliques: Sequence[str] = (),
        devices: Callable[[int, str], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.api = api
        self.id = unique(prefix)
        self.driver = d.driver(self.id)
        self.cls = f"{self.id}-gpu"
        self.label = {"e2e.ome.io/dra": self.id}
        self.node_names = [f"{self.id}-n{i}" for i in range(n_nodes)]
        self.nodes = [
            d.gpu_node(n, {**self.label, **({CLIQUE: f"{self.id}-{cliques[i]}"} if cliques else {})})
            for i, n in enumerate(self.node_names)
        ]
        if devices is None:

            def devices(i: int, n: str) -> list[dict[str, Any]]:
                return [d.gpu(j, n, clique=cliques[i] if cliques else None) for j in range(per_node)]

        self.slices = [d.node_slice(self.driver, n, devices(i, n)) for i, n in enumerate(self.node_names)]
        self.classes: list[dict[str, Any]] = [d.device_class(self.cls, self.driver)]
        self._nodes_cm: Any = None

    def __enter__(self) -> Setup:
        d.create(self.api, *self.classes, *self.slices)
        self._nodes_cm = temp_nodes(self.api, self.nodes)
        self._nodes_cm.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._nodes_cm.__exit__(None, None, None)
        d.delete(self.api, *self.slices, *self.classes)


def pod_on(setup: Setup, name: str, ns: str, **kw: Any) -> dict[str, Any]:
    """A DRA pod restricted to the setup's nodes."""
    return d.dra_pod(name, ns, node_selector=setup.label, **kw)


def wait_claim_allocated(api: Api, ns: str, name: str, timeout: float = 30.0) -> Any:
    return wait_for(
        f"claim {ns}/{name} allocated",
        lambda: (c := d.get_claim(api, ns, name)) and (c.get("status") or {}).get("allocation") and c,
        timeout=timeout,
    )


def claim_of_pod(api: Api, ns: str, pod_name: str, claim: str = "gpu", timeout: float = 20.0) -> str:
    return wait_for(
        f"claim {claim} of {pod_name} created", lambda: d.generated_claim_name(api, ns, pod_name, claim), timeout
    )


def test_resourceclaim_controller_is_on(api: Api, cluster: Cluster) -> None:
    """The control plane serves resource.k8s.io/v1 and KCM runs the resourceclaim controller
    (it holds a ServiceAccount of its own with --use-service-account-credentials)."""
    groups = api.get("/apis/resource.k8s.io")
    assert any(v["version"] == "v1" for v in groups["versions"])
    wait_for(
        "resource-claim-controller ServiceAccount",
        lambda: api.try_get("/api/v1/namespaces/kube-system/serviceaccounts/resource-claim-controller"),
        timeout=30,
    )


def test_template_claim_binds_within_two_seconds(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    """The controller creates the claim from the template; the pod binds within 2 s of that,
    with the allocation written as upstream writes it: 4 distinct devices of one pool, the
    node selector, the delete-protection finalizer and the pod in reservedFor."""
    with Setup(api, "tpl", 2, 8) as s:
        d.create(api, d.claim_template("four", ns, d.claim_spec([d.exactly("gpu", s.cls, 4)])))
        api.create_pod(pod_on(s, "p", ns, templates={"gpu": "four"}))
        name = wait_for("claim created", lambda: d.generated_claim_name(api, ns, "p", "gpu"), timeout=20, interval=0.02)
        seen = time.monotonic()
        node = wait_for("pod bound", lambda: node_of(api, ns, "p"), timeout=10, interval=0.02)
        took = time.monotonic() - seen
        assert took < 2.0, f"bound {took:.2f} s after the claim was created"
        c = wait_claim_allocated(api, ns, name)
        devs = d.allocated_devices(c)
        assert len(devs) == 4 and len(set(devs)) == 4, devs
        assert {(drv, pool) for drv, pool, _ in devs} == {(s.driver, node)}
        assert "resource.kubernetes.io/delete-protection" in c["metadata"]["finalizers"]
        pod_uid = api.pod(ns, "p")["metadata"]["uid"]
        assert [r["uid"] for r in c["status"]["reservedFor"]] == [pod_uid]
        assert c["status"]["reservedFor"][0]["resource"] == "pods"
        sel = c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        assert sel == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]


def test_missing_device_class_requeues_on_creation(
    api: Api, scheduler: SchedulerProcess, kube: KubeSchedulerProcess, ns: str
) -> None:
    """A claim naming a class that does not exist: upstream's message (same text as
    kube-scheduler's), and the pod binds as soon as the class is created."""
    with Setup(api, "nocls", 1, 2) as s:
        missing = f"{s.id}-later"
        d.create(api, d.claim("c-ome", ns, d.claim_spec([d.exactly("gpu", missing)])))
        d.create(api, d.claim("c-kube", ns, d.claim_spec([d.exactly("gpu", missing)])))
        api.create_pod(pod_on(s, "ome", ns, claims={"gpu": "c-ome"}))
        api.create_pod(pod_on(s, "kube", ns, claims={"gpu": "c-kube"}, scheduler=KUBE_PROFILE))
        want = f"request gpu: device class {missing} does not exist"
        got_ome = wait_message(api, ns, "ome", want)
        got_kube = wait_message(api, ns, "kube", want)
        assert got_ome == got_kube
        try:
            d.create(api, d.device_class(missing, s.driver))
            wait_bound(api, ns, ["ome"], timeout=15)
        finally:
            d.delete(api, d.device_class(missing, s.driver))


def test_missing_claim_requeues_on_creation(
    api: Api, scheduler: SchedulerProcess, kube: KubeSchedulerProcess, ns: str
) -> None:
    """A pod naming a claim that does not exist is held at PreEnqueue with upstream's message
    (in the V(4) log: PreEnqueue writes no event, in either scheduler) and binds once the claim
    is created, as kube-scheduler's copy does."""
    with Setup(api, "noclm", 1, 2) as s:
        api.create_pod(pod_on(s, "ome", ns, claims={"gpu": "later-o"}))
        api.create_pod(pod_on(s, "kube", ns, claims={"gpu": "later-k"}, scheduler=KUBE_PROFILE))
        want = f'could not find ResourceClaim \\"{ns}/later-o\\"'
        wait_for("PreEnqueue message in ome's log", lambda: want in scheduler.log(), timeout=15)
        time.sleep(1.0)
        for p in ("ome", "kube"):
            assert not node_of(api, ns, p) and not api.event_notes(ns, p, "FailedScheduling")
        d.create(api, d.claim("later-o", ns, d.claim_spec([d.exactly("gpu", s.cls)])))
        d.create(api, d.claim("later-k", ns, d.claim_spec([d.exactly("gpu", s.cls)])))
        wait_bound(api, ns, ["ome", "kube"], timeout=15)


def fit_error(api: Api, ns: str, name: str) -> str:
    c = scheduled_condition(api, ns, name)
    return str(c.get("message", "")) if c and c.get("status") == "False" else ""


def test_exhaustion_and_release_match_kube_scheduler(
    api: Api, scheduler: SchedulerProcess, kube: KubeSchedulerProcess, ns: str
) -> None:
    """One node with 8 devices, pods of 4 from templates: the third pod is `cannot allocate all
    claims` (the FitError text equal to kube-scheduler's on its own copy) and binds after the
    first is deleted (its claim deallocated by the controller)."""
    with Setup(api, "exo", 1, 8) as so, Setup(api, "exk", 1, 8) as sk:
        for s in (so, sk):
            d.create(api, d.claim_template(f"t-{s.id}", ns, d.claim_spec([d.exactly("gpu", s.cls, 4)])))
        for i in range(3):
            api.create_pod(pod_on(so, f"o{i}", ns, templates={"gpu": f"t-{so.id}"}))
            api.create_pod(pod_on(sk, f"k{i}", ns, templates={"gpu": f"t-{sk.id}"}, scheduler=KUBE_PROFILE))
            if i < 2:
                wait_bound(api, ns, [f"o{i}", f"k{i}"])
        msg_o = wait_for("o2 unschedulable", lambda: fit_error(api, ns, "o2"))
        msg_k = wait_for("k2 unschedulable", lambda: fit_error(api, ns, "k2"))
        assert "1 cannot allocate all claims" in msg_o, msg_o
        assert msg_o == msg_k
        api.delete_pod(ns, "o0")
        api.delete_pod(ns, "k0")
        wait_bound(api, ns, ["o2", "k2"], timeout=30)


def test_shared_claim_pins_later_pods(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    """Pods sharing one claim all go to the node of its allocation."""
    with Setup(api, "shr", 4, 2) as s:
        d.create(api, d.claim("shared", ns, d.claim_spec([d.exactly("gpu", s.cls)])))
        api.create_pod(pod_on(s, "p0", ns, claims={"gpu": "shared"}))
        first = wait_bound(api, ns, ["p0"])["p0"]
        for i in range(1, 4):
            api.create_pod(pod_on(s, f"p{i}", ns, claims={"gpu": "shared"}))
        got = wait_bound(api, ns, [f"p{i}" for i in range(1, 4)])
        assert set(got.values()) == {first}
        c = d.get_claim(api, ns, "shared")
        assert len(c["status"]["reservedFor"]) == 4
        assert len(d.allocated_devices(c)) == 1


def test_match_attribute_keeps_devices_in_one_clique(
    api: Api, scheduler: SchedulerProcess, kube: KubeSchedulerProcess, ns: str
) -> None:
    """A node with two cliques of 2 GPUs: 2 GPUs with matchAttribute cliqueID fit, 3 do not
    (the same text as kube-scheduler's)."""

    def two_cliques(i: int, n: str) -> list[dict[str, Any]]:
        return [d.gpu(j, n, clique="a" if j < 2 else "b") for j in range(4)]

    with Setup(api, "mao", 1, 0, devices=two_cliques) as so, Setup(api, "mak", 1, 0, devices=two_cliques) as sk:
        attr = f"{so.driver}/{d.CLIQUE_ATTR}"
        attr_k = f"{sk.driver}/{d.CLIQUE_ATTR}"
        d.create(api, d.claim("two-o", ns, d.claim_spec([d.exactly("gpu", so.cls, 2)], attr)))
        d.create(api, d.claim("three-o", ns, d.claim_spec([d.exactly("gpu", so.cls, 3)], attr)))
        d.create(api, d.claim("three-k", ns, d.claim_spec([d.exactly("gpu", sk.cls, 3)], attr_k)))
        api.create_pod(pod_on(so, "two", ns, claims={"gpu": "two-o"}))
        api.create_pod(pod_on(so, "three", ns, claims={"gpu": "three-o"}))
        api.create_pod(pod_on(sk, "three-k", ns, claims={"gpu": "three-k"}, scheduler=KUBE_PROFILE))
        wait_bound(api, ns, ["two"])
        devs = d.allocated_devices(d.get_claim(api, ns, "two-o"))
        assert {dev for _, _, dev in devs} in ({"gpu-0", "gpu-1"}, {"gpu-2", "gpu-3"}), devs
        msg_o = wait_for("three unschedulable", lambda: fit_error(api, ns, "three"))
        msg_k = wait_for("three-k unschedulable", lambda: fit_error(api, ns, "three-k"))
        assert "cannot allocate all claims" in msg_o and msg_o == msg_k


def test_first_available_prefers_the_first_alternative(api: Api, scheduler: SchedulerProcess, ns: str) -> None:
    """Node a has a B200 (first choice), node b only an H100: the pod goes to a and gets the
    first subrequest; once a's B200 is taken, the next pod gets the second one on b."""

    def products(i: int, n: str) -> list[dict[str, Any]]:
        return [d.gpu(0, n, product=("NVIDIA B200", "NVIDIA H100")[i])]

    with Setup(api, "fa", 2, 0, devices=products) as s:
        b200 = f"{s.id}-b200"
        h100 = f"{s.id}-h100"
        extra = [
            d.device_class(b200, s.driver, f'device.attributes["{s.driver}"].productName == "NVIDIA B200"'),
            d.device_class(h100, s.driver, f'device.attributes["{s.driver}"].productName == "NVIDIA H100"'),
        ]
        d.create(api, *extra)
        try:
            spec = d.claim_spec([d.first_available("gpu", [("big", b200, 1), ("small", h100, 1)])])
            d.create(api, d.claim_template("fa", ns, spec))
            api.create_pod(pod_on(s, "p0", ns, templates={"gpu": "fa"}))
            assert wait_bound(api, ns, ["p0"])["p0"] == s.node_names[0]
            c0 = wait_claim_allocated(api, ns, claim_of_pod(api, ns, "p0"))
            assert [r["request"] for r in c0["status"]["allocation"]["devices"]["results"]] == ["gpu/big"]
            api.create_pod(pod_on(s, "p1", ns, templates={"gpu": "fa"}))
            assert wait_bound(api, ns, ["p1"])["p1"] == s.node_names[1]
            c1 = wait_claim_allocated(api, ns, claim_of_pod(api, ns, "p1"))
            assert [r["request"] for r in c1["status"]["allocation"]["devices"]["results"]] == ["gpu/small"]
        finally:
            d.delete(api, *extra)


def test_two_hundred_pods_no_device_twice_and_restart(
    api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str
) -> None:
    """200 single-device pods against 25 nodes x 8 devices, created at once: exactly 200 bind,
    no (driver, pool, device) is allocated twice; the scheduler is restarted in the middle and
    finishes from its informers alone."""
    with Setup(api, "many", 25, 8) as s:
        d.create(api, d.claim_template("one", ns, d.claim_spec([d.exactly("gpu", s.cls)])))
        names = [f"p{i:03d}" for i in range(200)]
        with cf.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda n: api.create_pod(pod_on(s, n, ns, templates={"gpu": "one"})), names))
        wait_for("some pods bound", lambda: sum(1 for p in api.pods(ns) if p["spec"].get("nodeName")) >= 40, 60)
        scheduler.stop()
        at_stop = sum(1 for p in api.pods(ns) if p["spec"].get("nodeName"))
        assert at_stop < 200, "every pod bound before the restart: the restart proves nothing"
        scheduler.start()
        wait_for(
            "200 pods bound",
            lambda: sum(1 for p in api.pods(ns) if p["spec"].get("nodeName")) == 200 or None,
            timeout=150,
            interval=1.0,
        )
        claims = d.claims_of(api, ns)
        devs = [dev for c in claims for dev in d.allocated_devices(c)]
        assert len(devs) == 200 and len(set(devs)) == 200
        # the claim's allocation is on the node its pod was bound to
        by_pod = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.pods(ns)}
        for c in claims:
            [owner] = [r["name"] for r in c["status"]["reservedFor"]]
            assert {pool for _, pool, _ in d.allocated_devices(c)} == {by_pod[owner]}


def gang_member(s: Setup, name: str, ns: str, gang: str, template: str) -> dict[str, Any]:
    """A gang member with a claim from ``template``."""
    p = pod_on(s, name, ns, templates={"gpu": template}, labels={POD_GROUP_LABEL: gang})
    return p


GANG_CASES = {
    # case: (GPUs per node, clique per node, the clique the gang binds in or None)
    "fits-in-a": ([8, 8, 4, 4], ["a", "a", "b", "b"], "a"),
    # a has the least room by cpu (3 nodes, best fit) but GPUs for 3 members: the gang goes to b
    "fits-in-b-only": ([4, 4, 4, 4, 4, 4, 4], ["a", "a", "a", "b", "b", "b", "b"], "b"),
    "fits-nowhere": ([8, 4, 4, 4], ["a", "a", "b", "b"], None),
}


@pytest.mark.parametrize("case", list(GANG_CASES))
def test_gang_on_dra_devices_binds_in_one_clique_or_not_at_all(
    api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str, case: str
) -> None:
    """minMember 4, each member a template claim for 4 GPUs, nodes with node-local slices and
    clique labels. The gang binds in a clique only if all four fit there together (OMEGangPack's
    room counts the devices: a node of 8 GPUs takes two members, one of 4 takes one); otherwise
    nothing is allocated or bound and explain names each clique's device shortfall."""
    per, cliques, where = GANG_CASES[case]

    def devices(i: int, n: str) -> list[dict[str, Any]]:
        return [d.gpu(j, n, clique=cliques[i]) for j in range(per[i])]

    with Setup(api, "gang", len(per), 0, cliques=cliques, devices=devices) as s:
        d.create(api, d.claim_template("four", ns, d.claim_spec([d.exactly("gpu", s.cls, 4)])))
        api.create_pod_group(pod_group("g", ns, 4, topology_key=CLIQUE))
        members = [f"m{i}" for i in range(4)]
        for m in members:
            api.create_pod(gang_member(s, m, ns, "g", "four"))
        if where is not None:
            got = wait_bound(api, ns, members, timeout=30)
            in_clique = {n for n, c in zip(s.node_names, cliques, strict=True) if c == where}
            assert set(got.values()) <= in_clique, got
            devs = [dev for c in d.claims_of(api, ns) for dev in d.allocated_devices(c)]
            assert len(devs) == 16 and len(set(devs)) == 16
            # The first pin was the right clique: no attempt in a clique whose devices are short.
            pins = wait_for("the Pinned event", lambda: api.event_notes(ns, "g", "Pinned"), timeout=10)
            assert all(f"{CLIQUE}={s.id}-{where} " in n for n in pins), pins
            return
        wait_for("a member unschedulable", lambda: any(fit_error(api, ns, m) for m in members), timeout=30)
        time.sleep(2.0)
        assert not any(node_of(api, ns, m) for m in members)
        assert not [c for c in d.claims_of(api, ns) if d.allocated_devices(c)]
        # explain reads the DRA objects (snapshot) and counts each clique's room in devices.
        out = explain(cluster, scheduler, "podgroup", f"{ns}/g")
        reasons = [m["reason"] for m in out["members"]]
        assert not any("could not find ResourceClaim" in r for r in reasons), reasons
        doms = {x["domain"]: x for x in out["domains"]}
        a, b = doms[f"{s.id}-a"], doms[f"{s.id}-b"]
        assert (a["deviceRoom"], b["deviceRoom"]) == (3, 2), doms
        assert a["whyNot"].startswith("device shortfall: free devices take 3 of the 4 members"), a
        assert b["whyNot"].startswith("device shortfall: free devices take 2 of the 4 members"), b
        assert "no domain has room for gang" in out["decision"]["message"], out["decision"]


def many_slices(s: Setup, node_name: str, slices: int, per: int = 128) -> list[dict[str, Any]]:
    """``slices`` slices of ``per`` devices (128 is the API's maximum per slice) in one pool of
    ``node_name``: thousands of devices on one node."""
    return [
        d.node_slice(
            s.driver,
            node_name,
            [d.gpu(k * per + j, node_name) for j in range(per)],
            pool=f"{node_name}-big",
            slice_count=slices,
            name=f"{node_name}-big-{k}",
        )
        for k in range(slices)
    ]


def test_hostile_claims_get_clear_events_and_others_are_served(
    api: Api, scheduler: SchedulerProcess, kube: KubeSchedulerProcess, ns: str
) -> None:
    """Claims the API server accepts but that cannot be served: a selector that fails at run
    time (the same message as kube-scheduler's), 32 requests of 4 devices (128 devices: over
    the claim limit of 32), a hopeless matchAttribute over a pool of 5,120 devices (the step
    budget ends it). Each pod gets a FailedScheduling event saying why, the scheduler stays up,
    and a pod of another namespace binds meanwhile."""
    with Setup(api, "hostile", 2, 4) as s:
        big = many_slices(s, s.node_names[1], 40)
        d.create(api, *big)
        try:
            bad_cel = [f'device.attributes["{s.driver}"].noSuchAttribute == 1']
            for who in ("ome", "kube"):
                d.create(api, d.claim(f"cel-{who}", ns, d.claim_spec([d.exactly("gpu", s.cls, selectors=bad_cel)])))
            many = [d.exactly(f"r{i}", s.cls, 4) for i in range(32)]
            d.create(api, d.claim("many", ns, d.claim_spec(many)))
            hopeless = d.claim_spec([d.exactly("gpu", s.cls, 8)], f"{s.driver}/index")
            d.create(api, d.claim("hopeless", ns, hopeless))
            api.create_pod(pod_on(s, "cel", ns, claims={"gpu": "cel-ome"}))
            api.create_pod(pod_on(s, "cel-kube", ns, claims={"gpu": "cel-kube"}, scheduler=KUBE_PROFILE))
            api.create_pod(pod_on(s, "many", ns, claims={"gpu": "many"}))
            api.create_pod(pod_on(s, "hopeless", ns, claims={"gpu": "hopeless"}))
            msg_cel = wait_message(api, ns, "cel", "CEL runtime error")
            msg_kube = wait_message(api, ns, "cel-kube", "CEL runtime error")
            assert msg_cel == msg_kube.replace("cel-kube", "cel-ome"), (msg_cel, msg_kube)
            wait_message(api, ns, "many", "exceeds the claim limit of 32")
            wait_message(api, ns, "hopeless", "timed out trying to allocate devices", timeout=60)
            other = unique("e2e-other")
            api.create_namespace(other)
            try:
                d.create(api, d.claim("ok", other, d.claim_spec([d.exactly("gpu", s.cls)])))
                api.create_pod(pod_on(s, "ok", other, claims={"gpu": "ok"}))
                wait_bound(api, other, ["ok"], timeout=15)
            finally:
                api.delete_namespace(other, wait=30)
            assert scheduler.alive_or_raise()
            assert not any(node_of(api, ns, p) for p in ("cel", "many", "hopeless"))
        finally:
            d.delete(api, *big)


def test_all_devices_of_an_incomplete_pool_is_an_error_as_upstream(
    api: Api, scheduler: SchedulerProcess, kube: KubeSchedulerProcess, ns: str
) -> None:
    """A pool that says it has 2 slices while only 1 is published: allocationMode All is an
    error (not unresolvable: the pod is retried), with kube-scheduler's text; ExactCount still
    takes a device of the published slice. Once the second slice appears, All binds."""

    def half(i: int, n: str) -> list[dict[str, Any]]:
        return [d.gpu(j, n) for j in range(2)]

    with Setup(api, "inc", 1, 0, devices=half) as s:
        n = s.node_names[0]
        for sl in s.slices:
            sl["spec"]["pool"]["resourceSliceCount"] = 2
        api.patch(
            f"{d.PATHS['ResourceSlice']}/{s.slices[0]['metadata']['name']}",
            {"spec": {"pool": {"resourceSliceCount": 2}}},
        )
        for who in ("ome", "kube"):
            d.create(api, d.claim(f"all-{who}", ns, d.claim_spec([d.exactly("gpu", s.cls, mode="All")])))
        api.create_pod(pod_on(s, "all", ns, claims={"gpu": "all-ome"}))
        api.create_pod(pod_on(s, "all-kube", ns, claims={"gpu": "all-kube"}, scheduler=KUBE_PROFILE))
        want = f"asks for all devices, but resource pool {s.driver}/{n} is currently being updated"
        msg_o = wait_message(api, ns, "all", want)
        msg_k = wait_message(api, ns, "all-kube", want)
        assert msg_o == msg_k.replace("all-kube", "all-ome"), (msg_o, msg_k)
        assert scheduled_condition(api, ns, "all")["reason"] == "SchedulerError"  # type: ignore[index]
        api.delete_pod(ns, "all-kube")  # both want every device: only ours may take them
        second = d.node_slice(s.driver, n, [d.gpu(j, n) for j in range(2, 4)], slice_count=2, name=f"{n}-second")
        d.create(api, second)
        try:
            wait_bound(api, ns, ["all"], timeout=30)
            name = "all-ome"
            assert len(d.allocated_devices(wait_claim_allocated(api, ns, name))) == 4
        finally:
            d.delete(api, second)
