"""The local control plane as a library: what the e2e tests, the soak, the benchmark and the demo run on.

Lives here, from the bottom up (a module imports only those above it in this list, and
``tests.support`` for the plain-dict manifests and RBAC permissions)::

    paths         where things are in the checkout (repository root, e2e's data files, the chart)
    tokens        every bearer token the suite was issued, so that no log may hold one
    processes     local processes: start, wait for, inspect, stop; free ports; the binaries
    pki           the cluster's CA, certificates and kubeconfigs
    components    each control-plane component's command line and readiness check
    cluster       Cluster: etcd, kube-apiserver, KCM, kube-scheduler and kwok as local processes
    __main__      the command line: python -m e2e.harness up|down|stop|status|env
    audit         the API server's audit log (AuditLog, audit_events)
    toxiproxy     Toxiproxy between a client and the API server, and its faults
    interposer    an HTTP front for the API server that loses chosen Binding answers
    operators     mpi-operator and the training-operator as local processes
    serving       the LeaderWorkerSet controller and OME's controller-manager as local processes
    helm          the cached helm binary and the chart's e2e release
    api           Api: synchronous JSON access to the API server as cluster admin
    waits         wait_for and the waits tests share (pods bound, a message, nodes Ready)
    scheduler     SchedulerProcess, SupervisedScheduler, and what the scheduler's log tells
    gangs         held gangs and the user guide's demo gang
    invariants    the one invariants checker of e2e and the soak
    measurements  the times fault tests measured, for the session's summary

Importing this package imports none of its modules.
"""
