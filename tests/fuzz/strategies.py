"""Hypothesis strategies for the objects kube-apiserver 1.35 accepts, as the JSON it serves.

Every strategy draws the raw JSON dict of an object (camelCase, as a watch event carries it)
within the API server's validation rules (``pkg/apis/core/validation``, the PodGroup CRD's
schema), including the values that are legal but hostile:

* quantities: every suffix, decimal exponents up to the int64 bounds (``1e1000000``, stored by
  the API server as ``10e999999``; ``1e4294967296``, kept verbatim and worth 1), tiny amounts
  (``1e-1000000``, stored as ``1n``), non-canonical forms (``1.``, ``.5``, ``+1``), long digit
  strings;
* label keys and values per ``IsQualifiedName``/``IsValidLabelValue`` (a small shared pool, so
  selectors and topology keys actually meet the labels, plus arbitrary valid ones);
* label selectors with ``In``/``NotIn``/``Exists``/``DoesNotExist``, node selector terms with
  ``Gt``/``Lt`` too and ``matchFields`` on ``metadata.name``;
* tolerations (``Equal``/``Exists``, every effect, any ``tolerationSeconds`` with NoExecute),
  taints, node and pod (anti-)affinity terms (required and preferred), topology spread
  constraints (``minDomains``, policies, ``matchLabelKeys``);
* init containers, sidecars (``restartPolicy: Always``), host ports, overhead, pod-level
  resources, scheduling gates, priorities over the whole int32 range;
* PodGroups with any ``minMember`` >= 1 and ``scheduleTimeoutSeconds`` over int32, and a
  topology-key annotation that may be any string.

* DRA: device classes (one matching nothing, one named but never created), ResourceSlices on one
  node, on a selector's nodes or on all nodes, in pools that may be incomplete or of a newer
  generation; ResourceClaims with ExactCount, All, admin access, ``firstAvailable`` and
  ``matchAttribute``, some already allocated and reserved; pods naming claims (some missing) or
  templates whose claim may not exist yet.

``world()`` draws one small cluster: namespaces, nodes, PodGroups, DRA objects and pods that
refer to each other (pods name the PodGroups and claims, selectors use the node labels).
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# ---- quantities ---------------------------------------------------------------------------------

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
HOSTILE_QUANTITIES = [
    "10e999999",
    "1e1000000",
    "1E1000000",
    "1e-1000000",
    "1n",
    "1e4294967296",
    "1e9223372036854775807",
    "1e-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "8Ei",
    "100Ei",
    "999999999999999999999999999999999999",
    "0.000000000000000000001",
    "1.",
    ".5",
    "+1",
    "0",
    "-",
    ".",
    "1e2147483647",
    "1.5e-2147483647",
    "12345678901234567890e-20",
]

_digits = st.text(string.digits, min_size=0, max_size=25)


@st.composite
def quantity(draw: st.DrawFn, *, nonnegative: bool = True) -> str:
    """A string ``ParseQuantity`` accepts (never negative unless asked)."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.sampled_from(HOSTILE_QUANTITIES))
    if kind <= 15:  # everyday values, as users write them
        return draw(st.sampled_from(["0", "1", "2", "100m", "250m", "500m", "1Gi", "512Mi", "4", "8", "100Mi", "1k"]))
    whole = draw(_digits)
    frac = draw(st.one_of(st.none(), _digits))
    if not whole and not frac:
        whole = draw(st.text(string.digits, min_size=1, max_size=3))
    number = whole + ("." + frac if frac is not None else "")
    sign = draw(st.sampled_from(["", "", "+"] + ([] if nonnegative else ["-"])))
    if draw(st.booleans()):
        suffix = draw(st.sampled_from(SUFFIXES))
        if suffix in ("Pi", "Ei", "Ti") and not any(c.isdigit() for c in number):
            suffix = ""
    else:
        exp = draw(
            st.one_of(
                st.integers(-30, 30),
                st.sampled_from([2**31 - 1, 2**31, 2**32, 10**6, -(10**6), 2**63 - 1, -(2**63)]),
                st.integers(-(2**40), 2**40),
            )
        )
        suffix = draw(st.sampled_from("eE")) + (draw(st.sampled_from(["", "+"])) if exp >= 0 else "") + str(exp)
    return sign + number + suffix


