"""The Helm chart (helm/ome-scheduler) against its specification (chart.md) and the user guide.

Every test renders the chart with the real ``helm template`` (the cached helm v3 binary from
``e2e/build-binaries.sh`` or ``$OME_K8S_BIN_DIR``); a missing helm is a failure, not a skip.
The rendered KubeSchedulerConfiguration is also fed to ome-scheduler's own config loader and
framework builder, which proves the scheduler reads the ConfigMap unchanged.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.rbac import Permission, rarely_used, rule_permissions

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "helm" / "ome-scheduler"
NS = "ome"
RELEASE = "ome-scheduler"

SELECTOR = {"app.kubernetes.io/name": "ome-scheduler", "app.kubernetes.io/component": "scheduler"}
LABELS = {
    **SELECTOR,
    "helm.sh/chart": "ome-scheduler-0.1.0",
    "app.kubernetes.io/version": "0.1.0",
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/part-of": "ome",
}

# chart.md §3.3: the config.yaml of the default values in namespace "ome", byte for byte.
DEFAULT_CONFIG_YAML = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: ome-scheduler
  resourceNamespace: ome
profiles:
  - schedulerName: ome-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: OMEGangPack
        disabled:
          - name: DefaultPreemption
      score:
        enabled:
          - name: NodeResourcesFit
            weight: 10
          - name: OMEGangPack
            weight: 10
        disabled:
          - name: PodTopologySpread
    pluginConfig:
      - name: OMEGangPack
        args:
          podGroupTopologyKeyAnnotation: "ome.io/topology-key"
          unsupportedPlacementGroupLabel: "ome.io/placement-group"
          defaultPermitTimeoutSeconds: 600
          podGroupSyncTimeoutSeconds: 30
          gcIntervalSeconds: 60
          standaloneDomainPacking: true
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - name: cpu
                weight: 1
              - name: memory
                weight: 1
"""

# chart.md §4.2, exact.
FAIL_LEADER = "scheduler.leaderElect must be true when scheduler.replicaCount is greater than 1"
FAIL_ANNOTATION = (
    "scheduler.plugin.podGroupTopologyKeyAnnotation must be ome.io/topology-key when "
    "scheduler.omeControllerIntegration.enabled is true; disable OME controller integration for generic producers"
)
FAIL_PDB = (
    "scheduler.podDisruptionBudget.minAvailable must be less than scheduler.replicaCount "
    "so voluntary maintenance can make progress"
)
FAIL_MONITOR = (
    "scheduler.metrics.serviceMonitor.enabled requires scheduler.metrics.service.enabled "
    "\u2014 the ServiceMonitor selects the metrics Service"
)
SCHEMA_ERROR = "values don't meet the specifications of the schema(s)"

# ---- helm ---------------------------------------------------------------------------------


@functools.cache
def helm_bin() -> str:
    """The cached helm binary; building it if needed is e2e/build-binaries.sh's job."""
    bin_dir = os.environ.get("OME_K8S_BIN_DIR")
    if not bin_dir:
        out = subprocess.run(
            [str(REPO / "e2e" / "build-binaries.sh")], capture_output=True, text=True, check=False, timeout=1800
        )
        assert out.returncode == 0, f"e2e/build-binaries.sh failed:\n{out.stderr[-3000:]}"
        bin_dir = out.stdout.strip().splitlines()[-1]
    helm = Path(bin_dir) / "helm"
    assert helm.is_file() and os.access(helm, os.X_OK), f"helm not found at {helm} (run e2e/build-binaries.sh)"
    return str(helm)


@functools.cache
def _template(values_json: str, kube_version: str, namespace: str, release: str) -> tuple[int, str, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as f:
        f.write(values_json)  # JSON is YAML
        f.flush()
        argv = [helm_bin(), "template", release, str(CHART), "--namespace", namespace]
        argv += ["--kube-version", kube_version, "-f", f.name]
        p = subprocess.run(argv, capture_output=True, check=False, timeout=60)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def template(
    values: Mapping[str, Any] | None = None,
    *,
    kube_version: str = "1.35.0",
    namespace: str = NS,
    release: str = RELEASE,
) -> tuple[int, str, str]:
    """``helm template`` with ``values`` as a -f file; returns (exit code, stdout, stderr)."""
    return _template(json.dumps(values or {}, sort_keys=True), kube_version, namespace, release)


def render_text(values: Mapping[str, Any] | None = None, **kw: Any) -> str:
    rc, out, err = template(values, **kw)
    assert rc == 0, f"helm template failed:\n{err}"
    return out


def render(values: Mapping[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(values, **kw)) if d]


def render_error(values: Mapping[str, Any] | None = None, **kw: Any) -> str:
    rc, _, err = template(values, **kw)
    assert rc != 0, f"helm template accepted {values!r}"
    return err


def by_kind(docs: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in hits]}"
    return dict(hits[0])


