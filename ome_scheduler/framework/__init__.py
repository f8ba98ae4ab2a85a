"""The scheduling framework: plugin interfaces, Status, CycleState, NodeInfo and the runtime.

Lives here (upstream ``pkg/scheduler/framework``): ``interface.py`` (the extension points'
contracts and the Handle plugins see), ``status.py`` (Status and its codes), ``types.py``
(PodInfo, NodeInfo, QueuedPodInfo, Resource), ``events.py`` (cluster events and queueing
hints), ``profile.py`` (builds a profile's framework: defaults merged, plugins built,
multiPoint expanded, weights), ``runtime.py`` (runs them at each extension point, with one
rule for plugin exceptions; FitError), ``scoring.py`` (the Score path, plain and cached),
``waiting_pods.py`` (pods parked at Permit), ``equivalence.py`` (per-shape Filter/Score
reuse), ``signers.py`` (pod signatures) and ``batch.py`` (OpportunisticBatching),
``fence.py`` (no Binding from a leader whose lease may have passed). No I/O: the
whole engine runs in unit tests and offline.

May import: api, util, config, framework, logs, metrics.
"""
