"""The structured allocator: devices for a pod's unallocated ResourceClaims on one node.

Mirrors ``k8s.io/dynamic-resource-allocation/structured/internal/incubating/allocator_incubating.go``
(v0.35.4), the variant ``structured.NewAllocator`` picks for 1.35's default feature gates
(DRAAdminAccess and DRAPrioritizedList on; DRAPartitionableDevices, DRADeviceTaints,
DRADeviceBindingConditions and DRAConsumableCapacity off):

* claims are allocated one after the other, each request in order, each device of a request
  one after the other; for every device the first candidate that is not in use (or, with
  ``adminAccess``, not already picked for the same claim), passes the device class's and the
  request's CEL selectors and keeps every ``matchAttribute`` constraint is taken, and the search
  goes on; a dead end backtracks to the last choice. The first complete solution wins;
* ``ExactCount`` wants ``count`` devices, ``All`` every selectable device of the pools that
  reach the node (an error when one of them is incomplete or invalid, and no solution when
  none matches); at most 32 devices per claim (``AllocationResultsMaxSize``);
* a ``firstAvailable`` request is satisfied by its first subrequest that leads to a solution;
* a device with binding conditions or consuming counters is never picked (their gates are
  off); slices with counters or per-device node selection are not looked at (``pools.py``);
* each result carries the class's and the claim's configuration for the requests it serves,
  and a node selector: ``metadata.name`` of the node when a device is local to one node, the
  slices' node selector terms when they have one, none when the devices reach every node.

Outcomes of :meth:`Allocator.allocate`: a list of :class:`AllocationResult` (one per claim, in
order), None (the claims cannot be allocated on this node: devices in use, too few, constraints
unmet, pools incomplete), :class:`NodeAllocationFailed` (this node only: an invalid pool got in
the way), :class:`AllocationTimedOut`, or :class:`AllocationError` (the claims or classes are
broken wherever they are tried: a CEL error, an ``All`` request over an incomplete pool, more
than 32 devices for a claim, an unknown constraint or selector kind).

**The bound.** The search is exponential in the worst case (devices x requests x constraints, as
upstream's). It is bounded by steps, where a step is one call of the search function, one
candidate device looked at, or one CEL evaluation: at most :data:`NODE_STEP_BUDGET` steps per
node and :data:`CYCLE_STEP_BUDGET` steps over all nodes of one scheduling cycle (one
:class:`Allocator`), and by the wall clock: the ``deadline`` the caller passes
(DynamicResources' ``filterTimeout``, upstream's per-node Filter timeout), checked every 64
steps. Either limit raises :class:`AllocationTimedOut`. CPython takes about 1.5 million steps a
second (measured on 5,120 devices with a hopeless ``matchAttribute`` claim), so one node's search
ends within about 0.15 s and a whole cycle's within about 1.5 s, on an event loop that schedules
one pod at a time. Steps are counted in the same order on every machine, so a budget outcome,
unlike a timeout, is reproducible. The search runs on its own stack (generators driven by a
loop), so a pod with many claims cannot exhaust Python's recursion limit.

Differences from upstream that change no answer, only the work: the devices of one request are
tried in increasing (pool, slice, device) order only, not in every order (combinations, not
permutations: see :meth:`_Search.one`), and selector results are cached per (request, device)
across the nodes of one cycle, not per node (they do not depend on the node while per-device
node selection is off). One that fixes an upstream slip: a ``firstAvailable`` subrequest in
``All`` mode is validated under its own cache key (upstream's loop files it under the previous
subrequest's, which can mix two subrequests' selector results).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ome_scheduler.api.core import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from ome_scheduler.api.resource import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    ALLOCATION_RESULTS_MAX_SIZE,
    CONFIG_SOURCE_CLAIM,
    CONFIG_SOURCE_CLASS,
    AllocationResult,
    Device,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceAttribute,
    DeviceClass,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceSubRequest,
    ResourceClaim,
    ResourceSlice,
)
from ome_scheduler.dra.cel import (
    AttributeValue,
    CELCompileError,
    CELRuntimeError,
    DeviceView,
    Version,
    compile_selector,
)
from ome_scheduler.dra.pools import Pool, SliceIndex

DeviceID = tuple[str, str, str]
"""(driver, pool, device): a device, as ``structured.DeviceID``."""

NODE_STEP_BUDGET = 200_000
"""Steps one node's search may take (see the module docstring)."""
CYCLE_STEP_BUDGET = 2_000_000
"""Steps all nodes of one :class:`Allocator` (one scheduling cycle) may take together."""
_CLOCK_EVERY = 64
"""Steps between two looks at the clock."""


