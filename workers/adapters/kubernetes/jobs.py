"""ElasticJob custom resource + its scale target + their pods -> the core's ``ElasticJob``.

Pure conversion over the JSON dicts the API server returns; the reader feeds
it from the cache. The rules, from the issue:

- ``min``/``max``, policy (absent: the cluster policy), default parallelism,
  ``paused``, ``application`` and ``epochs`` from the CR spec;
- per-replica requests and limits from the target's pod template (a custom
  resource behind ``/scale`` has no template we know of: one of its pods
  stands in for it);
- current replicas from the target (``spec.replicas``, or ``spec.parallelism``
  for a ``batch/v1`` Job, or the Scale's ``spec.replicas``);
- ``all_pods_unschedulable`` (EDL's pending rule) when the target has pods and
  every one of them is ``PodScheduled=False`` with reason ``Unschedulable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.accounting import pod_is_terminated, pod_is_unschedulable, replica_resources
from scheduler_core.models import ElasticJob, JobPhase, Resources
from workers.adapters.kubernetes.selectors import (
    NOTHING,
    Selector,
    from_label_selector,
    parse_selector,
)

JsonObject = Mapping[str, Any]
# The planner of ElasticJobs without GPUs that name no policy.
EDL = "edl"


@dataclass(frozen=True)
class ScaleTargetView:
    """What the adapter knows of a scale target, whatever its kind."""

    replicas: int
    selector: Selector
    # A PodTemplateSpec or PodSpec; None when only /scale is known.
    pod_template: JsonObject | None
    phase: JobPhase = JobPhase.RUNNING


@dataclass(frozen=True)
class ScaleTargetRef:
    api_version: str
    kind: str
    name: str


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def scale_target_ref(elastic_job: JsonObject) -> ScaleTargetRef:
    ref = _mapping(_mapping(elastic_job.get("spec")).get("scaleTargetRef"))
    return ScaleTargetRef(
        api_version=str(ref.get("apiVersion") or ""),
        kind=str(ref.get("kind") or ""),
        name=str(ref.get("name") or ""),
    )


def namespace_and_name(obj: JsonObject) -> tuple[str, str]:
    meta = _mapping(obj.get("metadata"))
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _batch_job_phase(job: JsonObject) -> JobPhase:
    for condition in _mapping(job.get("status")).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return JobPhase.SUCCEEDED
        if condition.get("type") == "Failed":
            return JobPhase.FAILED
    return JobPhase.RUNNING


def view_of_workload(workload: JsonObject, *, batch_job: bool = False) -> ScaleTargetView:
    """A Deployment, StatefulSet, ReplicaSet or (``batch_job``) batch/v1 Job.

    The caller says which: items of a LIST carry no ``kind``.
    """
    spec = _mapping(workload.get("spec"))
    if batch_job:
        # Kubernetes: a Job's parallelism defaults to 1.
        replicas = spec.get("parallelism")
        phase = _batch_job_phase(workload)
    else:
        # Kubernetes: spec.replicas defaults to 1.
        replicas = spec.get("replicas")
        phase = JobPhase.RUNNING
    return ScaleTargetView(
        replicas=1 if replicas is None else int(replicas),
        selector=from_label_selector(spec.get("selector")),
        pod_template=_mapping(spec.get("template")) or None,
        phase=phase,
    )


def view_of_scale(scale: JsonObject) -> ScaleTargetView:
    """An ``autoscaling/v1`` Scale (any kind with a /scale subresource)."""
    selector_text = _mapping(scale.get("status")).get("selector")
    return ScaleTargetView(
        replicas=int(_mapping(scale.get("spec")).get("replicas") or 0),
        selector=parse_selector(selector_text) if selector_text is not None else NOTHING,
        pod_template=None,
    )


def pods_of(
    view: ScaleTargetView, namespace: str, *, pods: Sequence[JsonObject]
) -> list[JsonObject]:
    """The target's pods: same namespace, labels matching its selector."""
    found = []
    for pod in pods:
        meta = _mapping(pod.get("metadata"))
        if meta.get("namespace", "default") != namespace:
            continue
        if view.selector.matches(meta.get("labels")):
            found.append(pod)
    return found


