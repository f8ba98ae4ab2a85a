"""NodeVolumeLimits: accepted in profiles; CSI attach limits are not enforced.

Mirrors the shape of ``pkg/scheduler/framework/plugins/nodevolumelimits/csi.go``: PreFilter
skips pods without PVC, generic ephemeral or migratable in-tree volumes, exactly as upstream,
so the plugin appears at its place in the default profile and profiles that configure it
load. Deviation (docs/plugins.md): ome-scheduler watches neither CSINodes nor
VolumeAttachments, so Filter never reports ``node(s) exceed max volume count``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ome_scheduler.framework.interface import CycleState, FilterPlugin, PreFilterPlugin
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin):
    """No arguments."""

    name = "NodeVolumeLimits"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``PreFilter``: Skip pods without PVC, ephemeral or migratable in-tree volumes."""
        for v in pod.pod.spec.volumes:
            if (
                v.persistent_volume_claim is not None
                or v.ephemeral is not None
                or v.gce_persistent_disk is not None
                or v.aws_elastic_block_store is not None
            ):
                return None, None
        return None, Status(Code.SKIP)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """Always passes (attach limits are not enforced, see the module docstring)."""
        return None
