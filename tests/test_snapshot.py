"""``ome-scheduler snapshot``: listing (against a real HTTP server), the file format, anonymising."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod
from ome_scheduler.api.scheduling import PodGroup, PodGroupStatus
from ome_scheduler.api.snapshot import (
    ClusterSnapshot,
    SnapshotError,
    SnapshotMeta,
    decode_manifests,
    read_snapshot,
    write_snapshot,
)
from ome_scheduler.api.storage import (
    MIGRATED_PLUGINS_ANNOTATION,
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    VolumeAttachment,
)
from ome_scheduler.api.workloads import ReplicaSet, Service
from ome_scheduler.config.load import parse_config
from ome_scheduler.tools.anonymize import Anonymizer
from ome_scheduler.tools.listing import take_snapshot
from ome_scheduler.tools.simulation import Simulation
from tests.support.apiserver import FakeApiServer
from tests.support.manifests import HOSTNAME, chart_config, node, pod, pod_group

DK = "example.com/clique"


def with_uid(o: dict[str, Any]) -> dict[str, Any]:
    md = o["metadata"]
    return {**o, "metadata": {**md, "uid": f"uid-{md.get('namespace', '')}-{md['name']}"}}


def test_take_snapshot_lists_every_page_and_skips_what_it_cannot_read(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> tuple[ClusterSnapshot, FakeApiServer]:
        async with FakeApiServer() as api:
            api.lists["/api/v1/nodes"] = [node(f"n{i:04d}", {DK: f"d{i // 8}"}) for i in range(1003)]
            api.lists["/api/v1/namespaces"] = [{"metadata": {"name": "team", "labels": {"env": "prod"}}}]
            good = with_uid(pod("p", "team", gang="g"))
            bad = with_uid(pod("q", "team"))
            bad["spec"]["containers"] = "not-a-list"
            api.lists["/api/v1/pods"] = [good, bad]
            api.lists["/apis/storage.k8s.io/v1/storageclasses"] = []
            api.lists["/api/v1/persistentvolumes"] = []
            api.lists["/api/v1/persistentvolumeclaims"] = []
            api.lists["/apis/storage.k8s.io/v1/csinodes"] = []
            api.lists["/apis/storage.k8s.io/v1/volumeattachments"] = []
            api.lists["/apis/storage.k8s.io/v1/csidrivers"] = []
            api.lists["/apis/storage.k8s.io/v1/csistoragecapacities"] = []
            for path in ("/api/v1/services", "/api/v1/replicationcontrollers"):
                api.lists[path] = []
            for path in ("/apis/apps/v1/replicasets", "/apis/apps/v1/statefulsets"):
                api.lists[path] = []
            dra = "/apis/resource.k8s.io/v1"
            api.lists[f"{dra}/resourceclaims"] = []
            api.lists[f"{dra}/deviceclasses"] = [{"metadata": {"name": "gpu"}, "spec": {}}]
            api.lists[f"{dra}/resourceslices"] = [
                {
                    "metadata": {"name": "s"},
                    "spec": {"driver": "d.example.com", "nodeName": "n0000", "pool": {"name": "n0000"}},
                }
            ]
            # No PodGroup list: the CRD is not installed (404).
            return await take_snapshot(api.client()), api

    snap, api = asyncio.run(main())
    assert [n.metadata.name for n in snap.nodes][:2] == ["n0000", "n0001"] and len(snap.nodes) == 1003
    assert len(api.sent("GET", "/api/v1/nodes")) == 3  # 500 + 500 + 3
    pods_get = api.sent("GET", "/api/v1/pods")[0]
    assert pods_get.query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert [p.metadata.name for p in snap.pods] == ["p"]
    assert snap.pod_groups == [] and snap.namespaces[0].metadata.labels == {"env": "prod"}
    assert [c.metadata.name for c in snap.device_classes] == ["gpu"] and snap.resource_claims == []
    assert [sl.spec.node_name for sl in snap.resource_slices] == ["n0000"]
    assert not any("secrets" in r.path or "configmaps" in r.path for r in api.requests)
    err = capsys.readouterr().err
    assert "skipping an object that cannot be read" in err and "podgroups not served" in err
    assert snap.metadata.server.startswith("http://127.0.0.1:") and snap.metadata.taken_at.endswith("Z")


def sample() -> ClusterSnapshot:
    nodes = [node(f"gpu-{d}{i}", {DK: d}) for d in ("a", "b") for i in range(3)]
    pods = [
        with_uid(pod("m0", "team", gang="g", anti_affinity_on=HOSTNAME, node_name="gpu-b0")),
        with_uid(pod("solo", "team", node_selector={DK: "a"})),
    ]
    return ClusterSnapshot(
        metadata=SnapshotMeta(taken_at="2026-12-01T00:00:00Z", server="https://10.0.0.1:6443"),
        nodes=[msgspec.convert(n, Node) for n in nodes],
        namespaces=[msgspec.convert({"metadata": {"name": "team"}}, Namespace)],
        pods=[msgspec.convert(p, Pod) for p in pods],
        pod_groups=[msgspec.convert(with_uid(pod_group("g", "team", 3, topology_key=DK)), PodGroup)],
    )


@pytest.mark.parametrize("name", ["snap.json", "snap.yaml"])
def test_file_round_trip(tmp_path: Path, name: str) -> None:
    s = sample()
    write_snapshot(s, tmp_path / name)
    assert read_snapshot(tmp_path / name) == s


def test_a_file_that_is_not_a_snapshot_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("apiVersion: v1\nkind: Pod\n")
    with pytest.raises(SnapshotError, match="is not snapshot.ome.io/v1alpha1/ClusterSnapshot"):
        read_snapshot(tmp_path / "x.yaml")
    (tmp_path / "y.json").write_text('{"nodes": "no"}')
    with pytest.raises(SnapshotError, match=r"\$\.nodes"):
        read_snapshot(tmp_path / "y.json")


def test_manifests_accept_lists_documents_and_numeric_quantities(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n- {kind: Namespace, metadata: {name: x}}\n"
        "---\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - resources: {requests: {nvidia.com/gpu: 8, cpu: 0.5}}\n"
    )
    ns, p = decode_manifests(tmp_path / "m.yaml")
    assert isinstance(ns, Namespace) and isinstance(p, Pod)
    assert p.spec.containers[0].resources.requests == {"nvidia.com/gpu": "8", "cpu": "0.5"}


def test_anonymize_replaces_names_consistently_and_keeps_semantics() -> None:
    s = sample()
    # The leader's status annotations and another controller's occupiedBy name things too.
    pg0 = s.pod_groups[0]
    ann = {
        **pg0.metadata.annotations,
        "ome.io/placement": "Bound",
        "ome.io/placement-domain": "b",
        "ome.io/placement-topology-key": DK,
        "ome.io/waiting-reason": "0/6 nodes are available: waiting for all PodGroup member templates for team/g.",
    }
    s.pod_groups[0] = msgspec.structs.replace(
        pg0,
        metadata=msgspec.structs.replace(pg0.metadata, annotations=ann),
        status=PodGroupStatus(phase="Scheduling", occupied_by="team/solo"),
    )
    a = Anonymizer().snapshot(s)
    assert a.metadata.anonymized and a.metadata.server == ""
    names = {n.metadata.name for n in a.nodes}
    assert all(n.startswith("node-") for n in names)
    for n in a.nodes:
        assert n.metadata.labels[HOSTNAME] == n.metadata.name  # the same placeholder everywhere
        assert n.metadata.labels[DK].startswith("value-")
    m0 = next(p for p in a.pods if p.spec.node_name)
    assert m0.spec.node_name in names
    pg = a.pod_groups[0]
    assert m0.metadata.labels["scheduling.x-k8s.io/pod-group"] == pg.metadata.name
    domain_b = next(n.metadata.labels[DK] for n in a.nodes if n.metadata.name == m0.spec.node_name)
    assert pg.metadata.annotations == {  # label keys kept, the domain a placeholder, the reason dropped
        "ome.io/topology-key": DK,
        "ome.io/placement": "Bound",
        "ome.io/placement-domain": domain_b,
        "ome.io/placement-topology-key": DK,
    }
    assert pg.status == PodGroupStatus(phase="Scheduling")
    aff = m0.spec.affinity
    assert aff is not None and aff.pod_anti_affinity is not None
    sel = aff.pod_anti_affinity.required_during_scheduling_ignored_during_execution[0].label_selector
    assert sel is not None and sel.match_labels == {"app": m0.metadata.labels["app"]}
    original_names = {"gpu-a0", "team", "m0", "solo", "g"}
    text = msgspec.json.encode(a).decode()
    assert not any(f'"{x}"' in text for x in original_names)

    # The simulation sees the same cluster: the gang completes in the domain of its bound member.
    cfg = parse_config(chart_config())
    for snap in (s, a):
        ns = snap.namespaces[0].metadata.name
        gname = snap.pod_groups[0].metadata.name
        adds = [msgspec.convert(pod(f"extra-{i}", ns, gang=gname, anti_affinity_on=HOSTNAME), Pod) for i in range(2)]
        # the added members carry the anonymised app label of their gang
        adds = [
            msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, labels=dict(m0_labels(snap))))
            for p in adds
        ]
        r = Simulation(cfg, snap, adds).run()
        (g,) = r.gangs
        assert g.status == "bound" and len(g.domains) == 1
        bound_node = next(p for p in snap.pods if p.spec.node_name).spec.node_name
        domain = next(n.metadata.labels[DK] for n in snap.nodes if n.metadata.name == bound_node)
        assert g.domains == [domain]
        solo = next(p for p in r.pods if not p.gang)
        assert solo.status == "bound"


def m0_labels(snap: ClusterSnapshot) -> dict[str, str]:
    return dict(next(p for p in snap.pods if p.spec.node_name).metadata.labels)


def test_snapshot_command_without_credentials_exits_1(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ome_scheduler", "snapshot", str(tmp_path / "s.json"), "--kubeconfig=/nonexistent"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1 and "cannot read kubeconfig /nonexistent (--kubeconfig)" in r.stderr, r.stderr
    assert not (tmp_path / "s.json").exists()


def volume_sample() -> ClusterSnapshot:
    """Two nodes with one EBS attach slot each; node a's slot is taken by an attachment, and a
    bound pod on node b is mid-resize (its status holds 3 of the node's 4 cpu)."""
    nodes = [msgspec.convert(node(n, {DK: "x"}, cpu="4"), Node) for n in ("node-a", "node-b")]
    csi_nodes = [
        msgspec.convert(
            {
                "metadata": {"name": n, "annotations": {MIGRATED_PLUGINS_ANNOTATION: "kubernetes.io/aws-ebs"}},
                "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": f"i-{n}", "allocatable": {"count": 1}}]},
            },
            CSINode,
        )
        for n in ("node-a", "node-b")
    ]
    pvs = [
        msgspec.convert(
            {
                "metadata": {"name": f"pv-{i}"},
                "spec": {
                    "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{i}"},
                    "claimRef": {"name": f"claim-{i}", "namespace": "team", "uid": f"c{i}"},
                },
                "status": {"phase": "Bound"},
            },
            PersistentVolume,
        )
        for i in range(2)
    ]
    pvcs = [
        msgspec.convert(
            {
                "metadata": {
                    "name": f"claim-{i}",
                    "namespace": "team",
                    "uid": f"c{i}",
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                },
                "spec": {"volumeName": f"pv-{i}"},
            },
            PersistentVolumeClaim,
        )
        for i in range(2)
    ]
    va = msgspec.convert(
        {
            "metadata": {"name": "csi-abc"},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "node-a", "source": {"persistentVolumeName": "pv-0"}},
        },
        VolumeAttachment,
    )
    resizing = with_uid(pod("resizing", "team", node_name="node-b", cpu="1", gpu=0))
    resizing["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "controller": True}
    ]
    resizing["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": resizing["spec"]["containers"][0]["name"], "resources": {"requests": {"cpu": "3"}}}
        ],
    }
    return ClusterSnapshot(
        metadata=SnapshotMeta(taken_at="2026-12-01T00:00:00Z", server="https://10.0.0.1:6443"),
        nodes=nodes,
        namespaces=[msgspec.convert({"metadata": {"name": "team"}}, Namespace)],
        pods=[msgspec.convert(resizing, Pod)],
        persistent_volumes=pvs,
        persistent_volume_claims=pvcs,
        csi_nodes=csi_nodes,
        volume_attachments=[va],
        services=[
            msgspec.convert(
                {"metadata": {"name": "web", "namespace": "team"}, "spec": {"selector": {"app": "web"}}}, Service
            )
        ],
        replica_sets=[
            msgspec.convert(
                {
                    "metadata": {"name": "web-abc", "namespace": "team"},
                    "spec": {"selector": {"matchLabels": {"app": "web"}}},
                },
                ReplicaSet,
            )
        ],
        csi_drivers=[
            msgspec.convert({"metadata": {"name": "ebs.csi.aws.com"}, "spec": {"storageCapacity": True}}, CSIDriver)
        ],
        csi_storage_capacities=[
            msgspec.convert(
                {
                    "metadata": {"name": "cap-x", "namespace": "team"},
                    "storageClassName": "fast",
                    "nodeTopology": {"matchLabels": {DK: "x"}},
                    "capacity": "100Gi",
                },
                CSIStorageCapacity,
            )
        ],
    )


