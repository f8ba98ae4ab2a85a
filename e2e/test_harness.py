"""The harness's pure parts, without a cluster: the invariants checker, the scheduler log readers,
and what the LWS controller is given (its webhook certificates and configurations).

``e2e/harness/invariants.py`` is the one checker of the e2e tests and the soak; its rules are
checked here on hand-made objects. ``make test`` runs this file with the unit tests.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from e2e.harness.invariants import (
    bound_twice,
    effective_requests,
    overcommitted,
    partial_gangs,
    scheduled_twice,
    split_gangs,
    violations,
)
from e2e.harness.pki import webhook_pki
from e2e.harness.processes import ClusterError
from e2e.harness.scheduler import failed_attempts_by_gang, parse_drift, worst_attempt_window
from e2e.harness.serving import WEBHOOK_DIR, lws_webhook_configurations, private_webhook_dir
from ome_scheduler.api.core import Pod
from ome_scheduler.framework.types import pod_requests


def _c(name: str, restart: str | None = None, **req: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": dict(req)}}
    if restart:
        c["restartPolicy"] = restart
    return c


def _pod(
    name: str,
    node: str = "",
    containers: list[dict[str, Any]] | None = None,
    *,
    init: list[dict[str, Any]] | None = None,
    gang: str | None = None,
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if gang:
        md["labels"] = {"scheduling.x-k8s.io/pod-group": gang}
    s: dict[str, Any] = {"containers": containers or [_c("c", cpu="1")], **spec}
    if init:
        s["initContainers"] = init
    if node:
        s["nodeName"] = node
    return {"metadata": md, "spec": s, "status": {"phase": phase}}


def _node(name: str, **alloc: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


def _pg(name: str, min_member: int, key: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "ns"}
    if key:
        md["annotations"] = {"ome.io/topology-key": key}
    return {"metadata": md, "spec": {"minMember": min_member}}


SIDECAR_POD = _pod(
    "p",
    containers=[_c("app", cpu="500m", memory="1Gi"), _c("app2", cpu="250m")],
    init=[
        _c("setup", cpu="2", memory="512Mi"),  # alone: 2 CPU
        _c("proxy", "Always", cpu="200m", memory="256Mi"),  # sidecar: joins the app sum
        _c("migrate", cpu="1900m"),  # runs next to the sidecar: 2.1 CPU
    ],
    overhead={"cpu": "100m", "memory": "64Mi"},
)


def test_effective_requests_follow_pod_requests_with_sidecars_init_containers_and_overhead() -> None:
    got = effective_requests(SIDECAR_POD)
    # cpu: app sum 750m + sidecar 200m = 950m; init steps 2000m and 1900m + 200m = 2100m; max 2100m + 100m overhead.
    # memory: app 1Gi + sidecar 256Mi; init steps 512Mi and 256Mi; max is the app sum; + 64Mi overhead.
    assert got == {"cpu": 2200, "memory": (1024 + 256 + 64) * 2**20, "pods": 1}


def test_effective_requests_agree_with_the_schedulers_own_computation() -> None:
    pod_level = _pod("q", containers=[_c("a", cpu="1", memory="1Gi", **{"nvidia.com/gpu": "2"})])
    pod_level["spec"]["resources"] = {"requests": {"cpu": "3", "memory": "2Gi"}}
    for p in (SIDECAR_POD, pod_level, _pod("r", containers=[_c("a", cpu="1"), _c("b", memory="1Gi")])):
        theirs = pod_requests(msgspec.convert(p, Pod))
        mine = effective_requests(p)
        assert mine.pop("pods") == 1
        assert mine == theirs, p["metadata"]["name"]


def test_overcommitted_reports_a_node_over_allocatable_by_effective_requests_only() -> None:
    nodes = [_node("n1", cpu="2", pods="110"), _node("n2", cpu="4")]
    fits = [_pod("a", "n1", [_c("c", cpu="1")]), _pod("b", "n1", [_c("c", cpu="1")])]
    assert overcommitted(fits, nodes) == []
    # The container sum (950m) would fit in 2 CPUs; the effective request (2200m) does not.
    assert overcommitted([{**SIDECAR_POD, "spec": {**SIDECAR_POD["spec"], "nodeName": "n1"}}], nodes) == [
        "node n1 over-committed on cpu: 2200 > 2000"
    ]
    over = [*fits, _pod("c", "n1", [_c("c", cpu="1m")])]
    assert overcommitted(over, nodes) == ["node n1 over-committed on cpu: 2001 > 2000"]
    # Finished pods, unbound pods and pods on a node no longer listed do not count.
    ignored = [
        *fits,
        _pod("d", "n1", phase="Succeeded"),
        _pod("e", "n1", phase="Failed"),
        _pod("f"),
        _pod("g", "gone", [_c("c", cpu="100")]),
    ]
    assert overcommitted(ignored, nodes) == []
    assert overcommitted([_pod(f"p{i}", "n2", [_c("c", cpu="1m")]) for i in range(3)], [_node("n2", pods="2")]) == [
        "node n2 over-committed on pods: 3 > 2"
    ]


def test_split_gangs_finds_bound_members_in_two_domains_or_outside_any() -> None:
    labels = {"a1": {"k": "A"}, "a2": {"k": "A"}, "b1": {"k": "B"}, "bare": {}}
    whole = [_pod("m0", "a1", gang="g"), _pod("m1", "a2", gang="g"), _pod("m2", gang="g")]
    assert split_gangs(whole, [], labels, "k") == []
    split = [*whole, _pod("m3", "b1", gang="g"), _pod("s", "b1")]
    assert split_gangs(split, [], labels, "k") == ["gang ns/g split across domains ['A', 'B']"]
    unlabelled = [_pod("x0", "a1", gang="h"), _pod("x1", "bare", gang="h")]
    assert split_gangs(unlabelled, [], labels, "k") == ["gang ns/h split across domains ['<none>', 'A']"]
    alone_outside = [_pod("z0", "bare", gang="o")]
    assert split_gangs(alone_outside, [], labels, "k") == ["gang ns/o split across domains ['<none>']"]
    finished = [_pod("y0", "a1", gang="k"), _pod("y1", "b1", gang="k", phase="Succeeded")]
    assert split_gangs(finished, [], labels, "k") == []
    # A node nobody knows (deleted, its labels not remembered) cannot be judged.
    assert split_gangs([_pod("w0", "a1", gang="w"), _pod("w1", "gone", gang="w")], [], labels, "k") == []


def test_each_gang_is_judged_by_its_own_podgroups_domain_key() -> None:
    labels = {"n1": {"rack": "r1", "k": "A"}, "n2": {"rack": "r1", "k": "B"}}
    members = [_pod("m0", "n1", gang="g"), _pod("m1", "n2", gang="g")]
    by_rack = [_pg("g", 2, key="rack")]
    assert split_gangs(members, by_rack, labels, "k") == []
    assert split_gangs(members, [_pg("g", 2)], labels, "k") == ["gang ns/g split across domains ['A', 'B']"]
    assert split_gangs(members, [_pg("g", 2)], labels) == []  # no key anywhere: not judged


def test_partial_gangs_are_some_members_bound_below_min_member_with_others_waiting() -> None:
    pgs = [_pg("g", 3)]
    assert partial_gangs([_pod("m0", gang="g"), _pod("m1", gang="g"), _pod("m2", gang="g")], pgs) == []
    half = [_pod("m0", "n1", gang="g"), _pod("m1", gang="g"), _pod("m2", gang="g")]
    assert partial_gangs(half, pgs) == ["gang ns/g has 1 of minMember 3 bound (3 members)"]
    assert partial_gangs([*half[:1], _pod("m1", "n2", gang="g"), _pod("m2", "n3", gang="g")], pgs) == []
    # Members deleted after binding leave a smaller gang, all bound: not partial.
    assert partial_gangs(half[:1], pgs) == []
    # Finished members do not count; a gang without its PodGroup is not judged.
    assert partial_gangs([*half[:1], _pod("m1", gang="g", phase="Failed")], pgs) == []
    assert partial_gangs(half, []) == []


def test_violations_scope_the_gang_rules_to_a_namespace_and_the_partial_rule_to_a_settled_cluster() -> None:
    nodes = [_node("n1", cpu="1"), {**_node("n2"), "metadata": {"name": "n2", "labels": {"k": "B"}}}]
    nodes[0]["metadata"]["labels"] = {"k": "A"}
    theirs = {
        **_pod("t0", "n1", gang="g"),
        "metadata": {"name": "t0", "namespace": "other", "labels": {"scheduling.x-k8s.io/pod-group": "g"}},
    }
    theirs_too = {
        **_pod("t1", "n2", gang="g"),
        "metadata": {"name": "t1", "namespace": "other", "labels": {"scheduling.x-k8s.io/pod-group": "g"}},
    }
    mine = [_pod("m0", "n2", gang="h"), _pod("m1", gang="h")]
    pods = [theirs, theirs_too, *mine]
    pgs = [_pg("h", 2)]
    # Capacity counts every namespace's pods (t0 fills n1); the gangs are the namespace's own.
    assert violations(pods, nodes, pgs, namespace="ns", domain_key="k", settled=False) == []
    assert violations(pods, nodes, pgs, namespace="ns", domain_key="k") == [
        "gang ns/h has 1 of minMember 2 bound (2 members)"
    ]
    assert violations([*pods, _pod("x", "n1")], nodes, pgs, namespace="other", domain_key="k") == [
        "node n1 over-committed on cpu: 2000 > 1000",
        "gang other/g split across domains ['A', 'B']",
    ]
    # Remembered labels of a deleted node still place its pods in their domain.
    gone = [_pod("d0", "n2", gang="d"), _pod("d1", "gone", gang="d")]
    assert violations(gone, nodes, domain_key="k", node_labels={"gone": {"k": "A"}}) == [
        "gang ns/d split across domains ['A', 'B']"
    ]
    events = [{"reason": "Scheduled", "regarding": {"uid": "u", "namespace": "ns", "name": "m0"}}] * 2
    assert violations([], [], events=events, namespace="other") == []
    assert violations([], [], events=events, seen_nodes={"u": {"n1", "n2"}}) == [
        "pod ns/m0 (uid u) has 2 Scheduled events",
        "pod u bound to ['n1', 'n2']",
    ]


def test_a_pod_bound_twice_is_found_by_nodes_seen_and_by_scheduled_events() -> None:
    assert bound_twice({"u1": {"n1"}, "u2": {"n1", "n2"}}) == ["pod u2 bound to ['n1', 'n2']"]

    def ev(uid: str, reason: str = "Scheduled", count: int | None = None) -> dict[str, Any]:
        e: dict[str, Any] = {"reason": reason, "regarding": {"uid": uid, "namespace": "ns", "name": f"p-{uid}"}}
        if count is not None:
            e["series"] = {"count": count}
        return e

    assert scheduled_twice([ev("1"), ev("2"), ev("2", "FailedScheduling"), ev("3", count=1)]) == []
    assert scheduled_twice([ev("1"), ev("1"), ev("2", count=2)]) == [
        "pod ns/p-1 (uid 1) has 2 Scheduled events",
        "pod ns/p-2 (uid 2) has 2 Scheduled events",
    ]


def test_parse_drift_reads_the_comparers_summary_and_mismatch_lines() -> None:
    assert parse_drift('I1130 x "Cache comparer started"\n') is None
    ok = parse_drift('I1130 "Cache comparer finished" differences=0\n')
    assert ok == ("finished", 0, [])
    text = (
        'W1130 "Cache mismatch" kind="pod" object="ns/p" what="missed"\nI1130 "Cache comparer finished" differences=1\n'
    )
    assert parse_drift(text) == ("finished", 1, ['W1130 "Cache mismatch" kind="pod" object="ns/p" what="missed"'])
    assert parse_drift('E1130 "Cache comparer failed" err="x"') == ("failed", 0, [])


def test_failed_attempts_are_read_by_gang_and_counted_per_window() -> None:
    log = "\n".join(
        [
            'I1130 10:00:00.000000 1 x.go:1] "Unable to schedule pod; no fit; waiting" pod="ns/m0" gang="ns/g" err="x"',
            'I1130 10:00:01.500000 1 x.go:1] "Error scheduling pod; retrying" pod="ns/m1" gang="ns/g" err="y"',
            'I1130 10:00:30.000000 1 x.go:1] "Unable to schedule pod; no fit; waiting" pod="ns/s" gang="ns/h" err="z"',
            'I1130 10:00:31.000000 1 x.go:1] "Successfully bound pod to node" pod="ns/m0" gang="ns/g"',
        ]
    )
    got = failed_attempts_by_gang(log)
    assert sorted(got) == ["ns/g", "ns/h"] and len(got["ns/g"]) == 2
    assert got["ns/g"][1] - got["ns/g"][0] == 1.5
    assert worst_attempt_window([0.0, 1.0, 2.0, 30.0, 31.0], 10.0) == 3
    assert worst_attempt_window([], 10.0) == 0


def test_webhook_pki_is_what_the_lws_certificate_rotator_keeps() -> None:
    """cert-controller keeps a Secret whose CA verifies for its CA name and whose CA key parses as
    PKCS#1; the serving certificate must also be good for the loopback address the API server calls."""
    certs = webhook_pki("lws-ca", "lws", ["lws-webhook-service.lws-system.svc"], ["127.0.0.1"])
    assert set(certs) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert certs["ca.key"].startswith(b"-----BEGIN RSA PRIVATE KEY-----")  # PKCS#1
    assert isinstance(serialization.load_pem_private_key(certs["ca.key"], None), rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(certs["ca.crt"])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca_sans = ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ca_sans.get_values_for_type(x509.DNSName) == ["lws-ca"]
    leaf = x509.load_pem_x509_certificate(certs["tls.crt"])
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["lws-webhook-service.lws-system.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    # The rotator looks 90 days ahead before it calls a certificate still good.
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days > 90


_MANIFESTS = """---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mleaderworkerset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-lws}}
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate--v1-pod}}
"""


def _patch(index: int, name: str, path: str) -> str:
    return f"""- op: replace
  path: /webhooks/{index}
  value:
    name: {name}
    clientConfig: {{service: {{name: webhook-service, namespace: system, path: {path}}}}}
    objectSelector:
      matchExpressions: [{{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}}]
"""


def test_lws_webhook_configurations_are_patched_prefixed_and_served_on_loopback(tmp_path: Path) -> None:
    (tmp_path / "manifests.yaml").write_text(_MANIFESTS)
    (tmp_path / "mutating-patch.yaml").write_text(_patch(1, "mpod.kb.io", "/mutate--v1-pod"))
    (tmp_path / "validating-patch.yaml").write_text(_patch(0, "vpod.kb.io", "/validate--v1-pod"))
    mutating, validating = lws_webhook_configurations(tmp_path, "https://127.0.0.1:9443", b"CA")
    assert mutating["metadata"] == {"name": "lws-mutating-webhook-configuration"}
    assert validating["metadata"] == {"name": "lws-validating-webhook-configuration"}
    lws_hook, pod_hook = mutating["webhooks"]
    assert lws_hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-lws", "caBundle": "Q0E="}
    assert "objectSelector" not in lws_hook
    assert pod_hook["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate--v1-pod"
    for hook in (pod_hook, validating["webhooks"][0]):
        assert hook["objectSelector"]["matchExpressions"][0]["key"] == "leaderworkerset.sigs.k8s.io/name"
    (tmp_path / "validating-patch.yaml").write_text("- {op: add, path: /webhooks/0/x, value: 1}\n")
    with pytest.raises(ClusterError, match="unexpected patch"):
        lws_webhook_configurations(tmp_path, "https://127.0.0.1:9443", b"CA")


def test_private_webhook_dir_mounts_only_the_webhook_directory_and_execs(tmp_path: Path) -> None:
    argv = private_webhook_dir(tmp_path, ["env", "A=1", "/bin/lws"])
    assert argv[0] == "unshare" and "--mount" in argv
    i = argv.index("-c")
    script, own, target, rest = argv[i + 1], argv[i + 2], argv[i + 3], argv[i + 4 :]
    assert (own, target, rest) == (str(tmp_path), str(WEBHOOK_DIR), ["env", "A=1", "/bin/lws"])
    assert 'mount --bind "$0" "$1"' in script and script.endswith('exec "$@"')


def test_a_filter_error_naming_another_node_is_the_same_error_but_a_rejection_is_not() -> None:
    from e2e.parity_gen import Case
    from e2e.parity_harness import same_filter_error

    case = Case(id="pd1", index=0, nodes=[{"metadata": {"name": f"pd1-n{i}"}} for i in range(12)])
    error = 'running "DynamicResources" filter plugin: claim x, request r0: cannot add device d.example/pd1-n{}/gpu-2 because a claim constraint would not be satisfied'
    assert same_filter_error(error.format(2), error.format(1), case)
    # n1 and n11: the longer name is replaced first, so n11 is not read as n1 + "1"
    assert same_filter_error(error.format(11), error.format(1), case)
    assert not same_filter_error(error.format(2), error.format(2).replace("gpu-2", "gpu-3"), case)
    assert not same_filter_error(error.format(2), error.format(2).replace("pd1-n2", "other-n2"), case)
    rejection = "0/4 nodes are available: 1 node(s) had untolerated taint on pd1-n{}."
    assert not same_filter_error(rejection.format(1), rejection.format(2), case)
