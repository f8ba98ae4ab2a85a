"""Seeded generator of small scheduling cases for the differential test against kube-scheduler.

A *case* is a tiny cluster slice: 1-2 namespaces, 3 to 12 nodes (labels, taints, cordons,
capacities, images), existing pods bound straight to those nodes (requests, host ports,
required and preferred pod (anti-)affinity) and one new pod with a random mix of requests,
init containers, sidecars, pod overhead, pod-level resources, tolerations, node affinity,
pod (anti-)affinity, spread constraints, host ports and scheduling gates.

Isolation (see ``e2e/parity_harness.py``): every name and every topology value carries the
case id, every node carries ``parity-case=<id>``, the new pod always has the node selector
``parity-case: <id>``, and namespace selectors only select the case's own namespaces. So the
cases of one batch can share the cluster without seeing each other, and both schedulers see
the same node set. The generator is pure: ``generate(seed, n, run, first)`` always returns the same cases.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

CASE_LABEL = "parity-case"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
RACK = "parity.ome.io/rack"
DISK = "parity.ome.io/disk"
TIER = "parity.ome.io/tier"
GPU = "parity.ome.io/gpu"
EXT = "example.com/foo"
RUNTIME_CLASS = "parity-overhead"
RUNTIME_CLASS_OVERHEAD = {"cpu": "250m", "memory": "120Mi"}
IMAGES = ["registry.k8s.io/pause:3.10", "example.com/big:1", "example.com/app", "example.com/tools:v2"]
IMAGE_SIZES = {
    IMAGES[0]: 700_000,
    IMAGES[1]: 900 * 1024 * 1024,
    IMAGES[2]: 300 * 1024 * 1024,
    IMAGES[3]: 60 * 1024 * 1024,
}
APP = ["web", "db", "cache"]
ROLE = ["fe", "be"]
VER = ["1", "2"]
TAINTS: list[dict[str, str]] = [
    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "b", "effect": "NoSchedule"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
    {"key": "maint", "effect": "NoExecute"},
    {"key": "gpu", "effect": "NoSchedule"},
    {"key": "noisy", "value": "x", "effect": "PreferNoSchedule"},
]
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NO_PROVISIONER = "kubernetes.io/no-provisioner"
VOLUME_CASE_SHARE = 0.18
"""The share of cases whose new pod mounts PersistentVolumeClaims."""


def storage_class(name: str, binding_mode: str, provisioner: str = NO_PROVISIONER, **extra: Any) -> dict[str, Any]:
    """A StorageClass; ``binding_mode`` is ``Immediate`` or ``WaitForFirstConsumer``, ``extra`` adds
    top-level fields (``allowedTopologies``). The default provisioner provisions nothing (local PVs)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": binding_mode,
        **extra,
    }


@dataclass
class Case:
    """One generated case; objects are plain API dicts ready to POST.

    ``pod`` is the new pod without ``metadata.name`` and ``spec.schedulerName``; the harness
    stamps those per scheduler. ``gated`` is True when it carries scheduling gates.
    """

    id: str
    index: int
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    existing: list[dict[str, Any]] = field(default_factory=list)
    pod: dict[str, Any] = field(default_factory=dict)
    volumes: VolumeSpec | None = None

    @property
    def ns(self) -> str:
        return str(self.namespaces[0]["metadata"]["name"])

    @property
    def gated(self) -> bool:
        return bool(self.pod["spec"].get("schedulingGates"))

    def node_names(self) -> list[str]:
        return [str(n["metadata"]["name"]) for n in self.nodes]

    def desired_taints(self, node: dict[str, Any]) -> list[dict[str, str]]:
        """The taints the node must end with (its own plus the cordon taint)."""
        return list(node["spec"].get("taints") or [])

    def pod_for(self, name: str, scheduler: str, phase: str = "") -> dict[str, Any]:
        """The new pod for one phase; a volume case's pod lives in that phase's namespace."""
        p = copy.deepcopy(self.pod)
        p["metadata"]["name"] = name
        p["spec"]["schedulerName"] = scheduler
        if self.volumes is not None and phase:
            p["metadata"]["namespace"] = self.volumes.namespace(phase)
        return p


