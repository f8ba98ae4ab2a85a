"""The workload objects whose selectors PodTopologySpread's default constraints use.

``v1`` Service and ReplicationController, ``apps/v1`` ReplicaSet and StatefulSet (mirrors
``k8s.io/api/core/v1/types.go`` and ``k8s.io/api/apps/v1/types.go``), declaring only their
selectors: ``helper.DefaultSelector`` merges the selectors of the Services selecting a pod and of
its controller into the selector of the system default constraints. Plus the LeaderWorkerSet's
``startupPolicy``, which OMEGangPack reads for an LWS group's gang.
"""

from __future__ import annotations

import msgspec

from ome_scheduler.api.meta import LabelSelector, ObjectMeta, Record


class ServiceSpec(Record, gc=False):
    """``v1.ServiceSpec``: ``selector`` (None: the Service selects no pod, not every pod)."""

    selector: dict[str, str] | None = None


class Service(Record):
    """``v1.Service``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ServiceSpec = msgspec.field(default_factory=ServiceSpec)


class ReplicationControllerSpec(Record, gc=False):
    """``v1.ReplicationControllerSpec``: ``selector`` as a label map."""

    selector: dict[str, str] | None = None


class ReplicationController(Record):
    """``v1.ReplicationController``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ReplicationControllerSpec = msgspec.field(default_factory=ReplicationControllerSpec)


class SelectorSpec(Record, gc=False):
    """``appsv1.ReplicaSetSpec`` / ``appsv1.StatefulSetSpec``: only ``selector`` (a ``metav1.LabelSelector``)."""

    selector: LabelSelector | None = None


class ReplicaSet(Record):
    """``appsv1.ReplicaSet``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: SelectorSpec = msgspec.field(default_factory=SelectorSpec)


class StatefulSet(Record):
    """``appsv1.StatefulSet``."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: SelectorSpec = msgspec.field(default_factory=SelectorSpec)


class LeaderWorkerSetSpec(Record, gc=False):
    """``leaderworkerset.x-k8s.io/v1`` ``LeaderWorkerSetSpec`` (``sigs.k8s.io/lws`` v0.5.1
    ``api/leaderworkerset/v1/leaderworkerset_types.go``): only ``startupPolicy``
    (``LeaderCreated``, the default, or ``LeaderReady``), which OMEGangPack reads."""

    startup_policy: str = ""


class LeaderWorkerSet(Record):
    """``leaderworkerset.x-k8s.io/v1`` ``LeaderWorkerSet``: its groups are gangs (design §2.1)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: LeaderWorkerSetSpec = msgspec.field(default_factory=LeaderWorkerSetSpec)


class PodDisruptionBudgetSpec(Record, gc=False):
    """``policyv1.PodDisruptionBudgetSpec``: only ``selector`` (nil selects no pod; empty selects
    none either for preemption, ``filterPodsWithPDBViolation`` skips an empty selector)."""

    selector: LabelSelector | None = None


class PodDisruptionBudgetStatus(Record, gc=False):
    """``policyv1.PodDisruptionBudgetStatus``: ``disruptionsAllowed`` and ``disruptedPods`` (pod
    name -> when the eviction was admitted; such pods no longer count against the budget)."""

    disruptions_allowed: int = 0
    disrupted_pods: dict[str, str] = {}


class PodDisruptionBudget(Record):
    """``policy/v1`` PodDisruptionBudget, as DefaultPreemption reads it (victim selection and the
    node pick count the victims whose eviction would exceed ``disruptionsAllowed``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodDisruptionBudgetSpec = msgspec.field(default_factory=PodDisruptionBudgetSpec)
    status: PodDisruptionBudgetStatus = msgspec.field(default_factory=PodDisruptionBudgetStatus)
