"""Beat survives Redis going away and coming back (workers/adapters/beat_scheduler.py).

A real ``celery beat`` with the project's scheduler, a real ``redis-server``
that is SIGKILLed and restarted empty on the same port after the single-beat
lock (5 s here) has expired. Stock RedBeat dies on the first tick of the
outage (its lock renewal is not retried) and takes the periodic autoscale
with it; this scheduler waits the outage out, takes its lock again and goes
on sending the schedule.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.integration.conftest import PREFIX, Procs, wait_for
from workers.adapters.redis_server import EmbeddedRedis

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path / "beat-redis") as server:
        yield server


@pytest.fixture
def redis_url(own_server: EmbeddedRedis) -> str:
    return own_server.url


def test_beat_keeps_sending_after_redis_is_lost_and_comes_back_empty(
    own_server: EmbeddedRedis, procs: Procs
) -> None:
    beat = procs.beat("beat")
    sent = "Sending due task autoscale"
    wait_for(lambda: sent in beat.log_text(), timeout=60, what="beat sending the autoscale")
    own_server.stop(kill=True)  # a crash: the lock key and the schedule's state go with it
    wait_for(
        lambda: "Redis unreachable" in beat.log_text(), timeout=30, what="beat seeing the outage"
    )
    time.sleep(6)  # past the 5 s single-beat lock: it is gone when Redis comes back
    assert beat.alive(), beat.log_text()[-3000:]
    own_server.start()
    log_at_restart = len(beat.log_text())
    wait_for(
        lambda: sent in beat.log_text()[log_at_restart:],
        timeout=60,
        what="beat sending the autoscale after the restart",
    )
    assert beat.alive(), beat.log_text()[-3000:]
    assert "lock expired during an outage; taken again" in beat.log_text()
    client = redis.Redis.from_url(own_server.url)
    try:
        assert client.exists(f"{PREFIX}redbeat::lock") == 1  # held again, by this beat
    finally:
        client.close()
