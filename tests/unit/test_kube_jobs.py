"""ElasticJob CR + target + pods -> scheduler_core ElasticJob: pure conversion."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core.models import JobPhase
from workers.adapters.kubernetes.jobs import (
    elastic_job,
    pods_of,
    scale_target_ref,
    view_of_scale,
    view_of_workload,
)

GPU = "nvidia.com/gpu"


def elastic_job_cr(**spec: Any) -> dict[str, Any]:
    base = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"},
        "minReplicas": 2,
        "maxReplicas": 6,
        "policy": "edl",
        "defaultParallelism": 3,
    }
    base.update(spec)
    return {
        "apiVersion": "trainscaler.io/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": "resnet", "namespace": "ml", "generation": 1},
        "spec": base,
    }


def pod_template(cpu: str = "2", memory: str = "4Gi", gpus: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "trainer"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory},
                        "limits": {"cpu": cpu, "memory": memory, GPU: str(gpus)},
                    },
                }
            ]
        },
    }


def deployment(replicas: int | None = 3) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "trainer"}},
        "template": pod_template(),
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": "trainer", "namespace": "ml"}, "spec": spec}


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    namespace: str = "ml",
    unschedulable: bool = False,
) -> dict[str, Any]:
    conditions = (
        [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        if unschedulable
        else [{"type": "PodScheduled", "status": "True"}]
    )
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "trainer"}},
        "spec": pod_template()["spec"],
        "status": {"phase": "Pending" if unschedulable else "Running", "conditions": conditions},
    }


def test_spec_fields_and_template_resources() -> None:
    view = view_of_workload(deployment(replicas=3))
    job = elastic_job(elastic_job_cr(), view, target_pods=[], gpu_resource=GPU)
    assert (job.namespace, job.name, job.key) == ("ml", "resnet", "ml/resnet")
    assert (job.min_replicas, job.max_replicas, job.current_replicas) == (2, 6, 3)
    assert job.policy == "edl" and job.default_parallelism == 3 and not job.paused
    # Kubernetes: an extended resource's request defaults to its limit.
    assert (job.requests.cpu_milli, job.requests.memory_mega, job.requests.gpu) == (2000, 4295, 1)
    assert job.limits.gpu == 1 and job.needs_gpu
    assert job.phase == JobPhase.RUNNING and not job.all_pods_unschedulable


def test_missing_replicas_default_to_one_as_kubernetes_does() -> None:
    assert view_of_workload(deployment(replicas=None)).replicas == 1


def test_paused_and_defaults() -> None:
    cr = elastic_job_cr(paused=True)
    del cr["spec"]["policy"], cr["spec"]["defaultParallelism"], cr["spec"]["minReplicas"]
    job = elastic_job(cr, view_of_workload(deployment()), target_pods=[], gpu_resource=GPU)
    assert job.paused
    assert (job.policy, job.default_parallelism, job.min_replicas) == ("edl", 1, 1)


def test_a_spec_without_policy_belongs_to_the_cluster_policy() -> None:
    cr = elastic_job_cr(application="resnet50/batch-256", epochs=90)
    del cr["spec"]["policy"]
    job = elastic_job(
        cr,
        view_of_workload(deployment()),
        target_pods=[],
        gpu_resource=GPU,
        default_policy="goodput",
    )
    assert (job.policy, job.application, job.total_epochs) == ("goodput", "resnet50/batch-256", 90)
    named = elastic_job(
        elastic_job_cr(policy="edl"),
        view_of_workload(deployment()),
        target_pods=[],
        gpu_resource=GPU,
        default_policy="goodput",
    )
    assert named.policy == "edl" and named.application is None and named.total_epochs is None


def test_a_cpu_only_spec_without_policy_stays_with_edl() -> None:
    cr = elastic_job_cr()
    del cr["spec"]["policy"]
    cpu_only = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "spec": {"replicas": 2, "template": pod_template(gpus=0)},
    }
    job = elastic_job(
        cr, view_of_workload(cpu_only), target_pods=[], gpu_resource=GPU, default_policy="goodput"
    )
    assert job.policy == "edl" and not job.needs_gpu


@pytest.mark.parametrize("epochs", [0, -3, "many"])
def test_an_invalid_epoch_count_is_rejected(epochs: Any) -> None:
    with pytest.raises(ValueError):
        elastic_job(
            elastic_job_cr(epochs=epochs),
            view_of_workload(deployment()),
            target_pods=[],
            gpu_resource=GPU,
        )


def test_min_above_max_is_rejected() -> None:
    with pytest.raises(ValueError, match="min_replicas"):
        elastic_job(
            elastic_job_cr(minReplicas=5, maxReplicas=2),
            view_of_workload(deployment()),
            target_pods=[],
            gpu_resource=GPU,
        )


def test_batch_job_uses_parallelism_and_completion() -> None:
    job: dict[str, Any] = {
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "parallelism": 4,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "template": pod_template(),
        },
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    view = view_of_workload(job, batch_job=True)
    assert view.replicas == 4 and view.phase == JobPhase.SUCCEEDED
    del job["spec"]["parallelism"], job["status"]
    view = view_of_workload(job, batch_job=True)
    assert view.replicas == 1 and view.phase == JobPhase.RUNNING


def test_pods_found_through_the_selector_in_the_same_namespace() -> None:
    view = view_of_workload(deployment())
    pods = [
        pod("a"),
        pod("b", labels={"app": "other"}),
        pod("c", namespace="elsewhere"),
        pod("d", labels={"app": "trainer", "extra": "x"}),
    ]
    assert [p["metadata"]["name"] for p in pods_of(view, "ml", pods=pods)] == ["a", "d"]


def test_all_pods_unschedulable_is_edls_pending_rule() -> None:
    view = view_of_workload(deployment())
    pending = [pod("a", unschedulable=True), pod("b", unschedulable=True)]
    job = elastic_job(elastic_job_cr(), view, target_pods=pending, gpu_resource=GPU)
    assert job.all_pods_unschedulable and job.phase == JobPhase.PENDING

    mixed = [pod("a", unschedulable=True), pod("b")]
    job = elastic_job(elastic_job_cr(), view, target_pods=mixed, gpu_resource=GPU)
    assert not job.all_pods_unschedulable and job.phase == JobPhase.RUNNING

    job = elastic_job(elastic_job_cr(), view, target_pods=[], gpu_resource=GPU)
    assert not job.all_pods_unschedulable, "no pods is not 'all pods unschedulable'"


def test_scale_subresource_target_takes_resources_from_a_pod() -> None:
    scale = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "trainer", "namespace": "ml", "resourceVersion": "7"},
        "spec": {"replicas": 5},
        "status": {"replicas": 5, "selector": "app=trainer,role in (worker)"},
    }
    view = view_of_scale(scale)
    assert view.replicas == 5 and view.pod_template is None
    worker = pod("w", labels={"app": "trainer", "role": "worker"})
    master = pod("m", labels={"app": "trainer", "role": "master"})
    found = pods_of(view, "ml", pods=[worker, master])
    assert found == [worker]
    job = elastic_job(elastic_job_cr(), view, target_pods=found, gpu_resource=GPU)
    assert job.current_replicas == 5 and job.requests.cpu_milli == 2000 and job.limits.gpu == 1


def test_scale_without_selector_matches_no_pods() -> None:
    view = view_of_scale({"spec": {"replicas": 2}, "status": {"replicas": 2}})
    assert pods_of(view, "ml", pods=[pod("a")]) == []
    job = elastic_job(elastic_job_cr(), view, target_pods=[], gpu_resource=GPU)
    assert job.requests.cpu_milli == 0 and job.current_replicas == 2


def test_other_gpu_resource_names() -> None:
    template = pod_template()
    limits = template["spec"]["containers"][0]["resources"]["limits"]
    limits["amd.com/gpu"] = limits.pop(GPU)
    workload = deployment()
    workload["spec"]["template"] = template
    view = view_of_workload(workload)
    job = elastic_job(elastic_job_cr(), view, target_pods=[], gpu_resource="amd.com/gpu")
    assert job.limits.gpu == 1 and job.limits.gpu_resource == "amd.com/gpu"


def test_scale_target_ref() -> None:
    ref = scale_target_ref(elastic_job_cr())
    assert (ref.api_version, ref.kind, ref.name) == ("apps/v1", "Deployment", "trainer")
    assert scale_target_ref({"spec": {}}).name == ""


def test_placement_counts_live_pods_per_node() -> None:
    def pod(node: str | None, *, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        spec = {"nodeName": node} if node else {}
        return {"metadata": meta, "spec": spec, "status": {"phase": phase}}

    pods = [
        pod("node-a"),
        pod("node-a"),
        pod("node-b"),
        pod(None, phase="Pending"),  # not scheduled yet: on no node
        pod("node-b", deleting=True),  # going away
        pod("node-c", phase="Succeeded"),  # terminated
    ]
    job = elastic_job(
        elastic_job_cr(), view_of_workload(deployment()), target_pods=pods, gpu_resource=GPU
    )
    assert job.placement == {"node-a": 2, "node-b": 1}
