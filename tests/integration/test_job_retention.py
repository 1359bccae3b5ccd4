"""Finished jobs and all their keys leave Redis after the retention (issue 16, Deliver 3)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from scheduler_core.models import EpochReport
from tests.unit.runtime_fixtures import FixedClock, server
from workers import handlers
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import JobRecord
from workers.settings import Settings
from workers.wiring import Runtime

__all__ = ["server"]  # fixture used by name

pytestmark = pytest.mark.timeout(60)

RETENTION = 30.0


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(1000.0)


@pytest.fixture
def rt(server: EmbeddedRedis, clock: FixedClock) -> Iterator[Runtime]:
    runtime = Runtime(
        Settings(redis_url=server.url, scaler="recording", job_retention=RETENTION, discover=False),
        clock=clock,
    )
    runtime.redis.flushall()
    yield runtime
    runtime.redis.close()


def _report(job: str, epoch: int) -> dict[str, object]:
    return EpochReport(job=job, replicas=1, epoch=epoch, epoch_time_s=10.0).model_dump(mode="json")


def _run_job(rt: Runtime, job: str) -> None:
    rt.store.save_job(JobRecord(job=job, job_id=job.split("/")[1], policy="throughput"))
    for epoch in range(1, 4):
        handlers.accept_report(rt, _report(job, epoch))
        handlers.schedule_once(rt, send_scales=lambda commands: None)


def _keys_of(rt: Runtime, job: str) -> list[str]:
    return [k.decode() for k in rt.redis.scan_iter(match=f"{rt.store.key('job:')}{job}*")]


def test_a_finished_job_keeps_its_keys_for_the_retention_then_leaves(
    rt: Runtime, clock: FixedClock
) -> None:
    _run_job(rt, "team/done")
    _run_job(rt, "team/live")
    assert _keys_of(rt, "team/done"), "the job wrote no keys: nothing to check"
    handlers.finish_job(rt, "team/done")

    # Every key of the finished job carries the retention as its TTL; the live job's none.
    ttls = {key: rt.redis.pttl(key) for key in _keys_of(rt, "team/done")}
    assert all(0 < ttl <= RETENTION * 1000 for ttl in ttls.values()), ttls
    assert all(rt.redis.pttl(key) == -1 for key in _keys_of(rt, "team/live"))

    # A late report after the finish writes keys without a TTL: the purge takes them.
    handlers.accept_report(rt, _report("team/done", 4))
    clock.value += RETENTION - 1
    assert handlers.sweep_leases(rt)["purged"] == 0
    assert "team/done" in rt.store.job_names()

    clock.value += 2
    assert handlers.sweep_leases(rt)["purged"] == 1
    assert rt.store.job_names() == ["team/live"]
    assert _keys_of(rt, "team/done") == []
    assert rt.retention.finished_count() == 0
    assert _keys_of(rt, "team/live"), "the live job lost keys"


def test_the_ttl_alone_removes_the_keys_when_no_sweep_runs(server: EmbeddedRedis) -> None:
    runtime = Runtime(
        Settings(redis_url=server.url, scaler="recording", job_retention=0.3, discover=False),
        clock=FixedClock(),
    )
    runtime.redis.flushall()
    _run_job(runtime, "team/short")
    handlers.finish_job(runtime, "team/short")
    deadline = time.monotonic() + 10
    while _keys_of(runtime, "team/short"):
        assert time.monotonic() < deadline, _keys_of(runtime, "team/short")
        time.sleep(0.05)
    runtime.redis.close()


def test_a_purge_spares_a_job_finished_again_later(rt: Runtime, clock: FixedClock) -> None:
    _run_job(rt, "team/again")
    rt.retention.retire("team/again", at=clock.value)
    rt.retention.retire("team/again", at=clock.value + RETENTION)  # its newest finish counts
    clock.value += RETENTION + 1
    assert rt.retention.purge(now=clock.value) == 0
    assert "team/again" in rt.store.job_names()


def test_retention_must_be_positive() -> None:
    with pytest.raises(ValueError, match="job_retention"):
        Settings(job_retention=0, discover=False)
