"""``kill -9`` of a worker in the middle of a cluster round: no report lost or counted twice.

Real redis-server, two real Celery workers and a real beat (autoscale every
second), goodput as the cluster policy over a static cluster. The first
autoscale round pauses after deciding and before committing (fault
injection) and its worker is killed; reports keep arriving meanwhile. The
oracle is arithmetic over what was sent: every job's epochs and iterations in
goodput's books equal the sums of its reports, and the inbox drains.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from celery import Celery

from scheduler_core.models import ElasticJob, EpochReport, Resources
from scheduler_core.policies.goodput import GoodputState
from tests.integration.conftest import PREFIX, Procs, wait_for
from workers.adapters.state_store import StateStore
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode

pytestmark = pytest.mark.timeout(150)

GOODPUT_ENV = {"TRAINSCALER_CLUSTER_POLICY": "goodput", "TRAINSCALER_AUTOSCALE_LOCK_TTL": "3"}
JOBS = ("alpha", "beta", "gamma")
GPU = Resources(cpu_milli=1000, memory_mega=1000, gpu=1)


def _cluster(redis_client: redis.Redis) -> None:
    StaticClusterReader(redis_client, prefix=PREFIX).store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=64_000, memory_mega=640_000, gpu=8),),
            jobs=tuple(
                ElasticJob(
                    name=name,
                    min_replicas=1,
                    max_replicas=4,
                    current_replicas=1,
                    requests=GPU,
                    limits=GPU,
                    policy="goodput",
                    application=f"{name}/batch-64",
                    total_epochs=50,
                )
                for name in JOBS
            ),
        )
    )


def _send(client_app: Celery, epoch: int) -> dict[str, int]:
    """One epoch's report per job; returns the iterations sent per job."""
    sent = {}
    results = []
    for index, name in enumerate(JOBS):
        iterations = 100 + 7 * epoch + index
        report = EpochReport(
            job=f"default/{name}",
            replicas=1,
            epoch_time_s=20.0 + index,
            epoch=epoch,
            total_epochs=50,
            iterations=iterations,
            nodes=1,
            at=float(epoch),
        )
        results.append(
            client_app.send_task("trainscaler.report_epoch", args=[report.model_dump(mode="json")])
        )
        sent[f"default/{name}"] = iterations
    assert all(result.get(timeout=30)["ok"] for result in results)
    return sent


def _paused(redis_client: redis.Redis) -> dict[str, Any]:
    raw = redis_client.get(f"{PREFIX}faults:paused:autoscale")
    value: dict[str, Any] = json.loads(raw) if raw else {}
    return value


def _books(store: StateStore) -> GoodputState | None:
    raw = store.cluster_policy_state("goodput")
    return GoodputState.model_validate_json(raw) if raw else None


def _wait_counted(
    store: StateStore, totals: dict[str, int], *, epochs: int
) -> dict[str, tuple[int, float]]:
    """Each job's (epochs, iterations) in goodput's books once every job counts ``epochs``
    and the inbox is drained."""

    def counted() -> Any:  # the counts, or None while still waiting
        books = _books(store)
        if books is None or store.inbox_length("goodput"):
            return None
        seen = {job: (b.epochs_done, b.units_done) for job, b in books.jobs.items()}
        return seen if all(seen.get(job, (0, 0))[0] == epochs for job in totals) else None

    return wait_for(counted, timeout=60, what=f"all {epochs} epochs counted; books {_books(store)}")


def test_kill9_mid_round_loses_and_double_counts_no_report(
    procs: Procs, client_app: Celery, redis_client: redis.Redis, store: StateStore
) -> None:
    _cluster(redis_client)
    totals = {f"default/{name}": 0 for name in JOBS}
    # The first round to reach the point between deciding and committing stalls there.
    redis_client.set(f"{PREFIX}faults:pause:autoscale", "60")
    workers = {
        w.pid: w
        for w in (
            procs.worker("w1", extra_env=GOODPUT_ENV),
            procs.worker("w2", extra_env=GOODPUT_ENV),
        )
    }
    for epoch in (1, 2):
        for job, iterations in _send(client_app, epoch).items():
            totals[job] += iterations
    procs.beat("beat", extra_env=GOODPUT_ENV)
    marker = wait_for(lambda: _paused(redis_client), timeout=30, what="a paused autoscale round")
    # Mid-round: these reach the inbox after the stalled round read it.
    for epoch in (3, 4):
        for job, iterations in _send(client_app, epoch).items():
            totals[job] += iterations
    victim = workers.pop(marker["pid"])
    victim.kill9()
    survivor = next(iter(workers.values()))
    for epoch in (5, 6):
        for job, iterations in _send(client_app, epoch).items():
            totals[job] += iterations

    seen = _wait_counted(store, totals, epochs=6)
    assert seen == {job: (6, float(total)) for job, total in totals.items()}
    assert survivor.alive()
