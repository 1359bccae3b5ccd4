"""Redis stops (SIGTERM) or crashes (SIGKILL) and restarts with append-only persistence.

Nothing queued is lost: the queue's items, entries and leases come back as
they were, the Celery messages come back (and the decisions waiting for a
scale, which beat's sweep sends again), every report is confirmed by the
reporter (``CeleryClient.report_confirmed`` re-sends a report whose answer
never came: Celery's transport pops a message before recording it as
unacked), and every job still ends at the replica count an in-order replay
of its reports gives: 0 reports lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.integration.conftest import PREFIX, wait_for
from tests.integration.test_runtime_load import make_reports, send_concurrently, wait_for_replay
from workers.adapters.redis_queue import TRAIN, WAIT, RedisSchedulerQueue
from workers.adapters.redis_server import EmbeddedRedis
from workers.celery_app import create_app
from workers.client import CeleryClient

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def aof_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path / "aof", append_only=True) as server:
        yield server


@pytest.fixture
def redis_url(aof_server: EmbeddedRedis) -> str:
    return aof_server.url


def _snapshot(queue: RedisSchedulerQueue) -> dict[str, object]:
    return {
        "items": {q: queue.items(q) for q in (TRAIN, WAIT)},
        "entries": {
            (q, item): [e.data for e in queue.pending_entries(q, item)]
            for q in (TRAIN, WAIT)
            for item in queue.items(q)
        },
        "in_flight": {q: s.in_flight for q, s in queue.stats(now=0.0).items()},
    }


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "sigterm"])
def test_redis_restart_with_aof_loses_no_report(
    aof_server, procs, settings, redis_client, recorder, store, dead_letters, kill: bool
) -> None:
    client_app = create_app(settings)
    # A probe queue under its own prefix (no worker serves it): exact before/after check.
    probe = RedisSchedulerQueue(redis_client, prefix="probe:", max_length=10_000)
    for n in range(300):
        probe.push_entry(
            TRAIN if n % 3 else WAIT, f"default/p{n % 40}", payload={"n": n}, now=float(n)
        )
    in_flight = [probe.pop_delivery(lease_seconds=3600, now=400.0) for _ in range(10)]
    assert all(in_flight)
    before = _snapshot(probe)

    procs.worker("w1", pool="prefork")
    procs.worker("w2", pool="prefork")
    procs.beat("b1")  # its lease sweep re-triggers schedule for work a crash interrupted
    reports = make_reports(100, 4, seed=3, prefix="aof")
    # The first scale batch stops (after applying) long enough for the crash to hit it.
    redis_client.set(f"{PREFIX}faults:pause:scale_applied", "3")
    # Every job's first report, all at once (one per job, so order cannot matter).
    sender = CeleryClient(settings, app=client_app)
    first_sent = {
        sender.send_report(job_reports[0]): job_reports[0] for job_reports in reports.values()
    }
    wait_for(
        lambda: redis_client.get(f"{PREFIX}faults:paused:scale_applied"),
        timeout=20,
        what="a scale batch in flight",
    )
    # The paused batch's decisions wait in the pending-scale index until applied
    # (a scale message is not recorded for redelivery: UNRECORDED_TASKS).
    pending = redis_client.zcard(f"{PREFIX}scales:pending")
    assert pending > 0, "the crash must find work in flight"

    # Mid-run: reports, schedule and scale work is queued and in flight right now.
    aof_server.restart(kill=kill)
    wait_for(lambda: _ping(redis_client), timeout=20, what="redis back")

    assert _snapshot(probe) == before
    for delivery in in_flight:
        assert delivery is not None and probe.ack_delivery(delivery)
    # The client's result subscription did not survive the crash: a fresh client app.
    # Every first report is accepted (results persist too) before its job's next one.
    client = CeleryClient(settings)
    resends = 0
    for task_id, report in first_sent.items():
        confirmed = client.report_confirmed(report, sent=task_id, timeout=15)
        assert confirmed.outcome["ok"]
        resends += confirmed.resends
    print(f"redis {'SIGKILL' if kill else 'SIGTERM'}: {len(first_sent)} reports in flight, "
          f"{resends} re-sent by the reporter, 0 lost")  # fmt: skip
    send_concurrently(client.app, {job: r[1:] for job, r in reports.items()})
    # 0 lost: every job's every report is decided, in order (the replay's exact target).
    wait_for_replay(recorder, store, reports, timeout=60)
    assert dead_letters.count() == 0
    client.close()


def _ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