@dataclass(frozen=True, eq=False)
class TargetPods:
    """What a job's conversion needs of its target's pods: how many, how many
    the scheduler found no node for, and the first one (in cache order), which
    stands in for the pod template of a target known only through /scale."""

    count: int = 0
    unschedulable: int = 0
    first: JsonObject | None = None
    placement: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, pods: Sequence[JsonObject]) -> TargetPods:
        return cls(
            count=len(pods),
            unschedulable=sum(1 for pod in pods if pod_is_unschedulable(pod)),
            first=pods[0] if pods else None,
            placement=placement_of(pods),
        )

    def same_as(self, other: TargetPods) -> bool:
        return (
            self.count == other.count
            and self.unschedulable == other.unschedulable
            and self.first is other.first
            and self.placement == other.placement
        )


def elastic_job(
    resource: JsonObject,
    target: ScaleTargetView,
    *,
    target_pods: Sequence[JsonObject],
    gpu_resource: str,
    default_policy: str = "edl",
) -> ElasticJob:
    """The core's view of one ElasticJob from its target's pods (see ``elastic_job_of``)."""
    return elastic_job_of(
        resource,
        target,
        pods=TargetPods.of(target_pods),
        gpu_resource=gpu_resource,
        default_policy=default_policy,
    )


def elastic_job_of(
    resource: JsonObject,
    target: ScaleTargetView,
    *,
    pods: TargetPods,
    gpu_resource: str,
    default_policy: str = "edl",
) -> ElasticJob:
    """The core's view of one ElasticJob (raises ``ValueError`` on an invalid spec).

    A spec without ``policy`` belongs to ``default_policy`` (the runtime's
    cluster policy) when its replicas hold GPUs; one without GPUs to ``edl``
    (goodput plans GPUs: it would never give a CPU-only job a replica).
    """
    namespace, name = namespace_and_name(resource)
    spec = _mapping(resource.get("spec"))
    template = target.pod_template
    if template is None and pods.first is not None:
        template = _mapping(pods.first.get("spec"))
    if template:
        requests, limits = replica_resources(template, gpu_resource=gpu_resource)
    else:
        requests = limits = Resources(gpu_resource=gpu_resource)
    pending = pods.count > 0 and pods.unschedulable == pods.count
    phase = target.phase
    if pending and phase == JobPhase.RUNNING:
        phase = JobPhase.PENDING
    return ElasticJob(
        namespace=namespace,
        name=name,
        min_replicas=int(spec.get("minReplicas", 1)),
        max_replicas=int(spec.get("maxReplicas", 1)),
        current_replicas=target.replicas,
        phase=phase,
        requests=requests,
        limits=limits,
        policy=str(spec.get("policy") or (default_policy if limits.gpu or requests.gpu else EDL)),
        default_parallelism=int(spec.get("defaultParallelism") or 1),
        all_pods_unschedulable=pending,
        paused=bool(spec.get("paused", False)),
        application=_optional_text(spec.get("application")),
        total_epochs=int(spec["epochs"]) if spec.get("epochs") is not None else None,
        placement=dict(pods.placement),
    )


def placement_of(pods: Sequence[JsonObject]) -> dict[str, int]:
    """The job's live pods per node (``spec.nodeName``): goodput predicts its grows from it."""
    out: dict[str, int] = {}
    for pod in pods:
        node = _mapping(pod.get("spec")).get("nodeName")
        deleting = _mapping(pod.get("metadata")).get("deletionTimestamp") is not None
        if isinstance(node, str) and node and not deleting and not pod_is_terminated(pod):
            out[node] = out.get(node, 0) + 1
    return out


def _optional_text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
