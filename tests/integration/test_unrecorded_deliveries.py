"""Which deliveries kombu records for redelivery, on a real redis-server with the
product's Celery app (``UNRECORDED_TASKS``, ``workers/guarded_transport.py``).

A ``schedule`` message is a trigger: it costs its delivery alone, no unacked
record and no removal at the ack. Every other task's message keeps kombu's ack
emulation, so a worker that dies with it leaves it to be redelivered.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from kombu import Connection, Exchange, Queue  # type: ignore[attr-defined]

from workers.celery_app import EVENTS
from workers.guarded_transport import SelectiveQoS

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker(client_app: Celery, redis_client: redis.Redis) -> Iterator[Connection]:
    with client_app.connection_for_read() as connection:
        yield connection


def _events(connection: Connection) -> Queue:
    queue = Queue(EVENTS, Exchange(EVENTS, type="direct"), routing_key=EVENTS)
    return queue(connection.default_channel)


def _reads(client: redis.Redis) -> int:
    return int(client.info("stats")["total_reads_processed"])


def test_a_schedule_delivery_is_not_recorded_and_costs_no_round_trip_to_ack(
    client_app: Celery, broker: Connection, redis_client: redis.Redis
) -> None:
    client_app.send_task("trainscaler.schedule")
    client_app.send_task("trainscaler.report_epoch", args=[{"job": "default/a"}])
    events = _events(broker)
    unacked: str = broker.default_channel.unacked_key  # type: ignore[attr-defined]

    trigger = events.get(no_ack=False)
    assert trigger is not None and trigger.headers["task"] == "trainscaler.schedule"
    assert redis_client.hlen(unacked) == 0
    report = events.get(no_ack=False)
    assert report is not None and report.headers["task"] == "trainscaler.report_epoch"
    assert redis_client.hkeys(unacked) == [report.delivery_tag.encode()]

    before = _reads(redis_client)
    trigger.ack()
    assert _reads(redis_client) - before - 1 == 0  # the ack stays in the process
    report.ack()
    assert redis_client.hlen(unacked) == 0 and redis_client.zcard(f"{unacked}_index") == 0


def test_a_schedule_rejected_with_requeue_goes_back_behind_the_others(
    client_app: Celery, broker: Connection
) -> None:
    client_app.send_task("trainscaler.schedule")
    client_app.send_task("trainscaler.report_epoch", args=[{"job": "default/a"}])
    events = _events(broker)

    trigger = events.get(no_ack=False)
    assert trigger is not None
    trigger.reject(requeue=True)
    report = events.get(no_ack=False)
    assert report is not None and report.headers["task"] == "trainscaler.report_epoch"
    report.ack()
    again = events.get(no_ack=False)
    assert again is not None and again.headers["task"] == "trainscaler.schedule"
    assert again.delivery_info["redelivered"] is True
    again.ack()
    assert events.get(no_ack=False) is None


def test_a_schedule_held_at_shutdown_is_put_back(
    client_app: Celery, redis_client: redis.Redis
) -> None:
    client_app.send_task("trainscaler.schedule")
    with client_app.connection_for_read() as connection:
        held = _events(connection).get(no_ack=False)
        assert held is not None and redis_client.llen(EVENTS) == 0
        # Closing the channel restores what it holds unacked (kombu's shutdown path).
        connection.default_channel.close()
    assert redis_client.llen(EVENTS) == 1
    with client_app.connection_for_read() as connection:
        again = _events(connection).get(no_ack=False)
        assert again is not None and again.headers["task"] == "trainscaler.schedule"
        again.ack()


def test_a_put_back_that_fails_at_shutdown_still_restores_the_recorded_messages(
    client_app: Celery, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(self: SelectiveQoS, message: object, *, served_next: bool) -> None:
        raise redis.ConnectionError("gone")  # as Redis going away mid-shutdown

    monkeypatch.setattr(SelectiveQoS, "_put_back", unreachable)
    client_app.send_task("trainscaler.schedule")
    client_app.send_task("trainscaler.report_epoch", args=[{"job": "default/a"}])
    with client_app.connection_for_read() as connection:
        events = _events(connection)
        assert events.get(no_ack=False) is not None
        assert events.get(no_ack=False) is not None
        connection.default_channel.close()
    # The trigger is lost (sweep_leases sends another); the report is back.
    [restored] = redis_client.lrange(EVENTS, 0, -1)
    assert b"trainscaler.report_epoch" in restored
