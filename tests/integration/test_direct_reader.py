"""The cache-free ``ClusterReader`` of event workers and the API, on the loopback server.

It answers from targeted paged LISTs (and one GET for a single job), agrees
with the planner's watch-cache reader on what matters outside the planner
(which jobs exist, their policy, bounds and replicas, per-replica requests),
and never opens a watch.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core.models import DEFAULT_GPU_RESOURCE, TrainRequest
from tests.integration.test_kube_adapter import (
    NS,
    adapter,
    create_elastic_job,
    create_workload,
    kube,
    outside_rbac,
    server,
)
from workers.adapters.kubernetes import KubeAdapter
from workers.adapters.kubernetes.client import KubeClient
from workers.adapters.kubernetes.direct import DirectClusterReader
from workers.adapters.kubernetes.rbac import EVENT_WORKER_PERMISSIONS
from workers.targets import NoTargetError, check_target

__all__ = ["adapter", "kube", "server"]  # fixtures


def _verbs(counts: dict[tuple[str, str], int]) -> set[str]:
    return {verb for verb, _ in counts}


def test_direct_reads_agree_with_the_cache_and_open_no_watch(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "dep", replicas=2)
    create_elastic_job(kube, "dep", max_replicas=5)
    create_workload(kube, "Job", "batch", replicas=3)
    create_elastic_job(kube, "batch", api_version="batch/v1", kind="Job", max_replicas=4)
    create_elastic_job(kube, "orphan")  # its Deployment does not exist: not a job yet
    direct = adapter.direct_reader()
    server.reset_request_counts()
    jobs = {job.key: job for job in direct.elastic_jobs()}
    counts = server.request_counts()
    assert set(jobs) == {f"{NS}/dep", f"{NS}/batch"}
    assert (jobs[f"{NS}/dep"].current_replicas, jobs[f"{NS}/dep"].max_replicas) == (2, 5)
    assert jobs[f"{NS}/batch"].current_replicas == 3
    assert jobs[f"{NS}/dep"].requests.cpu_milli == 1000
    assert jobs[f"{NS}/dep"].policy == "edl"
    # One LIST of ElasticJobs and one per target kind they name; nothing else.
    assert counts == {("list", "elasticjobs"): 1, ("list", "deployments"): 1, ("list", "jobs"): 1}
    assert outside_rbac(counts, EVENT_WORKER_PERMISSIONS) == set()  # the event worker's account
    server.reset_request_counts()
    assert direct.inquire().cpu_total_milli == 16_000
    assert _verbs(server.request_counts()) == {"list"}
    assert not adapter.has_cache()

    # The planner's reader sees the same jobs, replicas and requests.
    cached = {job.key: job for job in adapter.cluster_reader().elastic_jobs()}
    for key, job in jobs.items():
        assert (job.current_replicas, job.requests, job.policy) == (
            cached[key].current_replicas,
            cached[key].requests,
            cached[key].policy,
        )


def test_submit_checks_one_job_with_one_get(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "present", replicas=1)
    create_elastic_job(kube, "present")
    direct = adapter.direct_reader()
    request = TrainRequest(model_type="m", batch_size=1, epochs=1, dataset="d", namespace=NS)
    server.reset_request_counts()
    check_target(request, job=f"{NS}/present", scaler="kubernetes", reader=direct)
    with pytest.raises(NoTargetError, match=f"no ElasticJob {NS}/absent"):
        check_target(request, job=f"{NS}/absent", scaler="kubernetes", reader=direct)
    assert server.request_counts() == {("get", "elasticjobs"): 2}


def test_look_up_reads_each_named_job_once_and_hands_back_the_object(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "named", replicas=1)
    create_elastic_job(kube, "named")  # spec.policy: edl
    create_workload(kube, "Deployment", "unnamed", replicas=1)
    unnamed = create_elastic_job(kube, "unnamed")
    del unnamed["spec"]["policy"]
    path = f"/apis/trainscaler.io/v1alpha1/namespaces/{NS}/elasticjobs/unnamed"
    kube.request("PUT", path, body=unnamed)
    direct = adapter.direct_reader()
    direct.look_up([f"{NS}/named"])  # API discovery of the target kinds, once
    server.reset_request_counts()
    found = direct.look_up([f"{NS}/named", f"{NS}/absent"])
    # One GET per named job, no LIST; a job that does not exist is left out.
    assert server.request_counts() == {("get", "elasticjobs"): 2}
    assert outside_rbac(server.request_counts(), EVENT_WORKER_PERMISSIONS) == set()
    assert set(found) == {f"{NS}/named"}
    observed = found[f"{NS}/named"].observed
    assert found[f"{NS}/named"].policy == "edl" and observed is not None
    assert observed["metadata"]["name"] == "named" and "managedFields" not in observed["metadata"]
    assert observed["spec"]["scaleTargetRef"]["name"] == "named"
    # Without spec.policy the policy depends on the target's GPUs: its workload is read too,
    # and the answer is the listing reader's.
    server.reset_request_counts()
    found = direct.look_up([f"{NS}/unnamed"])
    counts = server.request_counts()
    assert counts == {("get", "elasticjobs"): 1, ("list", "deployments"): 1}
    assert outside_rbac(counts, EVENT_WORKER_PERMISSIONS) == set()  # the event worker's account
    listed = {job.key: job.policy for job in direct.elastic_jobs()}
    assert found[f"{NS}/unnamed"].policy == listed[f"{NS}/unnamed"]
    # Under EDL as the cluster policy a job without spec.policy is EDL's either way.
    edl = DirectClusterReader(kube, gpu_resource=DEFAULT_GPU_RESOURCE, default_policy="edl")
    server.reset_request_counts()
    assert edl.look_up([f"{NS}/unnamed"])[f"{NS}/unnamed"].policy == "edl"
    assert server.request_counts() == {("get", "elasticjobs"): 1}