RESOURCE_NAMES = ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "hugepages-2Mi", "example.com/foo", "pods"]


def resource_list(names: list[str] | None = None, max_size: int = 4) -> st.SearchStrategy[dict[str, str]]:
    """A ResourceList of accepted quantities."""
    return st.dictionaries(st.sampled_from(names or RESOURCE_NAMES), quantity(), max_size=max_size)


# ---- labels ---------------------------------------------------------------------------------------

_NAME_CHARS = string.ascii_letters + string.digits


@st.composite
def label_name(draw: st.DrawFn, max_len: int = 63) -> str:
    """``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``, at most ``max_len`` characters."""
    n = draw(st.integers(1, max_len))
    if n == 1:
        return draw(st.sampled_from(_NAME_CHARS))
    middle = draw(st.text(_NAME_CHARS + "-_.", min_size=n - 2, max_size=n - 2))
    return draw(st.sampled_from(_NAME_CHARS)) + middle + draw(st.sampled_from(_NAME_CHARS))


@st.composite
def dns_subdomain(draw: st.DrawFn) -> str:
    """A DNS-1123 subdomain (labels of ``[a-z0-9]([-a-z0-9]*[a-z0-9])?`` joined by dots), <= 253."""
    parts = draw(st.lists(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True), min_size=1, max_size=4))
    return ".".join(parts)[:253].strip(".-") or "a"


KEY_POOL = [
    "app",
    "tier",
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "nvidia.com/gpu.clique",
    "example.com/rack",
    "team",
]
VALUE_POOL = ["a", "b", "c", "web", "db", "1", "10", "-5", "zone-1", "zone-2", "clique-1", "clique-2", ""]


@st.composite
def label_key(draw: st.DrawFn) -> str:
    """A qualified name: mostly from a shared pool, sometimes any valid ``[prefix/]name``."""
    if draw(st.integers(0, 4)):
        return draw(st.sampled_from(KEY_POOL))
    name = draw(label_name())
    return f"{draw(dns_subdomain())}/{name}" if draw(st.booleans()) else name


@st.composite
def label_value(draw: st.DrawFn) -> str:
    """A label value: empty or a label name (<= 63), mostly from a shared pool."""
    if draw(st.integers(0, 4)):
        return draw(st.sampled_from(VALUE_POOL))
    return draw(label_name())


labels = st.dictionaries(label_key(), label_value(), max_size=5)


@st.composite
def label_selector(draw: st.DrawFn) -> dict[str, Any]:
    """A ``metav1.LabelSelector`` (``{}`` selects everything)."""
    exprs = []
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        req: dict[str, Any] = {"key": draw(label_key()), "operator": op}
        if op in ("In", "NotIn"):
            req["values"] = draw(st.lists(label_value(), min_size=1, max_size=3))
        exprs.append(req)
    sel: dict[str, Any] = {}
    if draw(st.booleans()):
        sel["matchLabels"] = draw(st.dictionaries(label_key(), label_value(), max_size=2))
    if exprs:
        sel["matchExpressions"] = exprs
    return sel


@st.composite
def node_selector_term(draw: st.DrawFn, node_names: list[str]) -> dict[str, Any]:
    """A ``NodeSelectorTerm``: expressions with every operator (``Gt``/``Lt`` take one integer)
    and ``matchFields`` on ``metadata.name``."""
    exprs = []
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
        req: dict[str, Any] = {"key": draw(label_key()), "operator": op}
        if op in ("In", "NotIn"):
            req["values"] = draw(st.lists(label_value(), min_size=1, max_size=3))
        elif op in ("Gt", "Lt"):
            req["values"] = [str(draw(st.one_of(st.integers(-20, 20), INT64)))]
        exprs.append(req)
    term: dict[str, Any] = {"matchExpressions": exprs}
    if draw(st.integers(0, 4)) == 0:
        name = draw(st.sampled_from(node_names)) if node_names else "none"
        term["matchFields"] = [
            {"key": "metadata.name", "operator": draw(st.sampled_from(["In", "NotIn"])), "values": [name]}
        ]
    return term


