"""DRA objects for unit tests, shaped like upstream's ``allocatortesting`` helpers.

``device_class(name, driver)`` selects ``device.driver == driver``; ``claim(...)`` builds a claim
from request dicts (``req("r", "class-a", 2)``, ``req_all(...)``, ``first_available(...)``);
``slice_(...)`` a slice local to a node (``node=``), on every node (``all_nodes=True``) or on the
nodes a label selector picks (``selector={"region": "r1"}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ome_scheduler.api.resource import DeviceClass, ResourceClaim, ResourceSlice

DRIVER_A = "driver-a"
DRIVER_B = "driver-b"
CLASS_A = "class-a"
CLASS_B = "class-b"


def device_class(name: str, driver: str, *, selectors: Sequence[str] | None = None, config: Any = None) -> DeviceClass:
    sels = [f'device.driver == "{driver}"'] if selectors is None else list(selectors)
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in sels]}
    if config is not None:
        spec["config"] = [{"opaque": {"driver": driver, "parameters": config}}]
    return msgspec.convert({"metadata": {"name": name}, "spec": spec}, DeviceClass)


def req(
    name: str, cls: str, count: int = 1, *, selectors: Sequence[str] = (), admin: bool | None = None
) -> dict[str, Any]:
    e: dict[str, Any] = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}
    if selectors:
        e["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if admin is not None:
        e["adminAccess"] = admin
    return {"name": name, "exactly": e}


def req_all(name: str, cls: str, *, selectors: Sequence[str] = ()) -> dict[str, Any]:
    r = req(name, cls, selectors=selectors)
    r["exactly"]["allocationMode"] = "All"
    del r["exactly"]["count"]
    return r


def sub(
    name: str, cls: str, count: int = 1, *, mode: str = "ExactCount", selectors: Sequence[str] = ()
) -> dict[str, Any]:
    s: dict[str, Any] = {"name": name, "deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        s["count"] = count
    if selectors:
        s["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return s


def first_available(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subs)}


def claim(
    name: str,
    *requests: dict[str, Any],
    ns: str = "",
    uid: str = "",
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
    status: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ResourceClaim:
    md: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}", "resourceVersion": "1"}
    md.update(meta or {})
    raw = {
        "metadata": md,
        "spec": {"devices": {"requests": list(requests), "constraints": list(constraints), "config": list(config)}},
        "status": dict(status or {}),
    }
    return msgspec.convert(raw, ResourceClaim)


def device(
    name: str, attributes: Mapping[str, Any] | None = None, capacity: Mapping[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    if attributes:
        attrs = {}
        for k, v in attributes.items():
            if isinstance(v, bool):
                attrs[k] = {"bool": v}
            elif isinstance(v, int):
                attrs[k] = {"int": v}
            elif isinstance(v, str) and v.startswith("v"):
                attrs[k] = {"version": v[1:]}
            else:
                attrs[k] = {"string": v}
        d["attributes"] = attrs
    if capacity:
        d["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    d.update(extra)
    return d


def slice_(
    name: str,
    pool: str,
    driver: str,
    *devices: dict[str, Any] | str,
    node: str | None = None,
    all_nodes: bool = False,
    selector: Mapping[str, str] | None = None,
    generation: int = 1,
    count: int = 1,
    **spec_extra: Any,
) -> ResourceSlice:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": [{"name": d} if isinstance(d, str) else d for d in devices],
    }
    if node is not None:
        spec["nodeName"] = node
    elif all_nodes:
        spec["allNodes"] = True
    elif selector is not None:
        spec["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in selector.items()]}
            ]
        }
    spec.update(spec_extra)
    return msgspec.convert({"metadata": {"name": name}, "spec": spec}, ResourceSlice)


def local_node_selector(node: str) -> dict[str, Any]:
    """``localNodeSelector``: the node selector of an allocation from a node-local slice."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def results(*devices: tuple[str, str, str, str]) -> list[dict[str, str]]:
    """Allocation results as (request, driver, pool, device)."""
    return [{"request": r, "driver": d, "pool": p, "device": n} for r, d, p, n in devices]