def test_csinodes_attachments_and_resizes_survive_the_file_and_anonymising(tmp_path: Path) -> None:
    s = volume_sample()
    write_snapshot(s, tmp_path / "v.yaml")
    assert read_snapshot(tmp_path / "v.yaml") == s
    a = Anonymizer().snapshot(s)
    node_names = {n.metadata.name for n in a.nodes}
    assert {c.metadata.name for c in a.csi_nodes} == node_names
    assert all(c.metadata.annotations == {MIGRATED_PLUGINS_ANNOTATION: "kubernetes.io/aws-ebs"} for c in a.csi_nodes)
    assert all(d.node_id.startswith("node-") for c in a.csi_nodes for d in c.spec.drivers)
    (va,) = a.volume_attachments
    assert va.spec.node_name in node_names and va.spec.attacher == "ebs.csi.aws.com"
    assert va.spec.source.persistent_volume_name in {p.metadata.name for p in a.persistent_volumes}
    assert all(p.spec.csi is not None and p.spec.csi.volume_handle.startswith("handle-") for p in a.persistent_volumes)
    (cap,) = a.csi_storage_capacities
    assert cap.metadata.namespace == a.namespaces[0].metadata.name and cap.metadata.name.startswith("capacity-")
    assert cap.storage_class_name.startswith("class-") and cap.capacity == "100Gi"
    assert cap.node_topology is not None and cap.node_topology.match_labels == {DK: a.nodes[0].metadata.labels[DK]}
    assert a.csi_drivers == s.csi_drivers
    (svc,) = a.services
    (rs,) = a.replica_sets
    assert svc.spec.selector is not None and svc.spec.selector["app"] != "web"
    assert rs.spec.selector is not None and rs.spec.selector.match_labels == svc.spec.selector
    (p,) = a.pods
    assert p.metadata.owner_references[0].name == rs.metadata.name != "web-abc"
    assert p.metadata.owner_references[0].api_version == "apps/v1"
    assert p.status.container_statuses[0].name == p.spec.containers[0].name == "c0"
    text = msgspec.json.encode(a).decode()
    assert not any(x in text for x in ('"node-a"', '"csi-abc"', '"vol-0"', '"pv-0"', '"i-node-a"'))

    # The simulation counts both: the claim pod fits neither node a (attach slot) nor b (cpu).
    cfg = parse_config(chart_config())
    for snap in (s, a):
        ns = snap.namespaces[0].metadata.name
        claim = snap.persistent_volume_claims[1].metadata.name
        p = pod("user", ns, cpu="2", gpu=0)
        p["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
        r = Simulation(cfg, snap, [msgspec.convert(p, Pod)]).run()
        (user,) = [x for x in r.pods if x.name == "user"]
        assert user.status == "pending", user
        assert "1 Insufficient cpu, 1 node(s) exceed max volume count" in user.message, user.message