# ---- pods ---------------------------------------------------------------------------------------


@st.composite
def toleration(draw: st.DrawFn) -> dict[str, Any]:
    """A ``v1.Toleration``: ``Exists`` has no value (and may have no key), ``Equal`` needs a key."""
    op = draw(st.sampled_from(["Exists", "Equal", ""]))
    t: dict[str, Any] = {}
    if op:
        t["operator"] = op
    if op == "Exists":
        if draw(st.booleans()):
            t["key"] = draw(label_key())
    else:
        t["key"] = draw(label_key())
        t["value"] = draw(label_value())
    effect = draw(st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"]))
    if effect:
        t["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        t["tolerationSeconds"] = draw(INT64)
    return t


@st.composite
def taint(draw: st.DrawFn) -> dict[str, Any]:
    """A ``v1.Taint`` (the effect is required)."""
    t = {"key": draw(label_key()), "effect": draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))}
    if draw(st.booleans()):
        t["value"] = draw(label_value())
    return t


@st.composite
def pod_affinity_term(draw: st.DrawFn, namespaces: list[str]) -> dict[str, Any]:
    """A ``v1.PodAffinityTerm`` (topologyKey is required)."""
    term: dict[str, Any] = {"topologyKey": draw(label_key())}
    if draw(st.integers(0, 3)):
        term["labelSelector"] = draw(label_selector())
    if draw(st.booleans()):
        term["namespaces"] = draw(st.lists(st.sampled_from(namespaces), max_size=2))
    if draw(st.integers(0, 3)) == 0:
        term["namespaceSelector"] = draw(label_selector())
    return term


@st.composite
def affinity(draw: st.DrawFn, namespaces: list[str], node_names: list[str]) -> dict[str, Any]:
    """A ``v1.Affinity`` with any mix of node affinity, pod affinity and pod anti-affinity."""
    aff: dict[str, Any] = {}
    if draw(st.booleans()):
        na: dict[str, Any] = {}
        if draw(st.booleans()):
            terms = draw(st.lists(node_selector_term(node_names), min_size=1, max_size=3))
            na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        if draw(st.booleans()):
            na["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": draw(st.integers(1, 100)), "preference": draw(node_selector_term(node_names))}
                for _ in range(draw(st.integers(1, 3)))
            ]
        aff["nodeAffinity"] = na
    for field in ("podAffinity", "podAntiAffinity"):
        if draw(st.integers(0, 2)) == 0:
            pa: dict[str, Any] = {}
            if draw(st.booleans()):
                pa["requiredDuringSchedulingIgnoredDuringExecution"] = draw(
                    st.lists(pod_affinity_term(namespaces), min_size=1, max_size=3)
                )
            if draw(st.booleans()):
                pa["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": draw(st.integers(1, 100)), "podAffinityTerm": draw(pod_affinity_term(namespaces))}
                    for _ in range(draw(st.integers(1, 2)))
                ]
            aff[field] = pa
    return aff


