"""KubeML's SchedulerQueue on Redis: a train queue served before a wait queue.

Guarantees (each script below runs atomically inside Redis):

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

Key layout (``P`` is the key prefix, ``q`` is ``train`` or ``wait``):

* ``P queue:q`` LIST of item ids, head first.
* ``P queue:q:pending:<item>`` LIST of entries (JSON ``{"seq", "at", "data"}``).
* ``P queue:q:inflight:<item>`` LIST of entries of the delivery in progress.
* ``P queue:q:since`` HASH item -> time the pending item was first queued.
* ``P queue:leases`` ZSET ``q:<item>`` -> lease deadline.
* ``P queue:tokens`` HASH ``q:<item>`` -> token of the current delivery.
* ``P queue:leased_since`` HASH ``q:<item>`` -> first-queued time of the delivery.
* ``P queue:seq`` / ``P queue:token`` counters.

A push may also set a wake-up flag key (``push_and_wake``): the first push
after a consumer cleared the flag learns it must wake one.

Times are passed in from the injected clock, never read inside Redis.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import redis

TRAIN: Final = "train"
WAIT: Final = "wait"
QUEUES: Final = (TRAIN, WAIT)

_LUA_COMMON = r"""
local function return_member(p, member)
  local sep = string.find(member, ':', 1, true)
  local q = string.sub(member, 1, sep - 1)
  local item = string.sub(member, sep + 1)
  local qkey = p .. 'queue:' .. q
  local infl = qkey .. ':inflight:' .. item
  local pend = qkey .. ':pending:' .. item
  local since = redis.call('HGET', p .. 'queue:leased_since', member)
  if redis.call('EXISTS', pend) == 1 then
    -- A newer report arrived meanwhile: the older entries go before it.
    local old = redis.call('LRANGE', infl, 0, -1)
    for i = #old, 1, -1 do redis.call('LPUSH', pend, old[i]) end
    redis.call('DEL', infl)
    redis.call('LREM', qkey, 1, item)
  elseif redis.call('EXISTS', infl) == 1 then
    redis.call('RENAME', infl, pend)
  else
    since = false
  end
  if since then
    redis.call('LPUSH', qkey, item)
    redis.call('HSET', qkey .. ':since', item, since)
  end
  redis.call('ZREM', p .. 'queue:leases', member)
  redis.call('HDEL', p .. 'queue:tokens', member)
  redis.call('HDEL', p .. 'queue:leased_since', member)
end

local function return_expired(p, now, limit)
  local expired = redis.call('ZRANGEBYSCORE', p .. 'queue:leases', '-inf', now, 'LIMIT', 0, limit)
  for _, member in ipairs(expired) do return_member(p, member) end
  return #expired
end
"""

_PUSH = r"""
local p, q, item, data, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local maxlen = tonumber(ARGV[6])
local qkey = p .. 'queue:' .. q
local pend = qkey .. ':pending:' .. item
local exists = redis.call('EXISTS', pend) == 1
if exists then
  if redis.call('LLEN', pend) >= maxlen then return {-1, 0} end
elseif redis.call('LLEN', qkey) >= maxlen then
  return {-2, 0}
end
local seq = redis.call('INCR', p .. 'queue:seq')
redis.call('RPUSH', pend, '{"seq":' .. seq .. ',"at":' .. now .. ',"data":' .. data .. '}')
-- Optional wake-up flag: set if absent; 1 means this push must wake a consumer.
local woke = 0
if ARGV[7] and ARGV[7] ~= '' then
  if redis.call('SET', ARGV[7], '1', 'NX', 'PX', ARGV[8]) then woke = 1 end
end
if exists then return {1, seq, woke} end
redis.call('RPUSH', qkey, item)
redis.call('HSET', qkey .. ':since', item, now)
return {0, seq, woke}
"""

_POP = (
    _LUA_COMMON
    + r"""