@dataclass
class VolumeSpec:
    """Storage for a volume case, materialised once per phase (``k``, ``o``, ``v``).

    Each phase gets its own namespace ``<id>-v<phase>`` holding the claims (same names, so the
    pod spec is unchanged), its own StorageClasses and PVs (names suffixed with the phase), so
    a PV bound in one phase never changes what the next phase sees.
    """

    case_id: str
    classes: list[dict[str, Any]] = field(default_factory=list)
    pvs: list[dict[str, Any]] = field(default_factory=list)
    pvcs: list[dict[str, Any]] = field(default_factory=list)
    users: list[dict[str, Any]] = field(default_factory=list)

    def namespace(self, phase: str) -> str:
        return f"{self.case_id}-v{phase}"

    def _cls(self, base: str, phase: str) -> str:
        return f"{self.case_id}-{base}-{phase}"

    def materialise(self, phase: str) -> dict[str, list[dict[str, Any]]]:
        """API objects for one phase: namespace, storageclasses, pvs, pvcs, pods."""
        ns = self.namespace(phase)
        out: dict[str, list[dict[str, Any]]] = {
            "namespaces": [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns, "labels": {CASE_LABEL: self.case_id}},
                }
            ],
            "storageclasses": [],
            "pvs": [],
            "pvcs": [],
            "pods": [],
        }
        for c in self.classes:
            sc = copy.deepcopy(c)
            sc["metadata"]["name"] = self._cls(c["metadata"]["name"], phase)
            sc["metadata"]["labels"] = {CASE_LABEL: self.case_id}
            out["storageclasses"].append(sc)
        for v in self.pvs:
            pv = copy.deepcopy(v)
            pv["metadata"]["name"] = f"{self.case_id}-{v['metadata']['name']}-{phase}"
            pv["metadata"].setdefault("labels", {})[CASE_LABEL] = self.case_id
            pv["spec"]["storageClassName"] = self._cls(v["spec"]["storageClassName"], phase)
            if "claimRef" in pv["spec"]:
                pv["spec"]["claimRef"]["namespace"] = ns
            out["pvs"].append(pv)
        for c in self.pvcs:
            pvc = copy.deepcopy(c)
            pvc["metadata"]["namespace"] = ns
            pvc["metadata"]["labels"] = {CASE_LABEL: self.case_id}
            pvc["spec"]["storageClassName"] = self._cls(c["spec"]["storageClassName"], phase)
            if pvc["spec"].get("volumeName"):
                pvc["spec"]["volumeName"] = f"{self.case_id}-{pvc['spec']['volumeName']}-{phase}"
            out["pvcs"].append(pvc)
        for u in self.users:
            pod = copy.deepcopy(u)
            pod["metadata"]["namespace"] = ns
            out["pods"].append(pod)
        return out

    def prebound_claims(self) -> list[str]:
        return [c["metadata"]["name"] for c in self.pvcs if c["spec"].get("volumeName")]