def kinds_names(docs: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, str, str | None]]:
    return {(d["apiVersion"], d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs}


def deployment(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return by_kind(render(values), "Deployment")


def container(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    containers = deployment(values)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def config_text(values: Mapping[str, Any] | None = None, **kw: Any) -> str:
    cms = [d for d in render(values, **kw) if d["kind"] == "ConfigMap"]
    assert len(cms) == 1
    return str(cms[0]["data"]["config.yaml"])


def config(values: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return dict(yaml.safe_load(config_text(values, **kw)))


def profile(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    profiles = config(values)["profiles"]
    assert len(profiles) == 1
    return dict(profiles[0])


def gang_args(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    pc = {e["name"]: e.get("args") for e in profile(values)["pluginConfig"]}
    return dict(pc["OMEGangPack"])


def fit_args(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    pc = {e["name"]: e.get("args") for e in profile(values)["pluginConfig"]}
    return dict(pc["NodeResourcesFit"])


def sched(**kw: Any) -> dict[str, Any]:
    """Values ``{"scheduler": {...}}`` from keyword arguments; nested dicts pass through."""
    return {"scheduler": kw}


def merge(*parts: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in parts:
        _merge_into(out, p)
    return out


def _merge_into(dst: dict[str, Any], src: Mapping[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            _merge_into(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def dotted(path: str, value: Any) -> dict[str, Any]:
    """``dotted("scheduler.plugin.gcIntervalSeconds", 0)`` -> the nested values dict."""
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


# ---- the scheduler reads the ConfigMap ------------------------------------------------------


class _NoBinder:
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise AssertionError("not used")


def assert_scheduler_accepts(text: str) -> None:
    """ome-scheduler's loader validates the document and builds a framework per profile."""
    from ome_scheduler.config.load import parse_config
    from ome_scheduler.metrics import Metrics
    from ome_scheduler.scheduler import Scheduler

    cfg = parse_config(yaml.safe_load(text), "ConfigMap config.yaml")
    # DefaultBinder refuses to build without a binder, so pass one that is never called.
    s = Scheduler(cfg, metrics=Metrics(), binder=_NoBinder(), recorder=None)
    assert set(s.frameworks) == {p.scheduler_name for p in cfg.profiles}
    for fw in s.frameworks.values():
        assert "OMEGangPack" in fw.plugins


# ---- Chart.yaml, lint, values.yaml and the schema ---------------------------------------------


def test_chart_metadata() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "ome-scheduler"
    assert meta["type"] == "application"
    assert meta["version"] == "0.1.0"
    assert meta["appVersion"] == "0.1.0"
    assert meta["kubeVersion"] == ">=1.35.0-0 <1.36.0-0"
    assert "dependencies" not in meta
    assert meta["description"]
    assert not (CHART / "crds").exists(), "the chart must create no CRDs"


def test_helm_lint_strict() -> None:
    p = subprocess.run(
        [helm_bin(), "lint", "--strict", "--kube-version", "1.35.0", str(CHART)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 chart(s) failed" in p.stdout


# chart.md §2: every value and its default.
SPEC_DEFAULTS: dict[str, Any] = {
    "global.hub": "",
    "global.imagePullSecrets": [],
    "scheduler.name": "ome-scheduler",
    "scheduler.image.repository": "ome-scheduler",
    "scheduler.image.tag": "latest",
    "scheduler.image.pullPolicy": "IfNotPresent",
    "scheduler.imagePullSecrets": [],
    "scheduler.replicaCount": 2,
    "scheduler.leaderElect": True,
    "scheduler.omeControllerIntegration.enabled": True,
    "scheduler.deploymentStrategy.type": "RollingUpdate",
    "scheduler.deploymentStrategy.rollingUpdate.maxUnavailable": 1,
    "scheduler.deploymentStrategy.rollingUpdate.maxSurge": 0,
    "scheduler.podDisruptionBudget.enabled": True,
    "scheduler.podDisruptionBudget.minAvailable": 1,
    "scheduler.verbosity": 2,
    "scheduler.disablePreemption": True,
    "scheduler.disablePodTopologySpreadScore": True,
    "scheduler.percentageOfNodesToScore": None,
    "scheduler.omeGangPack.scoreWeight": 10,
    "scheduler.nodeResourcesFit.scoreWeight": 10,
    "scheduler.nodeResourcesFit.resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
    "scheduler.plugin.topologyKey": "",
    "scheduler.plugin.podGroupTopologyKeyAnnotation": "ome.io/topology-key",
    "scheduler.plugin.unsupportedPlacementGroupLabel": "ome.io/placement-group",
    "scheduler.plugin.defaultPermitTimeoutSeconds": 600,
    "scheduler.plugin.podGroupSyncTimeoutSeconds": 30,
    "scheduler.plugin.gcIntervalSeconds": 60,
    "scheduler.plugin.standaloneDomainPacking": True,
    # Beyond chart.md's list (issue 30): the operator's cap on Permit waits and holds; 0: none.
    "scheduler.plugin.maxPermitTimeoutSeconds": 0,
    # LWS groups as gangs (issue 25); true is left out of the config.
    "scheduler.plugin.lwsGangs": True,
    # Gang preemption (issue 26, design rule 13); false is left out of the config.
    "scheduler.plugin.preemption": False,
    "scheduler.metrics.bindAddress": "0.0.0.0",
    "scheduler.metrics.securePort": 10259,
    "scheduler.metrics.authDelegation.enabled": True,
    "scheduler.metrics.reader.create": True,
    "scheduler.metrics.reader.serviceAccounts": [],
    "scheduler.metrics.service.enabled": True,
    "scheduler.metrics.service.type": "ClusterIP",
    "scheduler.metrics.service.port": 10259,
    "scheduler.metrics.service.annotations": {},
    "scheduler.metrics.serviceMonitor.enabled": False,
    "scheduler.metrics.serviceMonitor.interval": "30s",
    "scheduler.metrics.serviceMonitor.scrapeTimeout": "10s",
    "scheduler.metrics.serviceMonitor.additionalLabels": {},
    "scheduler.metrics.serviceMonitor.tlsConfig": {},
    "scheduler.metrics.serviceMonitor.relabelings": [],
    "scheduler.metrics.serviceMonitor.metricRelabelings": [],
    "scheduler.metrics.grafanaDashboard.enabled": False,
    "scheduler.metrics.grafanaDashboard.namespace": "",
    "scheduler.metrics.grafanaDashboard.additionalLabels": {},
    "scheduler.metrics.grafanaDashboard.annotations": {},
    "scheduler.probes.liveness.path": "/healthz",
    "scheduler.probes.liveness.initialDelaySeconds": 15,
    "scheduler.probes.liveness.periodSeconds": 20,
    "scheduler.probes.readiness.path": "/readyz",
    "scheduler.probes.readiness.initialDelaySeconds": 5,
    "scheduler.resources": {"requests": {"cpu": "200m", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "12Gi"}},
    "scheduler.nodeSelector": {},
    "scheduler.affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": SELECTOR}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    },
    "scheduler.tolerations": [],
    "scheduler.topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": SELECTOR},
        }
    ],
    "scheduler.podAnnotations": {},
}


def test_values_yaml_has_every_spec_key_with_its_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    seen: set[str] = set()

    def walk(node: Any, path: str) -> None:
        if path in SPEC_DEFAULTS:
            assert node == SPEC_DEFAULTS[path], f"{path}: default {node!r}, spec {SPEC_DEFAULTS[path]!r}"
            assert type(node) is type(SPEC_DEFAULTS[path]), f"{path}: type {type(node).__name__}"
            seen.add(path)
            return
        assert isinstance(node, dict), f"values.yaml has a key the spec does not list: {path}"
        for k, v in node.items():
            walk(v, f"{path}.{k}" if path else k)

    walk(values, "")
    assert seen == set(SPEC_DEFAULTS), f"missing from values.yaml: {sorted(set(SPEC_DEFAULTS) - seen)}"
    # limits.cpu is the string "2", not a number.
    assert values["scheduler"]["resources"]["limits"]["cpu"] == "2"


def _schema_nodes(node: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        yield node
        for v in node.values():
            yield from _schema_nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from _schema_nodes(v)


def test_schema_is_draft07_requires_the_spec_keys_and_allows_unknown_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["required"] == ["scheduler"]
    s = schema["properties"]["scheduler"]
    assert set(s["required"]) == {
        "name",
        "replicaCount",
        "leaderElect",
        "omeControllerIntegration",
        "deploymentStrategy",
        "plugin",
        "omeGangPack",
        "nodeResourcesFit",
        "metrics",
        "probes",
        "podDisruptionBudget",
    }
    assert len(s["properties"]["plugin"]["required"]) == 7
    assert set(s["properties"]["metrics"]["required"]) == {"bindAddress", "securePort", "service"}
    assert all("additionalProperties" not in n for n in _schema_nodes(schema))
    # ...so a misspelled key is accepted without a word (documented behaviour).
    render(merge(sched(replicaCnt=5), {"typo": {"x": 1}}))


# ---- §3.1: the objects of the default values --------------------------------------------------

DEFAULT_OBJECTS = {
    ("v1", "ServiceAccount", "ome-scheduler", NS),
    ("v1", "ConfigMap", "ome-scheduler-config", NS),
    ("apps/v1", "Deployment", "ome-scheduler", NS),
    ("v1", "Service", "ome-scheduler-metrics", NS),
    ("policy/v1", "PodDisruptionBudget", "ome-scheduler", NS),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "ome-scheduler", None),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "ome-scheduler", None),
    ("rbac.authorization.k8s.io/v1", "Role", "ome-scheduler-leader-election", NS),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "ome-scheduler-leader-election", NS),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "ome-scheduler-auth-delegator", None),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "ome-scheduler-metrics-reader", None),
}


def test_defaults_render_exactly_the_objects_of_3_1() -> None:
    docs = render()
    assert kinds_names(docs) == DEFAULT_OBJECTS
    assert len(docs) == len(DEFAULT_OBJECTS)
    assert not any(d["kind"] in ("CustomResourceDefinition", "Namespace") for d in docs)


def test_every_object_and_the_pod_template_carry_the_full_label_set() -> None:
    docs = render(sched(metrics={"reader": {"serviceAccounts": [{"name": "p", "namespace": "m"}]}}))
    for d in docs:
        assert d["metadata"]["labels"] == LABELS, d["metadata"]["name"]
    dep = by_kind(docs, "Deployment")
    assert dep["spec"]["template"]["metadata"]["labels"] == LABELS
    assert dep["spec"]["selector"] == {"matchLabels": SELECTOR}


def test_bindings_bind_the_chart_service_account_to_its_own_roles() -> None:
    docs = render()
    subject = [{"kind": "ServiceAccount", "name": "ome-scheduler", "namespace": NS}]
    expected = {
        ("ClusterRoleBinding", "ome-scheduler"): ("ClusterRole", "ome-scheduler"),
        ("RoleBinding", "ome-scheduler-leader-election"): ("Role", "ome-scheduler-leader-election"),
        ("ClusterRoleBinding", "ome-scheduler-auth-delegator"): ("ClusterRole", "system:auth-delegator"),
    }
    bindings = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"].endswith("Binding")}
    assert bindings == set(expected)  # the metrics-reader binding is off by default
    for (kind, name), (ref_kind, ref_name) in expected.items():
        b = by_kind(docs, kind, name)
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref_name}
        assert b["subjects"] == subject
    assert by_kind(docs, "RoleBinding", "ome-scheduler-leader-election")["metadata"]["namespace"] == NS


# Issue 13 (least privilege) overrides chart.md §3.6, which binds system:kube-scheduler and
# system:volume-scheduler: the chart grants exactly what ome-scheduler does with the API server.
SCHEDULER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["persistentvolumes", "persistentvolumeclaims"],
        "verbs": ["list", "watch", "patch"],
    },
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["list", "watch"]},
    # DynamicResources (issue 24): informers, and PreBind's claim and claim status patches.
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices", "deviceclasses"], "verbs": ["list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch"]},
    # NodeVolumeLimits' attach limits and attached volumes (issue 27).
    {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes", "volumeattachments"], "verbs": ["list", "watch"]},
    # VolumeBinding's capacity-aware provisioning (issue 27).
    {"apiGroups": ["storage.k8s.io"], "resources": ["csidrivers", "csistoragecapacities"], "verbs": ["list", "watch"]},
    # PodTopologySpread's default constraints: the selectors of a pod's Services and controller (issue 27).
    {"apiGroups": [""], "resources": ["services", "replicationcontrollers"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets", "statefulsets"], "verbs": ["list", "watch"]},
    # DefaultPreemption's PodDisruptionBudgets (issue 26).
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["get", "list", "watch", "patch"]},
    # The leader keeps PodGroup status and its ome.io/ placement annotations (issue 15).
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups/status"], "verbs": ["update"]},
    # An LWS group's startupPolicy, for its gang (issue 25).
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]
LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resourceNames": ["ome-scheduler"],
        "resources": ["leases"],
        "verbs": ["get", "update"],
    },
]


