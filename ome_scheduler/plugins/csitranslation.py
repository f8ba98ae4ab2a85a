"""In-tree volume sources translated to their CSI drivers, as the volume plugins need it.

Mirrors ``k8s.io/csi-translation-lib`` v0.35.4 (``translate.go`` and ``plugins/*.go``): the
seven in-tree plugins the library knows (GCE PD, AWS EBS, Azure Disk, Azure File, Cinder,
vSphere, Portworx), which inline volume or PersistentVolume each claims, its CSI driver name,
and the CSI volume handle a translated volume gets. Only what the scheduler reads is
translated: the driver and the volume handle (NodeVolumeLimits), and a PersistentVolume's node
affinity (VolumeBinding checks a translated PV against the node's labels).

Which plugins the *scheduler* treats as migrated is the plugins' business, not the library's:
``nodevolumelimits/utils.go`` ``isCSIMigrationOn`` and ``volumebinding/binder.go``
``isCSIMigrationOnForPlugin`` both say GCE PD, AWS EBS, Azure Disk and Cinder always, Portworx
(CSIMigrationPortworx, GA in 1.35) when the node's CSINode lists it in its migrated-plugins
annotation, Azure File and vSphere never (:func:`migration_on`, :func:`migrated_on_node`).

In-tree sources are the API server's JSON (``pdName``, ``volumeID``, ``diskURI``...), as
:class:`~ome_scheduler.api.core.Volume` and ``PersistentVolumeSpec`` keep them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ome_scheduler.api.core import (
    CSIPersistentVolumeSource,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PersistentVolume,
    Volume,
    VolumeNodeAffinity,
)
from ome_scheduler.api.storage import MIGRATED_PLUGINS_ANNOTATION, CSINode

GCE_PD_PLUGIN = "kubernetes.io/gce-pd"
AWS_EBS_PLUGIN = "kubernetes.io/aws-ebs"
AZURE_DISK_PLUGIN = "kubernetes.io/azure-disk"
AZURE_FILE_PLUGIN = "kubernetes.io/azure-file"
CINDER_PLUGIN = "kubernetes.io/cinder"
VSPHERE_PLUGIN = "kubernetes.io/vsphere-volume"
PORTWORX_PLUGIN = "kubernetes.io/portworx-volume"

GCE_PD_DRIVER = "pd.csi.storage.gke.io"
AWS_EBS_DRIVER = "ebs.csi.aws.com"
AZURE_DISK_DRIVER = "disk.csi.azure.com"
AZURE_FILE_DRIVER = "file.csi.azure.com"
CINDER_DRIVER = "cinder.csi.openstack.org"
VSPHERE_DRIVER = "csi.vsphere.vmware.com"
PORTWORX_DRIVER = "pxd.portworx.com"

_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("gce_persistent_disk", GCE_PD_PLUGIN, GCE_PD_DRIVER),
    ("aws_elastic_block_store", AWS_EBS_PLUGIN, AWS_EBS_DRIVER),
    ("azure_disk", AZURE_DISK_PLUGIN, AZURE_DISK_DRIVER),
    ("azure_file", AZURE_FILE_PLUGIN, AZURE_FILE_DRIVER),
    ("cinder", CINDER_PLUGIN, CINDER_DRIVER),
    ("vsphere_volume", VSPHERE_PLUGIN, VSPHERE_DRIVER),
    ("portworx_volume", PORTWORX_PLUGIN, PORTWORX_DRIVER),
)
"""(field of ``Volume``/``PersistentVolumeSpec``, in-tree plugin name, CSI driver name)."""
DRIVER_OF_PLUGIN: dict[str, str] = {plugin: driver for _, plugin, driver in _SOURCES}
"""``GetCSINameFromInTreeName``: in-tree plugin name -> CSI driver name."""

TOPOLOGY_KEY = {
    GCE_PD_PLUGIN: "topology.gke.io/zone",
    AWS_EBS_PLUGIN: "topology.ebs.csi.aws.com/zone",
    CINDER_PLUGIN: "topology.cinder.csi.openstack.org/zone",
}
"""The zone key a translated PV's node affinity uses (plugins whose ``TranslateInTreePVToCSI``
calls ``translateTopologyFromInTreeToCSI``; Azure Disk and Portworx keep the affinity as is)."""

ZONE_GA = "topology.kubernetes.io/zone"
REGION_GA = "topology.kubernetes.io/region"
ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
REGION_BETA = "failure-domain.beta.kubernetes.io/region"
MULTI_ZONE_DELIMITER = "__"
UNSPECIFIED = "UNSPECIFIED"
_AWS_VOLUME = re.compile(r"vol-[^/]*")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class TranslationError(ValueError):
    """A source the library refuses to translate; the text is the library's error text."""


