"""What the tests build on: objects, fakes and stand-ins, none of them a test.

Lives here:

* ``manifests``: Nodes, Pods, PodGroups, storage objects, operator jobs and scheduler
  configurations as plain dicts, as the API server takes them (the unit tests build snapshots
  from them; the e2e tests, the soak and the benchmark create them on a real cluster);
* ``rbac``: RBAC permissions as data (what a PolicyRule grants, what the chart documents as
  rarely used);
* ``builders``: typed objects (``ome_scheduler.api`` records, ``NodeInfo``/``PodInfo``) for
  the engine's unit tests; ``snapshots``: cluster snapshots from manifest dicts;
* ``plugins_env``: a whole scheduler on in-memory objects; ``fakes``: a fake framework Handle;
* ``apiserver``: an in-process fake kube-apiserver (``python -m tests.support.apiserver``);
* ``https_load_target`` and ``loadgen``: the two processes of the HTTPS-under-load test
  (``python -m tests.support.https_load_target``, ``python -m tests.support.loadgen``).

May import: ``ome_scheduler`` and third-party packages, never ``e2e`` or ``bench`` (which build
on this; ``tests/test_import_walls.py`` checks it).
"""