def test_pods_are_deleted_only_when_preemption_is_enabled() -> None:
    """Issue 26: DefaultPreemption deletes its victims; the chart grants that only with
    ``scheduler.disablePreemption: false``, right after the status patch rule."""
    rules = by_kind(render(sched(disablePreemption=False)), "ClusterRole", "ome-scheduler")["rules"]
    i = rules.index({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]})
    assert rules[i + 1] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}
    assert [r for j, r in enumerate(rules) if j != i + 1] == SCHEDULER_RULES


def test_least_privilege_roles_and_the_metrics_reader_in_flow_style() -> None:
    text = render_text()
    docs = render()
    assert by_kind(docs, "ClusterRole", "ome-scheduler")["rules"] == SCHEDULER_RULES
    role = by_kind(docs, "Role", "ome-scheduler-leader-election")
    assert role["metadata"]["namespace"] == NS  # the Lease's namespace (leaderElection.resourceNamespace)
    assert config()["leaderElection"]["resourceNamespace"] == NS
    assert role["rules"] == LEASE_RULES
    reader = by_kind(docs, "ClusterRole", "ome-scheduler-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    # The upstream render test greps these fixed strings.
    assert 'resources: ["podgroups"]' in text
    assert 'nonResourceURLs: ["/metrics"]' in text
    assert 'verbs: ["get"]' in text
    # Its other check (no "resources: [\"pods\"]" or "[\"nodes\"]" copied from the built-in roles)
    # no longer applies: those roles are exactly what issue 13 removes. What they granted beyond
    # ome-scheduler's needs is nowhere.
    rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    for r in rules:
        assert "*" not in r["verbs"] and "*" not in r.get("resources", []) and "*" not in r.get("apiGroups", [])
        assert not {"delete", "deletecollection", "escalate", "bind", "impersonate"} & set(r["verbs"])
        assert "kube-scheduler" not in r.get("resourceNames", [])
    for built_in in ("system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"):
        assert built_in not in text


def test_every_rbac_rule_says_why() -> None:
    """Each rule of the chart's own roles follows a comment (the scheduler's roles), and what the
    e2e audit test cannot provoke is listed as "rarely used:" with why, naming a granted verb."""
    text = render_text()
    for doc in text.split("\n---\n"):
        if not re.search(r"^kind: (ClusterRole|Role)$", doc, re.M) or "metrics-reader" in doc:
            continue
        lines = doc.splitlines()
        rule_lines = [i for i, line in enumerate(lines) if line.startswith("  - apiGroups:")]
        assert rule_lines
        for i in rule_lines:
            assert lines[i - 1].lstrip().startswith("#"), f"rule without a comment: {lines[i]!r} in\n{doc}"
    rare = rarely_used(text)
    assert set(rare) == {
        Permission("get", "pods"),
        Permission("get", "podgroups.scheduling.x-k8s.io"),
        Permission("get", "resourceclaims.resource.k8s.io"),
    }
    granted = set().union(*(rule_permissions(r) for r in SCHEDULER_RULES))
    assert set(rare) <= granted
    assert all(len(why) > 40 for why in rare.values())


def test_deployment_of_3_2() -> None:
    docs = render()
    dep = by_kind(docs, "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    tpl = spec["template"]
    assert list(tpl["metadata"]["annotations"]) == ["checksum/config"]
    pod = tpl["spec"]
    assert pod["serviceAccountName"] == "ome-scheduler"
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for absent in ("imagePullSecrets", "nodeSelector", "tolerations"):
        assert absent not in pod
    assert pod["affinity"] == SPEC_DEFAULTS["scheduler.affinity"]
    assert pod["topologySpreadConstraints"] == SPEC_DEFAULTS["scheduler.topologySpreadConstraints"]
    assert pod["volumes"] == [{"name": "config", "configMap": {"name": "ome-scheduler-config"}}]
    (c,) = pod["containers"]
    assert c["name"] == "scheduler"
    assert c["image"] == "ome-scheduler:latest"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"] == ["/ome-scheduler"]
    assert c["args"] == [
        "--config=/etc/kubernetes/ome-scheduler/config.yaml",
        "--v=2",
        "--bind-address=0.0.0.0",
        "--secure-port=10259",
    ]
    assert c["ports"] == [{"name": "https-metrics", "containerPort": 10259, "protocol": "TCP"}]
    assert c["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": "https-metrics", "scheme": "HTTPS"},
        "initialDelaySeconds": 15,
        "periodSeconds": 20,
    }
    assert c["readinessProbe"] == {
        "httpGet": {"path": "/readyz", "port": "https-metrics", "scheme": "HTTPS"},
        "initialDelaySeconds": 5,
    }
    assert c["resources"] == {"limits": {"cpu": "2", "memory": "12Gi"}, "requests": {"cpu": "200m", "memory": "4Gi"}}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["volumeMounts"] == [{"name": "config", "mountPath": "/etc/kubernetes/ome-scheduler", "readOnly": True}]
    # No writable volume anywhere: the scheduler keeps its certificate in memory.
    assert all("emptyDir" not in v for v in pod["volumes"])
    # limits.cpu stays a string in the manifest.
    assert 'cpu: "2"' in render_text()


def test_the_scheduler_cli_accepts_the_container_args() -> None:
    from ome_scheduler.app.options import parse

    c = container(sched(verbosity=4, metrics={"bindAddress": "127.0.0.1", "securePort": 11259}))
    opts = parse(list(c["args"]))
    assert opts.config == "/etc/kubernetes/ome-scheduler/config.yaml"
    assert (opts.v, opts.bind_address, opts.secure_port) == (4, "127.0.0.1", 11259)


def test_service_and_pdb() -> None:
    docs = render()
    svc = by_kind(docs, "Service")
    assert "annotations" not in svc["metadata"]
    assert svc["spec"] == {
        "type": "ClusterIP",
        "selector": SELECTOR,
        "ports": [{"name": "https-metrics", "port": 10259, "targetPort": "https-metrics", "protocol": "TCP"}],
    }
    pdb = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}}

    svc = by_kind(
        render(sched(metrics={"service": {"type": "NodePort", "port": 9443, "annotations": {"a/b": "c"}}})), "Service"
    )
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"][0]["port"] == 9443
    assert svc["metadata"]["annotations"] == {"a/b": "c"}
    pdb = by_kind(render(sched(replicaCount=3, podDisruptionBudget={"minAvailable": 2})), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2


# ---- §3.3: the KubeSchedulerConfiguration -----------------------------------------------------


def test_configmap_content_is_exactly_3_3_for_defaults() -> None:
    text = config_text()
    assert text == DEFAULT_CONFIG_YAML
    assert yaml.safe_load(text) == yaml.safe_load(DEFAULT_CONFIG_YAML)
    assert_scheduler_accepts(text)


def test_configmap_matches_the_e2e_harness_default_config() -> None:
    from tests.support.manifests import chart_config

    assert config() == chart_config(leader_elect=True, lease_namespace=NS)


def test_demo_config_and_built_in_default_are_the_chart_default() -> None:
    from ome_scheduler.config.load import DEFAULT_CONFIG

    in_kube_system = config(namespace="kube-system")
    assert yaml.safe_load((REPO / "examples" / "demo" / "config.yaml").read_text()) == in_kube_system
    assert DEFAULT_CONFIG == in_kube_system


def test_operators_config_is_the_chart_with_the_clique_topology_key() -> None:
    from tests.support.manifests import chart_config

    rendered = config(sched(plugin={"topologyKey": "nvidia.com/gpu.clique"}), namespace="kube-system")
    assert yaml.safe_load((REPO / "examples" / "operators" / "config.yaml").read_text()) == rendered
    assert rendered == chart_config(topology_key="nvidia.com/gpu.clique", leader_elect=True)


def test_the_permit_cap_is_rendered_only_when_set() -> None:
    """``scheduler.plugin.maxPermitTimeoutSeconds`` (issue 30): 0 leaves it out (no cap, today's
    behaviour); a positive value becomes OMEGangPack's argument, which the scheduler accepts."""
    assert "maxPermitTimeoutSeconds" not in config_text()
    text = config_text(sched(plugin={"maxPermitTimeoutSeconds": 3600}))
    (gang,) = [p for p in yaml.safe_load(text)["profiles"][0]["pluginConfig"] if p["name"] == "OMEGangPack"]
    assert gang["args"]["maxPermitTimeoutSeconds"] == 3600
    assert_scheduler_accepts(text)
    assert "maxPermitTimeoutSeconds" in render_error(sched(plugin={"maxPermitTimeoutSeconds": -1}))


def test_gang_preemption_is_off_by_default_and_on_renders_the_argument() -> None:
    """``scheduler.plugin.preemption`` (issue 26): false (the default) leaves the argument out;
    true becomes OMEGangPack's ``preemption: true``, which the scheduler accepts."""
    assert "preemption: true" not in config_text()
    text = config_text(sched(plugin={"preemption": True}))
    (gang,) = [p for p in yaml.safe_load(text)["profiles"][0]["pluginConfig"] if p["name"] == "OMEGangPack"]
    assert gang["args"]["preemption"] is True
    assert_scheduler_accepts(text)
    assert "preemption" in render_error(sched(plugin={"preemption": "yes"}))


def test_lws_gangs_are_on_by_default_and_off_renders_the_argument() -> None:
    """``scheduler.plugin.lwsGangs`` (issue 25): true (the default) leaves the argument out, as
    the scheduler's default is on; false becomes ``lwsGangs: false``, which the scheduler
    accepts; a non-boolean is refused by the schema."""
    assert "lwsGangs" not in config_text()
    text = config_text(sched(plugin={"lwsGangs": False}))
    (gang,) = [p for p in yaml.safe_load(text)["profiles"][0]["pluginConfig"] if p["name"] == "OMEGangPack"]
    assert gang["args"]["lwsGangs"] is False
    assert_scheduler_accepts(text)
    assert SCHEMA_ERROR in render_error(sched(plugin={"lwsGangs": "no"}))


def test_configmap_indentation_bytes() -> None:
    text = render_text(sched(percentageOfNodesToScore=50, plugin={"topologyKey": "nvidia.com/gpu.clique"}))
    assert "\n  config.yaml: |\n    apiVersion: kubescheduler.config.k8s.io/v1\n" in text
    assert "\n        percentageOfNodesToScore: 50\n" in text
    assert "\n          multiPoint:\n" in text
    assert "\n          score:\n" in text
    for name in ("OMEGangPack", "NodeResourcesFit", "PodTopologySpread", "DefaultPreemption"):
        assert f"\n              - name: {name}\n" in text
    for arg in (
        'topologyKey: "nvidia.com/gpu.clique"',
        'podGroupTopologyKeyAnnotation: "ome.io/topology-key"',
        'unsupportedPlacementGroupLabel: "ome.io/placement-group"',
        "defaultPermitTimeoutSeconds: 600",
        "podGroupSyncTimeoutSeconds: 30",
        "gcIntervalSeconds: 60",
        "standaloneDomainPacking: true",
    ):
        assert f"\n              {arg}\n" in text
    assert "\n                type: MostAllocated\n" in text


def test_percentage_of_nodes_to_score_is_absent_by_default_and_under_the_profile_when_set() -> None:
    assert "percentageOfNodesToScore" not in render_text()
    p = profile(sched(percentageOfNodesToScore=1))
    assert list(p)[:3] == ["schedulerName", "percentageOfNodesToScore", "plugins"]
    assert p["percentageOfNodesToScore"] == 1
    assert "percentageOfNodesToScore" not in config(sched(percentageOfNodesToScore=100))


def test_leader_election_block_follows_name_and_namespace() -> None:
    le = config(
        merge(sched(name="gpu-sched", replicaCount=1, leaderElect=False, podDisruptionBudget={"enabled": False}))
    )["leaderElection"]
    assert le == {"leaderElect": False, "resourceName": "gpu-sched", "resourceNamespace": NS}
    assert "resourceLock" not in le
    le = config(namespace="schedulers")["leaderElection"]
    assert le == {"leaderElect": True, "resourceName": "ome-scheduler", "resourceNamespace": "schedulers"}


def test_behaviour_switches_in_the_profile() -> None:
    v = sched(disablePreemption=False, disablePodTopologySpreadScore=False, nodeResourcesFit={"resources": []})
    p = profile(v)
    assert p["plugins"]["multiPoint"] == {"enabled": [{"name": "OMEGangPack"}]}
    assert "disabled" not in p["plugins"]["score"]
    assert fit_args(v) == {"scoringStrategy": {"type": "MostAllocated"}}
    assert_scheduler_accepts(config_text(v))

    v = sched(
        omeGangPack={"scoreWeight": 1000000},
        nodeResourcesFit={"scoreWeight": 7},
        plugin={
            "unsupportedPlacementGroupLabel": "",
            "defaultPermitTimeoutSeconds": 1,
            "podGroupSyncTimeoutSeconds": 5,
            "gcIntervalSeconds": 3,
            "standaloneDomainPacking": False,
        },
    )
    p = profile(v)
    assert p["plugins"]["score"]["enabled"] == [
        {"name": "NodeResourcesFit", "weight": 7},
        {"name": "OMEGangPack", "weight": 1000000},
    ]
    assert gang_args(v) == {
        "podGroupTopologyKeyAnnotation": "ome.io/topology-key",
        "unsupportedPlacementGroupLabel": "",
        "defaultPermitTimeoutSeconds": 1,
        "podGroupSyncTimeoutSeconds": 5,
        "gcIntervalSeconds": 3,
        "standaloneDomainPacking": False,
    }
    assert '\n              unsupportedPlacementGroupLabel: ""\n' in render_text(v)
    assert_scheduler_accepts(config_text(v))


def test_a_custom_name_names_every_object_but_not_the_selector_labels() -> None:
    name = "a" * 55
    docs = render(sched(name=name))
    assert {d["metadata"]["name"] for d in docs} == {
        n.replace("ome-scheduler", name, 1) for (_, _, n, _) in DEFAULT_OBJECTS
    }
    assert len(f"{name}-metrics") == 63
    dep = by_kind(docs, "Deployment")
    assert dep["spec"]["selector"]["matchLabels"] == SELECTOR
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert profile(sched(name=name))["schedulerName"] == name
    assert config(sched(name=name))["leaderElection"]["resourceName"] == name
    assert by_kind(docs, "Role", f"{name}-leader-election")["rules"][1]["resourceNames"] == [name]
    assert by_kind(docs, "ClusterRoleBinding", name)["roleRef"]["name"] == name
    for d in docs:
        for s in d.get("subjects", []):
            assert s == {"kind": "ServiceAccount", "name": name, "namespace": NS}


# ---- §2: pod-shape and image values ------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "image"),
    [
        ({}, "ome-scheduler:latest"),
        ({"global": {"hub": "registry.example.com/ome"}}, "registry.example.com/ome/ome-scheduler:latest"),
        (
            merge({"global": {"hub": "hub.example.com"}}, sched(image={"repository": "other.example.com/x/sched"})),
            "other.example.com/x/sched:latest",
        ),
        (sched(image={"repository": "quay.io/me/ome-scheduler", "tag": "v2"}), "quay.io/me/ome-scheduler:v2"),
    ],
)
def test_image_hub_rule(values: dict[str, Any], image: str) -> None:
    assert container(values)["image"] == image


