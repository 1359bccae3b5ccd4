"""The metrics each process counts in memory, and the dashboard's queries over them.

Counters and histograms are per process (each pod is scraped on its own), so
the dashboard sums their rates across pods; the gauges the API reads from
Redis at scrape time are the same on every API replica, so they are never summed.
"""

from __future__ import annotations

import json
import re

import pytest
from flower.events import get_prometheus_metrics
from prometheus_client import REGISTRY, CollectorRegistry

from tests.integration.conftest import REPO
from tests.unit.runtime_fixtures import rt, server
from workers.observability.metrics import ApiMetrics, RuntimeMetrics
from workers.observability.runtime_gauges import RuntimeCollector
from workers.observability.worker_exposition import POOL_PROCESSES
from workers.wiring import Runtime

__all__ = ["rt", "server"]  # fixtures used by name

pytestmark = pytest.mark.timeout(60)

DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"


def _samples(registry: CollectorRegistry, family: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(sample.labels.values()): sample.value
        for metric in registry.collect()
        if metric.name == family
        for sample in metric.samples
        if sample.name == f"{family}_total"
    }


def test_batches_count_each_outcome_once() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    metrics.record_scale("scaled")
    metrics.record_scales(["scaled", "unchanged", "scaled"])
    metrics.record_scales([])
    metrics.record_decision(policy="edl", direction="up")
    metrics.record_decisions([("edl", "up"), ("throughput", "down"), ("edl", "up")])
    metrics.record_kube_request(verb="patch", code=409)
    metrics.record_autoscale_round(0.2)
    metrics.record_autoscale_round(float("nan"))  # not a duration: not observed
    assert _samples(registry, "trainscaler_scale_operations") == {
        ("scaled",): 3.0,
        ("unchanged",): 1.0,
    }
    assert _samples(registry, "trainscaler_decisions") == {
        ("edl", "up"): 3.0,
        ("throughput", "down"): 1.0,
    }
    assert _samples(registry, "trainscaler_kube_api_requests") == {("PATCH", "409"): 1.0}
    bucket = registry.get_sample_value("trainscaler_autoscale_round_seconds_bucket", {"le": "0.25"})
    assert bucket == 1.0
    assert registry.get_sample_value("trainscaler_autoscale_round_seconds_count") == 1.0


def _names(registry: CollectorRegistry) -> set[str]:
    """Every series name a scrape of ``registry`` can show (families with no sample too)."""
    names: set[str] = set()
    for metric in registry.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_count", "_sum"),
        }.get(metric.type, ("",))
        names.update(metric.name + suffix for suffix in suffixes)
    return names


def test_the_dashboard_sums_per_process_series_and_never_sums_scrape_time_gauges(
    rt: Runtime,
) -> None:
    per_process = CollectorRegistry()
    RuntimeMetrics(per_process)
    ApiMetrics(per_process)
    get_prometheus_metrics()  # Flower's metrics, on its (default) registry
    flower = {name for name in _names(REGISTRY) if name.startswith("flower_")}
    counted = _names(per_process) | flower | {POOL_PROCESSES}
    scrape_time = CollectorRegistry(auto_describe=False)
    scrape_time.register(
        RuntimeCollector(
            store=rt.store,
            queue=rt.queue,
            dead_letters=rt.dead_letters,
            clock=rt.clock,
            celery_broker=rt.redis,
        )
    )
    gauges = _names(scrape_time)

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queried = {
        name for expr in exprs for name in re.findall(r"\b(?:trainscaler|flower)_[a-z_]+", expr)
    }
    assert queried <= counted | gauges, queried - counted - gauges
    assert queried & flower, "Celery task metrics (Flower) are charted"
    for expr in exprs:
        names = set(re.findall(r"\b(?:trainscaler|flower)_[a-z_]+", expr))
        if names & counted:
            # Per process: summed across pods, quantiles over the summed buckets.
            assert re.match(r"^(sum\b|histogram_quantile\([0-9.]+, sum by \()", expr), expr
            assert "max by" not in expr and "avg" not in expr, expr
        if names & gauges:
            # The same value on every API replica: summing would count it once per replica.
            assert not expr.startswith("sum"), expr
        # No per-pod assumption: never grouped or filtered by the scraped target's labels.
        grouped = {
            label.strip()
            for clause in re.findall(r"\bby \(([^)]*)\)", expr)
            for label in clause.split(",")
        }
        per_pod = {"pod", "instance", "kubernetes_pod_name", "pod_name", "job", "hostname"}
        assert not grouped & per_pod, expr
        assert not re.search(r"\b(pod|instance|kubernetes_pod_name)=~?\"", expr), expr
