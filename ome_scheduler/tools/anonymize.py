"""Consistent placeholders for ``ome-scheduler snapshot --anonymize``.

:class:`Anonymizer` replaces node, namespace, pod, PodGroup, volume, claim and storage class
names, label and taint values, images and owner names by stable placeholders; the same
original string always gives the same placeholder, so selectors still match what they matched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ome_scheduler.api.scheduling import ANN_PLACEMENT_DOMAIN, ANN_WAITING_REASON
from ome_scheduler.api.snapshot import ClusterSnapshot
from ome_scheduler.api.storage import MIGRATED_PLUGINS_ANNOTATION


class Anonymizer:
    """Consistent placeholders: one table for every string, so a node's name, its hostname
    label and a pod's ``nodeName`` all become the same ``node-NNNNN``.

    The first use of a string decides its prefix, so :meth:`snapshot` visits nodes, namespaces,
    PodGroups, storage objects and only then pods and their labels.
    """

    def __init__(self) -> None:
        self.table: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def name(self, original: str, prefix: str) -> str:
        """The placeholder of ``original`` (allocated as ``<prefix>-NNNN`` on first sight)."""
        if not original:
            return original
        got = self.table.get(original)
        if got is None:
            n = self._counts.get(prefix, 0) + 1
            self._counts[prefix] = n
            got = self.table[original] = f"{prefix}-{n:0{5 if prefix in ('node', 'pod') else 4}d}"
        return got

    def value(self, original: str) -> str:
        """A label or taint value: numbers stay (``Gt``/``Lt`` compare them), others are replaced."""
        if original.lstrip("-").isdigit():
            return original
        return self.name(original, "value")

    def _labels(self, labels: dict[str, str]) -> dict[str, str]:
        return {k: self.value(v) for k, v in labels.items()}

    def _meta(self, md: dict[str, Any], prefix: str, *, keep_annotations: bool = False) -> None:
        if "name" in md:
            md["name"] = self.name(md["name"], prefix)
        if md.get("namespace"):
            md["namespace"] = self.name(md["namespace"], "ns")
        if "labels" in md:
            md["labels"] = self._labels(md["labels"])
        if not keep_annotations:
            md.pop("annotations", None)
        for ref in md.get("ownerReferences", []):
            ref["name"] = self.name(ref.get("name", ""), "owner")

    def _selector(self, sel: dict[str, Any] | None) -> None:
        if not sel:
            return
        if "matchLabels" in sel:
            sel["matchLabels"] = self._labels(sel["matchLabels"])
        for req in sel.get("matchExpressions", []):
            req["values"] = [self.value(v) for v in req.get("values", [])]

    def _node_selector_term(self, term: dict[str, Any]) -> None:
        for req in term.get("matchExpressions", []):
            req["values"] = [self.value(v) for v in req.get("values", [])]
        for req in term.get("matchFields", []):  # only metadata.name exists
            req["values"] = [self.name(v, "node") for v in req.get("values", [])]

    def _pod_affinity(self, pa: dict[str, Any] | None) -> None:
        if not pa:
            return
        terms = list(pa.get("requiredDuringSchedulingIgnoredDuringExecution", []))
        terms += [w.get("podAffinityTerm", {}) for w in pa.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        for t in terms:
            self._selector(t.get("labelSelector"))
            self._selector(t.get("namespaceSelector"))
            t["namespaces"] = [self.name(n, "ns") for n in t.get("namespaces", [])]

    def _taints(self, items: list[dict[str, Any]]) -> None:
        for t in items:
            if t.get("value"):
                t["value"] = self.value(t["value"])

    def node(self, n: dict[str, Any]) -> None:
        """A Node: name, labels, taint values, image names; annotations and messages dropped."""
        self._meta(n["metadata"], "node")
        self._taints(n.get("spec", {}).get("taints", []))
        st = n.get("status", {})
        for img in st.get("images", []):
            img["names"] = [self.name(x, "image") for x in img.get("names", [])]

    def namespace(self, ns: dict[str, Any]) -> None:
        """A Namespace: name and label values."""
        self._meta(ns["metadata"], "ns")

    def pod_group(self, pg: dict[str, Any]) -> None:
        """A PodGroup: name, namespace, labels; its annotations (label keys) are kept, except the
        scheduler's waiting reason (it names pods and gangs), and the placement domain becomes a
        placeholder like the label value it is; ``status.occupiedBy`` (owner names) is dropped."""
        self._meta(pg["metadata"], "gang", keep_annotations=True)
        ann = pg["metadata"].get("annotations", {})
        ann.pop(ANN_WAITING_REASON, None)
        if ann.get(ANN_PLACEMENT_DOMAIN):
            ann[ANN_PLACEMENT_DOMAIN] = self.value(ann[ANN_PLACEMENT_DOMAIN])
        pg.get("status", {}).pop("occupiedBy", None)

    def storage_class(self, sc: dict[str, Any]) -> None:
        """A StorageClass: name and allowed topology values."""
        self._meta(sc["metadata"], "class")
        for term in sc.get("allowedTopologies", []):
            for req in term.get("matchLabelExpressions", []):
                req["values"] = [self.value(v) for v in req.get("values", [])]

    def pv(self, pv: dict[str, Any]) -> None:
        """A PersistentVolume: name, claim reference, class, node affinity values."""
        self._meta(pv["metadata"], "pv", keep_annotations=True)
        spec = pv.get("spec", {})
        if spec.get("storageClassName"):
            spec["storageClassName"] = self.name(spec["storageClassName"], "class")
        ref = spec.get("claimRef")
        if ref:
            ref["name"] = self.name(ref.get("name", ""), "claim")
            ref["namespace"] = self.name(ref.get("namespace", ""), "ns")
        req = (spec.get("nodeAffinity") or {}).get("required") or {}
        for term in req.get("nodeSelectorTerms", []):
            self._node_selector_term(term)
        csi = spec.get("csi")
        if csi and csi.get("volumeHandle"):
            csi["volumeHandle"] = self.name(csi["volumeHandle"], "handle")

    def csi_node(self, cn: dict[str, Any]) -> None:
        """A CSINode: its node's name (it is named after it) and each driver's node id; only the
        migrated-plugins annotation is kept (in-tree plugin names)."""
        md = cn["metadata"]
        ann = {k: v for k, v in md.get("annotations", {}).items() if k == MIGRATED_PLUGINS_ANNOTATION}
        self._meta(md, "node")
        if ann:
            md["annotations"] = ann
        for d in cn.get("spec", {}).get("drivers", []):
            if d.get("nodeID"):
                d["nodeID"] = self.name(d["nodeID"], "node")

    def ephemeral_claims(self, p: dict[str, Any]) -> None:
        """Before the claims: a generic ephemeral volume's claim is ``<pod>-<volume>``, so its
        placeholder is the pod's and the volume's placeholders joined the same way (the pod is
        not changed here)."""
        pod_name = p.get("metadata", {}).get("name", "")
        for v in p.get("spec", {}).get("volumes", []):
            if v.get("ephemeral") is not None and pod_name and v.get("name"):
                claim = f"{pod_name}-{v['name']}"
                if claim not in self.table:
                    self.table[claim] = f"{self.name(pod_name, 'pod')}-{self.name(v['name'], 'volume')}"

    def csi_storage_capacity(self, cap: dict[str, Any]) -> None:
        """A CSIStorageCapacity: name, namespace, class and node topology values (quantities kept)."""
        self._meta(cap["metadata"], "capacity")
        if cap.get("storageClassName"):
            cap["storageClassName"] = self.name(cap["storageClassName"], "class")
        self._selector(cap.get("nodeTopology"))

    def map_workload(self, w: dict[str, Any]) -> None:
        """A Service or ReplicationController: name (the same placeholder as its pods' owner
        references), namespace, label values and its selector's values (a label map)."""
        self._meta(w["metadata"], "owner")
        spec = w.get("spec", {})
        if spec.get("selector") is not None:
            spec["selector"] = self._labels(spec["selector"])

    def selector_workload(self, w: dict[str, Any]) -> None:
        """A ReplicaSet or StatefulSet: as :meth:`map_workload`, its selector a ``LabelSelector``."""
        self._meta(w["metadata"], "owner")
        self._selector(w.get("spec", {}).get("selector"))

    def volume_attachment(self, va: dict[str, Any]) -> None:
        """A VolumeAttachment: name, node and PersistentVolume names (the attacher is a driver name, kept)."""
        self._meta(va["metadata"], "attachment")
        spec = va.get("spec", {})
        if spec.get("nodeName"):
            spec["nodeName"] = self.name(spec["nodeName"], "node")
        src = spec.get("source", {})
        if src.get("persistentVolumeName"):
            src["persistentVolumeName"] = self.name(src["persistentVolumeName"], "pv")

    def pvc(self, pvc: dict[str, Any]) -> None:
        """A PersistentVolumeClaim: name, namespace, volume, class, selector, selected node."""
        md = pvc["metadata"]
        ann = md.get("annotations", {})
        self._meta(md, "claim", keep_annotations=True)
        for k in list(ann):
            if k == "volume.kubernetes.io/selected-node":
                ann[k] = self.name(ann[k], "node")
            elif not k.startswith("pv.kubernetes.io/"):
                del ann[k]
        spec = pvc.get("spec", {})
        if spec.get("volumeName"):
            spec["volumeName"] = self.name(spec["volumeName"], "pv")
        if spec.get("storageClassName"):
            spec["storageClassName"] = self.name(spec["storageClassName"], "class")
        self._selector(spec.get("selector"))

    def resource_claim(self, c: dict[str, Any]) -> None:
        """A ResourceClaim: name, namespace, owners, the node selector and pool names of its
        allocation, the pods it is reserved for (device names, drivers and attributes are kept)."""
        self._meta(c["metadata"], "rclaim")
        st = c.get("status", {})
        alloc = st.get("allocation") or {}
        for term in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms", []):
            self._node_selector_term(term)
        for r in (alloc.get("devices") or {}).get("results", []):
            r["pool"] = self.name(r.get("pool", ""), "pool")
        for ref in st.get("reservedFor", []):
            ref["name"] = self.name(ref.get("name", ""), "pod")

    def resource_slice(self, sl: dict[str, Any]) -> None:
        """A ResourceSlice: name, node, pool name (a pool named after its node gets the node's
        placeholder), node selector."""
        self._meta(sl["metadata"], "slice")
        spec = sl.get("spec", {})
        if spec.get("nodeName"):
            spec["nodeName"] = self.name(spec["nodeName"], "node")
        pool = spec.get("pool") or {}
        if pool.get("name"):
            pool["name"] = self.name(pool["name"], "pool")
        for term in (spec.get("nodeSelector") or {}).get("nodeSelectorTerms", []):
            self._node_selector_term(term)

    def pod(self, p: dict[str, Any]) -> None:
        """A Pod: identity, labels, node, affinity and spread selectors, images, claim names."""
        self._meta(p["metadata"], "pod")
        spec = p.get("spec", {})
        renamed: dict[tuple[str, str], str] = {}
        for key in ("containers", "initContainers"):
            for i, c in enumerate(spec.get(key, [])):
                new = f"{'init' if key == 'initContainers' else 'c'}{i}"
                renamed[(key, c.get("name", ""))] = new
                c["name"] = new
                if c.get("image"):
                    c["image"] = self.name(c["image"], "image")
        if spec.get("nodeName"):
            spec["nodeName"] = self.name(spec["nodeName"], "node")
        if "nodeSelector" in spec:
            spec["nodeSelector"] = self._labels(spec["nodeSelector"])
        aff = spec.get("affinity") or {}
        req = (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        for term in req.get("nodeSelectorTerms", []):
            self._node_selector_term(term)
        for pref in (aff.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution", []):
            self._node_selector_term(pref.get("preference", {}))
        self._pod_affinity(aff.get("podAffinity"))
        self._pod_affinity(aff.get("podAntiAffinity"))
        for tsc in spec.get("topologySpreadConstraints", []):
            self._selector(tsc.get("labelSelector"))
        self._taints(spec.get("tolerations", []))
        for v in spec.get("volumes", []):
            v["name"] = self.name(v.get("name", ""), "volume")
            claim = v.get("persistentVolumeClaim")
            if claim:
                claim["claimName"] = self.name(claim.get("claimName", ""), "claim")
        for rc in spec.get("resourceClaims", []):
            rc["name"] = self.name(rc.get("name", ""), "claim")
            for k in ("resourceClaimName", "resourceClaimTemplateName"):
                if rc.get(k):
                    rc[k] = self.name(rc[k], "rclaim")
        st = p.get("status", {})
        for rcs in st.get("resourceClaimStatuses", []):
            rcs["name"] = self.name(rcs.get("name", ""), "claim")
            if rcs.get("resourceClaimName"):
                rcs["resourceClaimName"] = self.name(rcs["resourceClaimName"], "rclaim")
        # Container statuses follow their containers' new names (resize accounting matches by name).
        for key, spec_key in (("containerStatuses", "containers"), ("initContainerStatuses", "initContainers")):
            for cs in st.get(key, []):
                cs["name"] = renamed.get((spec_key, cs.get("name", "")), "")
        if st.get("nominatedNodeName"):
            st["nominatedNodeName"] = self.name(st["nominatedNodeName"], "node")
        for cond in st.get("conditions", []):
            cond.pop("message", None)

    def snapshot(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """An anonymised copy of ``snap`` (the original is not changed)."""
        data = msgspec.to_builtins(snap)
        order: Sequence[tuple[str, Callable[[dict[str, Any]], None]]] = (
            ("nodes", self.node),
            ("namespaces", self.namespace),
            ("podGroups", self.pod_group),
            ("storageClasses", self.storage_class),
            ("persistentVolumes", self.pv),
            ("pods", self.ephemeral_claims),
            ("persistentVolumeClaims", self.pvc),
            ("csiNodes", self.csi_node),
            ("volumeAttachments", self.volume_attachment),
            ("csiStorageCapacities", self.csi_storage_capacity),
            ("services", self.map_workload),
            ("replicationControllers", self.map_workload),
            ("replicaSets", self.selector_workload),
            ("statefulSets", self.selector_workload),
            ("resourceSlices", self.resource_slice),
            ("resourceClaims", self.resource_claim),
            ("pods", self.pod),
        )
        for key, fn in order:
            for obj in data.get(key, []):
                fn(obj)
        data["metadata"] = {**data.get("metadata", {}), "server": "", "anonymized": True}
        return msgspec.convert(data, ClusterSnapshot)
