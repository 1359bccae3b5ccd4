"""Prometheus metrics of trainscaler, cluster-wide, on an explicit registry.

Workers are separate processes that serve no HTTP, so nothing here relies on
in-process counters for the runtime's numbers:

* Counters the runtime increments (scale operations, decisions, Kubernetes API
  requests) and the autoscale round histogram live in Redis, written by
  ``MetricsRecorder.record_*`` (one pipelined round trip each). Every process
  adds to the same hashes, so any API replica's ``/metrics`` shows the
  cluster-wide totals.
* Gauges (queue depths and oldest age, dead letters, per-job replicas and
  desired replicas) are computed at scrape time from Redis by
  ``RuntimeCollector``.
* The API's own request counter and latency histogram are ordinary in-process
  metrics (``ApiMetrics``): each API replica is scraped on its own.

Nothing registers on prometheus_client's global default registry: callers
build a ``CollectorRegistry`` and pass it in.

Key layout (``P`` is ``Settings.redis_key_prefix``):

* ``P metrics:counters`` HASH ``["<name>", {labels}]`` JSON -> float total.
* ``P metrics:hist:<name>`` HASH ``le:<bound>`` -> cumulative count, ``sum``, ``count``.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, Literal

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from scheduler_core.models import ScalingPlan
from scheduler_core.ports import Clock
from workers.adapters.redis_queue import RedisSchedulerQueue
from workers.adapters.state_store import AppliedTarget, DecisionRecord, JobRecord, StateStore
from workers.deadletters import DeadLetters

log = logging.getLogger(__name__)

NAMESPACE: Final = "trainscaler"

SCALE_OPERATIONS: Final = "scale_operations"
DECISIONS: Final = "decisions"
KUBE_API_REQUESTS: Final = "kube_api_requests"
AUTOSCALE_ROUND: Final = "autoscale_round_seconds"

# Seconds; an autoscale round reads the cluster cache and runs one policy.
AUTOSCALE_ROUND_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

ScaleResult = Literal[
    "scaled", "unchanged", "superseded", "transient_error", "permanent_error", "gave_up"
]


def scale_result(outcome: str) -> ScaleResult:
    """The result label of a successful ``handlers.apply_scale`` outcome text."""
    if outcome.startswith("scaled"):
        return "scaled"
    if outcome.startswith("superseded"):
        return "superseded"
    return "unchanged"  # "already at target", "already applied (generation N)"


# Celery's broker queues (workers.celery_app): the kombu Redis transport keeps
# each as a LIST named after the queue, without the trainscaler prefix.
CELERY_QUEUES: Final = ("control", "events", "cluster-writes")


def _field(name: str, labels: Mapping[str, str]) -> str:
    return json.dumps([name, dict(sorted(labels.items()))], separators=(",", ":"))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class MetricsRecorder:
    """Adds to the cluster-wide counters in Redis; never fails the caller.

    A metric is worth less than the work it describes: a Redis error while
    recording is logged and swallowed.
    """

    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix

    @property
    def counters_key(self) -> str:
        return f"{self._prefix}metrics:counters"

    def histogram_key(self, name: str) -> str:
        return f"{self._prefix}metrics:hist:{name}"

    def _increment_all(self, name: str, label_sets: Iterable[Mapping[str, str]]) -> None:
        """Add one to counter ``name`` per label set, all in one round trip."""
        counts = Tally(_field(name, labels) for labels in label_sets)
        if not counts:
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            for field, count in counts.items():
                pipe.hincrbyfloat(self.counters_key, field, count)
            pipe.execute()
        except redis.RedisError as error:
            log.warning("metric %s not recorded: %s", name, error)

    def record_scale(self, result: ScaleResult) -> None:
        """One ``scale`` outcome."""
        self.record_scales([result])

    def record_scales(self, results: Iterable[ScaleResult]) -> None:
        """The outcomes of one ``scale`` task's commands, in one round trip."""
        self._increment_all(SCALE_OPERATIONS, ({"result": result} for result in results))

    def record_decision(self, *, policy: str, direction: str) -> None:
        """One scaling decision (``direction`` is up, down or none)."""
        self.record_decisions([(policy, direction)])

    def record_decisions(self, decisions: Iterable[tuple[str, str]]) -> None:
        """Scaling decisions as (policy, direction) pairs, in one round trip."""
        self._increment_all(
            DECISIONS, ({"policy": policy, "direction": d} for policy, d in decisions)
        )

    def record_plan(self, plan: ScalingPlan) -> None:
        """Every decision of a plan, in one round trip."""
        self.record_decisions((plan.policy, decision.direction) for decision in plan.decisions)

    def record_kube_request(self, *, verb: str, code: int | str) -> None:
        """One Kubernetes API request (``code`` 0 or "error" when no answer came)."""
        self._increment_all(KUBE_API_REQUESTS, [{"verb": verb.upper(), "code": str(code)}])

    def record_autoscale_round(self, seconds: float) -> None:
        """How long one autoscale round took."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        key = self.histogram_key(AUTOSCALE_ROUND)
        try:
            pipe = self._redis.pipeline(transaction=True)
            for bound in AUTOSCALE_ROUND_BUCKETS:
                if seconds <= bound:
                    pipe.hincrby(key, f"le:{bound!r}", 1)
            pipe.hincrbyfloat(key, "sum", seconds)
            pipe.hincrby(key, "count", 1)
            pipe.execute()
        except redis.RedisError as error:
            log.warning("metric %s not recorded: %s", AUTOSCALE_ROUND, error)

    # --- reads (the collector) -------------------------------------------------

    def counters(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Every counter: name -> [(labels, total)]."""
        result: dict[str, list[tuple[dict[str, str], float]]] = {}
        for raw_field, raw_value in self._redis.hgetall(self.counters_key).items():
            try:
                name, labels = json.loads(_text(raw_field))
                value = float(_text(raw_value))
            except (ValueError, TypeError):
                continue  # a field someone else wrote: not ours to export
            result.setdefault(str(name), []).append(
                ({str(k): str(v) for k, v in dict(labels).items()}, value)
            )
        return result

    def histogram(
        self, name: str, bounds: Sequence[float]
    ) -> tuple[list[tuple[str, float]], float]:
        """Cumulative ``(le, count)`` buckets ending with ``+Inf``, and the sum."""
        raw = {_text(k): _text(v) for k, v in self._redis.hgetall(self.histogram_key(name)).items()}
        buckets = [(repr(b), float(raw.get(f"le:{b!r}", "0"))) for b in bounds]
        buckets.append(("+Inf", float(raw.get("count", "0"))))
        return buckets, float(raw.get("sum", "0"))


