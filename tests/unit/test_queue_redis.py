"""The SchedulerQueue's guarantees, against a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis

from scheduler_core.ports import QueueStore
from workers.adapters.redis_queue import (
    TRAIN,
    WAIT,
    Delivery,
    QueueFullError,
    RedisSchedulerQueue,
)
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.script_pipeline import execute

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path_factory.mktemp("redis")) as embedded:
        yield embedded


@pytest.fixture
def client(server: EmbeddedRedis) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(server.url)
    connection.flushall()
    yield connection
    connection.close()


@pytest.fixture
def queue(client: redis.Redis) -> RedisSchedulerQueue:
    return RedisSchedulerQueue(client, prefix="t:", max_length=5)


def test_fifo_and_train_before_wait(queue: RedisSchedulerQueue) -> None:
    queue.push_entry(WAIT, "w1", payload={"n": 1}, now=1.0)
    queue.push_entry(TRAIN, "a", payload={"n": 2}, now=2.0)
    queue.push_entry(TRAIN, "b", payload={"n": 3}, now=3.0)
    order = []
    while (delivery := queue.pop_delivery(lease_seconds=10, now=4.0)) is not None:
        order.append((delivery.queue, delivery.item_id))
        assert queue.ack_delivery(delivery)
    assert order == [(TRAIN, "a"), (TRAIN, "b"), (WAIT, "w1")]
    assert queue.depths() == {TRAIN: 0, WAIT: 0}


def test_newer_report_merges_into_the_pending_item(queue: RedisSchedulerQueue) -> None:
    assert queue.push_entry(TRAIN, "a", payload={"epoch": 1}, now=1.0)[0] is False
    assert queue.push_entry(TRAIN, "a", payload={"epoch": 2}, now=2.0)[0] is True
    assert queue.depths()[TRAIN] == 1
    delivery = queue.pop_delivery(lease_seconds=10, now=3.0)
    assert delivery is not None
    assert [e.data["epoch"] for e in delivery.entries] == [1, 2]
    assert delivery.entries[0].seq < delivery.entries[1].seq


def test_a_job_in_flight_is_skipped_and_its_new_report_waits(queue: RedisSchedulerQueue) -> None:
    queue.push_entry(TRAIN, "a", payload={"epoch": 1}, now=1.0)
    first = queue.pop_delivery(lease_seconds=10, now=1.0)
    assert first is not None
    queue.push_entry(TRAIN, "a", payload={"epoch": 2}, now=2.0)
    queue.push_entry(TRAIN, "b", payload={"epoch": 1}, now=2.0)
    second = queue.pop_delivery(lease_seconds=10, now=2.0)
    assert second is not None and second.item_id == "b"
    assert queue.pop_delivery(lease_seconds=10, now=2.0) is None
    assert queue.ack_delivery(first)
    third = queue.pop_delivery(lease_seconds=10, now=3.0)
    assert third is not None and third.item_id == "a"
    assert [e.data["epoch"] for e in third.entries] == [2]


def test_expired_lease_returns_to_the_front_merged_before_newer(
    queue: RedisSchedulerQueue,
) -> None:
    queue.push_entry(TRAIN, "a", payload={"epoch": 1}, now=1.0)
    queue.push_entry(TRAIN, "b", payload={"epoch": 1}, now=1.5)
    lost = queue.pop_delivery(lease_seconds=5, now=2.0)
    assert lost is not None and lost.item_id == "a"
    queue.push_entry(TRAIN, "a", payload={"epoch": 2}, now=3.0)
    assert queue.return_expired(now=6.0) == 0
    assert queue.return_expired(now=7.5) == 1
    assert queue.items(TRAIN) == ["a", "b"]
    again = queue.pop_delivery(lease_seconds=5, now=8.0)
    assert again is not None and again.item_id == "a"
    assert [e.data["epoch"] for e in again.entries] == [1, 2]
    assert again.enqueued_at == 1.0
    # The worker that lost its lease cannot ack the redelivered item away.
    assert not queue.ack_delivery(lost)
    assert queue.ack_delivery(again)


def test_pop_returns_expired_items_itself(queue: RedisSchedulerQueue) -> None:
    queue.push_entry(TRAIN, "a", payload={"epoch": 1}, now=1.0)
    assert queue.pop_delivery(lease_seconds=1, now=1.0) is not None
    assert queue.pop_delivery(lease_seconds=1, now=1.5) is None
    redelivered = queue.pop_delivery(lease_seconds=1, now=2.5)
    assert redelivered is not None and redelivered.item_id == "a"


def test_bounded_length(queue: RedisSchedulerQueue) -> None:
    for n in range(5):
        queue.push_entry(TRAIN, f"j{n}", payload={"n": n}, now=1.0)
    with pytest.raises(QueueFullError, match="train queue is full"):
        queue.push_entry(TRAIN, "j5", payload={"n": 5}, now=1.0)
    for n in range(4):
        queue.push_entry(TRAIN, "j0", payload={"n": n}, now=1.0)
    with pytest.raises(QueueFullError, match="pending entries"):
        queue.push_entry(TRAIN, "j0", payload={"n": 9}, now=1.0)


def test_stats_and_remove(queue: RedisSchedulerQueue) -> None:
    queue.push_entry(TRAIN, "a", payload={"n": 1}, now=10.0)
    queue.push_entry(TRAIN, "b", payload={"n": 1}, now=12.0)
    queue.push_entry(WAIT, "c", payload={"n": 1}, now=11.0)
    assert queue.pop_delivery(lease_seconds=10, now=13.0) is not None
    stats = queue.stats(now=20.0)
    assert stats[TRAIN].depth == 1 and stats[TRAIN].in_flight == 1
    assert stats[TRAIN].oldest_age_s == pytest.approx(8.0)
    assert stats[WAIT].oldest_age_s == pytest.approx(9.0)
    assert queue.remove("a") == 1
    assert queue.remove("b") == 1
    assert queue.stats(now=20.0)[TRAIN].depth == 0


def test_nack_puts_back_in_front(queue: RedisSchedulerQueue) -> None:
    queue.push_entry(WAIT, "a", payload={"n": 1}, now=1.0)
    queue.push_entry(WAIT, "b", payload={"n": 1}, now=2.0)
    first = queue.pop_delivery(lease_seconds=10, now=3.0)
    assert first is not None and queue.nack_delivery(first)
    assert queue.items(WAIT) == ["a", "b"]


def test_is_the_queue_store_port(queue: RedisSchedulerQueue) -> None:
    port: QueueStore = queue  # mypy checks the shape; the depths check behaviour
    queue.push_entry(WAIT, "x", payload={"n": 1}, now=0.0)
    assert port.depths() == {TRAIN: 0, WAIT: 1}


def _reads(client: redis.Redis) -> int:
    return int(client.info("stats")["total_reads_processed"])


def test_pop_and_ack_are_one_round_trip_each_and_survive_a_script_flush(
    client: redis.Redis, queue: RedisSchedulerQueue
) -> None:
    # One pop and ack first, so the server knows the scripts whichever test ran before
    # (run alone, the first pop also paid its NOSCRIPT reload: 3 round trips, not 1).
    queue.push_entry(TRAIN, "warm", payload={"n": 0}, now=0.0)
    queue.ack_and_look(queue.pop_deliveries(lease_seconds=10, now=0.5, count=1))
    queue.push_entry(TRAIN, "a", payload={"n": 1}, now=1.0)
    queue.push_entry(TRAIN, "b", payload={"n": 2}, now=2.0)
    before = _reads(client)
    popped, replies = queue.pop_deliveries_after(
        lambda pipe: pipe.get("t:other"), lease_seconds=10, now=3.0, count=1
    )
    # The commands queued before the pop ride in its round trip (no SCRIPT EXISTS first).
    assert _reads(client) - before - 1 == 1
    assert [d.item_id for d in popped] == ["a"] and replies == [None]
    before = _reads(client)
    acked, newer = queue.ack_and_look(popped, answers={"t:reply:x": "yes"})
    assert _reads(client) - before - 1 == 1
    assert acked == [True] and not newer and client.lrange("t:reply:x", 0, -1) == [b"yes"]
    # A restart or failover empties the script cache: the scripts are loaded again and
    # only their calls are sent again (the answer is pushed once).
    client.script_flush()
    popped = queue.pop_deliveries(lease_seconds=10, now=4.0, count=1)
    assert [d.item_id for d in popped] == ["b"]
    client.script_flush()
    acked, _ = queue.ack_and_look(popped, answers={"t:reply:y": "yes"})
    assert acked == [True] and client.lrange("t:reply:y", 0, -1) == [b"yes"]
    assert queue.depths() == {TRAIN: 0, WAIT: 0}


def _waited_on(delivery: Delivery, key: str) -> Delivery:
    """``delivery`` as if its sender waited on ``key`` (the API's reply key)."""
    entries = tuple(replace(e, reply_to=key) for e in delivery.entries)
    return replace(delivery, entries=entries)


def test_a_conditional_ack_goes_and_answers_only_if_the_key_holds_the_value(
    queue: RedisSchedulerQueue, client: redis.Redis
) -> None:
    queue.push_entry(TRAIN, "a", payload={"n": 1}, now=1.0)
    [popped] = queue.pop_deliveries(lease_seconds=10, now=2.0, count=1)
    delivery = _waited_on(popped, "t:reply:a")
    client.set("t:cursor:a", "old")  # what a compare-and-set that failed leaves

    def ack(expected: str) -> list[object]:
        pipe = client.pipeline(transaction=False)
        queue.queue_ack_if(
            pipe, delivery, answer="decided", answer_ttl=5.0, cursor=("t:cursor:a", expected)
        )
        return list(execute(client, pipe))

    queue.push_entry(TRAIN, "a", payload={"n": 2}, now=2.5)  # a newer report meanwhile
    assert ack("new") == [0, 1]  # not acked, not answered; the newer item is counted
    assert client.llen("t:reply:a") == 0 and queue.stats(now=3.0)[TRAIN].in_flight == 1
    client.set("t:cursor:a", "new")  # the compare-and-set went through
    assert ack("new") == [1, 1]
    assert client.lrange("t:reply:a", 0, -1) == [b"decided"]
    assert 0 < client.pttl("t:reply:a") <= 5000
    assert queue.stats(now=3.0)[TRAIN].in_flight == 0
    # Acked already, or its lease lost meanwhile (the token is gone): not again.
    assert ack("new") == [0, 1]
    assert client.llen("t:reply:a") == 1


def test_an_unconditional_ack_without_waiting_senders_answers_nobody(
    queue: RedisSchedulerQueue, client: redis.Redis
) -> None:
    queue.push_entry(TRAIN, "b", payload={"n": 1}, now=1.0)
    [popped] = queue.pop_deliveries(lease_seconds=10, now=2.0, count=1)
    pipe = client.pipeline(transaction=False)
    queue.queue_ack_if(pipe, popped, answer="decided", answer_ttl=5.0)
    assert list(execute(client, pipe)) == [1, 0]
    assert queue.depths() == {TRAIN: 0, WAIT: 0}
    assert queue.stats(now=3.0)[TRAIN].in_flight == 0