def test_pod_shape_values_are_copied() -> None:
    v = merge(
        {"global": {"imagePullSecrets": [{"name": "global-secret"}]}},
        sched(
            image={"pullPolicy": "Always"},
            nodeSelector={"pool": "system"},
            tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            affinity=None,  # Helm merges maps, so a null (not {}) removes the default affinity
            topologySpreadConstraints=[],
            resources={"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": None},
            podAnnotations={"prometheus.io/scrape": "true", "prometheus.io/scheme": "https"},
            deploymentStrategy={"rollingUpdate": {"maxUnavailable": "50%", "maxSurge": "25%"}},
            probes={"liveness": {"path": "/livez", "initialDelaySeconds": 0, "periodSeconds": 1}},
        ),
    )
    dep = deployment(v)
    pod = dep["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "global-secret"}]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    assert "affinity" not in pod and "topologySpreadConstraints" not in pod
    assert list(dep["spec"]["template"]["metadata"]["annotations"]) == [
        "checksum/config",
        "prometheus.io/scheme",
        "prometheus.io/scrape",
    ]
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": "50%", "maxSurge": "25%"}
    c = pod["containers"][0]
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "1Gi"}}
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert (c["livenessProbe"]["initialDelaySeconds"], c["livenessProbe"]["periodSeconds"]) == (0, 1)

    pod = deployment(merge(v, sched(imagePullSecrets=[{"name": "own"}])))["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "own"}]


def test_optional_rbac_and_metrics_objects() -> None:
    docs = render(sched(metrics={"authDelegation": {"enabled": False}}))
    assert "ome-scheduler-auth-delegator" not in {d["metadata"]["name"] for d in docs}
    # /metrics keeps working without it: the scheduler's own ClusterRole grants the same two verbs.
    granted = set().union(*(rule_permissions(r) for r in by_kind(docs, "ClusterRole", "ome-scheduler")["rules"]))
    assert {Permission.parse("create tokenreviews.authentication.k8s.io")} <= granted
    assert {Permission.parse("create subjectaccessreviews.authorization.k8s.io")} <= granted
    # Without leader election there is no Lease to touch, so no Role for it.
    docs = render(sched(replicaCount=1, leaderElect=False, podDisruptionBudget={"enabled": False}))
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    assert by_kind(docs, "ClusterRole", "ome-scheduler")["rules"] == SCHEDULER_RULES
    sa = [{"name": "prometheus", "namespace": "monitoring"}]
    names = {d["metadata"]["name"] for d in render(sched(metrics={"reader": {"create": False, "serviceAccounts": sa}}))}
    assert "ome-scheduler-metrics-reader" not in names
    docs = render(sched(metrics={"service": {"enabled": False}}))
    assert not [d for d in docs if d["kind"] == "Service"]
    docs = render(sched(podDisruptionBudget={"enabled": False}))
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    # minAvailable 0 keeps the PDB with one replica.
    docs = render(sched(replicaCount=1, podDisruptionBudget={"minAvailable": 0}))
    assert by_kind(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 0


def test_service_monitor_options() -> None:
    v = sched(
        metrics={
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "scrapeTimeout": "5s",
                "additionalLabels": {"release": "kube-prometheus"},
                "tlsConfig": {"ca": {"secret": {"name": "ca", "key": "ca.crt"}}, "serverName": "ome-scheduler"},
                "relabelings": [{"action": "labeldrop", "regex": "pod"}],
                "metricRelabelings": [{"action": "drop", "regex": "go_.*", "sourceLabels": ["__name__"]}],
            }
        }
    )
    sm = by_kind(render(v, namespace="monitoring-ns"), "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == "monitoring-ns"
    assert sm["metadata"]["labels"] == {**LABELS, "release": "kube-prometheus"}
    assert sm["spec"]["selector"] == {"matchLabels": SELECTOR}
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["monitoring-ns"]}
    (ep,) = sm["spec"]["endpoints"]
    assert ep == {
        "port": "https-metrics",
        "path": "/metrics",
        "scheme": "https",
        "interval": "15s",
        "scrapeTimeout": "5s",
        "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "tlsConfig": {"ca": {"secret": {"name": "ca", "key": "ca.crt"}}, "serverName": "ome-scheduler"},
        "relabelings": [{"action": "labeldrop", "regex": "pod"}],
        "metricRelabelings": [{"action": "drop", "regex": "go_.*", "sourceLabels": ["__name__"]}],
    }


# ---- the Grafana dashboard (issue 16; beyond chart.md, off by default) -----------------------------

DASHBOARD = CHART / "dashboards" / "ome-scheduler.json"
METRIC_NAME = re.compile(r"\b((?:ome_scheduler|scheduler|leader_election)_[a-z0-9_]+)\b")


def dashboard_queries(dash: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel."""
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


def exported_metric_names() -> set[str]:
    """Every sample name ome-scheduler's registry exports (histogram and counter suffixes included)."""
    from ome_scheduler.metrics import Metrics

    names: set[str] = set()
    for fam in Metrics().registry.collect():
        names.add(fam.name)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(fam.type, ())
        names.update(fam.name + s for s in suffixes)
    return names


def test_grafana_dashboard_configmap_for_the_sidecar() -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("grafana-dashboard")]  # off by default
    docs = render(sched(metrics={"grafanaDashboard": {"enabled": True}}))
    cm = by_kind(docs, "ConfigMap", "ome-scheduler-grafana-dashboard")
    assert cm["metadata"]["namespace"] == NS
    assert cm["metadata"]["labels"] == {**LABELS, "grafana_dashboard": "1"}
    assert "annotations" not in cm["metadata"]
    assert json.loads(cm["data"]["ome-scheduler.json"]) == json.loads(DASHBOARD.read_text())
    # The config checksum covers the scheduler's ConfigMap only: the dashboard does not roll the pods.
    assert _checksum(sched(metrics={"grafanaDashboard": {"enabled": True}})) == _checksum()
    v = sched(
        name="gang-sched",
        metrics={
            "grafanaDashboard": {
                "enabled": True,
                "namespace": "monitoring",
                "additionalLabels": {"team": "ml"},
                "annotations": {"grafana_folder": "ome"},
            }
        },
    )
    cm = by_kind(render(v), "ConfigMap", "gang-sched-grafana-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"] == {**LABELS, "grafana_dashboard": "1", "team": "ml"}
    assert cm["metadata"]["annotations"] == {"grafana_folder": "ome"}


@pytest.mark.parametrize(("path", "bad"), [("enabled", "yes"), ("namespace", 3), ("annotations", "x")])
def test_schema_checks_the_grafana_dashboard_values(path: str, bad: Any) -> None:
    err = render_error(dotted(f"scheduler.metrics.grafanaDashboard.{path}", bad))
    assert SCHEMA_ERROR in err and f"/grafanaDashboard/{path}" in err, err


def test_dashboard_panels_cover_the_promised_topics_and_only_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "ome-scheduler" and dash["title"] == "ome-scheduler"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert set(variables) == {"datasource", "job", "topology_key"}
    titles = {p["title"] for p in dash["panels"]}
    for topic in (
        "Scheduling throughput",
        "Scheduling latency",
        "Pending pods by queue",
        "Gang bind skew",
        "Gang scheduling duration",
        "Holds and unwinds",
        "Free nodes",
        "Largest gang that still fits",
        "Leader status",
    ):
        assert topic in titles, topic
    exported = exported_metric_names()
    queries = dashboard_queries(dash)
    assert len(queries) >= 15
    for title, expr in queries:
        names = METRIC_NAME.findall(expr)
        assert names, (title, expr)
        assert set(names) <= exported, (title, set(names) - exported)
        assert 'job=~"$job"' in expr, (title, expr)  # every query follows the job picker
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
    # Every metric family of docs/operations/metrics.md that the issue names is on the board.
    used = {n for _, e in queries for n in METRIC_NAME.findall(e)}
    for family in (
        "scheduler_schedule_attempts_total",
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pending_pods",
        "ome_scheduler_gang_bind_skew_seconds_bucket",
        "ome_scheduler_gang_scheduling_duration_seconds_bucket",
        "ome_scheduler_pinned_groups",
        "ome_scheduler_gang_unwind_total",
        "ome_scheduler_domain_free_nodes",
        "ome_scheduler_domain_max_gang_size",
        "leader_election_master_status",
    ):
        assert family in used, family


# ---- §4.1: schema limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("scheduler.name", "Invalid_Name"),
        ("scheduler.name", "a" * 56),
        ("scheduler.name", ""),
        ("scheduler.name", "-leading-dash"),
        ("scheduler.name", "trailing-dash-"),
        ("scheduler.replicaCount", 0),
        ("scheduler.replicaCount", 1.5),
        ("scheduler.leaderElect", "yes"),
        ("scheduler.omeControllerIntegration.enabled", "true"),
        ("scheduler.deploymentStrategy.type", "Recreate"),
        ("scheduler.deploymentStrategy.rollingUpdate.maxUnavailable", -1),
        ("scheduler.deploymentStrategy.rollingUpdate.maxSurge", -1),
        ("scheduler.podDisruptionBudget.enabled", "no"),
        ("scheduler.podDisruptionBudget.minAvailable", -1),
        ("scheduler.percentageOfNodesToScore", 0),
        ("scheduler.percentageOfNodesToScore", 101),
        ("scheduler.percentageOfNodesToScore", 50.5),
        ("scheduler.percentageOfNodesToScore", "50"),
        ("scheduler.omeGangPack.scoreWeight", 0),
        ("scheduler.omeGangPack.scoreWeight", 1000001),
        ("scheduler.nodeResourcesFit.scoreWeight", 0),
        ("scheduler.nodeResourcesFit.scoreWeight", 1000001),
        ("scheduler.nodeResourcesFit.resources", [{"name": "cpu", "weight": 0}]),
        ("scheduler.nodeResourcesFit.resources", [{"name": "", "weight": 1}]),
        ("scheduler.nodeResourcesFit.resources", [{"name": "cpu"}]),
        ("scheduler.nodeResourcesFit.resources", [{"weight": 1}]),
        ("scheduler.nodeResourcesFit.resources", "cpu"),
        ("scheduler.plugin.topologyKey", 5),
        ("scheduler.plugin.podGroupTopologyKeyAnnotation", ""),
        ("scheduler.plugin.unsupportedPlacementGroupLabel", False),
        ("scheduler.plugin.defaultPermitTimeoutSeconds", 0),
        ("scheduler.plugin.podGroupSyncTimeoutSeconds", 0),
        ("scheduler.plugin.gcIntervalSeconds", 0),
        ("scheduler.plugin.gcIntervalSeconds", -60),
        ("scheduler.plugin.standaloneDomainPacking", "true"),
        ("scheduler.metrics.bindAddress", ""),
        ("scheduler.metrics.securePort", 0),
        ("scheduler.metrics.securePort", 65536),
        ("scheduler.metrics.service.enabled", 1),
        ("scheduler.metrics.service.type", "ExternalName"),
        ("scheduler.metrics.service.port", 0),
        ("scheduler.metrics.service.port", 65536),
        ("scheduler.probes.liveness.path", "healthz"),
        ("scheduler.probes.liveness.initialDelaySeconds", -1),
        ("scheduler.probes.liveness.periodSeconds", 0),
        ("scheduler.probes.readiness.path", "readyz"),
        ("scheduler.probes.readiness.initialDelaySeconds", -1),
        ("scheduler.affinity", "anti"),
        ("scheduler.topologySpreadConstraints", ["spread"]),
    ],
)
def test_schema_rejects(path: str, bad: Any) -> None:
    err = render_error(dotted(path, bad))
    assert SCHEMA_ERROR in err
    assert "at '/" + "/".join(path.split(".")) in err, err