class AllocationError(Exception):
    """The claims cannot be allocated anywhere as they are (upstream: an error from Allocate
    that aborts the scheduling attempt). The message is upstream's."""


class NodeAllocationFailed(AllocationError):
    """``ErrFailedAllocationOnNode``: only this node is affected (the pod is unschedulable there)."""


class AllocationTimedOut(Exception):
    """The step budget or the deadline ran out before the search ended."""


def device_id_text(d: DeviceID) -> str:
    """``DeviceID.String()``: ``driver/pool/device``."""
    return f"{d[0]}/{d[1]}/{d[2]}"


def claim_ref(claim: ResourceClaim) -> str:
    """``klog.KObj(claim)``: ``namespace/name``."""
    md = claim.metadata
    return f"{md.namespace}/{md.name}" if md.namespace else md.name


class Selector(Protocol):
    """A compiled selector (``dra.cel.CompiledSelector``, or a stand-in in tests)."""

    def matches(self, device: DeviceView) -> bool:
        """Whether ``device`` passes; raises ``CELRuntimeError`` (``CELCostLimitError`` included)."""
        ...


class SelectorCache:
    """Compiled CEL selectors by expression, least recently used dropped beyond ``size``
    (upstream's scheduler keeps 10 in ``cel.NewCache``). Only successes are kept, as upstream's
    cache keeps them; ``compile_fn`` is ``dra.cel.compile_selector`` but in tests."""

    def __init__(self, size: int = 64, compile_fn: Callable[[str], Selector] = compile_selector) -> None:
        self.size = size
        self.compile_fn = compile_fn
        self._entries: OrderedDict[str, Selector] = OrderedDict()

    def get(self, expression: str) -> Selector:
        """The compiled selector.

        Raises:
            CELCompileError: the expression does not compile.
        """
        hit = self._entries.get(expression)
        if hit is None:
            hit = self.compile_fn(expression)
            self._entries[expression] = hit
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(expression)
        return hit


@dataclass(frozen=True, slots=True)
class _Req:
    """``requestAccessor``: a request with ``exactly``, or one subrequest."""

    name: str
    class_name: str
    selectors: Sequence[DeviceSelector]
    mode: str
    count: int
    admin_access: bool
    has_admin_access: bool

    @staticmethod
    def exact(r: DeviceRequest) -> _Req:
        e = r.exactly
        if e is None:
            return _Req(r.name, "", (), ALLOCATION_MODE_EXACT_COUNT, 0, False, False)
        return _Req(
            r.name,
            e.device_class_name,
            e.selectors,
            e.allocation_mode,
            e.count,
            bool(e.admin_access),
            e.admin_access is not None,
        )

    @staticmethod
    def sub(s: DeviceSubRequest) -> _Req:
        return _Req(s.name, s.device_class_name, s.selectors, s.allocation_mode, s.count, False, False)


@dataclass(slots=True)
class _Candidate:
    id: DeviceID
    device: Device
    slice: ResourceSlice


@dataclass(slots=True)
class _RequestData:
    """``requestData``: one request without subrequests, or one subrequest."""

    request: _Req
    parent: _Req | None
    device_class: DeviceClass | None = None
    num_devices: int = 0
    selected_sub: int = 0
    all_devices: list[_Candidate] = field(default_factory=list)

    def request_name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent is not None else self.request.name


@dataclass(slots=True)
class _Result:
    request: str
    parent: str
    id: DeviceID
    device: Device
    slice: ResourceSlice
    admin_access: bool | None

    def request_name(self) -> str:
        return f"{self.parent}/{self.request}" if self.parent else self.request


