"""KubeML's SchedulerQueue on Redis: a train queue served before a wait queue.

Guarantees (each script of ``queue_scripts`` runs atomically inside Redis):

* At-least-once, nothing lost: ``pop`` moves an item to an in-flight set with a
  lease and a delivery token; ``ack`` with that token removes it; an item whose
  lease expired goes back to the *front* of its queue (``return_expired``, run
  at the start of every pop and by the periodic lease sweep).
* FIFO within a queue; the train queue is served before the wait queue.
* One pending item per job (``item_id``): a newer report for a job that is
  already queued is merged into that item instead of adding a second one. The
  item keeps every report in arrival order, each with a sequence number, so
  the policy still sees each epoch once and in order, and a redelivery can
  skip what was already applied (the consumer keeps the newest applied seq).
* At most one in-flight item per job: pop skips items whose job is in flight,
  so a job's reports are decided strictly in order even with many workers.
* Bounded: past ``max_length`` items per queue (or entries per item) a push
  raises ``QueueFullError`` instead of growing Redis without limit.
* Inspectable: depth, in-flight count and oldest-item age per queue.

Key layout (``P`` is the key prefix, carrying the hash tag of
``workers.adapters.redis_keys``; ``q`` is ``train`` or ``wait``). The key set is
fixed: every script takes all of it through ``KEYS`` (``RedisSchedulerQueue.keys``),
so it runs on Redis Cluster; per-item data lives in members, never in key names.

* ``P queue:q`` LIST of item ids, head first.
* ``P queue:q:pending`` ZSET of queued entries, all scored 0; each member is
  ``<item> NUL <seq, 20 digits> <entry JSON {"seq", "at", "data"}, and "reply": the key
  its sender waits on for the answer, when it waits>``, so one
  item's entries are a lex range, in seq order.
* ``P queue:q:inflight`` ZSET, the same, of the deliveries in progress.
* ``P queue:q:since`` HASH item -> time the pending item was first queued.
* ``P queue:leases`` ZSET ``q:<item>`` -> lease deadline.
* ``P queue:tokens`` HASH ``q:<item>`` -> token of the current delivery.
* ``P queue:leased_since`` HASH ``q:<item>`` -> first-queued time of the delivery.
* ``P queue:seq`` / ``P queue:token`` counters.

Item ids must not contain NUL.

A push may also set a wake-up flag key (``push_and_wake``): the first push
after a consumer cleared the flag learns it must wake one. ``ack_deliveries``
can push each entry's answer to its reply key in the same round trip.

Times are passed in from the injected clock, never read inside Redis.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import redis

from workers.adapters import queue_scripts
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_replies import text
from workers.adapters.script_pipeline import call_in, execute

TRAIN: Final = "train"
WAIT: Final = "wait"
QUEUES: Final = (TRAIN, WAIT)


class QueueFullError(Exception):
    """A push was refused because the queue (or the job's pending item) is at its bound."""


@dataclass(frozen=True)
class QueueEntry:
    seq: int
    at: float
    data: dict[str, Any]
    # Where the consumer answers this entry (a reply key the sender waits on), if anywhere.
    reply_to: str | None = None


@dataclass(frozen=True)
class Delivery:
    """One popped item: every entry queued for the job since its last delivery."""

    queue: str
    item_id: str
    token: str
    enqueued_at: float
    entries: tuple[QueueEntry, ...]


@dataclass(frozen=True)
class QueueStats:
    depth: int
    in_flight: int
    oldest_age_s: float | None


class RedisSchedulerQueue:
    """The SchedulerQueue (``scheduler_core.ports.QueueStore``) on one Redis database."""

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_KEY_PREFIX, max_length: int = 10_000
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._max_length = max_length
        self._push = client.register_script(queue_scripts.PUSH)
        self._pop = client.register_script(queue_scripts.POP)
        self._ack = client.register_script(queue_scripts.ACK)
        self._ack_if = client.register_script(queue_scripts.ACK_IF)
        self._nack = client.register_script(queue_scripts.NACK)
        self._sweep = client.register_script(queue_scripts.SWEEP)
        self._remove = client.register_script(queue_scripts.REMOVE)
        self.keys = self._script_keys()

    # --- QueueStore port -------------------------------------------------

    def depths(self) -> dict[str, int]:
        return {q: int(self._redis.llen(self._key(q))) for q in QUEUES}

    # --- the full interface ---------------------------------------------------

    def push_entry(
        self, queue: str, item_id: str, *, payload: Mapping[str, Any], now: float
    ) -> tuple[bool, int]:
        """Queue ``payload`` for ``item_id``; returns (merged into a pending item, seq)."""
        reply = self._push(
            keys=self.keys, args=self._push_args(queue, item_id, payload=payload, now=now)
        )
        return self.push_result(queue, item_id, reply=reply)

    def push_and_wake(
        self,
        queue: str,
        item_id: str,
        *,
        payload: Mapping[str, Any],
        now: float,
        wake_key: str,
        wake_ttl: float,
    ) -> tuple[bool, int, bool]:
        """``push_entry`` that also sets ``wake_key`` if absent (one round trip).

        Returns (merged, seq, woke): ``woke`` is true when this push set the
        flag, so the caller must wake a consumer; the consumer clears it.
        """
        args = [
            *self._push_args(queue, item_id, payload=payload, now=now),
            max(1, int(wake_ttl * 1000)),
        ]
        reply = self._push(keys=[*self.keys, wake_key], args=args)
        merged, seq = self.push_result(queue, item_id, reply=reply)
        return merged, seq, bool(int(reply[2]))

    def _push_args(
        self, queue: str, item_id: str, *, payload: Mapping[str, Any], now: float
    ) -> list[Any]:
        _check_queue(queue)
        _check_item(item_id)
        data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        return [queue, item_id, data, _num(now), self._max_length]

    @property
    def max_length(self) -> int:
        return self._max_length

    def push_result(self, queue: str, item_id: str, *, reply: Any) -> tuple[bool, int]:
        """(merged, seq) from a push's reply, or ``QueueFullError``."""
        status, seq = int(reply[0]), int(reply[1])
        if status == -1:
            raise QueueFullError(
                f"{queue} queue: job {item_id!r} already has {self._max_length} pending entries "
                "(TRAINSCALER_QUEUE_MAX_LENGTH)"
            )
        if status == -2:
            raise QueueFullError(
                f"{queue} queue is full: {self._max_length} items (TRAINSCALER_QUEUE_MAX_LENGTH)"
            )
        return status == 1, int(seq)

    def pop_delivery(
        self,
        *,
        lease_seconds: float,
        now: float,
        queues: tuple[str, ...] = QUEUES,
        scan: int = 1000,
    ) -> Delivery | None:
        """The next item (train queue first) whose job has nothing in flight, or None."""
        popped = self.pop_deliveries(lease_seconds=lease_seconds, now=now, queues=queues, scan=scan)
        return popped[0] if popped else None

    def pop_deliveries(
        self,
        *,
        lease_seconds: float,
        now: float,
        queues: tuple[str, ...] = QUEUES,
        count: int = 1,
        scan: int = 1000,
    ) -> list[Delivery]:
        """Up to ``count`` items in queue order (train first), each job at most once."""
        popped, _ = self.pop_deliveries_after(
            None, lease_seconds=lease_seconds, now=now, queues=queues, count=count, scan=scan
        )
        return popped

    def pop_deliveries_after(
        self,
        before: Callable[[Any], None] | None,
        *,
        lease_seconds: float,
        now: float,
        queues: tuple[str, ...] = QUEUES,
        count: int = 1,
        scan: int = 1000,
    ) -> tuple[list[Delivery], list[Any]]:
        """``pop_deliveries`` after the commands ``before`` queues on the same pipeline
        (one round trip); returns the deliveries and those commands' replies."""
        for queue in queues:
            _check_queue(queue)
        ordered = [q for q in QUEUES if q in queues]  # the train queue is always served first
        pipe = self._redis.pipeline(transaction=False)
        if before is not None:
            before(pipe)
        call_in(
            pipe,
            self._pop,
            keys=self.keys,
            args=[_num(now), _num(lease_seconds), scan, count, *ordered],
        )
        *replies, popped = execute(self._redis, pipe)
        raw = [text(x) for x in popped]
        deliveries = []
        index = 0
        while index < len(raw):
            queue, item, token, since, size = raw[index : index + 5]
            entries = raw[index + 5 : index + 5 + int(size)]
            index += 5 + int(size)
            deliveries.append(
                Delivery(
                    queue=queue,
                    item_id=item,
                    token=token,
                    enqueued_at=float(since),
                    entries=tuple(_entry(e) for e in entries),
                )
            )
        return deliveries, replies

    def ack_delivery(self, delivery: Delivery) -> bool:
        """Done with a delivery. False when its lease had expired and it was handed back."""
        return bool(
            self._ack(keys=self.keys, args=[delivery.queue, delivery.item_id, delivery.token])
        )

    def ack_deliveries(
        self,
        deliveries: list[Delivery],
        *,
        answers: Mapping[str, str] | None = None,
        answer_ttl: float = 60.0,
    ) -> list[bool]:
        """``ack_delivery`` for many, in one round trip, with their entries' answers.

        ``answers`` maps an entry's reply key to its answer: pushed there (the
        sender waits on the key) to expire after ``answer_ttl`` seconds, so an
        answer nobody waits for any more goes away by itself.
        """
        return self.ack_and_look(deliveries, answers=answers, answer_ttl=answer_ttl)[0]

    def ack_and_look(
        self,
        deliveries: list[Delivery],
        *,
        answers: Mapping[str, str] | None = None,
        answer_ttl: float = 60.0,
    ) -> tuple[list[bool], bool]:
        """``ack_deliveries``, and whether any of those jobs has a newer item queued
        (one a pop skipped while the job was in flight), in the same round trip."""
        answers = answers or {}
        pipe = self._redis.pipeline(transaction=False)
        for key, answer in answers.items():
            pipe.rpush(key, answer)
            pipe.pexpire(key, wake_ttl_ms(answer_ttl))
        for d in deliveries:
            call_in(pipe, self._ack, keys=self.keys, args=[d.queue, d.item_id, d.token])
        for d in deliveries:  # the item's pending entries: a lex range (see the key layout)
            pipe.zlexcount(f"{self._key(d.queue)}:pending", *_item_range(d.item_id))
        replies = execute(self._redis, pipe)[2 * len(answers) :]
        acked = [bool(x) for x in replies[: len(deliveries)]]
        return acked, any(int(x) for x in replies[len(deliveries) :])

    def queue_ack_if(
        self,
        pipe: Any,
        delivery: Delivery,
        *,
        answer: str | None,
        answer_ttl: float,
        cursor: tuple[str, str] | None = None,
    ) -> None:
        """On ``pipe``: ack ``delivery`` and answer its waiting senders (only if
        ``cursor``, a key and its value, is given and the key holds it: its job's
        compare-and-set, queued before on the same pipeline, went through); then
        whether its job has a newer item queued. Two replies: acked (0/1), the
        newer item's entry count."""
        replies = [e.reply_to for e in delivery.entries if e.reply_to] if answer else []
        condition = [] if cursor is None else [cursor[0]]
        call_in(
            pipe,
            self._ack_if,
            keys=[*self.keys, *condition, *replies],
            args=[
                delivery.queue,
                delivery.item_id,
                delivery.token,
                "" if cursor is None else cursor[1],
                answer or "",
                wake_ttl_ms(answer_ttl),
                "0" if cursor is None else "1",
            ],
        )
        pipe.zlexcount(f"{self._key(delivery.queue)}:pending", *_item_range(delivery.item_id))

    def nack_delivery(self, delivery: Delivery) -> bool:
        """Put a delivery back at the front of its queue now (e.g. no capacity yet)."""
        return bool(
            self._nack(keys=self.keys, args=[delivery.queue, delivery.item_id, delivery.token])
        )

    def return_expired(self, *, now: float, limit: int = 1000) -> int:
        """Hand items whose lease expired back to the front of their queue."""
        return int(self._sweep(keys=self.keys, args=[_num(now), limit]))

    def remove(self, item_id: str) -> int:
        """Drop every queued and in-flight entry of a job (KubeML ``taskFinished``)."""
        _check_item(item_id)
        return int(self._remove(keys=self.keys, args=[item_id]))

    def stats(self, *, now: float) -> dict[str, QueueStats]:
        leases = [text(m) for m in self._redis.zrange(self._p("queue:leases"), 0, -1)]
        result = {}
        for q in QUEUES:
            head = self._redis.lindex(self._key(q), 0)
            oldest = None
            if head is not None:
                since = self._redis.hget(f"{self._key(q)}:since", text(head))
                oldest = max(0.0, now - float(text(since))) if since is not None else None
            result[q] = QueueStats(
                depth=int(self._redis.llen(self._key(q))),
                in_flight=sum(1 for m in leases if m.startswith(f"{q}:")),
                oldest_age_s=oldest,
            )
        return result

    def pending_entries(self, queue: str, item_id: str) -> list[QueueEntry]:
        """Entries queued (not in flight) for one item, oldest first."""
        _check_queue(queue)
        _check_item(item_id)
        raw = self._redis.zrangebylex(f"{self._key(queue)}:pending", *_item_range(item_id))
        # Each member is item, NUL, 20 digits of seq, then the entry (see the key layout).
        return [_entry(text(member)[len(item_id) + 21 :]) for member in raw]

    def items(self, queue: str) -> list[str]:
        return [text(x) for x in self._redis.lrange(self._key(queue), 0, -1)]

    def _script_keys(self) -> list[str]:
        """Every key of the queue, in the order ``queue_keys`` in the scripts reads them."""
        shared = [self._p(f"queue:{name}") for name in ("leases", "tokens", "leased_since")]
        counters = [self._p("queue:seq"), self._p("queue:token")]
        per_queue = []
        for q in (TRAIN, WAIT):
            base = self._key(q)
            per_queue += [base, f"{base}:pending", f"{base}:inflight", f"{base}:since"]
        return [*shared, *counters, *per_queue]

    def _key(self, queue: str) -> str:
        return self._p(f"queue:{queue}")

    def _p(self, suffix: str) -> str:
        return f"{self._prefix}{suffix}"


def _entry(raw: str | bytes) -> QueueEntry:
    value = json.loads(raw)
    reply = value.get("reply")
    return QueueEntry(
        seq=int(value["seq"]),
        at=float(value["at"]),
        data=value["data"],
        reply_to=reply if isinstance(reply, str) else None,
    )


def _item_range(item_id: str) -> tuple[str, str]:
    """One item's members of a pending/inflight ZSET, as a lex range."""
    return f"[{item_id}\x00", f"({item_id}\x01"


def wake_ttl_ms(seconds: float) -> int:
    """A TTL in whole milliseconds, at least one (``PX`` refuses 0)."""
    return max(1, int(seconds * 1000))


def _check_item(item_id: str) -> None:
    # NUL ends the item's part of an entry's member (the lex range of its entries).
    if "\x00" in item_id:
        raise ValueError(f"queue item ids must not contain NUL: {item_id!r}")


def _check_queue(queue: str) -> None:
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; known: {', '.join(QUEUES)}")


def _num(value: float) -> str:
    # repr of a float is valid JSON and exact; Lua's tonumber reads it back.
    return repr(float(value))