@pytest.mark.parametrize(
    "path",
    [
        "scheduler",
        "scheduler.name",
        "scheduler.replicaCount",
        "scheduler.leaderElect",
        "scheduler.omeControllerIntegration",
        "scheduler.omeControllerIntegration.enabled",
        "scheduler.deploymentStrategy",
        "scheduler.deploymentStrategy.type",
        "scheduler.deploymentStrategy.rollingUpdate.maxSurge",
        "scheduler.plugin",
        "scheduler.plugin.topologyKey",
        "scheduler.plugin.gcIntervalSeconds",
        "scheduler.plugin.standaloneDomainPacking",
        "scheduler.omeGangPack.scoreWeight",
        "scheduler.nodeResourcesFit.resources",
        "scheduler.metrics.bindAddress",
        "scheduler.metrics.service.port",
        "scheduler.probes.liveness.periodSeconds",
        "scheduler.probes.readiness",
        "scheduler.podDisruptionBudget.minAvailable",
    ],
)
def test_schema_requires(path: str) -> None:
    # A null in a values file deletes the key from the chart's defaults.
    err = render_error(dotted(path, None))
    assert SCHEMA_ERROR in err
    assert f"missing property '{path.rsplit('.', 1)[-1]}'" in err, err


@pytest.mark.parametrize(
    ("path", "good"),
    [
        ("scheduler.name", "a" * 55),
        ("scheduler.name", "x"),
        ("scheduler.name", "ome-scheduler-2"),
        ("scheduler.percentageOfNodesToScore", 1),
        ("scheduler.percentageOfNodesToScore", 100),
        ("scheduler.omeGangPack.scoreWeight", 1000000),
        ("scheduler.nodeResourcesFit.scoreWeight", 1),
        ("scheduler.deploymentStrategy.rollingUpdate.maxUnavailable", "25%"),
        ("scheduler.deploymentStrategy.rollingUpdate.maxSurge", 0),
        ("scheduler.metrics.securePort", 65535),
        ("scheduler.metrics.securePort", 1),
        ("scheduler.metrics.service.port", 65535),
        ("scheduler.metrics.service.type", "LoadBalancer"),
        ("scheduler.plugin.unsupportedPlacementGroupLabel", ""),
        ("scheduler.probes.readiness.initialDelaySeconds", 0),
    ],
)
def test_schema_accepts_the_limits(path: str, good: Any) -> None:
    render(dotted(path, good))


