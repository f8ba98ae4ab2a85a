"""One scheduler process: wiring, flags, leader election, loop health, the cache debugger.

Lives here (upstream ``cmd/kube-scheduler/app``): ``run.py`` (start-up, the task groups,
graceful shutdown), ``options.py`` (kube-scheduler's flags and how they apply to the
configuration), ``informers.py`` (the informer table; ``snapshot`` lists the same),
``leader.py`` (Lease leader election with client-go's lock), ``watchdog.py`` (the event loop's
heartbeat and the thread that ends a stalled leader), ``gcpolicy.py`` (the cyclic garbage
collector kept off the scheduling path), ``debugger.py`` (SIGUSR2: the cache compared with a
fresh LIST). Importing this package loads none of them.

May import: api, util, config, framework, backend, kube, serving, controllers, app, scheduler, logs, metrics.
"""
