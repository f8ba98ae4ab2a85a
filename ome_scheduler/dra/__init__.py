"""Dynamic resource allocation as pure code (upstream ``k8s.io/dynamic-resource-allocation``).

Lives here: ``cel.py`` (CEL device selectors: the ``device`` variable, the Kubernetes CEL
libraries a selector may call, the runtime cost limit; upstream ``cel/compile.go`` and
``cel/cache.go``), ``pools.py`` (which ResourceSlices reach a node and which pools are
complete; upstream ``structured/internal/*/pools_*.go``), ``allocator.py`` (the search for
devices that satisfy a pod's claims on one node, with a step budget and a deadline; upstream
``structured/internal/incubating``, the variant 1.35's default feature gates select). No I/O
and no scheduler state: inputs in, results out.

May import: api, util, dra.
"""
