"""Manifests as plain dicts: Nodes, Pods, PodGroups, storage, operator jobs, serving objects, and scheduler configurations.

Dicts as the API server takes them (``apiVersion``, ``kind``, ``metadata``, ``spec``,
``status``), including the jobs of the job operators (``mpi_job``, ``pytorch_job``) and the
serving objects of OME and LeaderWorkerSet (``cluster_base_model``, ``cluster_serving_runtime``,
``inference_service``, ``leader_worker_set``).
``chart_config`` is the KubeSchedulerConfiguration the Helm chart renders;
``kube_counterpart_config`` the stock kube-scheduler configured to match it,
``coscheduling_config`` scheduler-plugins' Coscheduling on the same profile. Nothing here talks
to a cluster: the unit tests build snapshots from these, the e2e tests and the soak create them
on the local control plane (``e2e/harness/``), the benchmark configures its schedulers with them.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
TOPOLOGY_ANNOTATION = "ome.io/topology-key"
SCHEDULER_NAME = "ome-scheduler"
HOSTNAME = "kubernetes.io/hostname"
CLIQUE = "nvidia.com/gpu.clique"


def unique(prefix: str) -> str:
    """A short DNS-safe unique name."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def domain_key(prefix: str) -> tuple[str, str]:
    """A unique name for one test's nodes (``<prefix>-<6 hex>``) and its domain label key ``e2e.ome.io/<name>``."""
    key = unique(prefix)
    return key, f"e2e.ome.io/{key}"


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    gpu: int = 1,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: int = 110,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A kwok-managed Node object with capacity and allocatable set."""
    res = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpu:
        res["nvidia.com/gpu"] = str(gpu)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }


def domain_nodes(prefix: str, key: str, sizes: Mapping[str, int], **kw: Any) -> list[dict[str, Any]]:
    """Nodes ``<prefix>-<domain><i>`` in domains of label ``key``: ``sizes[domain]`` nodes of each
    (``i`` from 0), every one a :func:`node` with the other keyword arguments."""
    return [node(f"{prefix}-{d}{i}", {key: d}, **kw) for d, n in sizes.items() for i in range(n)]


def pod(
    name: str,
    ns: str,
    *,
    gang: str | None = None,
    gpu: int = 1,
    cpu: str | None = None,
    memory: str | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER_NAME,
    anti_affinity_on: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_name: str | None = None,
    affinity: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    gates: Sequence[str] = (),
) -> dict[str, Any]:
    """A pause pod; ``gang`` sets the pod-group label, ``anti_affinity_on`` a required
    anti-affinity against pods with the same ``app`` label on that topology key, ``gates``
    scheduling gates."""
    lab = {"app": gang or name, **(labels or {})}
    if gang:
        lab[POD_GROUP_LABEL] = gang
    req: dict[str, str] = {}
    if gpu:
        req["nvidia.com/gpu"] = str(gpu)
    if cpu:
        req["cpu"] = cpu
    if memory:
        req["memory"] = memory
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": dict(req), "limits": dict(req)} if req else {},
            }
        ],
    }
    aff: dict[str, Any] = copy.deepcopy(dict(affinity)) if affinity else {}
    if anti_affinity_on:
        aff["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": lab["app"]}}, "topologyKey": anti_affinity_on}
            ]
        }
    if aff:
        spec["affinity"] = aff
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": lab}, "spec": spec}


def pod_group(
    name: str,
    ns: str,
    min_member: int,
    *,
    topology_key: str | None = None,
    timeout: int | None = 300,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": ns}
    if topology_key:
        md["annotations"] = {TOPOLOGY_ANNOTATION: topology_key}
    if labels:
        md["labels"] = dict(labels)
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": md, "spec": spec}


NO_PROVISIONER = "kubernetes.io/no-provisioner"


def storage_class(name: str, provisioner: str = NO_PROVISIONER) -> dict[str, Any]:
    """A WaitForFirstConsumer StorageClass: claims bind when a pod using them is scheduled. The
    default provisioner provisions nothing (local PVs only)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def persistent_volume(
    name: str, storage_class_name: str, node_name: str, *, size: str = "1Gi", claim: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A local (hostPath) PersistentVolume usable only on node ``node_name``; ``claim`` (a PVC
    object) pre-binds it to that claim, as a provisioner does."""
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class_name,
        "persistentVolumeReclaimPolicy": "Delete" if claim else "Retain",
        "hostPath": {"path": f"/tmp/e2e/{name}"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node_name]}]}
                ]
            }
        },
    }
    if claim is not None:
        md = claim["metadata"]
        spec["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": md["namespace"],
            "name": md["name"],
            "uid": md["uid"],
        }
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def persistent_volume_claim(name: str, ns: str, storage_class_name: str, *, size: str = "1Gi") -> dict[str, Any]:
    """A ReadWriteOnce claim of ``size`` in class ``storage_class_name``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class_name,
            "resources": {"requests": {"storage": size}},
        },
    }


