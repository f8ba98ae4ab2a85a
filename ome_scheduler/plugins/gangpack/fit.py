"""How many members of one template a node takes now (design §3.1 under product rule 1).

A member fits a node when the node is schedulable for it (a cordoned node only for pods
that tolerate ``node.kubernetes.io/unschedulable``, as kube-scheduler's NodeUnschedulable
does: product rule 6), every NoSchedule/NoExecute taint is tolerated, ``spec.nodeName``
(if set) names it, the required node affinity and nodeSelector match, and its requests fit
the free allocatable. The count is the smallest ``free // request`` over requested
resources, capped by free pod slots. Units: millicores, bytes, pods, extended units.
CSI attach limits are counted on top of this by
:class:`~ome_scheduler.plugins.gangpack.volumes.AttachRoom`; inter-pod affinity, spread
constraints, ports, volume binding and volume topology are not modelled (design §3.1); their
failures surface through Filter and PostFilter.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import msgspec

from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.helper import find_untolerated_taint
from ome_scheduler.plugins.nodeaffinity import required_matches
from ome_scheduler.plugins.nodeunschedulable import tolerates_unschedulable

_BIG = 1 << 62


def member_capacity(pod: PodInfo, node: NodeInfo) -> int:
    """Members like ``pod`` that ``node`` takes now (0: it does not fit)."""
    if node.node is None:
        return 0
    spec = pod.pod.spec
    if node.unschedulable and not tolerates_unschedulable(pod.pod):
        return 0
    if node.taints and find_untolerated_taint(node.taints, spec.tolerations) is not None:
        return 0
    if spec.node_name and spec.node_name != node.name:
        return 0
    if (spec.node_selector or pod.node_selector_matcher is not None) and not required_matches(
        pod, node.name, node.labels
    ):
        return 0
    alloc, used, req = node.allocatable, node.requested, pod.requests
    n = alloc.allowed_pod_number - len(node.pods)
    if n <= 0:
        return 0
    if req.milli_cpu > 0:
        n = min(n, (alloc.milli_cpu - used.milli_cpu) // req.milli_cpu)
    if req.memory > 0:
        n = min(n, (alloc.memory - used.memory) // req.memory)
    if req.ephemeral_storage > 0:
        n = min(n, (alloc.ephemeral_storage - used.ephemeral_storage) // req.ephemeral_storage)
    for name, q in req.scalar.items():
        if q > 0:
            n = min(n, (alloc.scalar.get(name, 0) - used.scalar.get(name, 0)) // q)
        if n <= 0:
            return 0
    return max(0, min(n, _BIG))


_ENC = msgspec.json.Encoder()


def template_signature(pod: PodInfo) -> Hashable:
    """Equal for members with identical node needs (requests and node constraints)."""
    spec = pod.pod.spec
    aff = spec.affinity
    r = pod.requests
    return (
        r.milli_cpu,
        r.memory,
        r.ephemeral_storage,
        tuple(sorted(r.scalar.items())),
        spec.node_name,
        _ENC.encode(spec.tolerations),
        _ENC.encode(spec.node_selector),
        _ENC.encode(aff.node_affinity) if aff is not None and aff.node_affinity is not None else b"",
    )


def one_per_node(templates: Sequence[PodInfo]) -> bool:
    """Members keep apart: some member's required anti-affinity selects a sibling (rule 1).

    Members of one gang mostly share their terms and labels, so each distinct term is matched
    against each distinct (namespace, labels) once: linear in members, not quadratic.
    """
    terms = {term for t in templates for term in t.required_anti_affinity_terms}
    if not terms:
        return False
    seen: dict[tuple[str, frozenset[tuple[str, str]]], PodInfo] = {}
    for t in templates:
        seen.setdefault((t.namespace, frozenset(t.pod.metadata.labels.items())), t)
    return any(term.matches(other.pod, {}) for term in terms for other in seen.values())