class _Gen:
    def __init__(self, rng: random.Random, case_id: str, index: int) -> None:
        self.r = rng
        self.id = case_id
        self.index = index

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, seq: list[Any]) -> Any:
        return seq[self.r.randrange(len(seq))]

    def sample(self, seq: list[Any], k: int) -> list[Any]:
        return self.r.sample(seq, min(k, len(seq)))

    # ---- nodes --------------------------------------------------------------------------

    def zone(self, i: int) -> str:
        return f"{self.id}-z{i}"

    def rack(self, i: int) -> str:
        return f"{self.id}-r{i}"

    def node(self, j: int) -> dict[str, Any]:
        name = f"{self.id}-n{j}"
        labels = {HOSTNAME: name, "kubernetes.io/os": "linux", "type": "kwok", CASE_LABEL: self.id}
        if self.chance(0.85):
            labels[ZONE] = self.zone(self.r.randrange(3))
        if self.chance(0.6):
            labels[RACK] = self.rack(self.r.randrange(4))
        if self.chance(0.5):
            labels[DISK] = self.pick(["ssd", "hdd"])
        if self.chance(0.6):
            labels[TIER] = self.pick(["1", "2", "3", "4", "5"])
        if self.chance(0.3):
            labels[GPU] = "true"
        res = {
            "cpu": self.pick(["1", "2", "4", "8", "16", "1500m"]),
            "memory": self.pick(["1Gi", "2Gi", "4Gi", "8Gi", "16Gi"]),
            "pods": self.pick(["2", "3", "5", "110", "110", "110"]),
        }
        if self.chance(0.5):
            res["ephemeral-storage"] = self.pick(["10Gi", "20Gi"])
        if self.chance(0.3):
            res[EXT] = self.pick(["1", "2", "4"])
        if self.chance(0.2):
            res["hugepages-2Mi"] = self.pick(["64Mi", "128Mi"])
        taints: list[dict[str, str]] = []
        if self.chance(0.25):
            seen: set[tuple[str, str]] = set()
            for t in self.sample(TAINTS, self.r.randrange(1, 3)):
                if (t["key"], t["effect"]) not in seen:
                    seen.add((t["key"], t["effect"]))
                    taints.append(dict(t))
        cordon = self.chance(0.1)
        if cordon:
            taints.append(dict(UNSCHEDULABLE_TAINT))
        status: dict[str, Any] = {"capacity": dict(res), "allocatable": dict(res)}
        if self.chance(0.5):
            status["images"] = [
                {"names": [img], "sizeBytes": IMAGE_SIZES[img]} for img in self.sample(IMAGES, self.r.randrange(1, 4))
            ]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": labels},
            "spec": {"taints": taints, "unschedulable": cordon},
            "status": status,
        }

    # ---- shared pod pieces --------------------------------------------------------------

    def pod_labels(self) -> dict[str, str]:
        labels = {"app": self.pick(APP)}
        if self.chance(0.6):
            labels["role"] = self.pick(ROLE)
        if self.chance(0.5):
            labels["ver"] = self.pick(VER)
        return labels

    def label_selector(self, allow_empty: bool = True) -> dict[str, Any]:
        roll = self.r.random()
        if allow_empty and roll < 0.05:
            return {}
        if roll < 0.55:
            sel: dict[str, Any] = {"matchLabels": {"app": self.pick(APP)}}
            if self.chance(0.3):
                sel["matchLabels"]["role"] = self.pick(ROLE)
            return sel
        op = self.pick(["In", "NotIn", "Exists", "DoesNotExist"])
        key = self.pick(["app", "role", "ver"])
        vocab = {"app": APP, "role": ROLE, "ver": VER}[key]
        expr: dict[str, Any] = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            expr["values"] = self.sample(vocab, self.r.randrange(1, 3))
        sel = {"matchExpressions": [expr]}
        if self.chance(0.3):
            sel["matchLabels"] = {"app": self.pick(APP)}
        return sel

    def topology_key(self) -> str:
        return str(self.pick([HOSTNAME, HOSTNAME, ZONE, ZONE, RACK]))

    def affinity_term(self, pod_labels: dict[str, str], with_label_keys: bool) -> dict[str, Any]:
        sel = {"matchLabels": {"app": pod_labels["app"]}} if self.chance(0.3) else self.label_selector()
        term: dict[str, Any] = {"labelSelector": sel, "topologyKey": self.topology_key()}
        roll = self.r.random()
        if roll < 0.15:
            term["namespaceSelector"] = {"matchLabels": {CASE_LABEL: self.id}}
        elif roll < 0.25:
            term["namespaceSelector"] = {"matchLabels": {CASE_LABEL: self.id, "team": self.pick(["red", "blue"])}}
        elif roll < 0.3:
            term["namespaces"] = [f"{self.id}-a", f"{self.id}-b"]
        if with_label_keys and self.chance(0.25):
            used = set(term["labelSelector"].get("matchLabels", {})) | {
                e["key"] for e in term["labelSelector"].get("matchExpressions", [])
            }
            free = [k for k in pod_labels if k not in used]
            if free:
                k = self.pick(free)
                term["matchLabelKeys" if self.chance(0.6) else "mismatchLabelKeys"] = [k]
        return term

    def requests(self, big: bool = False) -> dict[str, str]:
        req: dict[str, str] = {}
        if self.chance(0.8):
            req["cpu"] = self.pick(["100m", "250m", "500m", "1", "1500m"] + (["2", "4"] if big else []))
        if self.chance(0.75):
            req["memory"] = self.pick(["64Mi", "256Mi", "512Mi", "1Gi"] + (["2Gi", "3Gi"] if big else []))
        if self.chance(0.12):
            req["ephemeral-storage"] = self.pick(["1Gi", "5Gi", "15Gi"])
        if self.chance(0.1):
            req[EXT] = self.pick(["1", "2", "3"])
        if self.chance(0.05):
            req["hugepages-2Mi"] = self.pick(["32Mi", "64Mi", "100Mi"])
            req.setdefault("memory", "64Mi")
        return req

    def container(self, name: str, req: dict[str, str], ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "image": self.pick(IMAGES)}
        if req:
            limits = {k: v for k, v in req.items() if k == EXT or k.startswith("hugepages-")}
            c["resources"] = {"requests": dict(req), **({"limits": limits} if limits else {})}
        if ports:
            c["ports"] = ports
        return c

    def host_ports(self) -> list[dict[str, Any]]:
        out = []
        seen = set()
        for _ in range(self.r.randrange(1, 3)):
            port = self.pick([8080, 9090, 7070])
            proto = self.pick(["TCP", "TCP", "UDP"])
            ip = self.pick(["", "", "127.0.0.1", "10.0.0.1"])
            if (port, proto, ip) in seen:
                continue
            seen.add((port, proto, ip))
            p: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": proto}
            if ip:
                p["hostIP"] = ip
            out.append(p)
        return out

    # ---- existing pods ------------------------------------------------------------------

    def existing_pod(self, k: int, node: dict[str, Any], namespaces: list[str]) -> dict[str, Any]:
        ns = namespaces[0] if len(namespaces) == 1 or self.chance(0.75) else namespaces[1]
        labels = self.pod_labels()
        ports = self.host_ports() if self.chance(0.2) else None
        spec: dict[str, Any] = {
            "schedulerName": "default-scheduler",
            "nodeName": node["metadata"]["name"],
            "terminationGracePeriodSeconds": 0,
            "containers": [self.container("c", self.requests(), ports)],
        }
        tol = [
            {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
            for t in node["spec"]["taints"]
            if t["effect"] == "NoExecute"
        ]
        if tol:
            spec["tolerations"] = tol
        aff: dict[str, Any] = {}
        if self.chance(0.2):
            aff["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [self.affinity_term(labels, False)]
            }
        if self.chance(0.15):
            kind = self.pick(["podAffinity", "podAntiAffinity"])
            aff.setdefault(kind, {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": self.r.randrange(1, 101), "podAffinityTerm": self.affinity_term(labels, False)}
            ]
        if self.chance(0.08):
            aff.setdefault("podAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = [
                self.affinity_term(labels, False)
            ]
        if aff:
            spec["affinity"] = aff
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"e{k}", "namespace": ns, "labels": labels},
            "spec": spec,
        }

    # ---- the new pod --------------------------------------------------------------------

    def node_requirement(self, node_names: list[str]) -> dict[str, Any]:
        key = self.pick([ZONE, RACK, DISK, TIER, TIER, GPU, HOSTNAME])
        if key == TIER:
            op = self.pick(["Gt", "Lt", "In", "NotIn", "Exists"])
        else:
            op = self.pick(["In", "In", "NotIn", "Exists", "DoesNotExist"])
        req: dict[str, Any] = {"key": key, "operator": op}
        if op in ("Gt", "Lt"):
            req["values"] = [self.pick(["1", "2", "3", "4"])]
        elif op in ("In", "NotIn"):
            vocab = {
                ZONE: [self.zone(i) for i in range(3)],
                RACK: [self.rack(i) for i in range(4)],
                DISK: ["ssd", "hdd"],
                TIER: ["1", "2", "3", "4", "5"],
                GPU: ["true"],
                HOSTNAME: node_names,
            }[key]
            req["values"] = self.sample(vocab, self.r.randrange(1, 3))
        return req

    def node_term(self, node_names: list[str]) -> dict[str, Any]:
        term: dict[str, Any] = {}
        if self.chance(0.85):
            term["matchExpressions"] = [self.node_requirement(node_names) for _ in range(self.r.randrange(1, 3))]
        if not term or self.chance(0.15):
            target = self.pick(node_names) if self.chance(0.85) else f"{self.id}-ghost"
            term["matchFields"] = [
                {"key": "metadata.name", "operator": self.pick(["In", "In", "NotIn"]), "values": [target]}
            ]
        return term

    def spread_constraint(self, labels: dict[str, str], hard: bool) -> dict[str, Any]:
        c: dict[str, Any] = {
            "maxSkew": self.pick([1, 1, 2]),
            "topologyKey": self.pick([HOSTNAME, ZONE, ZONE, RACK]),
            "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        }
        roll = self.r.random()
        if roll < 0.45:
            c["labelSelector"] = {"matchLabels": {"app": labels["app"]}}
        elif roll < 0.8:
            c["labelSelector"] = self.label_selector(allow_empty=True)
        if hard and self.chance(0.3):
            c["minDomains"] = self.pick([1, 2, 3, 4])
        if self.chance(0.3):
            c["nodeAffinityPolicy"] = self.pick(["Honor", "Ignore"])
        if self.chance(0.3):
            c["nodeTaintsPolicy"] = self.pick(["Honor", "Ignore"])
        if "labelSelector" in c and self.chance(0.2):
            sel = c["labelSelector"]
            used = set(sel.get("matchLabels", {})) | {e["key"] for e in sel.get("matchExpressions", [])}
            free = [k for k in labels if k not in used]
            if free:
                c["matchLabelKeys"] = [self.pick(free)]
        return c

    def tolerations(self, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.chance(0.05):
            return [{"operator": "Exists"}]
        pool = [t for n in nodes for t in n["spec"]["taints"]] + TAINTS
        for t in self.sample(pool, self.r.randrange(1, 4)):
            roll = self.r.random()
            if roll < 0.4:
                tol: dict[str, Any] = {"key": t["key"], "operator": "Exists"}
                if self.chance(0.5):
                    tol["effect"] = t["effect"]
            elif roll < 0.8:
                tol = {"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]}
            else:
                tol = {"key": t["key"], "operator": "Equal", "value": "other"}
            if tol not in out:
                out.append(tol)
        return out

    def new_pod(self, nodes: list[dict[str, Any]], ns: str) -> dict[str, Any]:
        labels = self.pod_labels()
        names = [n["metadata"]["name"] for n in nodes]
        spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
        ports = self.host_ports() if self.chance(0.25) else None
        containers = [self.container("app", self.requests(big=True), ports)]
        if self.chance(0.25):
            containers.append(self.container("helper", self.requests()))
        spec["containers"] = containers
        if self.chance(0.35):
            inits = []
            for i in range(self.r.randrange(1, 3)):
                sidecar = self.chance(0.5)
                c = self.container(f"init{i}", self.requests(big=not sidecar))
                if sidecar:
                    c["restartPolicy"] = "Always"
                    if self.chance(0.25):
                        c["ports"] = self.host_ports()
                inits.append(c)
            spec["initContainers"] = inits
        if self.chance(0.15):
            spec["runtimeClassName"] = RUNTIME_CLASS
        if self.chance(0.1):
            spec["resources"] = {"requests": self.pod_level_requests(spec)}
        node_selector = {CASE_LABEL: self.id}
        if self.chance(0.1):
            node_selector[DISK] = self.pick(["ssd", "hdd"])
        spec["nodeSelector"] = node_selector
        if self.chance(0.6):
            spec["tolerations"] = self.tolerations(nodes)
        aff: dict[str, Any] = {}
        if self.chance(0.3):
            terms = [self.node_term(names) for _ in range(self.r.randrange(1, 3))]
            aff.setdefault("nodeAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": terms
            }
        if self.chance(0.25):
            aff.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": self.r.randrange(1, 101), "preference": self.node_term(names)}
                for _ in range(self.r.randrange(1, 3))
            ]
        if self.chance(0.3):
            aff.setdefault("podAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = [
                self.affinity_term(labels, True) for _ in range(self.r.randrange(1, 3))
            ]
        if self.chance(0.3):
            aff.setdefault("podAntiAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = [
                self.affinity_term(labels, True)
            ]
        if self.chance(0.2):
            kind = self.pick(["podAffinity", "podAntiAffinity"])
            aff.setdefault(kind, {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": self.r.randrange(1, 101), "podAffinityTerm": self.affinity_term(labels, True)}
            ]
        if aff:
            spec["affinity"] = aff
        if self.chance(0.45):
            cons = []
            keys = set()
            for _ in range(self.r.randrange(1, 3)):
                c = self.spread_constraint(labels, hard=self.chance(0.8))
                if (c["topologyKey"], c["whenUnsatisfiable"]) in keys:
                    continue
                keys.add((c["topologyKey"], c["whenUnsatisfiable"]))
                cons.append(c)
            spec["topologySpreadConstraints"] = cons
        if self.chance(0.07):
            spec["schedulingGates"] = [{"name": "parity.ome.io/hold"}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "labels": labels}, "spec": spec}

    # ---- volumes ------------------------------------------------------------------------

    def pv_affinity(self, nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
        roll = self.r.random()
        if roll < 0.25:
            return None
        if roll < 0.65:
            names = [n["metadata"]["name"] for n in self.sample(nodes, self.r.randrange(1, 3))]
            req = {"key": HOSTNAME, "operator": "In", "values": names}
        else:
            req = {"key": ZONE, "operator": "In", "values": [self.zone(self.r.randrange(3))]}
        return {"required": {"nodeSelectorTerms": [{"matchExpressions": [req]}]}}

    def pv(self, name: str, cls: str, size: int, nodes: list[dict[str, Any]]) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "capacity": {"storage": f"{size}Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "hostPath": {"path": f"/tmp/{self.id}/{name}"},
            "persistentVolumeReclaimPolicy": "Retain",
        }
        aff = self.pv_affinity(nodes)
        if aff is not None:
            spec["nodeAffinity"] = aff
        md: dict[str, Any] = {"name": name}
        if self.chance(0.3):
            zones = sorted({self.zone(self.r.randrange(3)) for _ in range(self.r.randrange(1, 3))})
            md["labels"] = {ZONE: "__".join(zones)}
        return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": md, "spec": spec}

    def volumes(self, nodes: list[dict[str, Any]], pod: dict[str, Any]) -> VolumeSpec:
        """Claims for the new pod: pre-bound, unbound Immediate, WaitForFirstConsumer with or
        without matching PVs, unprovisionable, missing; sometimes ReadWriteOncePod in use."""
        vs = VolumeSpec(self.id)
        nowhere = [{"matchLabelExpressions": [{"key": ZONE, "values": [f"{self.id}-nowhere"]}]}]
        vs.classes = [
            storage_class("imm", "Immediate"),
            storage_class("wffc", "WaitForFirstConsumer"),
            storage_class("dyn", "WaitForFirstConsumer", provisioner="example.com/parity", allowedTopologies=nowhere),
        ]
        volumes = []
        for i in range(self.r.randrange(1, 3)):
            claim = f"data{i}"
            kind = self.pick(["bound"] * 7 + ["immediate"] * 2 + ["wffc"] * 6 + ["nomatch"] * 2 + ["dyn", "missing"])
            size = self.pick([1, 2, 5])
            pvc: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{size}Gi"}}},
            }
            if kind == "bound":
                pv = self.pv(f"pv{i}", "imm", size + self.pick([0, 1]), nodes)
                pv["spec"]["claimRef"] = {"name": claim, "namespace": "", "kind": "PersistentVolumeClaim"}
                if self.chance(0.3):
                    pv["spec"]["accessModes"] = pvc["spec"]["accessModes"] = ["ReadWriteOncePod"]
                    if self.chance(0.6):
                        vs.users.append(self.claim_user(claim, nodes))
                vs.pvs.append(pv)
                pvc["spec"]["storageClassName"] = "imm"
                pvc["spec"]["volumeName"] = f"pv{i}"
            elif kind == "immediate":
                pvc["spec"]["storageClassName"] = "imm"
                pvc["spec"]["resources"]["requests"]["storage"] = "50Gi"
            elif kind in ("wffc", "nomatch"):
                pvc["spec"]["storageClassName"] = "wffc"
                if kind == "wffc":
                    for j in range(self.r.randrange(1, 4)):
                        vs.pvs.append(self.pv(f"pv{i}-{j}", "wffc", self.pick([size, size, size + 4, 1]), nodes))
            elif kind == "dyn":
                pvc["spec"]["storageClassName"] = "dyn"
            if kind != "missing":
                vs.pvcs.append(pvc)
            volumes.append({"name": f"vol{i}", "persistentVolumeClaim": {"claimName": claim}})
        pod["spec"]["volumes"] = volumes
        return vs

    def claim_user(self, claim: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
        """A running pod (in the phase's namespace) that already uses a ReadWriteOncePod claim."""
        node = self.pick(nodes)
        tol = [{"operator": "Exists"}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"user-{claim}", "labels": {"app": "user"}},
            "spec": {
                "schedulerName": "default-scheduler",
                "nodeName": node["metadata"]["name"],
                "terminationGracePeriodSeconds": 0,
                "tolerations": tol,
                "containers": [{"name": "c", "image": IMAGES[0]}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}],
            },
        }

    def pod_level_requests(self, spec: dict[str, Any]) -> dict[str, str]:
        """Pod-level requests no smaller than the containers' aggregate (API validation)."""
        import msgspec

        from ome_scheduler.api.core import Pod
        from ome_scheduler.framework.types import pod_requests

        agg = pod_requests(msgspec.convert({"spec": spec}, Pod))
        out = {"cpu": f"{agg.get('cpu', 0) + self.pick([0, 100, 500, 1000])}m"}
        if self.chance(0.7):
            out["memory"] = str(agg.get("memory", 0) + self.pick([0, 64, 512]) * 1024 * 1024)
        return out


def generate_case(seed: int, index: int, run: str) -> Case:
    """Case ``index`` of the stream ``seed``; ``run`` keeps names unique between runs."""
    rng = random.Random(f"{seed}/{index}")
    cid = f"pc{run}{index:03d}"
    g = _Gen(rng, cid, index)
    case = Case(id=cid, index=index)
    ns_names = [f"{cid}-a"] + ([f"{cid}-b"] if g.chance(0.3) else [])
    for name in ns_names:
        labels = {CASE_LABEL: cid}
        if g.chance(0.6):
            labels["team"] = g.pick(["red", "blue"])
        case.namespaces.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    n = rng.randrange(3, 13)
    case.nodes = [g.node(j) for j in range(n)]
    k = 0
    for node in case.nodes:
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
            case.existing.append(g.existing_pod(k, node, ns_names))
            k += 1
    case.pod = g.new_pod(case.nodes, ns_names[0])
    if g.chance(VOLUME_CASE_SHARE):
        case.volumes = g.volumes(case.nodes, case.pod)
    return case


def generate(seed: int, count: int, run: str, first: int = 0) -> list[Case]:
    """Cases ``first`` .. ``first + count - 1`` of the stream ``seed``. Each case draws from its
    own ``Random(f"{seed}/{index}")``, so case ``i`` is the same whichever slice holds it."""
    return [generate_case(seed, i, run) for i in range(first, first + count)]
