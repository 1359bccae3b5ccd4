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

from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.script_pipeline import call_in, execute

TRAIN: Final = "train"
WAIT: Final = "wait"
QUEUES: Final = (TRAIN, WAIT)

# The queue's Lua functions, shared by its scripts and by any script that queues an
# entry as one step of something larger: such a script passes ``RedisSchedulerQueue.keys``
# first in its KEYS (``local k = queue_keys(1)``), its own keys after them, and calls
# ``push_entry(k, ...)``.
QUEUE_LUA = r"""
-- Every key comes from KEYS, in the order of ``RedisSchedulerQueue.keys``;
-- a queue's name (ARGV) only selects among them.
local function queue_keys(first)
  local k = {
    leases = KEYS[first], tokens = KEYS[first + 1], leased_since = KEYS[first + 2],
    seq_counter = KEYS[first + 3], token_counter = KEYS[first + 4],
  }
  k.train = {
    list = KEYS[first + 5], pending = KEYS[first + 6],
    inflight = KEYS[first + 7], since = KEYS[first + 8],
  }
  k.wait = {
    list = KEYS[first + 9], pending = KEYS[first + 10],
    inflight = KEYS[first + 11], since = KEYS[first + 12],
  }
  return k
end

-- An item's entries in a pending or in-flight ZSET: members item NUL seq(20 digits) entry,
-- all scored 0, so a lex range holds one item's entries in seq order.
local function item_range(item)
  return '[' .. item .. '\0', '(' .. item .. '\1'
end

local function entry_member(item, seq, entry)
  return item .. '\0' .. string.format('%020d', seq) .. entry
end

local function entry_of(item, member)
  return string.sub(member, #item + 22)
end

local function count_entries(zset, item)
  local lo, hi = item_range(item)
  return redis.call('ZLEXCOUNT', zset, lo, hi)
end

-- Moves an item's entries from one ZSET to another; returns them (members, seq order).
local function move_entries(from, to, item)
  local lo, hi = item_range(item)
  local members = redis.call('ZRANGEBYLEX', from, lo, hi)
  for i = 1, #members, 500 do
    local args = {}
    for j = i, math.min(i + 499, #members) do
      args[#args + 1] = 0
      args[#args + 1] = members[j]
    end
    redis.call('ZADD', to, unpack(args))
  end
  if #members > 0 then redis.call('ZREMRANGEBYLEX', from, lo, hi) end
  return members
end

local function drop_entries(zset, item)
  local lo, hi = item_range(item)
  return redis.call('ZREMRANGEBYLEX', zset, lo, hi)
end

local function return_member(k, member)
  local sep = string.find(member, ':', 1, true)
  local q = string.sub(member, 1, sep - 1)
  local item = string.sub(member, sep + 1)
  local qk = k[q]
  local since = redis.call('HGET', k.leased_since, member)
  local queued = count_entries(qk.pending, item) > 0
  -- Back to pending: seq order puts the older entries before any newer report.
  local moved = move_entries(qk.inflight, qk.pending, item)
  if queued then
    redis.call('LREM', qk.list, 1, item)
  elseif #moved == 0 then
    since = false
  end
  if since then
    redis.call('LPUSH', qk.list, item)
    redis.call('HSET', qk.since, item, since)
  end
  redis.call('ZREM', k.leases, member)
  redis.call('HDEL', k.tokens, member)
  redis.call('HDEL', k.leased_since, member)
end

local function return_expired(k, now, limit)
  local expired = redis.call('ZRANGEBYSCORE', k.leases, '-inf', now, 'LIMIT', 0, limit)
  for _, member in ipairs(expired) do return_member(k, member) end
  return #expired
end

-- 1: the entry joins the job's pending item; 0: it starts a new item;
-- -1 / -2: refused, the item / the queue is at its bound. Returns status, seq.
-- ``reply`` (optional): the key its sender waits on for the answer, as JSON text.
local function push_entry(k, q, item, data, now, maxlen, reply)
  local qk = k[q]
  local queued = count_entries(qk.pending, item)
  local status = 0
  if queued > 0 then
    if queued >= maxlen then return -1, 0 end
    status = 1
  elseif redis.call('LLEN', qk.list) >= maxlen then
    return -2, 0
  end
  local seq = redis.call('INCR', k.seq_counter)
  local entry = '{"seq":' .. seq .. ',"at":' .. now .. ',"data":' .. data
  if reply and reply ~= '' then entry = entry .. ',"reply":' .. reply end
  entry = entry .. '}'
  redis.call('ZADD', qk.pending, 0, entry_member(item, seq, entry))
  if status == 0 then
    redis.call('RPUSH', qk.list, item)
    redis.call('HSET', qk.since, item, now)
  end
  return status, seq
end
"""

# KEYS: the queue's keys, then optionally a wake-up flag.
# ARGV: queue, item, data, now, max length, flag TTL (ms).
_PUSH = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local status, seq = push_entry(k, ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]))
if status < 0 then return {status, 0, 0} end
-- Optional wake-up flag: set if absent; 1 means this push must wake a consumer.
local woke = 0
if KEYS[14] then
  if redis.call('SET', KEYS[14], '1', 'NX', 'PX', ARGV[6]) then woke = 1 end
