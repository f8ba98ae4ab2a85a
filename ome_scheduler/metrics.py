"""Prometheus metrics: kube-scheduler's standard families plus the ``ome_scheduler_*`` ones.

Names, labels, buckets and help texts mirror ``pkg/scheduler/metrics/metrics.go`` (v1.35.4),
including the ``[STABLE]``/``[BETA]``/``[ALPHA]`` help prefixes that component-base adds,
and ``leader_election_master_status`` from
``k8s.io/component-base/metrics/prometheus/clientgo/leaderelection``. Every family lives in
one dedicated :class:`~prometheus_client.CollectorRegistry` (``Metrics.registry``) so tests
get fresh state; ``process_*`` and ``python_*`` collectors are registered there too.
"""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# kube-scheduler exports no ``*_created`` series; without this every counter and histogram
# would add one.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def _exp(start: float, factor: float, count: int) -> list[float]:
    """``metrics.ExponentialBuckets``."""
    return [start * factor**i for i in range(count)]


class Metrics:
    """All metric families of one scheduler process, in its own registry."""

    def __init__(self) -> None:
        """Create every family in a fresh registry; durations are seconds, as upstream."""
        r = self.registry = CollectorRegistry(auto_describe=True)
        prometheus_client.ProcessCollector(registry=r)
        prometheus_client.PlatformCollector(registry=r)
        prometheus_client.GCCollector(registry=r)

        def counter(name: str, doc: str, labels: list[str], level: str) -> Counter:
            return Counter(name, f"[{level}] {doc}", labels, registry=r)

        def gauge(name: str, doc: str, labels: list[str], level: str) -> Gauge:
            return Gauge(name, f"[{level}] {doc}", labels, registry=r)

        def hist(name: str, doc: str, labels: list[str], level: str, buckets: list[float]) -> Histogram:
            return Histogram(name, f"[{level}] {doc}", labels, registry=r, buckets=buckets)

        s = "scheduler_"
        self.schedule_attempts = counter(
            s + "schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            "STABLE",
        )
        self.scheduling_attempt_duration = hist(
            s + "scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            "STABLE",
            _exp(0.001, 2, 15),
        )
        self.scheduling_algorithm_duration = hist(
            s + "scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            [],
            "ALPHA",
            _exp(0.001, 2, 15),
        )
        self.preemption_victims = hist(
            s + "preemption_victims", "Number of selected preemption victims", [], "STABLE", _exp(1, 2, 7)
        )
        self.preemption_attempts = counter(
            s + "preemption_attempts", "Total preemption attempts in the cluster till now", [], "STABLE"
        )
        self.preemption_goroutines_duration = hist(
            s + "preemption_goroutines_duration_seconds",
            "Duration in seconds for running goroutines for the preemption.",
            ["result"],
            "ALPHA",
            _exp(0.01, 2, 20),
        )
        self.preemption_goroutines_execution = counter(
            s + "preemption_goroutines_execution", "Number of preemption goroutines executed.", ["result"], "ALPHA"
        )
        self.pending_pods = gauge(
            s + "pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' "
            "means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that "
            "the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that "
            "the scheduler never attempted to schedule because they are gated.",
            ["queue"],
            "STABLE",
        )
        self.pod_scheduling_sli_duration = hist(
            s + "pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and "
            "might involve multiple scheduling attempts.",
            ["attempts"],
            "BETA",
            _exp(0.01, 2, 20),
        )
        self.pod_scheduling_attempts = hist(
            s + "pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            [],
            "STABLE",
            _exp(1, 2, 5),
        )
        self.framework_extension_point_duration = hist(
            s + "framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            "STABLE",
            _exp(0.0001, 2, 12),
        )
        self.plugin_execution_duration = hist(
            s + "plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ["plugin", "extension_point", "status"],
            "ALPHA",
            _exp(0.00001, 1.5, 20),
        )
        self.queue_incoming_pods = counter(
            s + "queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            "STABLE",
        )
        self.batch_attempts = counter(
            s + "batch_attempts", "Counts of results when we attempt to use batching.", ["profile", "result"], "ALPHA"
        )
        self.batch_cache_flushed = counter(
            s + "batch_cache_flushed", "Counts of cache flushes by reason.", ["profile", "reason"], "ALPHA"
        )
        self.get_node_hint_duration = hist(
            s + "get_node_hint_duration_seconds",
            "Latency for getting a node hint.",
            ["hinted", "profile"],
            "ALPHA",
            _exp(0.00001, 2, 12),
        )
        self.store_schedule_results_duration = hist(
            s + "store_schedule_results_duration_seconds",
            "Latency for getting a no.",
            ["profile"],
            "ALPHA",
            _exp(0.00001, 2, 12),
        )
        self.permit_wait_duration = hist(
            s + "permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ["result"],
            "ALPHA",
            _exp(0.001, 2, 15),
        )
        self.unschedulable_pods = gauge(
            s + "unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for "
            "all plugins that caused it to not schedule and so this metric have meaning only when broken down "
            "by plugin.",
            ["plugin", "profile"],
            "ALPHA",
        )
        self.cache_size = gauge(
            s + "cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            ["type"],
            "ALPHA",
        )
        self.goroutines = gauge(
            s + "goroutines",
            "Number of running goroutines split by the work they do such as binding.",
            ["operation"],
            "ALPHA",
        )
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            ["name"],
            registry=r,
        )

        o = "ome_scheduler_"
        self.gang_pin = counter(
            o + "gang_pin",
            "Gang domain-placement decisions by result (pinned, no_fit, reserved, adopted, stale_replan, "
            "topology_replan).",
            ["result"],
            "ALPHA",
        )
        self.gang_gate = counter(
            o + "gang_gate", "Permit gate evaluations by result (wait, admit).", ["result"], "ALPHA"
        )
        self.gang_activation = counter(
            o + "gang_activation",
            "Explicit gang member activations by trigger (permit, templates_complete, reservation_released, "
            "podgroup_change).",
            ["trigger"],
            "ALPHA",
        )
        self.gang_unwind = counter(
            o + "gang_unwind", "Gangs unwound (Unreserve) after a member failed to schedule.", [], "ALPHA"
        )
        self.pinned_groups = gauge(o + "pinned_groups", "Placement groups currently pinned to a domain.", [], "ALPHA")
        self.gang_longest_hold = gauge(
            o + "gang_longest_hold_seconds",
            "How long the oldest hold of a forming gang has kept its domain from others (0: no hold).",
            [],
            "ALPHA",
        )
        self.gang_bind_skew = hist(
            o + "gang_bind_skew_seconds",
            "Time from the first to the last member bind of a gang that completed.",
            [],
            "ALPHA",
            [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
        )
        self.gang_scheduling_duration = hist(
            o + "gang_scheduling_duration_seconds",
            "Time from the creation of a gang's last member to the bind of its last member.",
            [],
            "ALPHA",
            _exp(0.01, 2, 16),
        )
        self.domain_free_nodes = gauge(
            o + "domain_free_nodes",
            "Schedulable nodes of a topology domain whose extended resources (or, without any, cpu and memory) "
            "nobody requests, by topology key and domain.",
            ["topology_key", "domain"],
            "ALPHA",
        )
        self.domain_max_gang_size = gauge(
            o + "domain_max_gang_size",
            "The largest gang, in members shaped like the last gang member planned under this topology key, "
            "that a topology domain still fits.",
            ["topology_key", "domain"],
            "ALPHA",
        )
        # The HTTPS endpoint: kube's names from k8s.io/apiserver (secure_serving.go,
        # authenticatorfactory and authorizerfactory metrics), then ours.
        self.tls_handshake_errors = counter(
            "apiserver_tls_handshake_errors",
            "Number of requests dropped with 'TLS handshake error from' error",
            [],
            "ALPHA",
        )
        self.delegated_authn_requests = counter(
            "apiserver_delegated_authn_request",
            "Number of HTTP requests partitioned by status code.",
            ["code"],
            "ALPHA",
        )
        self.delegated_authz_requests = counter(
            "apiserver_delegated_authz_request",
            "Number of HTTP requests partitioned by status code.",
            ["code"],
            "ALPHA",
        )
        self.serving_connections = gauge(
            o + "secure_serving_connections", "Open connections to the HTTPS endpoint.", [], "ALPHA"
        )
        self.serving_closed_connections = counter(
            o + "secure_serving_closed_connections",
            "Connections the HTTPS endpoint closed, by reason (evicted, refused, handshake_timeout, read_timeout, "
            "idle_timeout, response_timeout, handshake_error, header_too_large, body_too_large, bad_request, "
            "pipelined_too_much).",
            ["reason"],
            "ALPHA",
        )
        self.review_throttled = counter(
            o + "review_throttled",
            "TokenReviews and SubjectAccessReviews not sent because the review rate limit was spent "
            "(the request was answered 429), by review (tokenreview, subjectaccessreview).",
            ["review"],
            "ALPHA",
        )
        # The process's health: the event loop (ome_scheduler/app/watchdog.py) and the informers.
        self.event_loop_lag = hist(
            o + "event_loop_lag_seconds",
            "How late the event loop's periodic heartbeat woke up (sampled every 0.25 s at most); "
            "a stalled loop shows as one late sample as long as the stall.",
            [],
            "ALPHA",
            _exp(0.001, 2, 16),
        )
        self.informer_relists = counter(
            o + "informer_relists",
            "Full LISTs an informer made after its first sync (410 Gone; a failed, stalled or very short watch), "
            "by resource.",
            ["resource"],
            "ALPHA",
        )
        self.informer_watch_restarts = counter(
            o + "informer_watch_restarts",
            "Watches an informer re-opened without relisting (the server ended one normally), by resource.",
            ["resource"],
            "ALPHA",
        )
        self.podgroup_status_writes = counter(
            o + "podgroup_status_writes",
            "Requests the leader sent to keep PodGroup status and its ome.io/ annotations, by kind (status, "
            "annotations, list) and result (written, unchanged, gone, conflict, ok).",
            ["kind", "result"],
            "ALPHA",
        )
        self.dra_allocation_conflicts = counter(
            o + "dra_allocation_conflicts",
            "Claim allocations PreBind did not write because another writer got there first, by kind: "
            "'device' (a device of the allocation is now held by another claim, e.g. one the default "
            "scheduler allocated) or 'claim' (the claim itself got allocated elsewhere).",
            ["kind"],
            "ALPHA",
        )
        for kind in ("device", "claim"):
            self.dra_allocation_conflicts.labels(kind)
        # Pre-create the known label values so each series is exported as 0 from the start:
        # rate() and absence alerts then work before the first matching event.
        for result in ("pinned", "no_fit", "reserved", "adopted", "stale_replan", "topology_replan"):
            self.gang_pin.labels(result)
        for result in ("wait", "admit"):
            self.gang_gate.labels(result)
        for trigger in ("permit", "templates_complete", "reservation_released", "podgroup_change"):
            self.gang_activation.labels(trigger)
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending_pods.labels(queue)
        for review in ("tokenreview", "subjectaccessreview"):
            self.review_throttled.labels(review)