# ---- §4.2: fail rules, §4.3: kubeVersion ----------------------------------------------------------


def _assert_fail(values: Mapping[str, Any], message: str) -> None:
    err = render_error(values)
    assert SCHEMA_ERROR not in err
    assert f": {message}\n" in err, err


def test_fail_more_than_one_replica_without_leader_election() -> None:
    _assert_fail(sched(leaderElect=False), FAIL_LEADER)
    _assert_fail(sched(leaderElect=False, replicaCount=3, podDisruptionBudget={"enabled": False}), FAIL_LEADER)
    render(sched(leaderElect=False, replicaCount=1, podDisruptionBudget={"enabled": False}))


def test_fail_annotation_locked_while_ome_integration_is_on() -> None:
    v = sched(plugin={"podGroupTopologyKeyAnnotation": "example.com/domain"})
    _assert_fail(v, FAIL_ANNOTATION)
    v = merge(v, sched(omeControllerIntegration={"enabled": False}))
    assert gang_args(v)["podGroupTopologyKeyAnnotation"] == "example.com/domain"
    assert_scheduler_accepts(config_text(v))


def test_fail_pdb_min_available_not_below_replicas() -> None:
    _assert_fail(sched(podDisruptionBudget={"minAvailable": 2}), FAIL_PDB)
    _assert_fail(sched(replicaCount=1), FAIL_PDB)
    render(sched(replicaCount=1, podDisruptionBudget={"enabled": False, "minAvailable": 5}))