local p, now, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local scan, count = tonumber(ARGV[4]), tonumber(ARGV[5])
local leases = p .. 'queue:leases'
return_expired(p, now, 1000)
local out = {}
local popped = 0
for i = 6, #ARGV do
  local q = ARGV[i]
  local qkey = p .. 'queue:' .. q
  -- From the head in small chunks; items of jobs in flight stay (and are skipped).
  local skipped, scanned = 0, 0
  while popped < count and scanned < scan do
    local items = redis.call('LRANGE', qkey, skipped, skipped + 15)
    if #items == 0 then break end
    for _, item in ipairs(items) do
      scanned = scanned + 1
      local member = q .. ':' .. item
      if redis.call('ZSCORE', leases, member) then
        skipped = skipped + 1
      else
        local infl = qkey .. ':inflight:' .. item
        redis.call('LREM', qkey, 1, item)
        redis.call('RENAME', qkey .. ':pending:' .. item, infl)
        local since = redis.call('HGET', qkey .. ':since', item)
        redis.call('HDEL', qkey .. ':since', item)
        local token = redis.call('INCR', p .. 'queue:token')
        redis.call('ZADD', leases, now + lease, member)
        redis.call('HSET', p .. 'queue:tokens', member, token)
        redis.call('HSET', p .. 'queue:leased_since', member, since)
        local entries = redis.call('LRANGE', infl, 0, -1)
        table.insert(out, q)
        table.insert(out, item)
        table.insert(out, tostring(token))
        table.insert(out, since)
        table.insert(out, tostring(#entries))
        for _, entry in ipairs(entries) do table.insert(out, entry) end
        popped = popped + 1
        if popped >= count then break end
      end
    end
  end
end
return out
"""
)

_ACK = r"""
local p, q, item, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local member = q .. ':' .. item
if redis.call('HGET', p .. 'queue:tokens', member) ~= token then return 0 end
redis.call('DEL', p .. 'queue:' .. q .. ':inflight:' .. item)
redis.call('ZREM', p .. 'queue:leases', member)
redis.call('HDEL', p .. 'queue:tokens', member)
redis.call('HDEL', p .. 'queue:leased_since', member)
return 1
"""

_NACK = (
    _LUA_COMMON
    + r"""
local p, q, item, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local member = q .. ':' .. item
if redis.call('HGET', p .. 'queue:tokens', member) ~= token then return 0 end
return_member(p, member)
return 1
"""
)

_SWEEP = (
    _LUA_COMMON
    + r"""
return return_expired(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
"""
)

_REMOVE = r"""
local p, item = ARGV[1], ARGV[2]
local removed = 0
for _, q in ipairs({'train', 'wait'}) do
  local qkey = p .. 'queue:' .. q
  removed = removed + redis.call('LREM', qkey, 0, item)
  redis.call('DEL', qkey .. ':pending:' .. item, qkey .. ':inflight:' .. item)
  redis.call('HDEL', qkey .. ':since', item)
  local member = q .. ':' .. item
  removed = removed + redis.call('ZREM', p .. 'queue:leases', member)
  redis.call('HDEL', p .. 'queue:tokens', member)
  redis.call('HDEL', p .. 'queue:leased_since', member)
end
return removed
"""


class QueueFullError(Exception):
    """A push was refused because the queue (or the job's pending item) is at its bound."""


@dataclass(frozen=True)
class QueueEntry:
    seq: int
    at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class Delivery:
    """One popped item: every entry queued for the job since its last delivery."""

    queue: str
    item_id: str
    token: str
    enqueued_at: float
    entries: tuple[QueueEntry, ...]

    @property
    def delivery_id(self) -> str:
        return f"{self.token}:{self.item_id}"


@dataclass(frozen=True)
class QueueStats:
    depth: int
    in_flight: int
    oldest_age_s: float | None


class RedisSchedulerQueue:
    """The SchedulerQueue (``scheduler_core.ports.QueueStore``) on one Redis database."""

    def __init__(
        self, client: redis.Redis, *, prefix: str = "trainscaler:", max_length: int = 10_000
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._max_length = max_length
        self._push = client.register_script(_PUSH)
        self._pop = client.register_script(_POP)
        self._ack = client.register_script(_ACK)
        self._nack = client.register_script(_NACK)
        self._sweep = client.register_script(_SWEEP)
        self._remove = client.register_script(_REMOVE)

    # --- QueueStore port -------------------------------------------------

    def push(
        self, queue: str, item_id: str, payload: Mapping[str, Any], *, now: float = 0.0
    ) -> None:
        self.push_entry(queue, item_id, payload, now=now)

    def pop(
        self, *, lease_seconds: float, now: float = 0.0
    ) -> tuple[str, str, dict[str, Any]] | None:
        """Port form of ``pop_delivery``: ``(queue, delivery_id, payload)``."""
        delivery = self.pop_delivery(lease_seconds=lease_seconds, now=now)
        if delivery is None:
            return None
        payload = {"item_id": delivery.item_id, "entries": [e.data for e in delivery.entries]}
        return delivery.queue, delivery.delivery_id, payload

    def ack(self, queue: str, item_id: str) -> None:
        """Port form of ``ack_delivery``: ``item_id`` is the delivery id pop returned."""
        token, _, item = item_id.partition(":")
        self._ack(args=[self._prefix, queue, item, token])

    def depths(self) -> dict[str, int]:
        return {q: int(self._redis.llen(self._key(q))) for q in QUEUES}

    # --- the full interface ---------------------------------------------------

    def push_entry(
        self, queue: str, item_id: str, payload: Mapping[str, Any], *, now: float
    ) -> tuple[bool, int]:
        """Queue ``payload`` for ``item_id``; returns (merged into a pending item, seq)."""
        return self.push_result(
            queue, item_id, self._push(args=self._push_args(queue, item_id, payload, now))
        )

    def push_and_wake(
        self,
        queue: str,
        item_id: str,
        payload: Mapping[str, Any],
        *,
        now: float,
        wake_key: str,
        wake_ttl: float,
    ) -> tuple[bool, int, bool]:
        """``push_entry`` that also sets ``wake_key`` if absent (one round trip).

        Returns (merged, seq, woke): ``woke`` is true when this push set the
        flag, so the caller must wake a consumer; the consumer clears it.
        """
        args = [
            *self._push_args(queue, item_id, payload, now),
            wake_key,
            max(1, int(wake_ttl * 1000)),
        ]
        reply = self._push(args=args)
        merged, seq = self.push_result(queue, item_id, reply)
        return merged, seq, bool(int(reply[2]))

    def push_in(
        self, pipe: Any, queue: str, item_id: str, payload: Mapping[str, Any], *, now: float
    ) -> None:
        """Queue the push on a pipeline; read its reply with ``push_result``."""
        self._push(args=self._push_args(queue, item_id, payload, now), client=pipe)

    def _push_args(
        self, queue: str, item_id: str, payload: Mapping[str, Any], now: float
    ) -> list[Any]:
        _check_queue(queue)
        data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        return [self._prefix, queue, item_id, data, _num(now), self._max_length]

    def push_result(self, queue: str, item_id: str, reply: Any) -> tuple[bool, int]:
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
        for queue in queues:
            _check_queue(queue)
        ordered = [q for q in QUEUES if q in queues]  # the train queue is always served first
        raw = [
            _text(x)
            for x in self._pop(
                args=[self._prefix, _num(now), _num(lease_seconds), scan, count, *ordered]
            )
        ]
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
        return deliveries

    def ack_delivery(self, delivery: Delivery) -> bool:
        """Done with a delivery. False when its lease had expired and it was handed back."""
        return bool(
            self._ack(args=[self._prefix, delivery.queue, delivery.item_id, delivery.token])
        )

    def ack_deliveries(self, deliveries: list[Delivery]) -> list[bool]:
        """``ack_delivery`` for many, in one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for d in deliveries:
            self._ack(args=[self._prefix, d.queue, d.item_id, d.token], client=pipe)
        return [bool(x) for x in pipe.execute()]

    def nack_delivery(self, delivery: Delivery) -> bool:
        """Put a delivery back at the front of its queue now (e.g. no capacity yet)."""
        return bool(
            self._nack(args=[self._prefix, delivery.queue, delivery.item_id, delivery.token])
        )

    def return_expired(self, *, now: float, limit: int = 1000) -> int:
        """Hand items whose lease expired back to the front of their queue."""
        return int(self._sweep(args=[self._prefix, _num(now), limit]))

    def remove(self, item_id: str) -> int:
        """Drop every queued and in-flight entry of a job (KubeML ``taskFinished``)."""
        return int(self._remove(args=[self._prefix, item_id]))

    def stats(self, *, now: float) -> dict[str, QueueStats]:
        leases = [_text(m) for m in self._redis.zrange(self._p("queue:leases"), 0, -1)]
        result = {}
        for q in QUEUES:
            head = self._redis.lindex(self._key(q), 0)
            oldest = None
            if head is not None:
                since = self._redis.hget(f"{self._key(q)}:since", _text(head))
                oldest = max(0.0, now - float(_text(since))) if since is not None else None
            result[q] = QueueStats(
                depth=int(self._redis.llen(self._key(q))),
                in_flight=sum(1 for m in leases if m.startswith(f"{q}:")),
                oldest_age_s=oldest,
            )
        return result

    def pending_entries(self, queue: str, item_id: str) -> list[QueueEntry]:
        """Entries queued (not in flight) for one item, oldest first."""
        raw = self._redis.lrange(f"{self._key(queue)}:pending:{item_id}", 0, -1)
        entries = []
        for entry in raw:
            value = json.loads(entry)
            entries.append(
                QueueEntry(seq=int(value["seq"]), at=float(value["at"]), data=value["data"])
            )
        return entries

    def items(self, queue: str) -> list[str]:
        return [_text(x) for x in self._redis.lrange(self._key(queue), 0, -1)]

    def _key(self, queue: str) -> str:
        return self._p(f"queue:{queue}")

    def _p(self, suffix: str) -> str:
        return f"{self._prefix}{suffix}"


def _entry(raw: str | bytes) -> QueueEntry:
    value = json.loads(raw)
    return QueueEntry(seq=int(value["seq"]), at=float(value["at"]), data=value["data"])


def _check_queue(queue: str) -> None:
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; known: {', '.join(QUEUES)}")


def _num(value: float) -> str:
    # repr of a float is valid JSON and exact; Lua's tonumber reads it back.
    return repr(float(value))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