end
return {status, seq, woke}
"""
)

# KEYS: the queue's keys. ARGV: now, lease, scan, count, queue names in order.
_POP = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local scan, count = tonumber(ARGV[3]), tonumber(ARGV[4])
return_expired(k, now, 1000)
local out = {}
local popped = 0
for i = 5, #ARGV do
  local q = ARGV[i]
  local qk = k[q]
  -- From the head in small chunks; items of jobs in flight stay (and are skipped).
  local skipped, scanned = 0, 0
  while popped < count and scanned < scan do
    local items = redis.call('LRANGE', qk.list, skipped, skipped + 15)
    if #items == 0 then break end
    for _, item in ipairs(items) do
      scanned = scanned + 1
      local member = q .. ':' .. item
      if redis.call('ZSCORE', k.leases, member) then
        skipped = skipped + 1
      else
        redis.call('LREM', qk.list, 1, item)
        local entries = move_entries(qk.pending, qk.inflight, item)
        local since = redis.call('HGET', qk.since, item)
        redis.call('HDEL', qk.since, item)
        local token = redis.call('INCR', k.token_counter)
        redis.call('ZADD', k.leases, now + lease, member)
        redis.call('HSET', k.tokens, member, token)
        redis.call('HSET', k.leased_since, member, since)
        table.insert(out, q)
        table.insert(out, item)
        table.insert(out, tostring(token))
        table.insert(out, since)
        table.insert(out, tostring(#entries))
        for _, entry in ipairs(entries) do table.insert(out, entry_of(item, entry)) end
        popped = popped + 1
        if popped >= count then break end
      end
    end
  end
end
return out
"""
)

# KEYS: the queue's keys. ARGV: queue, item, token.
_ACK = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local q, item, token = ARGV[1], ARGV[2], ARGV[3]
local member = q .. ':' .. item
if redis.call('HGET', k.tokens, member) ~= token then return 0 end
drop_entries(k[q].inflight, item)
redis.call('ZREM', k.leases, member)
redis.call('HDEL', k.tokens, member)
redis.call('HDEL', k.leased_since, member)
return 1
"""
)

# KEYS: the queue's keys. ARGV: queue, item, token.
_NACK = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local member = ARGV[1] .. ':' .. ARGV[2]
if redis.call('HGET', k.tokens, member) ~= ARGV[3] then return 0 end
return_member(k, member)
return 1
"""
)

# KEYS: the queue's keys. ARGV: now, limit.
_SWEEP = (
    QUEUE_LUA
    + r"""
return return_expired(queue_keys(1), tonumber(ARGV[1]), tonumber(ARGV[2]))
"""
)

# KEYS: the queue's keys. ARGV: item.
_REMOVE = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local item = ARGV[1]
local removed = 0
for _, q in ipairs({'train', 'wait'}) do
  local qk = k[q]
  removed = removed + redis.call('LREM', qk.list, 0, item)
  drop_entries(qk.pending, item)
  drop_entries(qk.inflight, item)
  redis.call('HDEL', qk.since, item)
  local member = q .. ':' .. item
  removed = removed + redis.call('ZREM', k.leases, member)
  redis.call('HDEL', k.tokens, member)
  redis.call('HDEL', k.leased_since, member)
end
return removed
"""
)


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
        self, client: redis.Redis, *, prefix: str = DEFAULT_KEY_PREFIX, max_length: int = 10_000
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
        self.keys = self._script_keys()

    # --- QueueStore port -------------------------------------------------

    def depths(self) -> dict[str, int]:
        return {q: int(self._redis.llen(self._key(q))) for q in QUEUES}

    # --- the full interface ---------------------------------------------------

    def push_entry(
        self, queue: str, item_id: str, payload: Mapping[str, Any], *, now: float
    ) -> tuple[bool, int]:
        """Queue ``payload`` for ``item_id``; returns (merged into a pending item, seq)."""
        reply = self._push(keys=self.keys, args=self._push_args(queue, item_id, payload, now))
        return self.push_result(queue, item_id, reply)

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
        args = [*self._push_args(queue, item_id, payload, now), max(1, int(wake_ttl * 1000))]
        reply = self._push(keys=[*self.keys, wake_key], args=args)
        merged, seq = self.push_result(queue, item_id, reply)
        return merged, seq, bool(int(reply[2]))

    def push_in(
        self, pipe: Any, queue: str, item_id: str, payload: Mapping[str, Any], *, now: float
    ) -> None:
        """Queue the push on a pipeline; read its reply with ``push_result``."""
        self._push(keys=self.keys, args=self._push_args(queue, item_id, payload, now), client=pipe)

    def _push_args(
        self, queue: str, item_id: str, payload: Mapping[str, Any], now: float
    ) -> list[Any]:
        _check_queue(queue)
        _check_item(item_id)
        data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        return [queue, item_id, data, _num(now), self._max_length]

    @property
    def max_length(self) -> int:
        return self._max_length

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
        raw = [_text(x) for x in popped]
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
        _check_queue(queue)
        _check_item(item_id)
        raw = self._redis.zrangebylex(f"{self._key(queue)}:pending", *_item_range(item_id))
        # Each member is item, NUL, 20 digits of seq, then the entry (see the key layout).
        return [_entry(_text(member)[len(item_id) + 21 :]) for member in raw]

    def items(self, queue: str) -> list[str]:
        return [_text(x) for x in self._redis.lrange(self._key(queue), 0, -1)]

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
