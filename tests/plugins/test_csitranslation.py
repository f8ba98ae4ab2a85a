"""In-tree to CSI translation (``plugins/csitranslation.py``, after ``k8s.io/csi-translation-lib``),
and VolumeBinding checking a migrated PV as its translation (``tryTranslatePVToCSI``)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import PersistentVolume, Volume
from ome_scheduler.api.storage import MIGRATED_PLUGINS_ANNOTATION, CSINode
from ome_scheduler.framework.events import QueueingHint
from ome_scheduler.plugins.csitranslation import (
    TranslationError,
    ebs_volume_id,
    inline_plugin,
    migrated_on_node,
    migration_on,
    pv_plugin,
    translate_inline,
    translate_pv,
    translate_pv_source,
)
from ome_scheduler.plugins.volumebinding import is_schedulable_after_csinode_change
from tests.support.plugins_env import Env, node, pod

GA = "topology.kubernetes.io/zone"
BETA = "failure-domain.beta.kubernetes.io/zone"


def vol(**src: Any) -> Volume:
    return msgspec.convert({"name": "v", **src}, Volume)


def pv(spec: dict[str, Any], labels: dict[str, str] | None = None, name: str = "pv") -> PersistentVolume:
    return msgspec.convert({"metadata": {"name": name, "labels": labels or {}}, "spec": spec}, PersistentVolume)


def zone_affinity(key: str, *zones: str) -> dict[str, Any]:
    expr = {"key": key, "operator": "In", "values": list(zones)}
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}


@pytest.mark.parametrize(
    ("source", "plugin", "driver", "handle"),
    [
        ({"gcePersistentDisk": {"pdName": "d"}}, "kubernetes.io/gce-pd", "pd.csi.storage.gke.io",
         "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/d"),
        ({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-123"}}, "kubernetes.io/aws-ebs",
         "ebs.csi.aws.com", "vol-123"),
        ({"azureDisk": {"diskName": "d", "diskURI": "uri"}}, "kubernetes.io/azure-disk", "disk.csi.azure.com", "uri"),
        ({"azureFile": {"secretName": "azure-storage-account-acct-secret", "shareName": "sh"}},
         "kubernetes.io/azure-file", "file.csi.azure.com", "#acct#sh#v#ns"),
        ({"cinder": {"volumeID": "c1"}}, "kubernetes.io/cinder", "cinder.csi.openstack.org", "c1"),
        ({"vsphereVolume": {"volumePath": "[ds] p"}}, "kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com",
         "[ds] p"),
        ({"portworxVolume": {"volumeID": "px1"}}, "kubernetes.io/portworx-volume", "pxd.portworx.com", "px1"),
    ],
)  # fmt: skip
def test_inline_translation(source: dict[str, Any], plugin: str, driver: str, handle: str) -> None:
    v = vol(**source)
    assert inline_plugin(v) == plugin
    assert translate_inline(v, "ns") == (driver, handle)


def test_what_is_not_migratable() -> None:
    assert inline_plugin(vol(hostPath={"path": "/x"})) == ""
    assert inline_plugin(vol(persistentVolumeClaim={"claimName": "c"})) == ""
    assert pv_plugin(pv({"csi": {"driver": "d", "volumeHandle": "h"}})) == ""
    assert [p for p in ("kubernetes.io/azure-file", "kubernetes.io/vsphere-volume") if migration_on(p)] == []
    assert all(migration_on(f"kubernetes.io/{p}") for p in ("gce-pd", "aws-ebs", "azure-disk", "cinder"))
    assert migration_on("kubernetes.io/portworx-volume")  # CSIMigrationPortworx is GA in 1.35


@pytest.mark.parametrize(
    ("kid", "want"),
    [
        ("vol-1", "vol-1"),
        ("anything", "anything"),  # a bare id is not checked
        ("aws://us-east-1a/vol-1", "vol-1"),
        ("aws:///vol-0123abc", "vol-0123abc"),
        ("aws://zone/vol-%41", "vol-A"),
    ],
)
def test_ebs_volume_ids(kid: str, want: str) -> None:
    assert ebs_volume_id(kid) == want


@pytest.mark.parametrize(
    ("kid", "msg"),
    [
        ("aws://zone/disk-1", "Invalid format for AWS volume (aws://zone/disk-1)"),
        ("aws://zone/a/vol-1", "Invalid format for AWS volume (aws://zone/a/vol-1)"),
        ("aws://zone/vol-%zz", 'Invalid disk name (aws://zone/vol-%zz): parse "aws://zone/vol-%zz": invalid URL escape "%zz"'),
    ],
)  # fmt: skip
def test_bad_ebs_volume_ids(kid: str, msg: str) -> None:
    with pytest.raises(TranslationError) as err:
        ebs_volume_id(kid)
    assert str(err.value) == msg


def test_azure_disk_kind_must_be_managed() -> None:
    assert translate_inline(vol(azureDisk={"diskURI": "u", "kind": "managed"}), "")[1] == "u"
    with pytest.raises(TranslationError, match=r"^kind\(Dedicated\) is not supported in csi migration$"):
        translate_inline(vol(azureDisk={"diskURI": "u", "kind": "Dedicated"}), "")


@pytest.mark.parametrize(
    ("labels", "handle"),
    [
        ({}, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/d"),
        ({GA: "us-central1-a"}, "projects/UNSPECIFIED/zones/us-central1-a/disks/d"),
        ({BETA: "us-central1-b", GA: "ignored"}, "projects/UNSPECIFIED/zones/us-central1-b/disks/d"),
        ({GA: "us-central1-a__us-central1-c"}, "projects/UNSPECIFIED/regions/us-central1/disks/d"),
    ],
)
def test_gce_pv_handles(labels: dict[str, str], handle: str) -> None:
    got = translate_pv_source(pv({"gcePersistentDisk": {"pdName": "d"}}, labels))
    assert (got.driver, got.volume_handle) == ("pd.csi.storage.gke.io", handle)


def test_gce_regional_pv_needs_one_region() -> None:
    with pytest.raises(TranslationError) as err:
        translate_pv_source(pv({"gcePersistentDisk": {"pdName": "d"}}, {GA: "us-central1-a__europe-west1-b"}))
    assert str(err.value) == (
        "failed to get region from zones: multiple or no regions gotten from zones, got: "
        "map[europe-west1:{} us-central1:{}]"
    )
    with pytest.raises(TranslationError, match="zone in unexpected format"):
        translate_pv_source(pv({"gcePersistentDisk": {"pdName": "d"}}, {GA: "a__b"}))


def _terms(p: PersistentVolume) -> list[list[tuple[str, list[str]]]]:
    na = p.spec.node_affinity
    assert na is not None and na.required is not None
    return [[(r.key, r.values) for r in t.match_expressions] for t in na.required.node_selector_terms]


def test_pv_topology_translation() -> None:
    # A zone requirement is renamed to the driver's key.
    got = translate_pv(pv({"gcePersistentDisk": {"pdName": "d"}, "nodeAffinity": zone_affinity(GA, "z1")}))
    assert _terms(got) == [[("topology.gke.io/zone", ["z1"])]]
    assert got.spec.csi is not None and got.spec.gce_persistent_disk is None
    # No affinity: the zone label's values become one (trimmed, sorted, deduplicated).
    got = translate_pv(pv({"awsElasticBlockStore": {"volumeID": "vol-1"}}, {BETA: "b__ a__a"}))
    assert _terms(got) == [[("topology.ebs.csi.aws.com/zone", ["a", "b"])]]
    # Beta region requirements become GA ones; other terms keep their requirements.
    aff = zone_affinity(BETA, "z")
    aff["required"]["nodeSelectorTerms"][0]["matchExpressions"].append(
        {"key": "failure-domain.beta.kubernetes.io/region", "operator": "In", "values": ["r"]}
    )
    got = translate_pv(pv({"cinder": {"volumeID": "c"}, "nodeAffinity": aff}))
    assert _terms(got) == [
        [("topology.cinder.csi.openstack.org/zone", ["z"]), ("topology.kubernetes.io/region", ["r"])]
    ]
    # Azure Disk and Portworx keep the affinity as it is.
    got = translate_pv(pv({"azureDisk": {"diskURI": "u"}, "nodeAffinity": zone_affinity(GA, "z")}))
    assert _terms(got) == [[(GA, ["z"])]]
    # An empty zone label adds nothing (upstream ignores addTopology's error).
    got = translate_pv(pv({"gcePersistentDisk": {"pdName": "d"}}, {GA: ""}))
    assert got.spec.node_affinity is None


def _csi_node(name: str, migrated: str) -> CSINode:
    md: dict[str, Any] = {"name": name, "annotations": {MIGRATED_PLUGINS_ANNOTATION: migrated} if migrated else {}}
    return msgspec.convert({"metadata": md}, CSINode)


def test_migrated_on_node_reads_the_annotation() -> None:
    assert not migrated_on_node("kubernetes.io/gce-pd", None)
    assert not migrated_on_node("kubernetes.io/gce-pd", _csi_node("n", ""))
    assert migrated_on_node("kubernetes.io/gce-pd", _csi_node("n", "kubernetes.io/aws-ebs,kubernetes.io/gce-pd"))


def test_volume_binding_checks_a_migrated_pv_as_its_translation() -> None:
    """A bound GCE PD PV with a zone affinity: on a node whose CSINode says the plugin migrated,
    the affinity is the driver's zone key (``topology.gke.io/zone``), which this node lacks."""
    env = Env()
    env.add_node(node("n1", {GA: "z1"}))
    env.add_node(node("n2", {GA: "z1", "topology.gke.io/zone": "z1"}))
    env.add_pv(
        {
            "metadata": {"name": "pd"},
            "spec": {
                "gcePersistentDisk": {"pdName": "d"},
                "nodeAffinity": zone_affinity(GA, "z1"),
                "claimRef": {"name": "c", "namespace": "default", "uid": "uid-c"},
            },
            "status": {"phase": "Bound"},
        }
    )
    env.add_pvc(
        {
            "metadata": {"name": "c", "namespace": "default", "uid": "uid-c",
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": "pd"},
        }
    )  # fmt: skip
    p = pod("p", spec={"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]})
    assert env.feasible(p) == {"n1", "n2"}
    vs = env.s.volume_store()
    vs.on_csinode_add(_csi_node("n1", "kubernetes.io/gce-pd"))
    vs.on_csinode_add(_csi_node("n2", "kubernetes.io/gce-pd"))
    assert env.feasible(p) == {"n2"}
    # A PV that does not translate is an Error.
    env.add_pv(
        {
            "metadata": {"name": "pd", "labels": {GA: "a__b"}},
            "spec": {"gcePersistentDisk": {"pdName": "d"}, "claimRef": {"name": "c", "namespace": "default"}},
        }
    )
    with pytest.raises(RuntimeError) as err:
        env.schedule(p)
    assert str(err.value).startswith(
        'running "VolumeBinding" filter plugin: could not translate pv: failed to get region from zones: '
        "zone in unexpected format"
    )


def test_volume_binding_csinode_hint() -> None:
    p = pod("p")
    assert is_schedulable_after_csinode_change(p, None, _csi_node("n", "")) == QueueingHint.QUEUE
    same = is_schedulable_after_csinode_change(p, _csi_node("n", "a"), _csi_node("n", "a"))
    assert same == QueueingHint.QUEUE_SKIP
    changed = is_schedulable_after_csinode_change(p, _csi_node("n", "a"), _csi_node("n", "a,b"))
    assert changed == QueueingHint.QUEUE
