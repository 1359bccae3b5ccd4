"""What operators see: one view of jobs, epoch history, target checks, wrong task calls.

In-process against a real redis-server with the recording scaler and the
static cluster reader (``runtime_fixtures``); the Kubernetes case swaps in a
reader that lists given ElasticJobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from scheduler_core.models import ClusterResource, ElasticJob, TrainRequest
from tests.unit.runtime_fixtures import rt, server
from workers import handlers, tasks
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.api.views import job_detail, list_jobs
from workers.targets import NoTargetError, check_target
from workers.wiring import Runtime

__all__ = ["rt", "server"]  # fixtures used by name

pytestmark = pytest.mark.timeout(60)

REQUEST = {"model_type": "resnet", "dataset": "cifar10", "batch_size": 64, "epochs": 5}


class ListedJobs:
    """A cluster reader that lists the given ElasticJobs (the Kubernetes case)."""

    def __init__(self, jobs: Sequence[ElasticJob]) -> None:
        self.jobs = tuple(jobs)

    def inquire(self) -> ClusterResource:
        return ClusterResource()

    def elastic_jobs(self) -> Sequence[ElasticJob]:
        return self.jobs


def _on_kubernetes(rt: Runtime, jobs: Sequence[ElasticJob]) -> Runtime:
    kube = Runtime(rt.settings.model_copy(update={"scaler": "kubernetes"}), clock=rt.clock)
    kube.__dict__["cluster_reader"] = ListedJobs(jobs)  # the cached adapter, replaced
    return kube


def test_every_report_is_in_the_history_with_its_epoch_number(rt: Runtime) -> None:
    job = "default/m"
    for seconds in (30.0, 20.0, 15.0):  # as POST /job or a Celery producer without epoch
        handlers.accept_report(rt, {"job": job, "replicas": 2, "epoch_time_s": seconds})
    handlers.accept_report(rt, {"job": job, "replicas": 2, "epoch": 7, "epoch_time_s": 9.0})
    handlers.accept_report(rt, {"job": job, "replicas": 2, "epoch_time_s": 8.0})
    handlers.schedule_once(rt, send_scales=lambda _: None)
    history = [(r.epoch, r.epoch_time_s) for r in rt.store.metrics(job)]
    assert history == [(8, 8.0), (7, 9.0), (3, 15.0), (2, 20.0), (1, 30.0)]
    epochs = [e.epoch for e in job_detail(rt, job).recent_epochs]
    assert epochs == [8, 7, 3, 2, 1]


def test_jobs_lists_recorded_jobs_and_cluster_elastic_jobs_with_one_shape(rt: Runtime) -> None:
    StaticClusterReader(rt.redis, prefix=DEFAULT_KEY_PREFIX).store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=4000, memory_mega=1000),),
            jobs=(ElasticJob(name="added-by-kubectl", min_replicas=1, max_replicas=5,
                             current_replicas=2, policy="edl"),),
        )
    )  # fmt: skip
    submitted = handlers.accept_submission(
        rt, {**REQUEST, "function_name": "ncf-api", "ps_url": "http://ps"}, submission_id="s1"
    )
    views = {v.job: v for v in list_jobs(rt)}
    elastic = views["default/added-by-kubectl"]
    assert (elastic.name, elastic.kind, elastic.policy) == ("added-by-kubectl", "elasticjob", "edl")
    assert (elastic.min_replicas, elastic.max_replicas, elastic.replicas) == (1, 5, 2)
    assert elastic.fulfillment == 0.25 and elastic.state == "running"
    request = views[submitted]
    assert (request.name, request.kind, request.state) == ("ncf-api", "train-request", "waiting")
    assert request.waiting_for == "its first decision" and request.scalable

    handlers.finish_job(rt, submitted)
    handlers.accept_report(rt, {"job": "default/gone", "replicas": 1, "epoch_time_s": 3.0})
    handlers.finish_job(rt, "default/gone")  # known only from its reports
    views = {v.job: v for v in list_jobs(rt)}
    for key in (submitted, "default/gone"):
        assert views[key].state == "finished" and views[key].replicas is None


def test_a_request_without_ps_url_or_elastic_job_is_refused_with_the_reason(
    rt: Runtime,
) -> None:
    kube = _on_kubernetes(rt, [ElasticJob(name="exists")])
    request = TrainRequest.model_validate(REQUEST)
    with pytest.raises(NoTargetError) as refused:
        check_target(request, job="default/abc", scaler="kubernetes", reader=kube.cluster_reader)
    assert "no ps_url" in str(refused.value) and "no ElasticJob default/abc" in str(refused.value)
    check_target(request, job="default/exists", scaler="kubernetes", reader=kube.cluster_reader)
    with_ps = TrainRequest.model_validate({**REQUEST, "ps_url": "http://ps"})
    check_target(with_ps, job="default/abc", scaler="kubernetes", reader=kube.cluster_reader)
    with pytest.raises(NoTargetError):
        handlers.accept_submission(kube, REQUEST, submission_id="s2")
    assert kube.store.job_names() == []  # nothing recorded, nothing queued
    assert kube.queue.depths() == {name: 0 for name in kube.queue.depths()}


def test_a_recorded_job_without_a_target_shows_as_waiting_and_unscalable(rt: Runtime) -> None:
    job = handlers.accept_submission(rt, REQUEST, submission_id="s3")  # recording: accepted
    kube = _on_kubernetes(rt, [])
    (view,) = list_jobs(kube)
    assert view.job == job and view.state == "waiting" and not view.scalable
    assert view.waiting_for == f"its ElasticJob {job} (the request has no ps_url)"


def test_a_task_called_with_a_wrong_keyword_is_dead_lettered_saying_how_to_call_it(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "runtime", lambda: rt)
    answer = tasks.submit.run(request=REQUEST)
    assert answer["ok"] is False and answer["dead_lettered"] is True
    (letter,) = rt.dead_letters.list()
    assert letter.task == "trainscaler.submit"
    assert "unexpected keyword argument 'request'" in letter.error
    assert "call it as trainscaler.submit(payload)" in letter.error
    assert letter.payload == {"args": [], "kwargs": {"request": REQUEST}}
