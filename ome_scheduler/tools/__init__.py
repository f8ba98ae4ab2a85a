"""The offline tools: ``ome-scheduler snapshot``, ``simulate`` and ``explain``.

Lives here: one module per command line, each importing its engine only after its arguments
parse: ``snapshot.py`` (the informers' view to one file) over ``listing.py`` (the LIST of every
informer's objects: the one module here that talks to the API server) and ``anonymize.py``;
``simulate.py`` over ``simulation.py`` (the real engine on a simulated clock),
``virtualtime.py`` (the event loop whose clock jumps), ``standins.py`` (in-memory Binder and
event recorder), ``inputs.py`` (snapshots and manifests read and checked), ``workloads.py``
(the pods Deployments, StatefulSets, Jobs and LeaderWorkerSets create), ``outcome.py``
(reading the settled scheduler), ``report.py`` (the result, as text or JSON) and
``domainmap.py`` (the PNG); ``explain.py`` over ``explainer.py``
(why a gang waits, in dry run). The engine never imports them.

May import: api, util, config, framework, backend, plugins, kube, app, tools, scheduler, logs, metrics.
"""
