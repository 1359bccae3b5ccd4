"""The metrics each trainscaler process counts itself, with prometheus_client.

Every process counts what it does, in memory, and is scraped on its own; the
dashboard sums across pods (``sum by (...) (rate(...))``). Nothing here
touches Redis: a Kubernetes request, a decision or a scale costs no round trip.

* ``RuntimeMetrics``: what the runtime does (scale operations, decisions,
  Kubernetes API requests, autoscale rounds). Workers expose it per pod
  (``workers.observability.worker_exposition``; multiprocess mode for prefork
  children), the API on its own ``/metrics``.
* ``ApiMetrics``: the API process's request counter and latency histogram.

Metrics are built on the ``CollectorRegistry`` a caller passes in: the worker's
per-process ``Runtime`` uses prometheus_client's default registry (the one its
exposition serves), every other ``Runtime`` (the API's, tests') a private one.
In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before the process
starts) the values live in that directory's files whichever registry holds
them. Celery's task metrics come from Flower's ``/metrics``; the gauges read
from Redis at scrape time live in ``workers.observability.runtime_gauges``.
"""

from __future__ import annotations

import math
from collections import Counter as Tally
from collections.abc import Iterable
from typing import Final, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram

from scheduler_core.models import ScalingPlan

NAMESPACE: Final = "trainscaler"

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


class RuntimeMetrics:
    """The runtime's counters and histogram, in this process's memory."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.scale_operations = Counter(
            f"{NAMESPACE}_scale_operations",
            "Scale operations by result.",
            labelnames=("result",),
            registry=registry,
        )
        self.decisions = Counter(
            f"{NAMESPACE}_decisions",
            "Scaling decisions by policy and direction.",
            labelnames=("policy", "direction"),
            registry=registry,
        )
        self.kube_api_requests = Counter(
            f"{NAMESPACE}_kube_api_requests",
            "Kubernetes API requests by verb and status code.",
            labelnames=("verb", "code"),
            registry=registry,
        )
        self.autoscale_round = Histogram(
            f"{NAMESPACE}_autoscale_round_seconds",
            "Duration of one autoscale round.",
            buckets=AUTOSCALE_ROUND_BUCKETS,
            registry=registry,
        )

    def record_scale(self, result: ScaleResult) -> None:
        """One ``scale`` outcome."""
        self.scale_operations.labels(result=result).inc()

    def record_scales(self, results: Iterable[ScaleResult]) -> None:
        """The outcomes of one ``scale`` task's commands."""
        for result, count in Tally(results).items():
            self.scale_operations.labels(result=result).inc(count)

    def record_decision(self, *, policy: str, direction: str) -> None:
        """One scaling decision (``direction`` is up, down or none)."""
        self.decisions.labels(policy=policy, direction=direction).inc()

    def record_decisions(self, decisions: Iterable[tuple[str, str]]) -> None:
        """Scaling decisions as (policy, direction) pairs."""
        for (policy, direction), count in Tally(decisions).items():
            self.decisions.labels(policy=policy, direction=direction).inc(count)

    def record_plan(self, plan: ScalingPlan) -> None:
        """Every decision of a plan."""
        self.record_decisions((plan.policy, decision.direction) for decision in plan.decisions)

    def record_kube_request(self, *, verb: str, code: int | str) -> None:
        """One Kubernetes API request (``code`` "error" when no answer came)."""
        self.kube_api_requests.labels(verb=verb.upper(), code=str(code)).inc()

    def record_autoscale_round(self, seconds: float) -> None:
        """How long one autoscale round took."""
        if math.isfinite(seconds) and seconds >= 0:
            self.autoscale_round.observe(seconds)


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