def inline_plugin(vol: Volume) -> str:
    """``GetInTreePluginNameFromSpec(nil, vol)``: the in-tree plugin of a migratable inline
    volume, or ``""`` (``IsInlineMigratable`` is ``!= ""``)."""
    for field, plugin, _ in _SOURCES:
        if getattr(vol, field) is not None:
            return plugin
    return ""


def pv_plugin(pv: PersistentVolume) -> str:
    """``GetInTreePluginNameFromSpec(pv, nil)``: the in-tree plugin of a migratable PV, or ``""``."""
    spec = pv.spec
    for field, plugin, _ in _SOURCES:
        if getattr(spec, field) is not None:
            return plugin
    return ""


def migration_on(plugin: str) -> bool:
    """``isCSIMigrationOnForPlugin`` (CSIMigrationPortworx on): whether kube-scheduler 1.35 treats
    ``plugin`` as migrated at all (Azure File and vSphere: no)."""
    return plugin in (GCE_PD_PLUGIN, AWS_EBS_PLUGIN, AZURE_DISK_PLUGIN, CINDER_PLUGIN, PORTWORX_PLUGIN)


def migrated_on_node(plugin: str, csi_node: CSINode | None) -> bool:
    """``isPluginMigratedToCSIOnNode``: the CSINode's migrated-plugins annotation lists ``plugin``."""
    if csi_node is None:
        return False
    ann = csi_node.metadata.annotations.get(MIGRATED_PLUGINS_ANNOTATION, "")
    return bool(ann) and plugin in ann.split(",")