class _MatchAttribute:
    """``matchAttributeConstraint``: every device of the constrained requests has one value of
    ``attribute`` (an empty ``requests`` constrains them all)."""

    __slots__ = ("requests", "attribute", "value", "num_devices")

    def __init__(self, requests: Sequence[str], attribute: str) -> None:
        self.requests = frozenset(requests)
        self.attribute = attribute
        self.value: DeviceAttribute | None = None
        self.num_devices = 0

    def _applies(self, request: str, sub: str) -> bool:
        if not self.requests:
            return True
        if not sub:
            return request in self.requests
        return request in self.requests or f"{request}/{sub}" in self.requests

    def add(self, request: str, sub: str, device: Device, did: DeviceID) -> bool:
        if not self._applies(request, sub):
            return True
        a = lookup_attribute(device, did, self.attribute)
        if a is None:
            return False
        if self.num_devices == 0:
            self.value, self.num_devices = a, 1
            return True
        v = self.value
        assert v is not None
        if a.string_value is not None:
            ok = v.string_value is not None and a.string_value == v.string_value
        elif a.int_value is not None:
            ok = v.int_value is not None and a.int_value == v.int_value
        elif a.bool_value is not None:
            ok = v.bool_value is not None and a.bool_value == v.bool_value
        elif a.version_value is not None:
            ok = v.version_value is not None and a.version_value == v.version_value
        else:
            ok = False
        if ok:
            self.num_devices += 1
        return ok

    def remove(self, request: str, sub: str, device: Device, did: DeviceID) -> None:
        if self._applies(request, sub):
            self.num_devices -= 1


def lookup_attribute(device: Device, did: DeviceID, name: str) -> DeviceAttribute | None:
    """``lookupAttribute``: ``name`` as given, or, when its domain is the device's driver, its
    part after the ``/``."""
    a = device.attributes.get(name)
    if a is not None:
        return a
    i = name.find("/")
    if i < 0 or name[:i] != did[0]:
        return None
    return device.attributes.get(name[i + 1 :])


class _Budget:
    __slots__ = ("cycle_steps",)

    def __init__(self, steps: int) -> None:
        self.cycle_steps = steps


class Allocator:
    """One scheduling cycle's allocator for a fixed list of unallocated ``claims`` (PreFilter),
    asked node by node (Filter).

    ``allocated``: devices other claims hold or are being given (admin-access results excluded);
    ``classes``: DeviceClass by name, or None; ``slices``: every ResourceSlice. Nothing given is
    modified.
    """

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        allocated: set[DeviceID] | frozenset[DeviceID],
        classes: Callable[[str], DeviceClass | None],
        slices: Sequence[ResourceSlice],
        *,
        selectors: SelectorCache | None = None,
        node_step_budget: int = NODE_STEP_BUDGET,
        cycle_step_budget: int = CYCLE_STEP_BUDGET,
    ) -> None:
        self.claims = list(claims)
        self.allocated = allocated
        self.classes = classes
        self.index = SliceIndex(slices)
        self.selectors = selectors if selectors is not None else SelectorCache()
        self.node_step_budget = node_step_budget
        self.budget = _Budget(cycle_step_budget)
        self.matches: dict[tuple[int, int, int, int], bool] = {}
        """(claim, request, subrequest, ``id(device)``) -> whether the device passes the
        class's and the request's selectors."""
        self.views: dict[int, DeviceView] = {}
        self.steps = 0
        """Steps taken so far, over every node."""

    def allocate(
        self, node_name: str, node_labels: Mapping[str, str], deadline: float | None = None
    ) -> list[AllocationResult] | None:
        """The claims' allocation on ``node_name`` (one result per claim), or None.

        ``deadline`` is a ``time.monotonic()`` instant (None: no clock limit).

        Raises:
            AllocationError: broken claims or classes (upstream's messages).
            NodeAllocationFailed: ``invalid resource pools were encountered`` (this node only).
            AllocationTimedOut: the step budget or the deadline ran out.
        """
        return _Search(self, node_name, node_labels, deadline).run()

    def view(self, device: Device, driver: str) -> DeviceView:
        """What a CEL selector sees of ``device`` (``cel.Device``), built once per device per
        cycle. Its ``key`` is its content (driver, attributes, capacity): the adapter's result
        memo then serves any device with the same content, in any cycle, and nothing else."""
        v = self.views.get(id(device))
        if v is None:
            attrs = {name: attribute_value(a) for name, a in device.attributes.items()}
            caps = {name: c.value for name, c in device.capacity.items()}
            key = (driver, tuple(sorted(attrs.items())), tuple(sorted(caps.items())))
            v = DeviceView(driver=driver, attributes=attrs, capacity=caps, key=key)
            self.views[id(device)] = v
        return v


