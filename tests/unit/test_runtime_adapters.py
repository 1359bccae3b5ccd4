"""Runtime adapters and handlers in-process, against a real redis-server."""

from __future__ import annotations

import json
from typing import cast

import pytest
import redis
from redis.lock import Lock

from scheduler_core.models import ElasticJob, EpochReport, Resources
from tests.unit.builders import scale_request
from tests.unit.runtime_fixtures import rt, server
from workers import handlers
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_queue import TRAIN, RedisSchedulerQueue
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import LOCK_RELEASE_RETRIES, JobRecord, StateStore
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.wiring import Runtime

__all__ = ["rt", "server"]  # fixtures used by name

pytestmark = pytest.mark.timeout(60)


def _job(name: str, *, current: int, cpu: int = 1000) -> ElasticJob:
    return ElasticJob(
        name=name,
        min_replicas=1,
        max_replicas=4,
        current_replicas=current,
        requests=Resources(cpu_milli=cpu, memory_mega=100),
        limits=Resources(cpu_milli=cpu, memory_mega=100),
    )


def test_static_cluster_overlays_recorded_replicas(rt: Runtime) -> None:
    reader = StaticClusterReader(rt.redis, prefix=DEFAULT_KEY_PREFIX)
    reader.store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=4000, memory_mega=1000),),
            jobs=(_job("a", current=1),),
        )
    )
    assert reader.inquire().cpu_request_milli == 1000
    rt.scaler.scale(scale_request("default/a", 3, reason="test"))
    assert [j.current_replicas for j in reader.elastic_jobs()] == [3]
    cluster = reader.inquire()
    assert cluster.cpu_request_milli == 3000
    assert cluster.nodes.nodes_cpu_idle_milli == {"n1": 1000}


def test_autoscale_stores_plan_free_room_and_sends_scales(rt: Runtime) -> None:
    StaticClusterReader(rt.redis, prefix=DEFAULT_KEY_PREFIX).store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=3000, memory_mega=10_000),),
            jobs=(_job("a", current=1), _job("b", current=1)),
        )
    )
    sent: list[handlers.ScaleCommand] = []
    result = handlers.autoscale_once(rt, send_scale=sent.append, owner="test")
    assert result["ran"] is True
    plan = rt.store.latest_plan()
    assert plan is not None
    assert sum(d.target for d in plan.plan.decisions) == 3  # 3000 milli-CPU, 1000 per replica
    assert {c.job for c in sent} == {d.job for d in plan.plan.changes}
    assert all(c.generation == rt.store.generation(c.job) for c in sent)
    free = rt.store.free_capacity()
    assert free is not None and free.cpu_milli == 0
    # Single flight: a held lock means the run is skipped.
    lock = rt.store.lock("autoscale", ttl=10)
    assert lock.acquire(blocking=False)
    try:
        assert handlers.autoscale_once(rt, send_scale=sent.append, owner="x")["ran"] is False
    finally:
        lock.release()
    assert rt.store.skipped_runs() == 1


def test_a_round_that_loses_redis_while_recording_still_releases_its_lock(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    StaticClusterReader(rt.redis, prefix=DEFAULT_KEY_PREFIX).store(
        StaticCluster(nodes=(StaticNode(name="n1", cpu_milli=3000, memory_mega=10_000),), jobs=())
    )

    def lost(_: object) -> None:
        raise redis.ConnectionError("primary gone (a failover)")

    with monkeypatch.context() as patched:
        patched.setattr(rt.store, "record_run", lost)
        with pytest.raises(redis.ConnectionError):
            handlers.autoscale_once(rt, send_scale=lambda _: None, owner="first")
    # Without the release the next round waits out autoscale_lock_ttl (120 s).
    assert handlers.autoscale_once(rt, send_scale=lambda _: None, owner="next")["ran"] is True


class FlakyRelease:
    """A real lock whose first ``failures`` releases lose the connection."""

    def __init__(self, lock: Lock, *, failures: int) -> None:
        self.lock = lock
        self.failures = failures

    def release(self) -> None:
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("Connection refused")
        self.lock.release()


def test_a_lock_release_lost_in_a_failover_is_retried_with_backoff(rt: Runtime) -> None:
    naps: list[float] = []
    store = StateStore(rt.redis, sleep=naps.append)
    lock = store.lock("autoscale", ttl=60)
    assert lock.acquire(blocking=False)
    store.release_lock(cast(Lock, FlakyRelease(lock, failures=3)))
    assert naps == [0.25, 0.5, 1.0]
    assert rt.redis.exists(store.key("lock:autoscale")) == 0
    # An expired (or taken-over) lock is not an error: there is nothing to release.
    store.release_lock(lock)


def test_a_lock_release_gives_up_after_its_retries(rt: Runtime) -> None:
    naps: list[float] = []
    store = StateStore(rt.redis, sleep=naps.append)
    lock = store.lock("autoscale", ttl=60)
    assert lock.acquire(blocking=False)
    with pytest.raises(redis.ConnectionError):
        store.release_lock(cast(Lock, FlakyRelease(lock, failures=LOCK_RELEASE_RETRIES + 1)))
    assert len(naps) == LOCK_RELEASE_RETRIES
    assert max(naps) == 2.0 and 20 < sum(naps) < 40  # about half a minute, capped steps


def test_schedule_clamps_growth_to_the_room_the_plan_leaves(rt: Runtime) -> None:
    StaticClusterReader(rt.redis, prefix=DEFAULT_KEY_PREFIX).store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=3000, memory_mega=10_000),),
            jobs=(_job("a", current=1, cpu=1000), _job("idle", current=1, cpu=1)),
        )
    )
    handlers.autoscale_once(rt, send_scale=lambda _: None, owner="test")
    free = rt.store.free_capacity()
    assert free is not None
    sent: list[handlers.ScaleCommand] = []
    # A submitted job (its record names the job policy) the plan knows: throughput
    # wants +1 per report. Without the record, EDL would own it and nothing be decided.
    rt.store.save_job(JobRecord(job="default/a", job_id="a", policy=rt.settings.job_policy))
    for epoch, seconds in enumerate((None, 10.0, 9.0, 8.0)):
        handlers.accept_report(
            rt, EpochReport(job="default/a", replicas=1 + epoch, epoch=epoch, epoch_time_s=seconds)
        )
        handlers.schedule_once(rt, send_scales=sent.extend)
    history = rt.store.decisions("default/a")
    clamped = [d.decision for d in history if d.decision.reason.rule.endswith("+capacity")]
    assert clamped, [d.decision.reason.rule for d in history]
    assert "leaves room for 0 more" in clamped[0].reason.message
    unclamped = clamped[0].reason.numbers["unclamped_target"]
    assert isinstance(unclamped, int) and unclamped > clamped[0].target == 1
    # Held back by the clamp, the job never went past the one replica it started with.
    assert [c.target for c in sent] == [1]