def ebs_volume_id(kubernetes_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://zone/vol-x`` -> ``vol-x``; a bare id is kept.

    Go's ``url.Parse`` is reduced to what can fail on such a string: a bad ``%`` escape or a
    control character.

    Raises:
        TranslationError: the id is a URL that does not name a ``vol-...`` volume.
    """
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in kubernetes_id):
        raise TranslationError(
            f'Invalid disk name ({kubernetes_id}): parse "{kubernetes_id}": net/url: invalid control character in URL'
        )
    rest = kubernetes_id[len("aws://") :].split("#", 1)[0].split("?", 1)[0]
    slash = rest.find("/")
    path = rest[slash:] if slash >= 0 else ""
    bad = _ESCAPE.search(rest)
    if bad is not None:
        esc = rest[bad.start() : bad.start() + 3]
        raise TranslationError(
            f'Invalid disk name ({kubernetes_id}): parse "{kubernetes_id}": invalid URL escape "{esc}"'
        )
    aws_id = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), path).strip("/")
    if not _AWS_VOLUME.fullmatch(aws_id):
        raise TranslationError(f"Invalid format for AWS volume ({kubernetes_id})")
    return aws_id


def _ebs_handle(src: Mapping[str, Any]) -> str:
    try:
        return ebs_volume_id(str(src.get("volumeID") or ""))
    except TranslationError as exc:
        raise TranslationError(f"failed to translate Kubernetes ID to EBS Volume ID {exc}") from None


def _azure_disk_handle(src: Mapping[str, Any]) -> str:
    kind = src.get("kind")
    if kind is not None and str(kind).lower() != "managed":
        raise TranslationError(f"kind({kind}) is not supported in csi migration")
    return str(src.get("diskURI") or "")


def translate_inline(vol: Volume, namespace: str) -> tuple[str, str]:
    """``TranslateInTreeInlineVolumeToCSI``: (CSI driver, volume handle) of a migratable inline volume.

    Handles: GCE PD ``projects/UNSPECIFIED/zones/UNSPECIFIED/disks/<pdName>``, AWS EBS the EBS
    id of ``volumeID``, Azure Disk ``diskURI``, Azure File ``#<account>#<share>#<volume>#<ns>``,
    Cinder and Portworx ``volumeID``, vSphere ``volumePath``.

    Raises:
        TranslationError: an AWS id that is not an EBS volume, an Azure disk of a kind other
            than ``Managed``, or a volume with no in-tree source.
    """
    if vol.gce_persistent_disk is not None:
        pd = str(vol.gce_persistent_disk.get("pdName") or "")
        return GCE_PD_DRIVER, f"projects/{UNSPECIFIED}/zones/{UNSPECIFIED}/disks/{pd}"
    if vol.aws_elastic_block_store is not None:
        return AWS_EBS_DRIVER, _ebs_handle(vol.aws_elastic_block_store)
    if vol.azure_disk is not None:
        return AZURE_DISK_DRIVER, _azure_disk_handle(vol.azure_disk)
    if vol.azure_file is not None:
        secret = str(vol.azure_file.get("secretName") or "")
        m = re.search(r"azure-storage-account-(.+)-secret", secret)
        account = m.group(1) if m else secret
        share = str(vol.azure_file.get("shareName") or "")
        return AZURE_FILE_DRIVER, f"#{account}#{share}#{vol.name}#{namespace or 'default'}"
    if vol.cinder is not None:
        return CINDER_DRIVER, str(vol.cinder.get("volumeID") or "")
    if vol.vsphere_volume is not None:
        return VSPHERE_DRIVER, str(vol.vsphere_volume.get("volumePath") or "")
    if vol.portworx_volume is not None:
        return PORTWORX_DRIVER, str(vol.portworx_volume.get("volumeID") or "")
    raise TranslationError(f"could not find in-tree plugin translation logic for {vol.name!r}")


def _gce_region(zones: list[str]) -> str:
    """``gceGetRegionFromZones``: the one region ``{locale}-{region}`` of ``{locale}-{region}-{zone}`` zones."""
    regions = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(
                f"failed to get region from zones: zone in unexpected format, expected: "
                f"{{locale}}-{{region}}-{{zone}}, got: {zone}"
            )
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        listed = " ".join(f"{r}:{{}}" for r in sorted(regions))  # Go's %v of a sets.String
        raise TranslationError(
            f"failed to get region from zones: multiple or no regions gotten from zones, got: map[{listed}]"
        )
    return regions.pop()


def _gce_pv_handle(pv: PersistentVolume, pd: str) -> str:
    labels = pv.metadata.labels
    zones = (labels.get(ZONE_BETA) or labels.get(ZONE_GA) or "").split(MULTI_ZONE_DELIMITER)
    if len(zones) == 1 and zones[0]:
        return f"projects/{UNSPECIFIED}/zones/{zones[0]}/disks/{pd}"
    if len(zones) > 1:
        return f"projects/{UNSPECIFIED}/regions/{_gce_region(zones)}/disks/{pd}"
    return f"projects/{UNSPECIFIED}/zones/{UNSPECIFIED}/disks/{pd}"


def translate_pv_source(pv: PersistentVolume) -> CSIPersistentVolumeSource:
    """``TranslateInTreePVToCSI``'s CSI source (driver and volume handle) of a migratable PV.

    Handles as :func:`translate_inline`, except GCE PD: the zone comes from the PV's zone label
    (``failure-domain.beta.kubernetes.io/zone`` first, then ``topology.kubernetes.io/zone``):
    one zone ``projects/UNSPECIFIED/zones/<zone>/disks/<pd>``, several (``__``-separated)
    ``projects/UNSPECIFIED/regions/<region>/disks/<pd>``, none ``.../zones/UNSPECIFIED/...``;
    Azure File and vSphere are not translated (no plugin counts or checks them).

    Raises:
        TranslationError: GCE zones in no single region, a bad AWS id, an Azure disk that is
            not ``Managed``, or a PV the scheduler does not translate.
    """
    spec = pv.spec
    if spec.gce_persistent_disk is not None:
        pd = str(spec.gce_persistent_disk.get("pdName") or "")
        return CSIPersistentVolumeSource(driver=GCE_PD_DRIVER, volume_handle=_gce_pv_handle(pv, pd))
    if spec.aws_elastic_block_store is not None:
        return CSIPersistentVolumeSource(driver=AWS_EBS_DRIVER, volume_handle=_ebs_handle(spec.aws_elastic_block_store))
    if spec.azure_disk is not None:
        return CSIPersistentVolumeSource(driver=AZURE_DISK_DRIVER, volume_handle=_azure_disk_handle(spec.azure_disk))
    if spec.cinder is not None:
        return CSIPersistentVolumeSource(driver=CINDER_DRIVER, volume_handle=str(spec.cinder.get("volumeID") or ""))
    if spec.portworx_volume is not None:
        handle = str(spec.portworx_volume.get("volumeID") or "")
        return CSIPersistentVolumeSource(driver=PORTWORX_DRIVER, volume_handle=handle)
    raise TranslationError(f"could not find in-tree plugin translation logic for {pv.metadata.name!r}")


def _topology_values(terms: list[NodeSelectorTerm], key: str) -> list[str]:
    """``getTopologyValues``: every value of ``key`` in the terms' expressions, sorted, once each."""
    return sorted({v for t in terms for r in t.match_expressions if r.key == key for v in r.values})


def _replace_key(terms: list[NodeSelectorTerm], old: str, new: str) -> list[NodeSelectorTerm]:
    """``replaceTopology``: expressions on ``old`` renamed to ``new``."""
    return [
        msgspec.structs.replace(
            t,
            match_expressions=[msgspec.structs.replace(r, key=new) if r.key == old else r for r in t.match_expressions],
        )
        for t in terms
    ]


def _topology_label(pv: PersistentVolume) -> tuple[str, str]:
    """``getTopologyLabel``: (zone key, region key), GA or beta, by what the PV uses."""
    na = pv.spec.node_affinity
    terms = na.required.node_selector_terms if na is not None and na.required is not None else []
    keys = {r.key for t in terms for r in t.match_expressions}
    labels = pv.metadata.labels
    if ZONE_GA in keys:
        return ZONE_GA, REGION_GA
    if ZONE_BETA in keys:
        return ZONE_BETA, REGION_BETA
    if ZONE_GA in labels:
        return ZONE_GA, REGION_GA
    if ZONE_BETA in labels:
        return ZONE_BETA, REGION_BETA
    return ZONE_GA, REGION_GA


def translate_pv(pv: PersistentVolume) -> PersistentVolume:
    """``TranslateInTreePVToCSI`` as far as the scheduler reads it: a copy with the CSI source
    and, for GCE PD, AWS EBS and Cinder, ``translateTopologyFromInTreeToCSI``'s node affinity:
    zone requirements renamed to the driver's zone key (:data:`TOPOLOGY_KEY`), or, when the
    affinity names no zone, the PV's zone label values (``__``-separated, trimmed, sorted)
    added to every term as ``<key> In [...]``; beta region requirements renamed to
    ``topology.kubernetes.io/region``.

    Raises:
        TranslationError: from :func:`translate_pv_source`.
    """
    source = translate_pv_source(pv)
    plugin = pv_plugin(pv)
    spec = msgspec.structs.replace(
        pv.spec,
        csi=source,
        gce_persistent_disk=None,
        aws_elastic_block_store=None,
        azure_disk=None,
        cinder=None,
        portworx_volume=None,
    )
    key = TOPOLOGY_KEY.get(plugin)
    if key is not None:
        spec = msgspec.structs.replace(spec, node_affinity=_translated_affinity(pv, key))
    return msgspec.structs.replace(pv, spec=spec)


def _translated_affinity(pv: PersistentVolume, csi_key: str) -> VolumeNodeAffinity | None:
    """``translateTopologyFromInTreeToCSI``'s node affinity (never fails: upstream ignores
    ``addTopology``'s "no valid zones" error)."""
    zone_key, region_key = _topology_label(pv)
    na = pv.spec.node_affinity
    required = na.required if na is not None else None
    terms = list(required.node_selector_terms) if required is not None else []
    if _topology_values(terms, zone_key):
        terms = _replace_key(terms, zone_key, csi_key)
    elif zone_key in pv.metadata.labels:
        zones = sorted({z.strip() for z in pv.metadata.labels[zone_key].split(MULTI_ZONE_DELIMITER) if z.strip()})
        if zones:
            if not terms:
                terms = [NodeSelectorTerm()]
            req = NodeSelectorRequirement(key=csi_key, operator="In", values=zones)
            terms = [msgspec.structs.replace(t, match_expressions=[*t.match_expressions, req]) for t in terms]
    if region_key == REGION_BETA and _topology_values(terms, region_key):
        terms = _replace_key(terms, region_key, REGION_GA)
    if not terms and (na is None or required is None):
        return na
    return VolumeNodeAffinity(required=NodeSelector(node_selector_terms=terms))