def attribute_value(a: DeviceAttribute) -> AttributeValue:
    """A ``DeviceAttribute`` as the selector sees it (None: no value set, a runtime error)."""
    if a.int_value is not None:
        return a.int_value
    if a.bool_value is not None:
        return a.bool_value
    if a.string_value is not None:
        return a.string_value
    if a.version_value is not None:
        return Version(a.version_value)
    return None


_Idx = tuple[int, int, int, int]
"""(claim, request, subrequest, device): upstream's ``deviceIndices``."""
_Frame = Generator[tuple[_Idx, bool, int], bool, bool]


class _MaxSizeExceeded(Exception):
    """``errAllocationResultMaxSizeExceeded``: more than 32 devices for one claim down this path."""


class _Search:
    """One node's search (upstream's ``allocator``)."""

    def __init__(
        self, owner: Allocator, node_name: str, node_labels: Mapping[str, str], deadline: float | None
    ) -> None:
        self.a = owner
        self.node_name = node_name
        self.node_labels = node_labels
        self.deadline = deadline
        self.steps_left = owner.node_step_budget
        self.claims = owner.claims
        self.pools: list[Pool] = []
        self.request_data: dict[tuple[int, int, int], _RequestData] = {}
        self.constraints: list[list[_MatchAttribute]] = []
        self.allocating: dict[DeviceID, set[int]] = {}
        self.result: list[list[_Result]] = [[] for _ in self.claims]

    # ---- budget ---------------------------------------------------------------------------

    def step(self) -> None:
        """Count one step.

        Raises:
            AllocationTimedOut: a budget or the deadline ran out.
        """
        self.steps_left -= 1
        b = self.a.budget
        b.cycle_steps -= 1
        self.a.steps += 1
        if self.steps_left < 0 or b.cycle_steps < 0:
            raise AllocationTimedOut("step budget exhausted")
        if self.deadline is not None and self.steps_left % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise AllocationTimedOut("deadline exceeded")

    # ---- Allocate -------------------------------------------------------------------------

    def run(self) -> list[AllocationResult] | None:
        self.pools = self.a.index.pools_for(self.node_name, self.node_labels)
        for ci, claim in enumerate(self.claims):
            min_claim = 0
            for qi, request in enumerate(claim.spec.devices.requests):
                if request.first_available:
                    lowest = None
                    parent = _Req.exact(request)
                    for si, sub in enumerate(request.first_available):
                        rd = self.validate(_Req.sub(sub), parent, (ci, qi, si))
                        self.request_data[(ci, qi, si)] = rd
                        lowest = rd.num_devices if lowest is None else min(lowest, rd.num_devices)
                    min_claim += lowest or 0
                else:
                    rd = self.validate(_Req.exact(request), None, (ci, qi, 0))
                    self.request_data[(ci, qi, 0)] = rd
                    min_claim += rd.num_devices
            if min_claim > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"claim {claim_ref(claim)}: number of requested devices {min_claim} exceeds the claim limit of "
                    f"{ALLOCATION_RESULTS_MAX_SIZE}"
                )
            cons = []
            for i, c in enumerate(claim.spec.devices.constraints):
                if c.match_attribute is None:
                    raise AllocationError(
                        f"claim {claim_ref(claim)}, constraint #{i}: empty constraint (unsupported constraint type?)"
                    )
                cons.append(_MatchAttribute(c.requests, c.match_attribute))
            self.constraints.append(cons)
        try:
            done = self.drive((0, 0, 0, 0), False)
        except _MaxSizeExceeded:
            done = False
        if not done:
            if any(p.invalid for p in self.pools):
                raise NodeAllocationFailed("invalid resource pools were encountered")
            return None
        return [self.build_result(ci, claim) for ci, claim in enumerate(self.claims)]

    def validate(self, req: _Req, parent: _Req | None, key: tuple[int, int, int]) -> _RequestData:
        """``validateDeviceRequest``: the request's class and how many devices it needs here.

        Raises:
            AllocationError: with upstream's message.
        """
        claim = self.claims[key[0]]
        rd = _RequestData(req, parent)
        for i, sel in enumerate(req.selectors):
            if sel.cel is None:
                raise AllocationError(
                    f"claim {claim_ref(claim)}, request {req.name}, selector #{i}: CEL expression empty "
                    "(unsupported selector type?)"
                )
        if not req.class_name:
            raise AllocationError(
                f"claim {claim_ref(claim)}, request {req.name}: missing device class name (unsupported request type?)"
            )
        cls = self.a.classes(req.class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim_ref(claim)}, request {req.name}: could not retrieve device class {req.class_name}: "
                f'deviceclass.resource.k8s.io "{req.class_name}" not found'
            )
        rd.device_class = cls
        if req.mode == ALLOCATION_MODE_EXACT_COUNT:
            rd.num_devices = req.count
        elif req.mode == ALLOCATION_MODE_ALL:
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim_ref(claim)}, request {req.name}: asks for all devices, but resource pool "
                        f"{pool.pool_id} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim_ref(claim)}, request {req.name}: asks for all devices, but resource pool "
                        f"{pool.pool_id} is currently invalid"
                    )
                for s in pool.slices:
                    for dev in s.spec.devices:
                        self.step()
                        if self.selectable(key, rd, s, dev):
                            rd.all_devices.append(_Candidate((s.spec.driver, s.spec.pool.name, dev.name), dev, s))
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationError(f"claim {claim_ref(claim)}, request {req.name}: unsupported count mode {req.mode}")
        return rd

    # ---- the search -----------------------------------------------------------------------

    def drive(self, start: _Idx, sub: bool) -> bool:
        """Run :meth:`one` from ``start`` with generators for frames (no Python recursion)."""
        stack: list[_Frame] = [self.one(start, sub, -1)]
        value: Any = None  # None starts a frame, then each callee's outcome
        error: BaseException | None = None
        while True:
            frame = stack[-1]
            try:
                if error is not None:
                    e, error = error, None
                    call = frame.throw(e)
                else:
                    call = frame.send(value)
            except StopIteration as done:
                stack.pop()
                if not stack:
                    return bool(done.value)
                value = done.value
                continue
            except Exception as exc:
                stack.pop()
                if not stack:
                    raise
                error = exc
                continue
            stack.append(self.one(*call))
            value = None

    def one(self, r: _Idx, allocate_sub: bool, after: int) -> _Frame:
        """``allocateOne``: a frame that yields the next call (and gets its outcome back);
        returns whether everything from ``r`` on got allocated.

        ``after``: the position (in pool, slice, device order) of the device the same request
        took last, -1 for its first device. Only later candidates are tried: upstream tries
        every order of a request's devices, but two orders of one set leave the same state,
        and of all solutions the one found first is sorted within each request, so skipping
        the other orders changes no answer, only the work (combinations, not permutations)."""
        self.step()
        c, q, sq, di = r
        if c >= len(self.claims):
            return True
        requests = self.claims[c].spec.devices.requests
        if q >= len(requests):
            try:
                return (yield ((c + 1, 0, 0, 0), False, -1))
            except _MaxSizeExceeded:
                return False
        key = (c, q, sq)
        rd = self.request_data[key]
        if not allocate_sub and rd.parent is not None:
            all_exceeded = True
            si = 0
            while (c, q, si) in self.request_data:
                try:
                    ok = yield ((c, q, si, di), True, -1)
                except _MaxSizeExceeded:
                    si += 1
                    continue
                all_exceeded = False
                if ok:
                    rd.selected_sub = si
                    return True
                si += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False
        req = rd.request
        do_all = req.mode == ALLOCATION_MODE_ALL
        if do_all and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            return (yield ((c, q + 1, 0, 0), False, -1))
        if len(self.result[c]) + rd.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded
        if do_all:
            undo = self.allocate_device(r, rd.all_devices[di], True)
            if undo is None:
                return False
            try:
                done = yield ((c, q, sq, di + 1), allocate_sub, -1)
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done
        pos = -1
        for pool in self.pools:
            if pool.incomplete or pool.invalid:
                continue
            for s in pool.slices:
                for dev in s.spec.devices:
                    pos += 1
                    if pos <= after:
                        continue  # tried as an earlier device of this request
                    self.step()
                    did = (pool.driver, pool.name, dev.name)
                    if req.admin_access:
                        if c in self.allocating.get(did, ()):
                            continue
                    elif did in self.a.allocated or self.allocating.get(did):
                        continue
                    if not self.selectable(key, rd, s, dev):
                        continue
                    undo = self.allocate_device(r, _Candidate(did, dev, s), False)
                    if undo is None:
                        continue
                    try:
                        done = yield ((c, q, sq, di + 1), allocate_sub, pos)
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def selectable(self, key: tuple[int, int, int], rd: _RequestData, s: ResourceSlice, dev: Device) -> bool:
        """``isSelectable``: the class's and the request's selectors pass (cached per cycle).

        Raises:
            AllocationError: a selector is empty, does not compile or fails to evaluate.
        """
        if dev.binding_conditions:
            return False  # DRADeviceBindingConditions is off
        mkey = (key[0], key[1], key[2], id(dev))
        hit = self.a.matches.get(mkey)
        if hit is not None:
            return hit
        ok = (rd.device_class is None or self.selectors_match(key[0], dev, s, rd.device_class)) and (
            self.selectors_match(key[0], dev, s, None, rd.request.selectors)
        )
        self.a.matches[mkey] = ok
        return ok

    def selectors_match(
        self,
        claim_index: int,
        dev: Device,
        s: ResourceSlice,
        cls: DeviceClass | None,
        selectors: Sequence[DeviceSelector] = (),
    ) -> bool:
        """``selectorsMatch``: every selector of ``cls`` (when given) or else ``selectors`` passes.

        Raises:
            AllocationError: ``class X: selector #i: CEL compile error: ...`` (or ``claim ns/c: ...``),
                ``... CEL runtime error: ...``.
        """
        if cls is not None:
            selectors, who = cls.spec.selectors, f"class {cls.metadata.name}"
        else:
            who = f"claim {claim_ref(self.claims[claim_index])}"
        for i, sel in enumerate(selectors):
            if sel.cel is None:
                raise AllocationError(f"{who}: selector #{i}: CEL expression empty (unsupported selector type?)")
            try:
                compiled = self.a.selectors.get(sel.cel.expression)
            except CELCompileError as exc:
                raise AllocationError(f"{who}: selector #{i}: CEL compile error: {exc}") from exc
            self.step()
            try:
                ok = compiled.matches(self.a.view(dev, s.spec.driver))
            except CELRuntimeError as exc:
                raise AllocationError(f"{who}: selector #{i}: CEL runtime error: {exc}") from exc
            if not ok:
                return False
        return True

    def allocate_device(self, r: _Idx, cand: _Candidate, must: bool) -> Callable[[], None] | None:
        """``allocateDevice``: take ``cand`` for device ``r`` if it is free and keeps the
        constraints; returns how to give it back, or None.

        Raises:
            AllocationError: ``must`` (an ``All`` request) and a constraint refuses the device.
        """
        c, q, sq, _ = r
        rd = self.request_data[(c, q, sq)]
        req = rd.request
        if req.admin_access:
            if c in self.allocating.get(cand.id, ()):
                return None
        elif cand.id in self.a.allocated or self.allocating.get(cand.id):
            return None
        if cand.device.consumes_counters:
            return None  # DRAPartitionableDevices is off
        if rd.parent is None:
            base, sub = req.name, ""
        else:
            base, sub = rd.parent.name, req.name
        cons = self.constraints[c]
        for i, con in enumerate(cons):
            if not con.add(base, sub, cand.device, cand.id):
                if must:
                    raise AllocationError(
                        f"claim {claim_ref(self.claims[c])}, request {req.name}: cannot add device "
                        f"{device_id_text(cand.id)} because a claim constraint would not be satisfied"
                    )
                for e in range(i):
                    cons[e].remove(base, sub, cand.device, cand.id)
                return None
        self.allocating.setdefault(cand.id, set()).add(c)
        results = self.result[c]
        prev = len(results)
        results.append(
            _Result(
                req.name,
                rd.parent.name if rd.parent else "",
                cand.id,
                cand.device,
                cand.slice,
                req.admin_access or None,
            )
        )

        def undo() -> None:
            for con in cons:
                con.remove(base, sub, cand.device, cand.id)
            self.allocating[cand.id].discard(c)
            del results[prev:]

        return undo

    # ---- results --------------------------------------------------------------------------

    def build_result(self, ci: int, claim: ResourceClaim) -> AllocationResult:
        """The claim's ``AllocationResult``: devices, configuration, node selector.

        Raises:
            AllocationError: a slice's node selector has more than one term.
        """
        devices = [
            DeviceRequestAllocationResult(
                request=r.request_name(), driver=r.id[0], pool=r.id[1], device=r.id[2], admin_access=r.admin_access
            )
            for r in self.result[ci]
        ]
        config: list[DeviceAllocationConfiguration] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        requests = claim.spec.devices.requests
        for qi in range(len(requests)):
            rd = self.request_data[(ci, qi, 0)]
            if rd.parent is not None:
                rd = self.request_data[(ci, qi, rd.selected_sub)]
            cls = rd.device_class
            if cls is None:
                continue
            have = class_ranges.get(cls.metadata.name)
            if have is not None:
                for i in range(*have):
                    config[i].requests.append(rd.request_name())
                continue
            start = len(config)
            for cc in cls.spec.config:
                config.append(
                    DeviceAllocationConfiguration(
                        source=CONFIG_SOURCE_CLASS, requests=[rd.request_name()], opaque=cc.opaque
                    )
                )
            class_ranges[cls.metadata.name] = (start, len(config))
        for cfg in claim.spec.devices.config:
            if not cfg.requests:
                config.append(DeviceAllocationConfiguration(source=CONFIG_SOURCE_CLAIM, opaque=cfg.opaque))
                continue
            for qi, request in enumerate(requests):
                if request.name in cfg.requests:
                    config.append(
                        DeviceAllocationConfiguration(
                            source=CONFIG_SOURCE_CLAIM, requests=list(cfg.requests), opaque=cfg.opaque
                        )
                    )
                    continue
                rd = self.request_data[(ci, qi, 0)]
                if rd.parent is None:
                    continue
                sub = request.first_available[rd.selected_sub]
                if f"{request.name}/{sub.name}" in cfg.requests:
                    config.append(
                        DeviceAllocationConfiguration(
                            source=CONFIG_SOURCE_CLAIM, requests=list(cfg.requests), opaque=cfg.opaque
                        )
                    )
        try:
            selector = node_selector_for(self.result[ci])
        except ValueError as exc:
            raise AllocationError(f"create NodeSelector for claim {claim.metadata.name}: {exc}") from exc
        return AllocationResult(devices=DeviceAllocationResult(results=devices, config=config), node_selector=selector)


