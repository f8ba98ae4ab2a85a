"""Fault injection on the real control plane (issue 12): what users lose when things break.

Each test breaks one thing on the local cluster of ``e2e/harness/cluster.py`` and checks the
invariants every fault test ends with (``e2e.harness.invariants.assert_invariants``: no pod
scheduled twice, no node over-committed, no gang split or partly bound), plus the fault's own
promise. Run them with the rest of
the end-to-end suite, or alone:

    OME_CLUSTER_DIR=/tmp/cluster-$USER .venv/bin/pytest e2e/faults -x

The API server writes an audit log (``<cluster dir>/logs/audit.log``, every request at Metadata
level, ``e2e/audit-policy.yaml``); tests read it with ``e2e.harness.audit.audit_events`` to prove
who sent what, when. A cluster started before audit logging existed has none: stop it
(``python -m e2e.harness down``) and let the fixture start a fresh one.

Test-only hooks the scheduler honours (never set outside tests):

* ``OME_SCHEDULER_TEST_STALL_SIGNAL=<seconds>``: SIGUSR1 blocks the scheduler's event loop for
  that long (``ome_scheduler.app.run``), as a pathological input or a paused VM would.

Modules:

* ``test_fencing.py``: a leader whose event loop stalls is ended by its watchdog, and no
  Binding it sent is later than its successor's ``acquireTime`` (item 1);
* ``test_loop_health.py``: a stalled loop shows in ``ome_scheduler_event_loop_lag_seconds`` and
  fails ``/livez``; the informers' relists and watch restarts are counted (item 7);
* ``test_apiserver_outages.py``: kube-apiserver paused 70 s, kube-apiserver and etcd restarted
  while gangs form (item 2);
* ``test_proxy_faults.py``: Toxiproxy between the scheduler and the API server: stalled watches,
  a blackhole while a node is deleted, resets, latency, bandwidth (item 3);
* ``test_binding_outcomes.py``: a Binding whose answer is lost (``e2e/harness/interposer.py``
  turns it into a 504, whose retry meets 409, or cuts it off) is a success; a member whose Binding a
  ValidatingAdmissionPolicy always refuses keeps no hold past its gang's timeout (item 4);
* ``test_no_hold_outlives_its_gang.py``: a partly bound gang whose domain lost a node, and a
  gang with a member that never fits, release their holds within ``scheduleTimeoutSeconds``
  (item 5; the gated member is ``e2e/test_gang_changes.py``'s).

Every test where the scheduler keeps running also ends with zero cache drift
(``e2e.harness.scheduler.assert_no_drift``: SIGUSR2 runs the scheduler's cache comparer, item 6).

The figures these tests measure are published in docs/operations/failure-behaviour.md.
"""
