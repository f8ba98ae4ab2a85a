"""Pod signatures: the signer names and the signers plugins share (OpportunisticBatching).

Mirrors ``k8s.io/kube-scheduler/framework/signers.go`` (v0.35.4). A plugin that takes part in
PreFilter, Filter, PreScore or Score signs a pod (``SignPlugin.sign_pod`` in ``interface.py``)
with fragments ``(signer name, value)``: everything of the pod its answers depend on. Two pods
whose fragments of every such plugin are equal get the same feasibility and scores on the same
nodes in the same state. :class:`PodSigner` (``frameworkImpl.SignPod``; the framework's
``sign_pod``) assembles the fragments into one signature; ``batch.py`` compares them.

A fragment's value is anything ``msgspec.json`` encodes (str, int, lists, dicts, API records);
each signer here returns it in a canonical order, as upstream's sort the lists they build.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ome_scheduler.api.core import NodeSelectorRequirement, NodeSelectorTerm, Pod, Toleration, Volume
from ome_scheduler.framework.interface import CycleState, SignPlugin
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.logs import get_logger

log = get_logger()

DYNAMIC_RESOURCES_SIGNER = "v1.Pod.Spec.DynamicResources"
IMAGE_NAMES_SIGNER = "v1.Pod.Spec.CanonicalImageNames()"
LABELS_SIGNER = "v1.Pod.Labels"
NODE_NAME_SIGNER = "v1.Pod.Spec.NodeName"
NODE_AFFINITY_SIGNER = "v1.Pod.Spec.Affinity.NodeAffinity"
NODE_SELECTOR_SIGNER = "v1.Pod.Spec.Affinity.NodeSelector"
HOST_PORTS_SIGNER = "v1.Pod.Spec.HostPorts()"
RESOURCES_SIGNER = "v1.Pod.Spec.ContainerRequestsAndOverheads()"
SCHEDULER_NAME_SIGNER = "v1.Pod.Spec.SchedulerName"
TOLERATIONS_SIGNER = "v1.Pod.Spec.Tolerations"
VOLUMES_SIGNER = "v1.Pod.Spec.Volumes.NonSyntheticSources()"

_ENC = msgspec.json.Encoder(order="sorted")
_EMPTY_VOLUME = Volume()


def host_ports_signer(pod: Pod) -> list[int]:
    """``HostPortsSigner``: the distinct non-zero host ports of every container and init
    container, ascending."""
    spec = pod.spec
    return sorted({p.host_port for c in (*spec.containers, *spec.init_containers) for p in c.ports if p.host_port})


def tolerations_signer(pod: Pod) -> list[Toleration]:
    """``TolerationsSigner``: the tolerations sorted (stably) by key, then value."""
    return sorted(pod.spec.tolerations, key=lambda t: (t.key, t.value))


def volumes_signer(pod: Pod) -> list[str]:
    """``VolumesSigner``: every volume's source (its name left out) as JSON, sorted.

    Upstream leaves out ConfigMap and Secret volumes (they do not affect scheduling and differ
    per pod). The ``Volume`` record keeps only the sources some plugin reads (claims, ephemeral
    claims, in-tree disks, inline CSI); a volume with none of them (ConfigMap, Secret, but also
    emptyDir, hostPath, projected, downwardAPI) is left out here, so two pods that differ only
    in those sign alike here and differently upstream (no plugin's answer depends on them).
    """
    out: list[str] = []
    for v in pod.spec.volumes:
        source = msgspec.structs.replace(v, name="")
        if source != _EMPTY_VOLUME:
            out.append(_ENC.encode(source).decode())
    out.sort()
    return out


def _requirements(reqs: list[NodeSelectorRequirement]) -> list[str]:
    """``NodeSelectorRequirementsSigner``: each requirement (values sorted) as JSON, sorted."""
    return sorted(_ENC.encode(msgspec.structs.replace(r, values=sorted(r.values))).decode() for r in reqs)


def _term(t: NodeSelectorTerm) -> dict[str, list[str]]:
    """``NodeSelectorTermSigner``."""
    return {"MatchExpressions": _requirements(t.match_expressions), "MatchFields": _requirements(t.match_fields)}


def node_affinity_signer(pod: Pod) -> dict[str, list[str]] | None:
    """``NodeAffinitySigner``: the required and preferred node-affinity terms in canonical
    order, or None without node affinity."""
    aff = pod.spec.affinity
    na = aff.node_affinity if aff is not None else None
    if na is None:
        return None
    pref = sorted(
        _ENC.encode({"Weight": p.weight, "Preference": _term(p.preference)}).decode()
        for p in na.preferred_during_scheduling_ignored_during_execution
    )
    required = na.required_during_scheduling_ignored_during_execution
    req = sorted(_ENC.encode(_term(t)).decode() for t in required.node_selector_terms) if required is not None else []
    return {"Required": req, "Preferred": pref}


def encode_signature(fragments: dict[str, Any]) -> bytes:
    """The signature of merged fragments: their JSON with keys sorted (``json.Marshal`` of the
    map, as ``frameworkImpl.SignPod``). Equal bytes, equal signatures."""
    return _ENC.encode(fragments)


class PodSigner:
    """``frameworkImpl.SignPod`` for one profile: its signing plugins (``sign_plugins``, those
    that may refuse first), and the framework's metric callbacks (a plugin's duration:
    ``(state, plugin, point, status, start)``; the point's: ``(point, status, start)``)."""

    def __init__(
        self,
        plugins: Sequence[SignPlugin],
        plugin_metric: Callable[[CycleState, str, str, Status | None, float], None],
        observe: Callable[[str, Status | None, float], None],
    ) -> None:
        self.plugins = plugins
        self._plugin_metric = plugin_metric
        self._observe = observe

    def sign(self, state: CycleState, pod: PodInfo) -> bytes | None:
        """``pod``'s signature, equal for pods every PreFilter, Filter, PreScore and Score plugin
        treats alike: the scheduler name and each plugin's fragments, merged by signer name
        (:func:`encode_signature`). None when a plugin refuses this pod (an Error status or an
        exception is logged and refuses too). The ``Sign`` point is observed on sampled cycles."""
        start = time.perf_counter()
        fragments: dict[str, Any] = {SCHEDULER_NAME_SIGNER: pod.pod.spec.scheduler_name}
        ret: Status | None = None
        try:
            for pl in self.plugins:
                t0 = time.perf_counter()
                try:
                    out = pl.sign_pod(pod)
                except Exception as exc:
                    out = Status.as_error(exc)
                if isinstance(out, Status):
                    self._plugin_metric(state, pl.name, "Sign", out, t0)
                    ret = out.with_plugin(pl.name)
                    if out.code == Code.ERROR:
                        log.error("SignPod failed for plugin", plugin=pl.name, pod=pod.key, err=out.message())
                    log.info("SignPod can't sign pod due to plugin", v=5, plugin=pl.name, status=out.message())
                    return None
                self._plugin_metric(state, pl.name, "Sign", None, t0)
                fragments.update(out)
            return encode_signature(fragments)
        finally:
            if state.record_plugin_metrics:
                self._observe("Sign", ret, start)
