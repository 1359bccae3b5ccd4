"""An epoch report's way into the SchedulerQueue: one Lua call, one round trip.

Owns the script every entry point hands a report to (the HTTP API, the
KubeML listener and ``trainscaler.report_epoch``, through
``workers.intake.accept_report``). Atomically, it:

* numbers the report: the sender's epoch (the job's counter keeps the highest
  seen) or the job's next one; a first contact (no epoch time) is no epoch and
  stays as sent;
* keeps it in the job's bounded metrics history;
* queues it to train (one pending item per job, entries in arrival order),
  with the key its sender waits on for the answer when it waits;
* claims the schedule trigger (the wake-up flag): the caller whose push set it
  sends ``trainscaler.schedule``.

A full queue changes nothing (``QueueFullError``). Every key name comes in
through KEYS, built by its owner: the queue's by
``RedisSchedulerQueue.keys``, the job's and the flag's by ``StateStore``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis

from scheduler_core.models import EpochReport
from workers.adapters.queue_scripts import QUEUE_LUA
from workers.adapters.redis_queue import TRAIN, RedisSchedulerQueue, wake_ttl_ms
from workers.adapters.redis_replies import text
from workers.adapters.script_pipeline import call_in, execute
from workers.adapters.state_scripts import HISTORY_LUA
from workers.adapters.state_store import StateStore

logger = logging.getLogger(__name__)

# KEYS: the queue's keys (``RedisSchedulerQueue.keys``), then the wake-up flag, the
# job's epoch counter and its metrics list.
# ARGV: item, report JSON before and after its epoch value, the sender's epoch
# or '', '1' when the report is an epoch (numbered and kept), now, max length,
# flag TTL (ms), history kept, reply key as JSON text or ''.
_PUSH_REPORT = (
    QUEUE_LUA
    + HISTORY_LUA
    + r"""
local k = queue_keys(1)
local flag, epochs, metrics = KEYS[14], KEYS[15], KEYS[16]
local item, maxlen = ARGV[1], tonumber(ARGV[7])
-- Checked before numbering, so a refused report changes nothing.
local queued = count_entries(k.train.pending, item)
if queued >= maxlen and queued > 0 then return {-1, 0, 0, ''} end
if queued == 0 and redis.call('LLEN', k.train.list) >= maxlen then return {-2, 0, 0, ''} end
local epoch = ARGV[4]
if ARGV[5] == '1' then epoch = number_epoch(epochs, epoch) end
local value = 'null'
if epoch ~= '' then value = epoch end
local report = ARGV[2] .. value .. ARGV[3]
if ARGV[5] == '1' then keep_metric(metrics, report, tonumber(ARGV[9])) end
local status, seq = push_entry(k, 'train', item, report, ARGV[6], maxlen, ARGV[10])
local woke = 0
if redis.call('SET', flag, '1', 'NX', 'PX', ARGV[8]) then woke = 1 end
return {status, seq, woke, epoch}
"""
)

_EPOCH = '"epoch":null'


@dataclass(frozen=True)
class PushedReport:
    """A queued report: numbered, with its queue seq; ``woke``: this push claimed the
    schedule trigger, so its sender sends ``trainscaler.schedule``."""

    report: EpochReport
    seq: int
    merged: bool
    woke: bool


def split_at_epoch(report: EpochReport) -> tuple[str, str]:
    """The report's JSON before and after its epoch value (the script puts the number in).

    Exactly what ``model_dump_json`` writes for the numbered report, so the
    history's "not twice" check compares like with like.
    """
    text = report.model_copy(update={"epoch": None}).model_dump_json()
    # Top-level and once: a string value cannot hold an unescaped quote.
    if text.count(_EPOCH) != 1:
        raise ValueError(f"cannot place the epoch in {text!r}")
    head, _, tail = text.partition(_EPOCH)
    return head + '"epoch":', tail


class ReportIntake:
    """Queues epoch reports to train in one Lua call each."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        queue: RedisSchedulerQueue,
        store: StateStore,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 200,
    ) -> None:
        self._redis = client
        self._queue = queue
        self._store = store
        self._push = client.register_script(_PUSH_REPORT)
        self._wait_replicas = wait_replicas
        self._wait_timeout_ms = wait_timeout_ms

    def push(
        self,
        report: EpochReport,
        *,
        now: float,
        keep: int,
        wake_key: str,
        wake_ttl: float,
        reply_to: str | None = None,
    ) -> PushedReport:
        """Number, keep and queue ``report``, claiming ``wake_key``; raises ``QueueFullError``."""
        job = report.job
        head, tail = split_at_epoch(report)
        is_epoch = report.epoch_time_s is not None
        pipe = self._redis.pipeline(transaction=False)
        call_in(
            pipe,
            self._push,
            keys=[
                *self._queue.keys,
                wake_key,
                self._store.job_key(job, "epochs"),
                self._store.job_key(job, "metrics"),
            ],
            args=[
                job,
                head,
                tail,
                "" if report.epoch is None else str(report.epoch),
                "1" if is_epoch else "0",
                repr(float(now)),
                self._queue.max_length,
                wake_ttl_ms(wake_ttl),
                keep,
                "" if reply_to is None else json.dumps(reply_to),
            ],
        )
        # WAIT follows the push on the pipeline's one connection: a replica that
        # acknowledges holds the report (a promoted replica still has it queued;
        # at worst it is decided twice, never lost). Same round trip.
        waits = (
            [("WAIT", self._wait_replicas, self._wait_timeout_ms)] if self._wait_replicas else []
        )
        results = execute(self._redis, pipe, then=waits)
        reply = results[0]
        if waits:
            self._warn_if_unreplicated(job, int(results[-1]))
        merged, seq = self._queue.push_result(TRAIN, job, reply=reply)
        epoch = text(reply[3])
        if epoch and report.epoch != int(epoch):
            report = report.model_copy(update={"epoch": int(epoch)})
        return PushedReport(report=report, seq=seq, merged=merged, woke=bool(int(reply[2])))

    def _warn_if_unreplicated(self, job: str, acknowledged: int) -> None:
        if acknowledged < self._wait_replicas:
            logger.warning(
                "report for %s accepted with %d of %d replicas acknowledging within %d ms",
                job,
                acknowledged,
                self._wait_replicas,
                self._wait_timeout_ms,
            )
