"""Small builders for unit tests: Kubernetes node/pod dicts and ElasticJob models.

The dicts have the shape the Kubernetes API returns in JSON (camelCase keys),
so the same functions feed ``scheduler_core.accounting`` and the fake API
server. Every builder returns a fresh object; nothing is shared between calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_core.models import (
    DEFAULT_GPU_RESOURCE,
    ClusterResource,
    ElasticJob,
    JobPhase,
    NodeResources,
    Reason,
    Resources,
    ScalingDecision,
    ScalingPlan,
)
from scheduler_core.ports import ScaleRequest

Quantity = str | int | float


def container(
    *,
    requests: Mapping[str, Quantity] | None = None,
    limits: Mapping[str, Quantity] | None = None,
    name: str = "main",
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A container; ``restart_policy="Always"`` makes an init container a sidecar."""
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    if limits is not None:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    built: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy is not None:
        built["restartPolicy"] = restart_policy
    return built


def node(
    name: str,
    *,
    cpu: Quantity = "8",
    memory: Quantity = "32Gi",
    gpu: int = 4,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    """A node whose allocatable is ``cpu``/``memory``/``gpu`` (GPU key omitted when 0)."""
    allocatable = {"cpu": str(cpu), "memory": str(memory), "pods": "110"}
    if gpu:
        allocatable[gpu_resource] = str(gpu)
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                }
            ],
        },
    }


def pod(
    name: str,
    *,
    node: str | None = None,
    phase: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    overhead: Mapping[str, Quantity] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A pod, bound to ``node`` when given.

    ``containers`` defaults to one container requesting 1 CPU and 1Gi.
    ``phase`` defaults to "Running", or "Pending" for an ``unschedulable``
    pod, which also gets the scheduler's PodScheduled=False/Unschedulable
    condition.
    """
    if containers is None:
        containers = [container(requests={"cpu": "1", "memory": "1Gi"})]
    spec: dict[str, Any] = {"containers": [dict(c) for c in containers]}
    if init_containers is not None:
        spec["initContainers"] = [dict(c) for c in init_containers]
    if overhead is not None:
        spec["overhead"] = {k: str(v) for k, v in overhead.items()}
    if node is not None:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase or ("Pending" if unschedulable else "Running")}
    if unschedulable:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
        ]
    elif node is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
        "status": status,
    }


def job(name: str, **overrides: Any) -> ElasticJob:
    """An elastic job (1..4 replicas, 1 running, 1 CPU / 1000 MB, no GPU); fields overridable."""
    fields: dict[str, Any] = {
        "name": name,
        "min_replicas": 1,
        "max_replicas": 4,
        "current_replicas": 1,
        "requests": Resources(cpu_milli=1000, memory_mega=1000),
        "limits": Resources(cpu_milli=1000, memory_mega=1000),
    }
    fields.update(overrides)
    return ElasticJob(**fields)


def decision_of(plan: ScalingPlan, key: str) -> ScalingDecision:
    """The plan's decision for ``key``; fails the test when there is none."""
    found = plan.for_job(key)
    if found is None:
        raise AssertionError(f"no decision for {key} in {plan.policy} plan")
    return found


def gpu_job(name: str, requested: int, current: int = 0, *, max_replicas: int = 64) -> ElasticJob:
    """A one-GPU-per-replica job that asked for ``requested`` replicas; running iff it holds some."""
    one_gpu = Resources(gpu=1)
    return ElasticJob(
        name=name,
        min_replicas=1,
        max_replicas=max_replicas,
        default_parallelism=requested,
        current_replicas=current,
        phase=JobPhase.RUNNING if current else JobPhase.PENDING,
        requests=one_gpu,
        limits=one_gpu,
    )


def gpu_cluster(total: int, free: int) -> ClusterResource:
    """A GPU cluster whose free GPUs all sit on one node (enough for gang-policy tests)."""
    return ClusterResource(
        node_count=1, gpu_total=total, nodes=NodeResources(nodes_gpu_free={"node-00": free})
    )


def scale_request(
    job: str,
    replicas: int,
    *,
    reason: str = "r",
    rule: str = "test",
    policy: str | None = None,
    generation: int | None = None,
    epoch_time_s: float | None = None,
) -> ScaleRequest:
    """The ``ReplicaScaler`` port's request, with a one-line reason."""
    return ScaleRequest(
        job=job,
        replicas=replicas,
        reason=Reason(rule=rule, message=reason),
        policy=policy,
        generation=generation,
        epoch_time_s=epoch_time_s,
    )