def test_fail_service_monitor_without_service() -> None:
    _assert_fail(sched(metrics={"serviceMonitor": {"enabled": True}, "service": {"enabled": False}}), FAIL_MONITOR)
    assert "\u2014" in FAIL_MONITOR


@pytest.mark.parametrize("version", ["1.34.99", "1.36.0", "1.34.0", "1.36.1"])
def test_kube_version_guard_refuses_other_minors(version: str) -> None:
    err = render_error(kube_version=version)
    assert f"chart requires kubeVersion: >=1.35.0-0 <1.36.0-0 which is incompatible with Kubernetes v{version}" in err


@pytest.mark.parametrize("version", ["1.35.0", "1.35.4", "1.35.99"])
def test_kube_version_guard_accepts_1_35(version: str) -> None:
    assert kinds_names(render(kube_version=version)) == DEFAULT_OBJECTS


# ---- §4.4: rollout on config change ------------------------------------------------------------


def _checksum(values: Mapping[str, Any] | None = None) -> str:
    return str(deployment(values)["spec"]["template"]["metadata"]["annotations"]["checksum/config"])


def test_checksum_is_the_sha256_of_the_rendered_configmap() -> None:
    text = render_text()
    cm_doc = next(
        doc for doc in text.split("---\n") if doc.startswith("# Source: ome-scheduler/templates/configmap.yaml\n")
    )
    manifest = cm_doc.split("\n", 1)[1]
    assert _checksum() == hashlib.sha256(manifest.encode()).hexdigest()


