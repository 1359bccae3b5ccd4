"""Redis crashing (SIGKILL, append-only persistence) in the middle of a cluster round:
no report lost or counted twice.

A real Celery worker and beat, goodput as the cluster policy over a static
cluster. The first autoscale round stalls between deciding and committing and
Redis is killed under it; reports already accepted are sent again (as a
reporter without an answer does) and more follow. Every job's epochs and
iterations in goodput's books must equal the sums of what was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery.exceptions import TimeoutError as CeleryTimeoutError

from tests.integration.conftest import PREFIX, Procs, wait_for
from tests.integration.test_runtime_cluster_reports_kill import (
    GOODPUT_ENV,
    JOBS,
    _cluster,
    _paused,
    _send,
    _wait_counted,
)
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import StateStore
from workers.celery_app import create_app
from workers.settings import Settings

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def aof_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path / "aof", append_only=True) as server:
        yield server


@pytest.fixture
def redis_url(aof_server: EmbeddedRedis) -> str:
    return aof_server.url


def _ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _send_surely(settings: Settings, epoch: int) -> dict[str, int]:
    """``_send`` with a fresh client, resending a report whose answer a crash ate."""
    app = create_app(settings)
    try:
        for attempt in range(3):
            try:
                return _send(app, epoch)
            except CeleryTimeoutError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
    finally:
        app.close()


def test_redis_crash_mid_round_loses_and_double_counts_no_report(
    aof_server: EmbeddedRedis,
    procs: Procs,
    settings: Settings,
    redis_client: redis.Redis,
    store: StateStore,
) -> None:
    _cluster(redis_client)
    totals = {f"default/{name}": 0 for name in JOBS}
    procs.worker("w1", extra_env=GOODPUT_ENV)
    for epoch in (1, 2):
        for job, iterations in _send_surely(settings, epoch).items():
            totals[job] += iterations
    # The first round stalls between deciding and committing; Redis dies under it.
    redis_client.set(f"{PREFIX}faults:pause:autoscale", "3")
    procs.beat("beat", extra_env=GOODPUT_ENV)
    wait_for(lambda: _paused(redis_client), timeout=30, what="a paused autoscale round")
    aof_server.restart(kill=True)
    wait_for(lambda: _ping(redis_client), timeout=20, what="redis back")
    # Epochs 1-2 were accepted before the crash: resending them must change nothing.
    _send_surely(settings, 2)
    for epoch in (3, 4):
        for job, iterations in _send_surely(settings, epoch).items():
            totals[job] += iterations

    seen = _wait_counted(store, totals, epochs=4)
    assert seen == {job: (4, float(total)) for job, total in totals.items()}