def node_selector_for(results: Sequence[_Result]) -> NodeSelector | None:
    """``createNodeSelector``: where the allocated devices can be used (None: every node).

    Raises:
        ValueError: ``unsupported ResourceSlice.NodeSelector with N terms``.
    """
    fields: list[NodeSelectorRequirement] = []
    exprs: list[NodeSelectorRequirement] = []
    for r in results:
        spec = r.slice.spec
        if spec.node_name:
            return NodeSelector(
                node_selector_terms=[
                    NodeSelectorTerm(
                        match_fields=[
                            NodeSelectorRequirement(key="metadata.name", operator="In", values=[spec.node_name])
                        ]
                    )
                ]
            )
        ns = spec.node_selector
        if ns is None:
            continue
        terms = ns.node_selector_terms
        if len(terms) == 1:
            _add_new(terms[0].match_fields, fields)
            _add_new(terms[0].match_expressions, exprs)
        elif len(terms) > 1:
            raise ValueError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
    if fields or exprs:
        return NodeSelector(node_selector_terms=[NodeSelectorTerm(match_expressions=exprs, match_fields=fields)])
    return None


def _add_new(src: Sequence[NodeSelectorRequirement], dst: list[NodeSelectorRequirement]) -> None:
    """``addNewNodeSelectorRequirements``: append what ``dst`` lacks (values compared as sets)."""
    for req in src:
        if not any(d.key == req.key and d.operator == req.operator and set(d.values) == set(req.values) for d in dst):
            dst.append(req)
