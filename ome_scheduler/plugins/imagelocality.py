"""ImageLocality: prefer nodes that already hold the pod's container images.

Mirrors ``pkg/scheduler/framework/plugins/imagelocality/image_locality.go``: for every init
and app container whose (normalised, ``:latest`` appended when untagged) image the node
lists, add ``size * nodes_with_image / all_nodes`` bytes; clamp the sum to
``[23 MiB, 1000 MiB * containers]`` and scale it linearly to ``0..100``. No normalisation.
"""

from __future__ import annotations

from collections.abc import Sequence

from ome_scheduler.framework.interface import MAX_NODE_SCORE, CycleState, Handle, ScorePlugin, SignFragment, SignPlugin
from ome_scheduler.framework.signers import IMAGE_NAMES_SIGNER
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
"""Bytes below which a node's image score is 0 (``minThreshold``)."""
MAX_CONTAINER_THRESHOLD = 1000 * MB
"""Bytes per container at which the score saturates (``maxContainerThreshold``)."""


def normalized_image_name(name: str) -> str:
    """``normalizedImageName``: append ``:latest`` when the last path element has no tag."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    """``calculatePriority``: clamp the byte sum and map it to ``0..MAX_NODE_SCORE``."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


def sum_image_scores(node: NodeInfo, images: Sequence[str], total_nodes: int) -> int:
    """``sumImageScores``: bytes of the listed images on the node, scaled by their spread."""
    total = 0
    states = node.image_states
    for img in images:
        st = states.get(img)
        if st is not None:
            total += int(st.size * (st.num_nodes / total_nodes))
    return total


class ImageLocality(ScorePlugin, SignPlugin):
    """Score only; weight 1 in the default profile."""

    name = "ImageLocality"
    node_local_score = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the distinct normalised image names of every container and init
        container, sorted."""
        spec = pod.pod.spec
        names = {normalized_image_name(c.image) for c in (*spec.containers, *spec.init_containers)}
        return [(IMAGE_NAMES_SIGNER, sorted(names))]

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """``Score`` per node: 0..100 from the bytes of the pod's images the node already holds."""
        spec = pod.pod.spec
        images = [normalized_image_name(c.image) for c in spec.init_containers] + [
            normalized_image_name(c.image) for c in spec.containers
        ]
        total_nodes = len(self.handle.node_infos())
        n_containers = len(images)
        if not total_nodes or not n_containers:
            return [0] * len(nodes)
        return [calculate_priority(sum_image_scores(n, images, total_nodes), n_containers) for n in nodes]