@st.composite
def spread_constraint(draw: st.DrawFn) -> dict[str, Any]:
    """A ``v1.TopologySpreadConstraint`` (``minDomains`` only with DoNotSchedule)."""
    when = draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]))
    c: dict[str, Any] = {
        "maxSkew": draw(st.one_of(st.integers(1, 3), st.integers(1, 2**31 - 1))),
        "topologyKey": draw(label_key()),
        "whenUnsatisfiable": when,
    }
    if draw(st.integers(0, 3)):
        c["labelSelector"] = draw(label_selector())
    if when == "DoNotSchedule" and draw(st.booleans()):
        c["minDomains"] = draw(st.one_of(st.integers(1, 5), st.integers(1, 2**31 - 1)))
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if draw(st.booleans()):
            c[policy] = draw(st.sampled_from(["Honor", "Ignore"]))
    if draw(st.integers(0, 3)) == 0:
        c["matchLabelKeys"] = draw(st.lists(label_key(), max_size=2, unique=True))
    return c


@st.composite
def container(draw: st.DrawFn, name: str, *, sidecar: bool = False) -> dict[str, Any]:
    """A ``v1.Container`` with requests (and limits), host ports; ``sidecar``: restartPolicy Always."""
    c: dict[str, Any] = {"name": name, "image": draw(st.sampled_from(["img:1", "registry.example.com/big:2", "x"]))}
    res: dict[str, Any] = {}
    if draw(st.integers(0, 4)):
        names = (
            ["cpu", "memory"]
            if draw(st.integers(0, 2))
            else ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "hugepages-2Mi"]
        )
        res["requests"] = draw(resource_list(names))
    if draw(st.booleans()):
        res["limits"] = draw(resource_list(["cpu", "memory"]))
    if res:
        c["resources"] = res
    if draw(st.integers(0, 5)) == 0:
        c["ports"] = [
            {
                "containerPort": draw(st.integers(1, 65535)),
                "hostPort": draw(st.one_of(st.sampled_from([80, 443, 8080]), st.integers(1, 65535))),
                "protocol": draw(st.sampled_from(["TCP", "UDP", "SCTP"])),
                **({"hostIP": draw(st.sampled_from(["127.0.0.1", "10.0.0.1", "::1"]))} if draw(st.booleans()) else {}),
            }
        ]
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


@st.composite
def pod(
    draw: st.DrawFn,
    name: str,
    *,
    namespaces: list[str],
    node_names: list[str],
    pod_groups: list[tuple[str, str]],
    schedulers: tuple[str, ...] = ("ome-scheduler", "ome-scheduler", "ome-scheduler", "nobody"),
) -> dict[str, Any]:
    """A pod in one of ``namespaces``; may belong to one of ``pod_groups`` (namespace, name) and
    may already be bound to one of ``node_names``."""
    ns = draw(st.sampled_from(namespaces))
    lab = draw(labels)
    groups_here = [g for n, g in pod_groups if n == ns]
    if groups_here and draw(st.booleans()):
        lab["scheduling.x-k8s.io/pod-group"] = draw(st.sampled_from(groups_here))
    spec: dict[str, Any] = {
        "schedulerName": draw(st.sampled_from(schedulers)),
        "containers": [draw(container(f"c{i}")) for i in range(draw(st.integers(1, 3)))],
    }
    if draw(st.integers(0, 3)) == 0:
        spec["initContainers"] = [
            draw(container(f"init{i}", sidecar=draw(st.booleans()))) for i in range(draw(st.integers(1, 3)))
        ]
    if draw(st.integers(0, 4)) == 0:
        spec["overhead"] = draw(resource_list(["cpu", "memory"]))
    if draw(st.integers(0, 4)) == 0:
        spec["resources"] = {"requests": draw(resource_list(["cpu", "memory", "hugepages-2Mi"]))}
    if draw(st.integers(0, 2)) == 0:
        spec["tolerations"] = draw(st.lists(toleration(), max_size=6))
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = draw(st.dictionaries(label_key(), label_value(), max_size=2))
    if draw(st.integers(0, 2)) == 0:
        spec["affinity"] = draw(affinity(namespaces, node_names))
    if draw(st.integers(0, 3)) == 0:
        spec["topologySpreadConstraints"] = draw(st.lists(spread_constraint(), max_size=3))
    if draw(st.integers(0, 6)) == 0:
        spec["schedulingGates"] = [
            {"name": g} for g in draw(st.lists(label_key(), min_size=1, max_size=2, unique=True))
        ]
    if draw(st.booleans()):
        spec["priority"] = draw(st.one_of(st.integers(-10, 1000), INT32))
    if node_names and draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = draw(st.sampled_from(node_names))
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "1", "labels": lab},
        "spec": spec,
    }


