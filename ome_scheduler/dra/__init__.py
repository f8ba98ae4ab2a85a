"""Dynamic resource allocation as pure code: CEL device selectors, pools and the structured allocator.

Lives here (upstream ``k8s.io/dynamic-resource-allocation``): ``cel.py`` (device selectors:
compile once, evaluate per device, bounded cost), ``pools.py`` (which ResourceSlices reach a
node and which pools are complete; upstream ``structured/internal/*/pools_*.go``),
``allocator.py`` (the search for devices that satisfy a pod's claims on one node, with a step
budget and a deadline; upstream ``structured/internal/incubating``, the variant 1.35's default
feature gates select). No I/O and no scheduler state: inputs in, allocation results out.

May import: api, util, dra.
"""