class RuntimeCollector(Collector):
    """Builds every runtime metric at scrape time from Redis."""

    def __init__(
        self,
        *,
        store: StateStore,
        queue: RedisSchedulerQueue,
        dead_letters: DeadLetters,
        recorder: MetricsRecorder,
        clock: Clock,
        celery_broker: redis.Redis | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._dead_letters = dead_letters
        self._recorder = recorder
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
        yield from self._counters()
        yield self._autoscale_histogram()
        yield from self._queues()
        dead = GaugeMetricFamily(f"{NAMESPACE}_dead_letters", "Dead-lettered payloads kept.")
        dead.add_metric([], float(self._dead_letters.count()))
        yield dead
        yield from self._jobs()

    def _counters(self) -> Iterator[Metric]:
        totals = self._recorder.counters()
        specs = (
            (SCALE_OPERATIONS, "Scale operations by result.", ("result",)),
            (DECISIONS, "Scaling decisions by policy and direction.", ("policy", "direction")),
            (
                KUBE_API_REQUESTS,
                "Kubernetes API requests by verb and status code.",
                ("verb", "code"),
            ),
        )
        for name, help_text, label_names in specs:
            family = CounterMetricFamily(f"{NAMESPACE}_{name}", help_text, labels=label_names)
            for labels, value in totals.get(name, []):
                family.add_metric([labels.get(n, "") for n in label_names], value)
            yield family

    def _autoscale_histogram(self) -> Metric:
        buckets, total = self._recorder.histogram(AUTOSCALE_ROUND, AUTOSCALE_ROUND_BUCKETS)
        family = HistogramMetricFamily(
            f"{NAMESPACE}_{AUTOSCALE_ROUND}", "Duration of one autoscale round.", labels=()
        )
        family.add_metric([], buckets, total)
        return family

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
            labels=("job",),
        )
        desired = GaugeMetricFamily(
            f"{NAMESPACE}_job_desired_replicas",
            "Replicas of the newest decision per job.",
            labels=("job",),
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

    def __init__(self, job: str, replicas: int | None, desired: int | None) -> None:
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
        result.append(JobGauge(job, applied, desired))
    return result


class ApiMetrics:
    """The API process's own request metrics, on the registry it is given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            f"{NAMESPACE}_api_requests",
            "HTTP requests served by the API by method, route and status.",
            labelnames=("method", "route", "status"),
            registry=registry,
        )
        self.latency = Histogram(
            f"{NAMESPACE}_api_request_seconds",
            "HTTP request latency by route.",
            labelnames=("route",),
            registry=registry,
        )

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method=method, route=route, status=str(status)).inc()
        self.latency.labels(route=route).observe(seconds)