def with_claim(p: dict[str, Any], claim: str) -> dict[str, Any]:
    """Pod ``p`` (from :func:`pod`) mounting PersistentVolumeClaim ``claim`` at ``/data``."""
    p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    p["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return p


HOLD_GATE = "example.com/hold"
#: An MPIJob launcher's requests: CPU only, but more than a GPU node has left next to a worker.
MPI_LAUNCHER_REQUESTS: dict[str, str] = {"cpu": "4"}
#: A training replica's requests (MPIJob worker, PyTorchJob master and worker): one GPU and 6 CPUs.
TRAINING_REQUESTS: dict[str, str] = {"cpu": "6", "nvidia.com/gpu": "1"}


def _job_template(
    container: str,
    image: str,
    requests: Mapping[str, str],
    *,
    command: Sequence[str] = (),
    node_selector: Mapping[str, str] | None = None,
    gated: bool = False,
) -> dict[str, Any]:
    """A job operator's replica pod template: one container with equal requests and limits."""
    c: dict[str, Any] = {
        "name": container,
        "image": image,
        "resources": {"requests": dict(requests), "limits": dict(requests)},
    }
    if command:
        c["command"] = list(command)
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": [c]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if gated:
        spec["schedulingGates"] = [{"name": HOLD_GATE}]
    return {"spec": spec}


def _scheduling_policy(min_available: int | None, timeout: int | None) -> dict[str, Any]:
    """``runPolicy.schedulingPolicy`` with the fields that end up in the operator's PodGroup."""
    policy: dict[str, Any] = {}
    if min_available is not None:
        policy["minAvailable"] = min_available
    if timeout is not None:
        policy["scheduleTimeoutSeconds"] = timeout
    return policy


def mpi_job(
    name: str,
    ns: str,
    workers: int,
    *,
    node_selector: Mapping[str, str] | None = None,
    gated: bool = False,
    min_available: int | None = None,
    timeout: int | None = None,
) -> dict[str, Any]:
    """A ``kubeflow.org/v2beta1`` MPIJob (mpi-operator v0.6.0): one launcher and ``workers`` workers.

    Workers request ``TRAINING_REQUESTS`` (one GPU), the launcher ``MPI_LAUNCHER_REQUESTS``: with
    8-CPU nodes the launcher cannot share a node with a worker, so the job needs ``workers + 1``
    nodes both physically and in OMEGangPack's room count (which sizes a node by the largest
    member that fits it). ``gated`` puts the scheduling gate ``HOLD_GATE`` on every pod (a test
    releases them one by one, in an order of its choosing); ``min_available`` and ``timeout`` go to ``runPolicy.schedulingPolicy`` (the PodGroup's
    ``minMember`` and ``scheduleTimeoutSeconds``). The operator adds ``schedulerName`` and the
    pod-group label when it runs with ``--gang-scheduling``.
    """
    image = "mpioperator/mpi-pi:openmpi"
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running"}
    if policy := _scheduling_policy(min_available, timeout):
        run_policy["schedulingPolicy"] = policy
    launcher = _job_template(
        "launcher",
        image,
        MPI_LAUNCHER_REQUESTS,
        command=["mpirun", "-n", str(workers), "/home/mpiuser/pi"],
        node_selector=node_selector,
        gated=gated,
    )
    worker = _job_template("worker", image, TRAINING_REQUESTS, node_selector=node_selector, gated=gated)
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": launcher},
                "Worker": {"replicas": workers, "template": worker},
            },
        },
    }


def pytorch_job(
    name: str,
    ns: str,
    workers: int,
    *,
    node_selector: Mapping[str, str] | None = None,
    gated: bool = False,
    min_available: int | None = None,
    timeout: int | None = None,
) -> dict[str, Any]:
    """A ``kubeflow.org/v1`` PyTorchJob (training-operator v1): one master and ``workers`` workers.

    Every replica requests ``TRAINING_REQUESTS``; the other arguments are those of :func:`mpi_job`.
    """
    image = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
    run_policy: dict[str, Any] = {}
    if policy := _scheduling_policy(min_available, timeout):
        run_policy["schedulingPolicy"] = policy

    def replicas(n: int) -> dict[str, Any]:
        t = _job_template("pytorch", image, TRAINING_REQUESTS, node_selector=node_selector, gated=gated)
        return {"replicas": n, "restartPolicy": "OnFailure", "template": t}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(workers)}},
    }


LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LWS_EXCLUSIVE_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
SERVING_REQUESTS: dict[str, str] = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}
"""What every serving pod of the e2e tests asks for: a whole node of four GPUs."""
MODEL_FORMAT: dict[str, Any] = {
    "modelFormat": {"name": "safetensors", "version": "1.0.0"},
    "modelFramework": {"name": "transformers", "version": "4.0.0"},
    "modelArchitecture": "LlamaForCausalLM",
}
"""The format, framework and architecture of the test models, which their runtimes match exactly."""


def model_ready_label(model: str) -> str:
    """The node label OME's serving pods select (``Ready``) for ClusterBaseModel ``model``.

    Its model agent sets it on the nodes holding the model; the tests set it by hand."""
    return f"models.ome.io/clusterbasemodel.{model}"


def _serving_container(requests: Mapping[str, str]) -> dict[str, Any]:
    return {
        "name": "ome-container",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": dict(requests), "limits": dict(requests)},
    }


def cluster_base_model(name: str) -> dict[str, Any]:
    """An OME ClusterBaseModel of :data:`MODEL_FORMAT` (never downloaded: no model agent runs)."""
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "ClusterBaseModel",
        "metadata": {"name": name},
        "spec": {
            **copy.deepcopy(MODEL_FORMAT),
            "storage": {"storageUri": "hf://example/never-downloaded", "path": f"/raid/models/{name}"},
        },
    }


def cluster_serving_runtime(
    name: str,
    *,
    workers: int | None = None,
    scheduler: str = SCHEDULER_NAME,
    requests: Mapping[str, str] = SERVING_REQUESTS,
) -> dict[str, Any]:
    """An OME ClusterServingRuntime for :data:`MODEL_FORMAT` whose pods ask ``scheduler`` for ``requests``.

    With ``workers`` its engine is multi-node (a leader and that many workers: OME makes a
    LeaderWorkerSet of size ``workers + 1``); otherwise a single pod (a Deployment). The
    ``schedulerName`` sits in the engine's, the leader's and the worker's own pod specs, where
    this OME release reads it (not at the runtime's top level).
    """
    engine: dict[str, Any]
    if workers is None:
        engine = {"schedulerName": scheduler, "runner": _serving_container(requests)}
    else:
        engine = {
            "leader": {"schedulerName": scheduler, "runner": _serving_container(requests)},
            "worker": {"size": workers, "schedulerName": scheduler, "runner": _serving_container(requests)},
        }
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": name},
        "spec": {
            "supportedModelFormats": [{"name": "safetensors", **copy.deepcopy(MODEL_FORMAT), "autoSelect": False}],
            "protocolVersions": ["openAI"],
            "engineConfig": engine,
        },
    }


def inference_service(name: str, ns: str, model: str, runtime: str, *, replicas: int = 1) -> dict[str, Any]:
    """An OME InferenceService of ClusterBaseModel ``model`` on ClusterServingRuntime ``runtime``;
    ``replicas`` engine replicas (LeaderWorkerSet groups for a multi-node runtime)."""
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "model": {"name": model},
            "runtime": {"name": runtime},
            "engine": {"minReplicas": replicas, "maxReplicas": replicas},
        },
    }


def leader_worker_set(
    name: str,
    ns: str,
    size: int,
    *,
    replicas: int = 1,
    startup_policy: str = "LeaderCreated",
    restart_policy: str = "RecreateGroupOnPodRestart",
    exclusive_topology: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER_NAME,
    requests: Mapping[str, str] = SERVING_REQUESTS,
) -> dict[str, Any]:
    """A LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``) of ``replicas`` groups of ``size`` pods
    (a leader and ``size - 1`` workers, one template for both) asking ``scheduler`` for ``requests``.

    ``exclusive_topology`` sets the annotation that gives each group a topology domain of its own.
    Pods get one second of grace: a pod deleted with none vanishes at once, and the controller
    recreates a group only for a pod it sees terminating.
    """
    template: dict[str, Any] = {
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 1,
            "containers": [_serving_container(requests)],
        }
    }
    if node_selector:
        template["spec"]["nodeSelector"] = dict(node_selector)
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if exclusive_topology:
        meta["annotations"] = {LWS_EXCLUSIVE_ANNOTATION: exclusive_topology}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "startupPolicy": startup_policy,
            "leaderWorkerTemplate": {"size": size, "restartPolicy": restart_policy, "workerTemplate": template},
        },
    }