@pytest.mark.parametrize(
    "change",
    [
        sched(plugin={"gcIntervalSeconds": 120}),
        sched(plugin={"topologyKey": "nvidia.com/gpu.clique"}),
        sched(percentageOfNodesToScore=100),
        sched(omeGangPack={"scoreWeight": 20}),
        sched(disablePreemption=False),
    ],
)
def test_a_config_change_changes_the_checksum(change: dict[str, Any]) -> None:
    assert _checksum(change) != _checksum()


@pytest.mark.parametrize(
    "change",
    [
        sched(podAnnotations={"example.com/note": "x"}),
        sched(verbosity=4),
        sched(resources={"requests": {"cpu": "1"}}),
        sched(image={"tag": "v9"}),
        sched(replicaCount=3),
    ],
)
def test_an_unrelated_change_keeps_the_checksum(change: dict[str, Any]) -> None:
    assert _checksum(change) == _checksum()


# ---- the user guide's values snippets (use-the-ome-scheduler) -----------------------------------

GUIDE_IMAGE = """
global:
  hub: registry.example.com/ome
scheduler:
  image:
    tag: v1.3.0
"""
GUIDE_ONE_REPLICA = """
scheduler:
  replicaCount: 1
  podDisruptionBudget:
    enabled: false
"""
GUIDE_FALLBACK_KEY = """
scheduler:
  plugin:
    topologyKey: nvidia.com/gpu.clique
"""
GUIDE_PACK_BY_ACCELERATOR = """
scheduler:
  nodeResourcesFit:
    resources:
      - name: nvidia.com/gpu
        weight: 10
      - name: cpu
        weight: 1
      - name: memory
        weight: 1
"""
GUIDE_STANDALONE = """
scheduler:
  plugin:
    topologyKey: nvidia.com/gpu.clique
  percentageOfNodesToScore: 100
"""
GUIDE_METRICS = """
scheduler:
  metrics:
    reader:
      serviceAccounts:
        - name: prometheus
          namespace: monitoring
    serviceMonitor:
      enabled: true
"""
GUIDE_SNIPPETS = [
    GUIDE_IMAGE,
    GUIDE_ONE_REPLICA,
    GUIDE_FALLBACK_KEY,
    GUIDE_PACK_BY_ACCELERATOR,
    GUIDE_STANDALONE,
    GUIDE_METRICS,
]


def guide(*snippets: str) -> dict[str, Any]:
    return merge(*(yaml.safe_load(s) for s in snippets))


def test_guide_image_values_pull_the_promised_image() -> None:
    v = guide(GUIDE_IMAGE)
    assert container(v)["image"] == "registry.example.com/ome/ome-scheduler:v1.3.0"
    assert profile(v)["schedulerName"] == "ome-scheduler"
    assert kinds_names(render(v)) == DEFAULT_OBJECTS


def test_guide_one_replica_without_pdb() -> None:
    docs = render(guide(GUIDE_IMAGE, GUIDE_ONE_REPLICA))
    assert by_kind(docs, "Deployment")["spec"]["replicas"] == 1
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert config(guide(GUIDE_ONE_REPLICA))["leaderElection"]["leaderElect"] is True


def test_guide_fallback_topology_key_is_the_first_quoted_gang_argument() -> None:
    v = guide(GUIDE_FALLBACK_KEY)
    args = gang_args(v)
    assert list(args)[0] == "topologyKey"
    assert args["topologyKey"] == "nvidia.com/gpu.clique"
    assert (
        '\n      - name: OMEGangPack\n        args:\n          topologyKey: "nvidia.com/gpu.clique"\n'
        '          podGroupTopologyKeyAnnotation: "ome.io/topology-key"\n'
    ) in config_text(v)
    assert "topologyKey" not in gang_args()


def test_guide_pack_by_accelerator() -> None:
    v = guide(GUIDE_PACK_BY_ACCELERATOR)
    assert fit_args(v) == {
        "scoringStrategy": {
            "type": "MostAllocated",
            "resources": [
                {"name": "nvidia.com/gpu", "weight": 10},
                {"name": "cpu", "weight": 1},
                {"name": "memory", "weight": 1},
            ],
        }
    }


def test_guide_standalone_packing_scores_every_node_under_the_profile() -> None:
    v = guide(GUIDE_STANDALONE)
    p = profile(v)
    assert p["percentageOfNodesToScore"] == 100
    assert list(p)[:3] == ["schedulerName", "percentageOfNodesToScore", "plugins"]
    assert "percentageOfNodesToScore" not in config(v)  # per profile, not global
    assert gang_args(v)["topologyKey"] == "nvidia.com/gpu.clique"
    assert gang_args(v)["standaloneDomainPacking"] is True
    manifest = render_text(v)  # the document sits at column 4 of the ConfigMap manifest
    assert (
        "\n      - schedulerName: ome-scheduler\n        percentageOfNodesToScore: 100\n        plugins:\n" in manifest
    )


def test_guide_metrics_reader_and_service_monitor() -> None:
    docs = render(guide(GUIDE_METRICS))
    binding = by_kind(docs, "ClusterRoleBinding", "ome-scheduler-metrics-reader")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "ome-scheduler-metrics-reader",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    by_kind(docs, "ClusterRole", "ome-scheduler-metrics-reader")
    sm = by_kind(docs, "ServiceMonitor", "ome-scheduler")
    assert sm["metadata"]["namespace"] == NS
    (ep,) = sm["spec"]["endpoints"]
    assert ep["tlsConfig"] == {"insecureSkipVerify": True}
    assert (ep["port"], ep["path"], ep["scheme"]) == ("https-metrics", "/metrics", "https")
    assert (ep["interval"], ep["scrapeTimeout"]) == ("30s", "10s")
    assert ep["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert "relabelings" not in ep and "metricRelabelings" not in ep
    assert kinds_names(docs) == DEFAULT_OBJECTS | {
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "ome-scheduler-metrics-reader", None),
        ("monitoring.coreos.com/v1", "ServiceMonitor", "ome-scheduler", NS),
    }


@pytest.mark.parametrize(
    "snippets",
    [(), *((s,) for s in GUIDE_SNIPPETS), tuple(GUIDE_SNIPPETS)],
    ids=["defaults", "image", "one-replica", "fallback-key", "pack-gpu", "standalone", "metrics", "all"],
)
def test_the_scheduler_reads_the_rendered_configmap(snippets: tuple[str, ...]) -> None:
    assert_scheduler_accepts(config_text(guide(*snippets)))
