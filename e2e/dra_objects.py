"""Hand-written DRA objects for the end-to-end tests: device classes, slices, claims, pods.

Shapes follow ``resource.k8s.io/v1`` (Kubernetes 1.35) and, for the devices, scheduler_perf's
DRA templates (``test/integration/scheduler_perf/dra/templates``) and the NVIDIA driver's GPU
devices (attributes ``index``, ``uuid``, ``productName``, ``cliqueID``; capacity ``memory``).
Every test makes its own driver name (``<id>.e2e.ome.io``), so its classes select only its own
devices and two tests never share a device. Nothing here talks to the API server: ``create``
posts whatever these functions return (one API path per kind, :data:`PATHS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from e2e.harness.api import Api
from tests.support.manifests import SCHEDULER_NAME, node

GROUP = "/apis/resource.k8s.io/v1"
PATHS = {
    "DeviceClass": f"{GROUP}/deviceclasses",
    "ResourceSlice": f"{GROUP}/resourceslices",
    "ResourceClaim": f"{GROUP}/namespaces/{{ns}}/resourceclaims",
    "ResourceClaimTemplate": f"{GROUP}/namespaces/{{ns}}/resourceclaimtemplates",
}
"""API collection path per kind (``{ns}`` filled from the object's namespace)."""

CLIQUE_ATTR = "cliqueID"
PAUSE = "registry.k8s.io/pause:3.10"


def path_of(obj: Mapping[str, Any]) -> str:
    """The collection path of ``obj`` (KeyError for a kind not in :data:`PATHS`)."""
    return PATHS[obj["kind"]].format(ns=obj["metadata"].get("namespace", ""))


def create(api: Api, *objs: Mapping[str, Any]) -> list[Any]:
    """POST every object in order; returns what the API server stored (AssertionError on >= 400)."""
    return [api.post(path_of(o), o) for o in objs]


def delete(api: Api, *objs: Mapping[str, Any]) -> None:
    """DELETE every object (a missing one is fine)."""
    for o in objs:
        api.delete(f"{path_of(o)}/{o['metadata']['name']}")


def driver(test_id: str) -> str:
    """The driver name of one test: ``<test_id>.e2e.ome.io`` (a DNS subdomain, ≤ 63 chars)."""
    return f"{test_id}.e2e.ome.io"


def device_class(name: str, drv: str, *extra_cel: str) -> dict[str, Any]:
    """A DeviceClass selecting the devices of driver ``drv`` (and every ``extra_cel`` expression)."""
    sels = [f'device.driver == "{drv}"', *extra_cel]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in sels]},
    }


def gpu(i: int, node_name: str, *, clique: str | None = None, product: str = "NVIDIA B200") -> dict[str, Any]:
    """Device ``gpu-<i>`` shaped like the NVIDIA driver's: int ``index``, string ``uuid`` and
    ``productName``, optional string ``cliqueID``, a version ``driverVersion`` and 80 GiB ``memory``."""
    attrs: dict[str, Any] = {
        "index": {"int": i},
        "uuid": {"string": f"GPU-{node_name}-{i}"},
        "productName": {"string": product},
        "driverVersion": {"version": "1.2.3"},
    }
    if clique is not None:
        attrs[CLIQUE_ATTR] = {"string": clique}
    return {"name": f"gpu-{i}", "attributes": attrs, "capacity": {"memory": {"value": "80Gi"}}}


def node_slice(
    drv: str,
    node_name: str,
    devices: Sequence[Mapping[str, Any]],
    *,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    name: str | None = None,
) -> dict[str, Any]:
    """A node-local ResourceSlice of ``drv`` publishing ``devices`` in pool ``pool`` (default:
    the node's name), the only slice of its pool unless ``slice_count`` says otherwise."""
    pool = pool or node_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-{drv.split('.')[0]}"},
        "spec": {
            "driver": drv,
            "nodeName": node_name,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": slice_count},
            "devices": list(devices),
        },
    }


def gpu_node(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A kwok node without any extended resources (GPUs only as DRA devices)."""
    return node(name, labels, gpu=0)


def exactly(
    name: str, cls: str, count: int = 1, *, selectors: Sequence[str] = (), mode: str = "ExactCount"
) -> dict[str, Any]:
    """An ``exactly`` device request (``count`` only in ExactCount mode)."""
    ex: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        ex["count"] = count
    if selectors:
        ex["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": ex}


def first_available(name: str, subs: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    """A ``firstAvailable`` request of (subrequest name, class, count) alternatives, best first."""
    return {
        "name": name,
        "firstAvailable": [
            {"name": s, "deviceClassName": c, "allocationMode": "ExactCount", "count": n} for s, c, n in subs
        ],
    }


def claim_spec(requests: Sequence[Mapping[str, Any]], match_attribute: str | None = None) -> dict[str, Any]:
    """A claim's ``spec``; ``match_attribute`` adds one constraint over every request."""
    devices: dict[str, Any] = {"requests": list(requests)}
    if match_attribute:
        devices["constraints"] = [{"matchAttribute": match_attribute}]
    return {"devices": devices}


def claim(name: str, ns: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaim ``ns/name``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": dict(spec),
    }


def claim_template(name: str, ns: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaimTemplate ``ns/name`` whose claims have ``spec``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": dict(spec)},
    }


def dra_pod(
    name: str,
    ns: str,
    *,
    claims: Mapping[str, str] | None = None,
    templates: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER_NAME,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pause pod with ``spec.resourceClaims``: ``claims`` maps the pod's claim name to an
    existing ResourceClaim, ``templates`` to a ResourceClaimTemplate. Its container uses them all."""
    rcs: list[dict[str, str]] = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    rcs += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "resourceClaims": rcs,
        "containers": [{"name": "c", "image": PAUSE, "resources": {"claims": [{"name": r["name"]} for r in rcs]}}],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name, **(labels or {})}},
        "spec": spec,
    }


def get_claim(api: Api, ns: str, name: str) -> Any:
    """The ResourceClaim ``ns/name`` as stored (None when missing)."""
    return api.try_get(f"{GROUP}/namespaces/{ns}/resourceclaims/{name}")


def claims_of(api: Api, ns: str) -> list[Any]:
    """Every ResourceClaim of namespace ``ns``."""
    return list(api.get(f"{GROUP}/namespaces/{ns}/resourceclaims")["items"])


def allocated_devices(c: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(driver, pool, device)`` of every result of claim ``c``'s allocation ([] if unallocated)."""
    alloc = (c.get("status") or {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in (alloc.get("devices") or {}).get("results") or []]


def generated_claim_name(api: Api, ns: str, pod_name: str, claim: str) -> str | None:
    """The name the resourceclaim controller gave the pod's claim ``claim`` (pod status), or None."""
    st = api.pod(ns, pod_name).get("status", {}).get("resourceClaimStatuses") or []
    for s in st:
        if s.get("name") == claim and s.get("resourceClaimName"):
            return str(s["resourceClaimName"])
    return None