def kube_counterpart_config(
    scheduler_name: str, kubeconfig: str, *, qps: float | None = None, burst: int | None = None
) -> dict[str, Any]:
    """The stock kube-scheduler configured like the chart's profile minus OMEGangPack (it has
    no gangs): MostAllocated packing on cpu and memory, no preemption, no spread scoring."""
    conn: dict[str, Any] = {"kubeconfig": kubeconfig}
    if qps is not None:
        conn["qps"] = qps
    if burst is not None:
        conn["burst"] = burst
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": conn,
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": scheduler_name,
                "plugins": {
                    "multiPoint": {"disabled": [{"name": "DefaultPreemption"}]},
                    "score": {
                        "enabled": [{"name": "NodeResourcesFit", "weight": 10}],
                        "disabled": [{"name": "PodTopologySpread"}],
                    },
                },
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                            }
                        },
                    }
                ],
            }
        ],
    }


def coscheduling_config(
    scheduler_name: str,
    kubeconfig: str,
    *,
    qps: float | None = None,
    burst: int | None = None,
    permit_wait_s: int = 600,
) -> dict[str, Any]:
    """scheduler-plugins' scheduler (v0.34.7) configured as ``kube_counterpart_config`` plus
    Coscheduling at queueSort (replacing PrioritySort), preFilter, postFilter, permit and reserve.

    Coscheduling reads the same ``scheduling.x-k8s.io/v1alpha1`` PodGroups and the
    ``scheduling.x-k8s.io/pod-group`` pod label as OMEGangPack; ``permit_wait_s`` is its
    ``permitWaitingTimeSeconds`` (a PodGroup's ``scheduleTimeoutSeconds`` overrides it). It has
    no topology domains: nothing keeps a gang in one clique. These are the extension points
    Coscheduling implements, so this is what scheduler-plugins'
    ``manifests/coscheduling/scheduler-config.yaml`` enables with ``multiPoint``.
    """
    cfg = kube_counterpart_config(scheduler_name, kubeconfig, qps=qps, burst=burst)
    profile = cfg["profiles"][0]
    co = [{"name": "Coscheduling"}]
    profile["plugins"].update(
        {
            "queueSort": {"enabled": co, "disabled": [{"name": "*"}]},
            "preFilter": {"enabled": co},
            "postFilter": {"enabled": co},
            "permit": {"enabled": co},
            "reserve": {"enabled": co},
        }
    )
    profile["pluginConfig"].append({"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": permit_wait_s}})
    return cfg


def chart_config(
    *,
    scheduler_name: str = SCHEDULER_NAME,
    topology_key: str | None = None,
    percentage: int | None = None,
    leader_elect: bool = False,
    lease_namespace: str = "kube-system",
    gang_args: Mapping[str, Any] | None = None,
    fit_resources: Sequence[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The KubeSchedulerConfiguration the chart renders with its defaults (spec chart.md §3.3)."""
    args: dict[str, Any] = {
        "podGroupTopologyKeyAnnotation": "ome.io/topology-key",
        "unsupportedPlacementGroupLabel": "ome.io/placement-group",
        "defaultPermitTimeoutSeconds": 600,
        "podGroupSyncTimeoutSeconds": 30,
        "gcIntervalSeconds": 60,
        "standaloneDomainPacking": True,
    }
    if topology_key:
        args = {"topologyKey": topology_key, **args}
    args.update(gang_args or {})
    profile: dict[str, Any] = {"schedulerName": scheduler_name}
    if percentage is not None:
        profile["percentageOfNodesToScore"] = percentage
    profile["plugins"] = {
        "multiPoint": {"enabled": [{"name": "OMEGangPack"}], "disabled": [{"name": "DefaultPreemption"}]},
        "score": {
            "enabled": [{"name": "NodeResourcesFit", "weight": 10}, {"name": "OMEGangPack", "weight": 10}],
            "disabled": [{"name": "PodTopologySpread"}],
        },
    }
    profile["pluginConfig"] = [
        {"name": "OMEGangPack", "args": args},
        {
            "name": "NodeResourcesFit",
            "args": {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": list(fit_resources or [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]),
                }
            },
        },
    ]
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {
            "leaderElect": leader_elect,
            "resourceName": scheduler_name,
            "resourceNamespace": lease_namespace,
        },
        "profiles": [profile],
    }
    cfg.update(extra or {})
    return cfg
