"""``resource.k8s.io/v1`` records: ResourceClaim, ResourceSlice and DeviceClass.

Mirrors ``k8s.io/api/resource/v1/types.go`` (v0.35.4), declaring only the fields the
DynamicResources plugin and the structured allocator (``ome_scheduler/dra/``) read, camelCase,
unknown fields ignored (:class:`~ome_scheduler.api.meta.Record`).

Fields of the DRA feature gates that are off by default in Kubernetes 1.35 are left out, as the
API server drops them when those gates are off: device taints and tolerations
(DRADeviceTaints), counters and per-device node selection are kept only as far as the allocator
must *skip* what uses them (DRAPartitionableDevices), binding conditions likewise
(DRADeviceBindingConditions), and consumable capacity's ``capacity`` requests, ``shareID``,
``distinctAttribute`` and ``allowMultipleAllocations`` not at all (DRAConsumableCapacity).
``docs/design/dra.md`` lists each gate and how its fields are treated.

Quantities stay strings, as in :mod:`ome_scheduler.api.core`. ``allocationMode`` and ``count``
carry the API server's defaults (``ExactCount``, 1), so a hand-built object means what the same
object read back from the API server means.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ome_scheduler.api.core import NodeSelector
from ome_scheduler.api.meta import ObjectMeta, Record

FINALIZER = "resource.kubernetes.io/delete-protection"
"""``resourceapi.Finalizer``: set on a claim before its allocation is written, so the claim is
not deleted while it is allocated."""
ALLOCATION_RESULTS_MAX_SIZE = 32
"""``AllocationResultsMaxSize``: the most devices one claim may be allocated."""
DEVICE_REQUESTS_MAX_SIZE = ALLOCATION_RESULTS_MAX_SIZE
"""``DeviceRequestsMaxSize``: the most requests one claim may have (API validation)."""
FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE = 8
"""``FirstAvailableDeviceRequestMaxSize``: the most subrequests of one ``firstAvailable`` list."""
RESOURCE_SLICE_MAX_DEVICES = 128
"""``ResourceSliceMaxDevices``: the most devices one ResourceSlice may list (API validation)."""
CEL_SELECTOR_EXPRESSION_MAX_COST = 1_000_000
"""``CELSelectorExpressionMaxCost``: the cost limit of one CEL selector evaluation."""
ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
CONFIG_SOURCE_CLASS = "FromClass"
CONFIG_SOURCE_CLAIM = "FromClaim"


# ---- shared -------------------------------------------------------------------------------


class CELDeviceSelector(Record, gc=False):
    """``CELDeviceSelector``: a CEL expression over the ``device`` variable (``ome_scheduler/dra/cel.py``)."""

    expression: str = ""


class DeviceSelector(Record, gc=False):
    """``DeviceSelector``: exactly one field set; ``cel`` is the only kind 1.35 knows (None: a future kind)."""

    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(Record, gc=False):
    """``OpaqueDeviceConfiguration``: driver parameters, copied into allocation results unread."""

    driver: str = ""
    parameters: Any = None


class DeviceConfiguration(Record, gc=False):
    """``DeviceConfiguration`` (inlined in the configuration records below)."""

    opaque: OpaqueDeviceConfiguration | None = None


# ---- ResourceSlice ------------------------------------------------------------------------


class DeviceAttribute(Record, gc=False):
    """``DeviceAttribute``: exactly one of ``int``, ``bool``, ``string``, ``version`` (semver text)."""

    int_value: int | None = msgspec.field(default=None, name="int")
    bool_value: bool | None = msgspec.field(default=None, name="bool")
    string_value: str | None = msgspec.field(default=None, name="string")
    version_value: str | None = msgspec.field(default=None, name="version")


class DeviceCapacity(Record, gc=False):
    """``DeviceCapacity``: ``value`` is a quantity string (``requestPolicy`` is DRAConsumableCapacity's)."""

    value: str = "0"


class Device(Record, gc=False):
    """``Device``: one device of a slice.

    ``attributes`` and ``capacity`` are keyed by qualified name (``model``, or
    ``gpu.nvidia.com/model``; an unqualified name belongs to the slice's driver).
    ``consumes_counters``, ``node_name``/``node_selector``/``all_nodes`` (per-device node
    selection) and ``binding_conditions`` are read only to skip the device while their gates
    (DRAPartitionableDevices, DRADeviceBindingConditions) are off, as upstream's allocator does.
    """

    name: str = ""
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    consumes_counters: list[Any] = []
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    binding_conditions: list[str] = []


class ResourcePool(Record, gc=False):
    """``ResourcePool``: a slice's pool; a pool is complete when ``resourceSliceCount`` slices of
    its newest ``generation`` are seen."""

    name: str = ""
    generation: int = 0
    resource_slice_count: int = 0


class ResourceSliceSpec(Record, gc=False):
    """``ResourceSliceSpec``: the driver, pool and devices, and which nodes reach them: exactly one
    of ``nodeName``, ``nodeSelector``, ``allNodes`` and ``perDeviceNodeSelection`` (API validation).
    ``shared_counters`` is read only to skip the slice while DRAPartitionableDevices is off."""

    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    devices: list[Device] = []
    per_device_node_selection: bool | None = None
    shared_counters: list[Any] = []


class ResourceSlice(Record):
    """``ResourceSlice``: devices a DRA driver publishes (cluster-scoped)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


# ---- DeviceClass --------------------------------------------------------------------------


class DeviceClassConfiguration(Record, gc=False):
    """``DeviceClassConfiguration``: configuration every device of the class gets."""

    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(Record, gc=False):
    """``DeviceClassSpec``: selectors every device of the class must pass, and its configuration."""

    selectors: list[DeviceSelector] = []
    config: list[DeviceClassConfiguration] = []


class DeviceClass(Record):
    """``DeviceClass`` (cluster-scoped): what a request's ``deviceClassName`` names."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)


# ---- ResourceClaim ------------------------------------------------------------------------


class ExactDeviceRequest(Record, gc=False):
    """``ExactDeviceRequest``: ``count`` devices of a class (``ExactCount``), or all that match (``All``).

    ``admin_access`` (DRAAdminAccess, on by default): the devices are not allocated exclusively
    and may be in use by other claims.
    """

    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None


class DeviceSubRequest(Record, gc=False):
    """``DeviceSubRequest``: one alternative of a ``firstAvailable`` list (DRAPrioritizedList)."""

    name: str = ""
    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1


class DeviceRequest(Record, gc=False):
    """``DeviceRequest``: exactly one of ``exactly`` and ``firstAvailable`` (the first
    subrequest that can be allocated wins)."""

    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] = []