def test_pop_many_takes_each_job_once_in_order(rt: Runtime) -> None:
    queue = RedisSchedulerQueue(rt.redis, prefix="q:")
    for job in ("a", "b", "c"):
        queue.push_entry(TRAIN, job, payload={"job": job}, now=1.0)
    first = queue.pop_delivery(lease_seconds=10, now=2.0)
    assert first is not None and first.item_id == "a"
    queue.push_entry(TRAIN, "a", payload={"job": "a", "n": 2}, now=3.0)
    chunk = queue.pop_deliveries(lease_seconds=10, now=4.0, count=10)
    assert [d.item_id for d in chunk] == ["b", "c"]
    assert queue.ack_deliveries([first, *chunk]) == [True, True, True]
    rest = queue.pop_deliveries(lease_seconds=10, now=5.0, count=10)
    assert [d.item_id for d in rest] == ["a"]


def test_a_redelivered_report_is_decided_once(rt: Runtime) -> None:
    from tests.integration.replay import replay_throughput

    reports = [
        EpochReport(job="default/d", replicas=2, epoch=0),
        EpochReport(job="default/d", replicas=2, epoch=1, epoch_time_s=10.0),
        EpochReport(job="default/d", replicas=3, epoch=2, epoch_time_s=12.5),
    ]
    # Epoch 1 twice in one batch; epoch 2 again after it was decided. Applied twice,
    # the repeat of epoch 2 would scale up (12.5 s is within 1.05 x its own time).
    for report in (reports[0], reports[1], reports[1]):
        handlers.accept_report(rt, report.model_dump(mode="json"))
    handlers.schedule_once(rt, send_scales=lambda _: None)
    for report in (reports[2], reports[2]):
        handlers.accept_report(rt, report.model_dump(mode="json"))
        handlers.schedule_once(rt, send_scales=lambda _: None)
    assert replay_throughput(reports) == 2
    assert replay_throughput([*reports, reports[2]]) == 4
    assert rt.store.cursor("default/d").last_target == 2
    assert rt.store.cursor("default/d").last_epoch == 2


def test_dead_letters_cli_lists_and_purges(
    rt: Runtime, server: EmbeddedRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer
    from typer.testing import CliRunner

    from workers.commands import deadletters
    from workers.settings import get_settings

    rt.dead_letters.add(
        task="trainscaler.submit", payload={"x": 1}, error="epochs: missing", at=1.0
    )
    monkeypatch.setenv("TRAINSCALER_REDIS_URL", server.url)
    get_settings.cache_clear()
    try:
        app = typer.Typer()
        deadletters.register(app)
        runner = CliRunner()
        listed = runner.invoke(app, ["dead-letters", "list", "--json"])
        assert listed.exit_code == 0, listed.output
        assert json.loads(listed.output.splitlines()[0])["error"] == "epochs: missing"
        purged = runner.invoke(app, ["dead-letters", "purge", "--yes"])
        assert purged.exit_code == 0 and "purged 1" in purged.output
        assert rt.dead_letters.count() == 0
    finally:
        get_settings.cache_clear()
