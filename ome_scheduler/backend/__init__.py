"""The scheduler's state between cycles: the cache, the scheduling queue, the pod-group state.

Lives here: ``cache.py`` (nodes and pods with assume/forget, the per-cycle snapshot; upstream
``pkg/scheduler/backend/cache``), ``queue.py`` (activeQ, backoffQ and the unschedulable pods
moved by queueing hints; upstream ``pkg/scheduler/backend/queue``, drawn in
``docs/design/queue.md``), ``podgroups.py`` (PodGroups and their members, read by OMEGangPack
through the Handle), ``affinity_index.py`` (pods with affinity terms, indexed). No I/O.

May import: api, util, config, framework, logs, metrics.
"""
