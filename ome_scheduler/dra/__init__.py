"""Dynamic resource allocation as pure code (upstream ``k8s.io/dynamic-resource-allocation``).

Lives here: ``cel.py`` (CEL device selectors: the ``device`` variable, the Kubernetes CEL
libraries a selector may call, the runtime cost limit; upstream ``cel/compile.go`` and
``cel/cache.go``). The structured allocator and pools join it (branch ``h24-dra``). No I/O
and no scheduler state: inputs in, results out.

May import: api, util, dra.
"""
