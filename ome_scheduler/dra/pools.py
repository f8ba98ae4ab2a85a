"""Which ResourceSlices reach a node, grouped into pools, and whether each pool is usable.

Mirrors ``GatherPools``, ``NodeMatches``, ``checkSlicesInPool`` and ``buildPool`` of
``k8s.io/dynamic-resource-allocation/structured/internal/incubating/pools_incubating.go``
(v0.35.4) with DRAPartitionableDevices off, its 1.35 default:

* a slice with ``sharedCounters`` or with ``perDeviceNodeSelection`` set is ignored;
* a slice reaches a node by ``nodeName`` (that node), ``allNodes`` (every node) or
  ``nodeSelector`` (the nodes it matches, label expressions and the ``metadata.name`` field);
  a slice with none of them is some future kind of slice and is ignored;
* of a pool, only the slices of the newest generation that reaches the node count. The pool is
  *complete* when that generation has ``resourceSliceCount`` slices, counting those that do not
  reach the node too; a newer generation elsewhere in the pool makes it *obsolete* (ignored: the
  driver is replacing it); otherwise it is *incomplete* (no device is allocated from it, and a
  request for ``All`` devices fails on it);
* a complete pool whose slices repeat a device name is *invalid* (``duplicate device name X``).

Unlike upstream, whose pools come out of a Go map in random order, pools are ordered by
(driver, pool) and their slices by name, so the allocator's search, and thus which devices it
picks, is the same on every run.

:class:`SliceIndex` is built once per scheduling cycle (O(slices)); :meth:`SliceIndex.pools_for`
then costs O(the node's own slices + the slices with a node selector) per node instead of
O(all slices).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ome_scheduler.api.resource import ResourceSlice
from ome_scheduler.util.labels import NodeSelectorMatcher

PoolID = tuple[str, str]
"""(driver, pool name)."""


@dataclass(slots=True)
class Pool:
    """A resource pool as one node sees it (``Pool`` of upstream).

    ``slices`` are the pool's slices of its newest generation that reach the node
    (``DeviceSlicesTargetingNode``), sorted by name; empty when ``incomplete`` or ``invalid``.
    """

    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[ResourceSlice] = field(default_factory=list)

    @property
    def pool_id(self) -> str:
        """``driver/pool``, as upstream's ``PoolID.String()`` prints it in messages."""
        return f"{self.driver}/{self.name}"


@dataclass(slots=True)
class _PoolGenerations:
    newest: int
    count: dict[int, int] = field(default_factory=dict)


class SliceIndex:
    """The cycle's ResourceSlices indexed by how they reach nodes.

    ``slices``: every ResourceSlice the informer holds. Ignored slices (counters, per-device
    node selection, no node selection at all) are still counted when deciding whether a pool
    is complete, as upstream's ``checkSlicesInPool`` counts every slice of the pool.
    """

    __slots__ = ("by_node", "all_nodes", "by_selector", "generations")

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        self.by_node: dict[str, list[ResourceSlice]] = {}
        self.all_nodes: list[ResourceSlice] = []
        self.by_selector: list[tuple[ResourceSlice, NodeSelectorMatcher]] = []
        self.generations: dict[PoolID, _PoolGenerations] = {}
        for s in slices:
            spec = s.spec
            g = spec.pool.generation
            gens = self.generations.setdefault((spec.driver, spec.pool.name), _PoolGenerations(g))
            gens.count[g] = gens.count.get(g, 0) + 1
            gens.newest = max(gens.newest, g)
            if spec.per_device_node_selection is not None or spec.shared_counters:
                continue  # DRAPartitionableDevices is off
            if spec.node_name:
                self.by_node.setdefault(spec.node_name, []).append(s)
            elif spec.all_nodes:
                self.all_nodes.append(s)
            elif spec.node_selector is not None:
                self.by_selector.append((s, NodeSelectorMatcher.from_node_selector(spec.node_selector)))
            # else: a future kind of node selection, ignored as upstream does

    def pools_for(self, node_name: str, node_labels: Mapping[str, str]) -> list[Pool]:
        """``GatherPools``: the pools with devices that ``node_name`` (with ``node_labels``) can
        use, ordered by (driver, pool). Never raises."""
        reaching: dict[PoolID, list[ResourceSlice]] = {}
        for s in self._reaching(node_name, node_labels):
            _add_slice(reaching, s)
        out: list[Pool] = []
        for pid in sorted(reaching):
            slices = reaching[pid]
            spec = slices[0].spec
            want = spec.pool.resource_slice_count
            if len(slices) != want:
                gens = self.generations[pid]
                if gens.newest > spec.pool.generation:
                    continue  # obsolete: the driver is publishing a newer generation
                if gens.count.get(spec.pool.generation, 0) != want:
                    out.append(Pool(pid[0], pid[1], incomplete=True))
                    continue
            out.append(_build_pool(pid, sorted(slices, key=lambda x: x.metadata.name)))
        return out

    def _reaching(self, node_name: str, node_labels: Mapping[str, str]) -> Iterable[ResourceSlice]:
        yield from self.by_node.get(node_name, ())
        yield from self.all_nodes
        for s, matcher in self.by_selector:
            if matcher.matches(node_name, node_labels):
                yield s


def _add_slice(pools: dict[PoolID, list[ResourceSlice]], s: ResourceSlice) -> None:
    """``addSlice``: keep only the newest generation's slices of each pool."""
    pid = (s.spec.driver, s.spec.pool.name)
    have = pools.get(pid)
    if have is None:
        pools[pid] = [s]
        return
    g, current = s.spec.pool.generation, have[0].spec.pool.generation
    if g < current:
        return
    if g > current:
        pools[pid] = [s]
        return
    have.append(s)


def _build_pool(pid: PoolID, slices: list[ResourceSlice]) -> Pool:
    """``buildPool`` without partitionable devices: invalid when a device name repeats."""
    seen: set[str] = set()
    for s in slices:
        for d in s.spec.devices:
            if d.name in seen:
                return Pool(pid[0], pid[1], invalid=True, invalid_reason=f"duplicate device name {d.name}")
            seen.add(d.name)
    return Pool(pid[0], pid[1], slices=slices)
