"""Gauges the API's ``/metrics`` computes from Redis at scrape time.

Queue depths and oldest age, dead letters, per-job replicas and desired
replicas describe the shared state, not one process: ``RuntimeCollector``
reads them from Redis when Prometheus scrapes an API replica, so nothing is
written to keep them. Every API replica reports the same values (the
dashboard takes ``max`` across replicas, never ``sum``). The per-job gauges
label the job ``job_key`` (``namespace/name``): ``job`` is the label Prometheus
gives every scraped target, and a metric's own ``job`` would be renamed
``exported_job``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler_core.ports import Clock
from workers.adapters.redis_queue import RedisSchedulerQueue
from workers.adapters.state_store import AppliedTarget, DecisionRecord, JobRecord, StateStore
from workers.deadletters import DeadLetters
from workers.observability.metrics import CELERY_QUEUES, NAMESPACE

log = logging.getLogger(__name__)


class RuntimeCollector(Collector):
    """Builds the state gauges at scrape time from Redis."""

    def __init__(
        self,
        *,
        store: StateStore,
        queue: RedisSchedulerQueue,
        dead_letters: DeadLetters,
        clock: Clock,
        celery_broker: redis.Redis | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._dead_letters = dead_letters
        self._clock = clock
        self._celery_broker = celery_broker

    def describe(self) -> Iterable[Metric]:
        # Described lazily: collecting here would touch Redis on registration.
        return ()

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            f"{NAMESPACE}_state_up", "1 when the runtime's state in Redis could be read."
        )
        try:
            metrics = list(self._collect_from_redis())
        except redis.RedisError as error:
            log.warning("metrics scrape could not read Redis: %s", error)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from metrics

    def _collect_from_redis(self) -> Iterator[Metric]:
        yield from self._queues()
        dead = GaugeMetricFamily(f"{NAMESPACE}_dead_letters", "Dead-lettered payloads kept.")
        dead.add_metric([], float(self._dead_letters.count()))
        yield dead
        yield from self._jobs()

    def _queues(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            f"{NAMESPACE}_queue_depth", "Items waiting per queue.", labels=("queue", "kind")
        )
        in_flight = GaugeMetricFamily(
            f"{NAMESPACE}_queue_in_flight", "Items leased to a worker per queue.", labels=("queue",)
        )
        oldest = GaugeMetricFamily(
            f"{NAMESPACE}_queue_oldest_age_seconds",
            "Age of the oldest waiting item per queue (0 when empty).",
            labels=("queue",),
        )
        for name, stats in self._queue.stats(now=self._clock.now()).items():
            depth.add_metric([name, "scheduler"], float(stats.depth))
            in_flight.add_metric([name], float(stats.in_flight))
            oldest.add_metric([name], float(stats.oldest_age_s or 0.0))
        if self._celery_broker is not None:
            for name in CELERY_QUEUES:
                depth.add_metric([name, "celery"], float(self._celery_broker.llen(name)))
        yield depth
        yield in_flight
        yield oldest

    def _jobs(self) -> Iterator[Metric]:
        replicas = GaugeMetricFamily(
            f"{NAMESPACE}_job_replicas",
            "Replicas of the newest applied scale per job.",
            labels=("job_key",),
        )
        desired = GaugeMetricFamily(
            f"{NAMESPACE}_job_desired_replicas",
            "Replicas of the newest decision per job.",
            labels=("job_key",),
        )
        for view in job_gauges(self._store):
            if view.replicas is not None:
                replicas.add_metric([view.job], float(view.replicas))
            if view.desired is not None:
                desired.add_metric([view.job], float(view.desired))
        yield replicas
        yield desired


class JobGauge:
    """One live job's applied and desired replicas (None when unknown)."""

    __slots__ = ("desired", "job", "replicas")

    def __init__(self, job: str, replicas: int | None, *, desired: int | None) -> None:
        self.job = job
        self.replicas = replicas
        self.desired = desired


def job_gauges(store: StateStore) -> list[JobGauge]:
    """Applied and desired replicas of every unfinished job, in one round trip."""
    names = store.job_names()
    if not names:
        return []
    pipe = store.redis.pipeline(transaction=False)
    for job in names:
        pipe.get(store.key(f"job:{job}"))
        pipe.get(store.job_key(job, "applied"))
        pipe.lindex(store.job_key(job, "decisions"), 0)
    raw = pipe.execute()
    result = []
    for index, job in enumerate(names):
        record_raw, applied_raw, decision_raw = raw[3 * index : 3 * index + 3]
        if record_raw and JobRecord.model_validate_json(record_raw).finished_at is not None:
            continue
        applied = AppliedTarget.model_validate_json(applied_raw).target if applied_raw else None
        desired = (
            DecisionRecord.model_validate_json(decision_raw).decision.target
            if decision_raw
            else None
        )
        result.append(JobGauge(job, applied, desired=desired))
    return result
