"""The runtime's metrics, end to end: a real worker runs an autoscale round that
changes a job, and the collector the API's ``/metrics`` serves shows the round
and the scale; a report of that EDL-managed job then scales nothing."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from scheduler_core.models import ElasticJob, EpochReport, Resources
from tests.integration.conftest import PREFIX, wait_for
from workers.adapters.redis_queue import RedisSchedulerQueue
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.deadletters import DeadLetters
from workers.observability.metrics import MetricsRecorder, RuntimeCollector
from workers.wiring import SystemClock

pytestmark = pytest.mark.timeout(90)

JOB = "default/grow"


def _cluster() -> StaticCluster:
    job = ElasticJob(
        name="grow",
        min_replicas=1,
        max_replicas=3,
        current_replicas=1,
        requests=Resources(cpu_milli=1000, memory_mega=1000),
        limits=Resources(cpu_milli=1000, memory_mega=1000),
        policy="edl",
    )
    return StaticCluster(
        nodes=(StaticNode(name="n1", cpu_milli=4000, memory_mega=16000),), jobs=(job,)
    )


def _sample(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_an_autoscale_round_with_a_change_shows_in_the_metrics(
    procs, client_app, redis_client, store, recorder
) -> None:
    StaticClusterReader(redis_client, prefix=PREFIX).store(_cluster())
    procs.worker("w1")
    result = client_app.send_task("trainscaler.autoscale").get(timeout=30)
    assert result["ran"] is True and result["changes"] == 1
    wait_for(lambda: store.applied(JOB), timeout=30, what="the planned scale applied")
    assert recorder.all_replicas()[JOB] == 3
    [applied] = recorder.applied_log()
    assert applied["rule"] == store.decisions(JOB)[0].decision.reason.rule
    assert applied["policy"] == "edl"

    recorder_metrics = MetricsRecorder(redis_client, prefix=PREFIX)
    registry = CollectorRegistry()
    registry.register(
        RuntimeCollector(
            store=store,
            queue=RedisSchedulerQueue(redis_client, prefix=PREFIX),
            dead_letters=DeadLetters(redis_client, prefix=PREFIX, max_length=1000),
            recorder=recorder_metrics,
            clock=SystemClock(),
        )
    )
    # The scale's counter is written just after the applied target: wait for it.
    wait_for(
        lambda: _sample(registry, "trainscaler_scale_operations_total", {"result": "scaled"}),
        timeout=10,
        what="the scale counted",
    )
    assert _sample(registry, "trainscaler_autoscale_round_seconds_count", {}) >= 1
    assert (
        _sample(registry, "trainscaler_decisions_total", {"policy": "edl", "direction": "up"}) >= 1
    )

    # The EDL-managed job reports an epoch: kept, but throughput must not rescale it.
    report = EpochReport(job=JOB, replicas=3, epoch=0)
    assert client_app.send_task(
        "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
    ).get(timeout=20)["ok"]
    wait_for(lambda: store.last_report(JOB), timeout=20, what="the report kept")
    assert all(d.source == "autoscale" for d in store.decisions(JOB))
    assert recorder.all_replicas()[JOB] == 3 and len(recorder.applied_log()) == 1


def test_batches_count_each_outcome_once(redis_client) -> None:
    recorder = MetricsRecorder(redis_client, prefix="batch-counts:")
    recorder.record_scale("scaled")
    recorder.record_scales(["scaled", "unchanged", "scaled"])
    recorder.record_scales([])
    recorder.record_decision(policy="edl", direction="up")
    recorder.record_decisions([("edl", "up"), ("throughput", "down"), ("edl", "up")])
    counters = {
        tuple(json.loads(field)[1].values()): float(value)
        for field, value in redis_client.hgetall(recorder.counters_key).items()
    }
    assert counters == {
        ("scaled",): 3.0,
        ("unchanged",): 1.0,
        ("up", "edl"): 3.0,
        ("down", "throughput"): 1.0,
    }