class DeviceConstraint(Record, gc=False):
    """``DeviceConstraint``: ``matchAttribute`` (a fully qualified attribute name) must have one
    value across the devices of ``requests`` (all requests when empty)."""

    requests: list[str] = []
    match_attribute: str | None = None


class DeviceClaimConfiguration(Record, gc=False):
    """``DeviceClaimConfiguration``: configuration for the devices of ``requests`` (all when empty)."""

    requests: list[str] = []
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(Record, gc=False):
    """``DeviceClaim``: the requests, their constraints and configuration."""

    requests: list[DeviceRequest] = []
    constraints: list[DeviceConstraint] = []
    config: list[DeviceClaimConfiguration] = []


class ResourceClaimSpec(Record, gc=False):
    """``ResourceClaimSpec``: what the claim asks for (immutable)."""

    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(Record, gc=False):
    """``DeviceRequestAllocationResult``: one allocated device, for ``request`` (``req`` or
    ``req/subreq``); ``admin_access`` True when it was not allocated exclusively."""

    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    admin_access: bool | None = None


class DeviceAllocationConfiguration(Record, gc=False):
    """``DeviceAllocationConfiguration``: configuration ``FromClass`` or ``FromClaim`` for ``requests``."""

    source: str = ""
    requests: list[str] = []
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(Record, gc=False):
    """``DeviceAllocationResult``: the devices and their configuration."""

    results: list[DeviceRequestAllocationResult] = []
    config: list[DeviceAllocationConfiguration] = []


class AllocationResult(Record, gc=False):
    """``AllocationResult``: the devices, and the nodes they can be used from (None: every node)."""

    devices: DeviceAllocationResult = msgspec.field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = None


class ResourceClaimConsumerReference(Record, gc=False):
    """``ResourceClaimConsumerReference``: who uses an allocated claim (the scheduler writes pods)."""

    api_group: str = ""
    resource: str = ""
    name: str = ""
    uid: str = ""


class ResourceClaimStatus(Record, gc=False):
    """``ResourceClaimStatus``: the allocation and who it is reserved for (at most 256)."""

    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = []


class ClaimMeta(ObjectMeta):
    """``metav1.ObjectMeta`` plus ``finalizers`` (read only of claims)."""

    finalizers: list[str] = []


class ResourceClaim(Record):
    """``ResourceClaim``: devices a pod (or several) asks for, and what was allocated."""

    metadata: ClaimMeta = msgspec.field(default_factory=ClaimMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)
