"""What reaches the replica scaler, and which reports the runtime decides on.

In process, against a real redis-server: the scaler gets the decision's rule,
policy and limit; a target already in force is confirmed through the scaler
(so a half-failed write is repaired) without being logged as applied again;
and reports of ElasticJobs the cluster policy (EDL) owns are kept, never
decided on by the per-job policy.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core.models import ElasticJob, EpochReport, Reason, Resources
from scheduler_core.ports import ScaleOutcome, ScaleRequest
from tests.unit.builders import scale_request
from tests.unit.runtime_fixtures import rt, server
from workers import handlers
from workers.adapters.recording_scaler import RecordingScaler
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.state_store import JobRecord
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.wiring import Runtime

__all__ = ["rt", "server"]  # fixtures used by name

pytestmark = pytest.mark.timeout(60)

PREFIX = DEFAULT_KEY_PREFIX


def _recording(rt: Runtime) -> RecordingScaler:
    return RecordingScaler(rt.redis, prefix=PREFIX, clock=rt.clock, faults=rt.faults)


def _command(job: str, target: int, generation: int, **numbers: Any) -> handlers.ScaleCommand:
    return handlers.ScaleCommand(
        job=job,
        target=target,
        generation=generation,
        reason=Reason(rule="edl.scale_up", message="room for more", numbers=numbers),
        source="autoscale",
        policy="edl",
    )


def _cluster(rt: Runtime, *, cpu_milli: int) -> None:
    job = ElasticJob(
        name="e",
        min_replicas=1,
        max_replicas=4,
        current_replicas=1,
        requests=Resources(cpu_milli=1000, memory_mega=100),
        limits=Resources(cpu_milli=1000, memory_mega=100),
        policy="edl",
    )
    StaticClusterReader(rt.redis, prefix=PREFIX).store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=cpu_milli, memory_mega=10_000),),
            jobs=(job,),
        )
    )


def test_the_recorded_scale_carries_the_rule_policy_and_limit(rt: Runtime) -> None:
    outcome = handlers.apply_scale(rt, _command("default/r", 3, 1, limited_by="cpu"))
    assert outcome == "scaled 0 -> 3"
    [entry] = _recording(rt).applied_log()
    assert (entry["rule"], entry["policy"], entry["limited_by"]) == ("edl.scale_up", "edl", "cpu")
    assert entry["replicas"] == 3


def test_a_target_in_force_is_confirmed_through_the_scaler_not_applied_again(
    rt: Runtime,
) -> None:
    recording = _recording(rt)
    recording.scale(scale_request("default/c", 2, reason="set up"))
    # A retry of a scale whose change went through but whose bookkeeping did not.
    outcome = handlers.apply_scale(rt, _command("default/c", 2, 1))
    assert outcome == "already at target"
    assert recording.confirmations() == {"default/c": 1}
    assert [e["reason"] for e in recording.applied_log()] == ["set up"]
    assert rt.store.applied("default/c") is not None


def test_an_already_at_target_retry_calls_the_scaler(rt: Runtime) -> None:
    calls: list[ScaleRequest] = []

    class Spy:
        def scale(self, request: ScaleRequest) -> ScaleOutcome:
            calls.append(request)
            return ScaleOutcome(job=request.job, before=2, after=request.replicas)

    rt.__dict__["scaler"] = Spy()  # the cached_property's slot
    assert handlers.apply_scale(rt, _command("default/s", 2, 1)) == "already at target"
    # One call, carrying the decision's reason, policy and generation.
    assert [(c.job, c.replicas, c.reason.rule, c.policy, c.generation) for c in calls] == [
        ("default/s", 2, "edl.scale_up", "edl", 1)
    ]


def test_a_report_of_an_edl_job_without_a_record_triggers_no_scale(rt: Runtime) -> None:
    _cluster(rt, cpu_milli=4000)
    planned: list[handlers.ScaleCommand] = []
    handlers.autoscale_once(rt, send_scale=planned.append, owner="test")
    assert [c.target for c in planned] == [4]  # EDL grows it into the free room
    generation = rt.store.generation("default/e")
    sent: list[handlers.ScaleCommand] = []
    # Throughput's first contact would answer with the report's replica count (1).
    for epoch, seconds in enumerate((None, 10.0)):
        handlers.accept_report(
            rt, EpochReport(job="default/e", replicas=1, epoch=epoch, epoch_time_s=seconds)
        )
        summary = handlers.schedule_once(rt, send_scales=sent.extend)
        assert summary.decisions == 0
    assert sent == []
    assert rt.store.generation("default/e") == generation
    assert all(d.source == "autoscale" for d in rt.store.decisions("default/e"))
    last = rt.store.last_report("default/e")
    assert last is not None and last.epoch == 1  # kept for GET /jobs/{id}


def test_a_planned_job_of_a_per_report_policy_is_still_decided_on_its_reports(
    rt: Runtime,
) -> None:
    # The planner sees every ElasticJob in scope, throughput's too (it counts them in
    # the snapshot); only its own policy's are its candidates. Their reports must not
    # all go to the cluster policy once a plan exists (they did: "in the plan" was
    # taken for "the cluster policy's").
    jobs = tuple(
        ElasticJob(
            name=name,
            min_replicas=1,
            max_replicas=4,
            current_replicas=1,
            requests=Resources(cpu_milli=1000, memory_mega=100),
            limits=Resources(cpu_milli=1000, memory_mega=100),
            policy=policy,
        )
        for name, policy in (("e", "edl"), ("t", "throughput"))
    )
    StaticClusterReader(rt.redis, prefix=PREFIX).store(
        StaticCluster(nodes=(StaticNode(name="n1", cpu_milli=8000, memory_mega=10_000),), jobs=jobs)
    )
    handlers.autoscale_once(rt, send_scale=lambda _: None, owner="test")
    plan = rt.store.latest_plan()
    assert plan is not None and plan.policies == {"default/e": "edl", "default/t": "throughput"}
    sent: list[handlers.ScaleCommand] = []
    for job in ("default/t", "default/e"):
        handlers.accept_report(rt, EpochReport(job=job, replicas=3, epoch=0))
    assert handlers.schedule_once(rt, send_scales=sent.extend).decisions == 1
    assert [(c.job, c.target, c.policy) for c in sent] == [("default/t", 3, "throughput")]
    assert rt.store.last_report("default/e") is not None  # kept for the cluster policy


def test_a_report_of_a_job_recorded_under_the_cluster_policy_triggers_no_scale(
    rt: Runtime,
) -> None:
    job = "default/k"
    rt.store.save_job(JobRecord(job=job, job_id="k", policy=rt.settings.cluster_policy))
    sent: list[handlers.ScaleCommand] = []
    handlers.accept_report(rt, EpochReport(job=job, replicas=3, epoch=0))
    assert handlers.schedule_once(rt, send_scales=sent.extend).decisions == 0
    assert sent == [] and rt.store.generation(job) == 0


def test_a_report_of_a_submitted_job_is_decided_by_its_policy(rt: Runtime) -> None:
    job = "default/t"
    rt.store.save_job(JobRecord(job=job, job_id="t", policy=rt.settings.job_policy))
    sent: list[handlers.ScaleCommand] = []
    handlers.accept_report(rt, EpochReport(job=job, replicas=3, epoch=0))
    assert handlers.schedule_once(rt, send_scales=sent.extend).decisions == 1
    assert [(c.job, c.policy) for c in sent] == [(job, rt.settings.job_policy)]


def test_autoscale_records_its_plan_and_round_time(rt: Runtime) -> None:
    _cluster(rt, cpu_milli=3000)
    handlers.autoscale_once(rt, send_scale=lambda _: None, owner="test")
    registry = rt.metrics.registry
    assert registry.get_sample_value("trainscaler_autoscale_round_seconds_count") == 1.0
    decided = {
        (sample.labels["policy"], sample.labels["direction"]): sample.value
        for family in registry.collect()
        if family.name == "trainscaler_decisions"
        for sample in family.samples
        if sample.name == "trainscaler_decisions_total"
    }
    assert decided == {("edl", "up"): 1.0}
