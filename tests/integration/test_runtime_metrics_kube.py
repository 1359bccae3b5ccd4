"""No Redis write per Kubernetes request: a real worker scales ElasticJobs on the
loopback API server while a real redis-server counts every command it is sent.

The worker counts its Kubernetes requests in memory and shows them on its own
``/metrics``; Redis sees no counter increment at all (the Redis-backed metrics
did one ``HINCRBYFLOAT`` per request, decision and scale).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.models import EpochReport
from tests.integration.conftest import PREFIX, Procs, wait_for
from tests.integration.metrics_scrape import sample, scrape_until
from tests.integration.replay import replay_throughput
from tests.integration.test_kube_adapter import NS
from tests.integration.throughput_jobs import create_throughput_jobs, loopback_apiserver
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes.client import KubeClient
from workers.adapters.redis_server import free_port

pytestmark = pytest.mark.timeout(180)

JOBS = 3
# How Redis keeps a metric: adding to a hash field or a float (plain INCR numbers
# generations and epochs, which is state, not a metric).
INCREMENTS = ("hincrbyfloat", "hincrby", "incrbyfloat")


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[LoopbackApiServer, Path]]:
    with loopback_apiserver(tmp_path / "kubeconfig") as served:
        yield served


def _commands(redis_client: Any) -> dict[str, int]:
    """Calls per command since the server started (``INFO commandstats``; scripts' calls too)."""
    stats = redis_client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(fields["calls"]) for name, fields in stats.items()}


def test_scaling_counts_kubernetes_requests_in_memory_with_no_redis_write(
    apiserver, procs: Procs, client_app, redis_client, store
) -> None:
    server, kubeconfig = apiserver
    kube = KubeClient(server.api_client())
    names = create_throughput_jobs(kube, (f"trainer{i}" for i in range(JOBS)))
    port = free_port()
    procs.worker(
        "k",
        extra_env={
            "TRAINSCALER_SCALER": "kubernetes",
            "TRAINSCALER_KUBECONFIG": str(kubeconfig),
            "TRAINSCALER_KUBE_QPS": "1000",
            "TRAINSCALER_KUBE_BURST": "1000",
            "TRAINSCALER_WORKER_METRICS_PORT": str(port),
        },
    )
    url = f"http://127.0.0.1:{port}/metrics"
    before = _commands(redis_client)

    # Each job's first contact asks for 2 replicas: one scale per job.
    reports = {n: EpochReport(job=f"{NS}/{n}", replicas=2, epoch=0) for n in names}
    for report in reports.values():
        client_app.send_task("trainscaler.report_epoch", args=[report.model_dump(mode="json")])
    expected = {n: replay_throughput([r]) for n, r in reports.items()}
    assert set(expected.values()) == {2}

    def deployment(name: str) -> int:
        path = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"
        return int(kube.request("GET", path)["spec"]["replicas"])

    wait_for(
        lambda: all(deployment(n) == want for n, want in expected.items()),
        timeout=60,
        what=f"deployments at {expected}",
    )
    samples = scrape_until(
        url,
        lambda s: sample(s, "trainscaler_scale_operations_total", result="scaled") == JOBS,
        timeout=20,
        what="every scale counted",
    )
    after = _commands(redis_client)

    kube_requests = sum(
        value
        for (name, _), value in samples.items()
        if name == "trainscaler_kube_api_requests_total"
    )
    writes = sum(
        value
        for (name, labels), value in samples.items()
        if name == "trainscaler_kube_api_requests_total"
        and dict(labels)["verb"] in {"PUT", "PATCH", "POST"}
    )
    delta = {c: after.get(c, 0) - before.get(c, 0) for c in after}
    increments = {c: delta.get(c, 0) for c in INCREMENTS}
    print(
        f"{JOBS} scales: {kube_requests:.0f} Kubernetes requests ({writes:.0f} writes), "
        f"{sum(delta.values())} Redis commands (Celery's included), increments {increments}"
    )
    assert kube_requests >= 2 * JOBS  # at least a read and a write per scale
    assert writes >= JOBS
    assert sum(v for (n, _), v in samples.items() if n == "trainscaler_decisions_total") == JOBS
    # Not one counter kept in Redis: no increment command, no key of the old counters.
    assert increments == dict.fromkeys(INCREMENTS, 0)
    assert not redis_client.keys(f"{PREFIX}metrics:*")