# ---- nodes, namespaces, PodGroups ---------------------------------------------------------------------


@st.composite
def node(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A node with labels (hostname, zone, clique), taints, allocatable (sometimes hostile) and images."""
    lab = draw(labels)
    lab["kubernetes.io/hostname"] = name
    for key, values in (
        ("topology.kubernetes.io/zone", ["zone-1", "zone-2"]),
        ("nvidia.com/gpu.clique", ["clique-1", "clique-2"]),
    ):
        if draw(st.integers(0, 3)):
            lab[key] = draw(st.sampled_from(values))
    alloc = {
        "cpu": "32",
        "memory": "256Gi",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "ephemeral-storage": "100Gi",
        "hugepages-2Mi": "1Gi",
    }
    if draw(st.integers(0, 2)) == 0:
        names = ["cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi"]
        alloc.update(draw(resource_list(names, 3)))
    status: dict[str, Any] = {"allocatable": alloc, "capacity": alloc}
    if draw(st.booleans()):
        status["images"] = [
            {
                "names": [draw(st.sampled_from(["img:1", "registry.example.com/big:2", "x"]))],
                "sizeBytes": draw(st.integers(0, 2**63 - 1)),
            }
        ]
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 2)) == 0:
        spec["taints"] = draw(st.lists(taint(), max_size=3))
    if draw(st.integers(0, 6)) == 0:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": "1", "labels": lab},
        "spec": spec,
        "status": status,
    }


@st.composite
def namespace(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A namespace with labels (namespaceSelector reads them)."""
    lab = draw(labels)
    lab["kubernetes.io/metadata.name"] = name
    return {"metadata": {"name": name, "uid": f"uid-ns-{name}", "resourceVersion": "1", "labels": lab}}


@st.composite
def pod_group(draw: st.DrawFn, name: str, ns: str) -> dict[str, Any]:
    """A PodGroup as the CRD accepts it: minMember >= 1 (int32), any int32 timeout, any annotation."""
    spec: dict[str, Any] = {"minMember": draw(st.one_of(st.integers(1, 4), st.integers(1, 2**31 - 1)))}
    if draw(st.integers(0, 3)):
        spec["scheduleTimeoutSeconds"] = draw(st.one_of(st.integers(1, 60), INT32))
    md: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-pg-{ns}-{name}", "resourceVersion": "1"}
    if draw(st.booleans()):
        md["annotations"] = {
            "ome.io/topology-key": draw(st.one_of(st.sampled_from(KEY_POOL + [""]), st.text(max_size=300), label_key()))
        }
        # Topology levels and sub-gangs (design §3.9, §3.10): valid, nested or not, and any text.
        keys = st.one_of(st.sampled_from(KEY_POOL), label_key(), st.text(max_size=40))
        if draw(st.booleans()):
            md["annotations"]["ome.io/topology-preferred-keys"] = ",".join(draw(st.lists(keys, max_size=6)))
        if draw(st.booleans()):
            md["annotations"]["ome.io/subgroup-size"] = draw(
                st.one_of(
                    st.sampled_from(["1", "2", "4", "0", "-1", ""]), st.integers(0, 2**40).map(str), st.text(max_size=8)
                )
            )
            md["annotations"]["ome.io/subgroup-topology-key"] = draw(keys)
    return {"metadata": md, "spec": spec}


@st.composite
def world(draw: st.DrawFn, max_nodes: int = 6, max_pods: int = 14) -> dict[str, list[dict[str, Any]]]:
    """One small cluster: namespaces, nodes, PodGroups and pods that refer to each other."""
    namespaces = ["tenant-a", "tenant-b"]
    node_names = [f"n{i}" for i in range(draw(st.integers(0, max_nodes)))]
    groups = [(draw(st.sampled_from(namespaces)), f"g{i}") for i in range(draw(st.integers(0, 3)))]
    dra = draw(dra_world(namespaces, node_names))
    claims = [(c["metadata"]["namespace"], c["metadata"]["name"]) for c in dra["resourceclaims"]]
    pods = []
    for i in range(draw(st.integers(1, max_pods))):
        p = draw(pod(f"p{i}", namespaces=namespaces, node_names=node_names, pod_groups=groups))
        if draw(st.integers(0, 2)) == 0:
            entries, statuses = draw(pod_resource_claims(claims, p["metadata"]["namespace"], f"p{i}"))
            p["spec"]["resourceClaims"] = entries
            if draw(st.booleans()):  # a modest pod, so DynamicResources is what decides
                for k in ("affinity", "nodeSelector", "topologySpreadConstraints", "schedulingGates", "overhead"):
                    p["spec"].pop(k, None)
                p["spec"]["tolerations"] = [{"operator": "Exists"}]
                p["spec"]["containers"] = [{"name": "c"}]
                p["spec"].pop("initContainers", None)
                p["spec"].pop("resources", None)
                p["metadata"]["labels"].pop("scheduling.x-k8s.io/pod-group", None)
            if statuses:
                p["status"] = {"resourceClaimStatuses": statuses}
        pods.append(p)
    return {
        "namespaces": [draw(namespace(n)) for n in namespaces],
        "nodes": [draw(node(n)) for n in node_names],
        "podgroups": [draw(pod_group(name, ns)) for ns, name in groups],
        **dra,
        "pods": pods,
    }


# ---- DRA: DeviceClasses, ResourceSlices, ResourceClaims ----------------------------------------

DRA_DRIVERS = ["gpu.example.com", "nic.example.com"]
DRA_CLASSES = ["gpu", "nic", "none", "missing"]
"""``none`` selects no device; ``missing`` is named by requests but never created."""


def device_classes() -> list[dict[str, Any]]:
    """The classes requests name: one per driver, and one whose selector matches nothing."""
    out = [
        {
            "metadata": {"name": name, "uid": f"uid-dc-{name}", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for name, driver in zip(DRA_CLASSES[:2], DRA_DRIVERS, strict=True)
    ]
    out.append(
        {
            "metadata": {"name": "none", "uid": "uid-dc-none", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nobody"'}}]},
        }
    )
    return out


@st.composite
def resource_slice(draw: st.DrawFn, name: str, node_names: list[str]) -> dict[str, Any]:
    """A slice of up to 6 devices on one node, every node, or the nodes a selector picks; its pool
    may be incomplete (``resourceSliceCount`` 2) or of a newer generation."""
    driver = draw(st.sampled_from(DRA_DRIVERS))
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": draw(st.sampled_from(["p0", "p1", *node_names[:2]])),
            "generation": draw(st.integers(1, 2)),
            "resourceSliceCount": draw(st.sampled_from([1, 1, 1, 2])),
        },
        "devices": [
            {
                "name": f"d{i}",
                "attributes": {
                    "numa": {"int": draw(st.integers(0, 1))},
                    "model": {"string": draw(st.sampled_from(["a", "b"]))},
                },
                "capacity": {"memory": {"value": draw(st.sampled_from(["40Gi", "80Gi"]))}},
            }
            for i in range(draw(st.integers(0, 6)))
        ],
    }
    if draw(st.booleans()):
        spec["driver"] = DRA_DRIVERS[0]
    where = draw(st.integers(0, 3))
    if where == 0 or not node_names:
        spec["allNodes"] = True
    elif where == 1:
        spec["nodeSelector"] = {"nodeSelectorTerms": [draw(node_selector_term(node_names))]}
    else:
        spec["nodeName"] = draw(st.sampled_from(node_names))
    return {"metadata": {"name": name, "uid": f"uid-rs-{name}", "resourceVersion": "1"}, "spec": spec}


@st.composite
def device_request(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """``exactly`` (ExactCount 1..3 or All, admin access sometimes) or ``firstAvailable``."""
    if draw(st.integers(0, 3)) == 0:
        subs = [
            {
                "name": f"s{i}",
                "deviceClassName": draw(st.sampled_from(DRA_CLASSES[:3])),
                "count": draw(st.integers(1, 3)),
            }
            for i in range(draw(st.integers(1, 3)))
        ]
        return {"name": name, "firstAvailable": subs}
    exactly: dict[str, Any] = {"deviceClassName": draw(st.sampled_from(["gpu", "gpu", "gpu", "nic", *DRA_CLASSES[2:]]))}
    if draw(st.integers(0, 4)) == 0:
        exactly["allocationMode"] = "All"
    else:
        exactly["allocationMode"] = "ExactCount"
        exactly["count"] = draw(st.sampled_from([1, 1, 2, 3]))
    if draw(st.integers(0, 5)) == 0:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


@st.composite
def resource_claim(draw: st.DrawFn, name: str, ns: str) -> dict[str, Any]:
    """A claim of 1..3 requests, maybe a NUMA ``matchAttribute``; sometimes already allocated
    (to a device that may or may not exist) and reserved for some pod."""
    requests = [draw(device_request(f"r{i}")) for i in range(draw(st.sampled_from([1, 1, 2, 3])))]
    devices: dict[str, Any] = {"requests": requests}
    if draw(st.integers(0, 2)) == 0:
        devices["constraints"] = [{"matchAttribute": f"{draw(st.sampled_from(DRA_DRIVERS))}/numa"}]
    status: dict[str, Any] = {}
    if draw(st.integers(0, 4)) == 0:
        status["allocation"] = {
            "devices": {
                "results": [
                    {
                        "request": "r0",
                        "driver": draw(st.sampled_from(DRA_DRIVERS)),
                        "pool": draw(st.sampled_from(["p0", "p1"])),
                        "device": f"d{draw(st.integers(0, 5))}",
                    }
                ]
            }
        }
        if draw(st.booleans()):
            status["reservedFor"] = [{"resource": "pods", "name": "someone", "uid": "uid-someone"}]
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-rc-{ns}-{name}", "resourceVersion": "1"},
        "spec": {"devices": devices},
        "status": status,
    }


@st.composite
def dra_world(draw: st.DrawFn, namespaces: list[str], node_names: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Classes, slices and claims for :func:`world` (claims named ``rc<i>`` in each namespace)."""
    return {
        "deviceclasses": device_classes(),
        "resourceslices": [draw(resource_slice(f"rs{i}", node_names)) for i in range(draw(st.integers(0, 5)))],
        "resourceclaims": [
            draw(resource_claim(f"rc{i}", ns)) for ns in namespaces for i in range(draw(st.integers(1, 3)))
        ],
    }


@st.composite
def pod_resource_claims(
    draw: st.DrawFn, claims: list[tuple[str, str]], ns: str, pod_name: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(``spec.resourceClaims``, ``status.resourceClaimStatuses``): claims by name (some of them
    missing), or from a template whose claim may not be created yet."""
    mine = [n for c_ns, n in claims if c_ns == ns]
    here = mine * 3 + ["absent"] if mine else ["absent"]
    entries: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    for i in range(draw(st.sampled_from([1, 1, 2]))):
        if draw(st.integers(0, 3)) == 0:
            entries.append({"name": f"t{i}", "resourceClaimTemplateName": "template"})
            if draw(st.booleans()):
                statuses.append({"name": f"t{i}", "resourceClaimName": draw(st.sampled_from(here))})
        else:
            entries.append({"name": f"c{i}", "resourceClaimName": draw(st.sampled_from(here))})
    return entries, statuses
