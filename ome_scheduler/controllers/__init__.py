"""Controllers the leader runs beside the scheduling loop.

Lives here: ``podgroupstatus.py`` (every PodGroup's status and the ``ome.io/placement*``,
``ome.io/waiting-reason`` annotations, coalesced and written in the background through
``kube/podgroupwriter.py``). They read the backend's state and write through ``kube/``; they
make no scheduling decision.

May import: api, util, framework, backend, kube, controllers, logs, metrics.
"""
