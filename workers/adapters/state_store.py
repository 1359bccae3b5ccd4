"""Everything the runtime remembers, in Redis, as JSON.

Owns: job records, per-job policy state (with optimistic concurrency), per-job
decision generations and history (each decision with its reason), the newest
cluster plan and its history, the free capacity the newest plan leaves, the
bounded per-job metrics history, autoscale run records and the locks. The HTTP
API and the CLI read through the small functions here, never raw keys.

Key layout (``P`` is ``Settings.redis_key_prefix``, default ``trainscaler:``;
``<job>`` is ``namespace/name``):

* ``P jobs`` SET of known job keys; ``P job:<job>`` STRING ``JobRecord`` JSON.
  A finished job's keys (``job_keys``) expire after the retention and the job
  leaves ``P jobs`` (``workers.adapters.job_retention``, ``P jobs:finished``).
* ``P job:<job>:policy:<policy>`` STRING the policy's state for this job only.
* ``P job:<job>:schedule`` STRING ``ScheduleCursor`` JSON (newest applied queue
  seq, newest decided target), written in the same compare-and-set as the state.
* ``P job:<job>:generation`` STRING int: generation of the newest decision.
* ``P job:<job>:applied`` STRING ``AppliedTarget`` JSON: newest applied decision.
* ``P scales:pending`` ZSET job -> since when its newest decision waits for a
  scale (``workers.adapters.pending_scales``).
* ``P job:<job>:decisions`` LIST ``DecisionRecord`` JSON, newest first, bounded.
* ``P job:<job>:metrics`` LIST ``EpochReport`` JSON, newest first, bounded: every
  accepted epoch report, whichever entry point sent it.
* ``P job:<job>:epochs`` STRING int: the job's highest epoch number (reports
  without one get the next).
* ``P job:<job>:last_report`` STRING the newest ``EpochReport`` decided on
  (written with the schedule state, by the same compare-and-set).
* ``P plan:latest`` STRING ``PlanRecord`` JSON; ``P plan:history`` LIST, newest first.
* ``P cluster:policy:<policy>`` STRING the cluster policy's state.
* ``P cluster:policy:<policy>:inbox`` LIST ``EpochReport`` JSON handed to the
  cluster policy by ``schedule`` (with the job's cursor, in one compare-and-set)
  and removed by the round that consumed them (with the new state, in one).
* ``P capacity:free`` HASH cpu_milli / memory_mega / gpu the newest plan leaves free.
* ``P autoscale:runs`` LIST ``AutoscaleRun`` JSON, newest first, bounded;
  ``P autoscale:run_id`` counter; ``P autoscale:skipped`` runs that found the lock held.
* ``P lock:autoscale`` and ``P lock:scale:<job>``: locks with a TTL (owner token).
* ``P schedule:triggered`` STRING: a schedule task is already on its way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import redis
from redis.exceptions import LockError
from redis.lock import Lock

from scheduler_core.models import (
    EpochReport,
    ScalingDecision,
)
from scheduler_core.registry import policy_names
from workers.adapters import state_scripts as scripts
from workers.adapters.pending_scales import PendingScales
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_replies import opt_text, text
from workers.adapters.script_pipeline import call_in, execute
from workers.adapters.state_records import (
    AppliedTarget,
    AutoscaleRun,
    ClusterRound,
    ConcurrentUpdateError,
    DecisionRecord,
    JobRecord,
    PlanRecord,
    Record,
    Reservation,
    ScheduleCursor,
    ScheduleSnapshot,
    ScheduleWrite,
)

# A lock release lost in a Redis failover is retried for about half a minute
# (0.25 s doubling to 2 s between tries): Sentinel's default down-after plus
# election fits in it.
LOCK_RELEASE_RETRIES = 16
LOCK_RELEASE_BACKOFF = 0.25

T = TypeVar("T")

# The per-job keys besides the record and the policies' states (see the layout above).
JOB_KEY_SUFFIXES = (
    "schedule",
    "generation",
    "applied",
    "decisions",
    "metrics",
    "epochs",
    "last_report",
)


class BegunScale(NamedTuple):
    """One job of ``begin_scales``: whether its lock was taken, with it its newest and
    applied generation, and its record (None: report-only)."""

    locked: bool
    newest: int
    applied: AppliedTarget | None
    record: JobRecord | None


class StateStore(PendingScales):
    """Typed reads and writes of the runtime's state in one Redis database
    (the cluster-wide books: ``ClusterBooks``; the pending-scale index: ``PendingScales``)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_KEY_PREFIX,
        history: int = 200,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(client, prefix=prefix, history=history)
        self._sleep = sleep
        self._compare_and_set = client.register_script(scripts.COMPARE_AND_SET)
        self._begin_scales = client.register_script(scripts.BEGIN_SCALES)
        self._finish_scales = client.register_script(scripts.FINISH_SCALES)
        self._append_metric = client.register_script(scripts.APPEND_METRIC)

    def job_key(self, job: str, suffix: str) -> str:
        return self.key(f"job:{job}:{suffix}")

    def job_keys(self, job: str) -> list[str]:
        """Every key that belongs to one job (its record, state, history), in a fixed order."""
        suffixes = [*JOB_KEY_SUFFIXES, *(f"policy:{name}" for name in policy_names())]
        return [self.key(f"job:{job}"), *(self.job_key(job, s) for s in suffixes)]

    # --- job records ------------------------------------------------------------

    def save_job(self, record: JobRecord) -> None:
        pipe = self.redis.pipeline()
        pipe.set(self.key(f"job:{record.job}"), record.model_dump_json())
        pipe.sadd(self.key("jobs"), record.job)
        pipe.execute()

    def get_jobs(self, jobs: list[str]) -> dict[str, JobRecord]:
        """Records of the jobs that have one, in one read."""
        if not jobs:
            return {}
        raw = self.redis.mget([self.key(f"job:{job}") for job in jobs])
        return {
            job: JobRecord.model_validate_json(r) for job, r in zip(jobs, raw, strict=True) if r
        }

    def get_job(self, job: str) -> JobRecord | None:
        raw = self.redis.get(self.key(f"job:{job}"))
        return JobRecord.model_validate_json(raw) if raw else None

    def job_names(self) -> list[str]:
        return sorted(text(x) for x in self.redis.smembers(self.key("jobs")))

    def forget_job_policy(
        self, job: str, policy: str, *, forget: Callable[[str | None], str | None]
    ) -> None:
        """Rewrite (or drop, when ``forget`` returns None) one job's policy state."""
        state_key = self.job_key(job, f"policy:{policy}")

        def update(pipe: Any) -> None:
            new = forget(opt_text(pipe.get(state_key)))
            pipe.multi()
            if new is None:
                pipe.delete(state_key)
            else:
                pipe.set(state_key, new)

        self.redis.transaction(update, state_key)

    # --- the schedule transaction -----------------------------------------------------

    def read_schedule(self, jobs: list[tuple[str, str]]) -> list[ScheduleSnapshot]:
        """Policy state, cursor and generation of each (job, policy), in one read."""
        if not jobs:
            return []
        keys = []
        for job, policy in jobs:
            keys += [
                self.job_key(job, f"policy:{policy}"),
                self.job_key(job, "schedule"),
                self.job_key(job, "generation"),
            ]
        values = [opt_text(v) for v in self.redis.mget(keys)]
        return [
            ScheduleSnapshot(job, policy, values[3 * i], values[3 * i + 1], values[3 * i + 2])
            for i, (job, policy) in enumerate(jobs)
        ]

    def read_chunk(
        self, jobs: list[str], *, policies: tuple[str, ...]
    ) -> tuple[dict[str, JobRecord], dict[tuple[str, str], ScheduleSnapshot]]:
        """``get_jobs`` and ``read_schedule`` of every job under each of ``policies``
        (those that may drive it before its record says which), in one read."""
        if not jobs:
            return {}, {}
        return self.chunk_of(
            self.redis.mget(self._chunk_keys(jobs, policies)), jobs, policies=policies
        )

    def queue_read_chunk(self, pipe: Any, jobs: list[str], *, policies: tuple[str, ...]) -> None:
        """``read_chunk`` on ``pipe`` (one reply, for ``chunk_of``); ``jobs`` not empty."""
        pipe.mget(self._chunk_keys(jobs, policies))

    def _chunk_keys(self, jobs: list[str], policies: tuple[str, ...]) -> list[str]:
        keys = []
        for job in jobs:
            keys += [self.key(f"job:{job}"), self.job_key(job, "schedule")]
            keys += [self.job_key(job, "generation")]
            keys += [self.job_key(job, f"policy:{policy}") for policy in policies]
        return keys

    def chunk_of(
        self, raw: Any, jobs: list[str], *, policies: tuple[str, ...]
    ) -> tuple[dict[str, JobRecord], dict[tuple[str, str], ScheduleSnapshot]]:
        """``read_chunk``'s result from the reply of ``queue_read_chunk``."""
        values = [opt_text(v) for v in raw]
        width = 3 + len(policies)
        records: dict[str, JobRecord] = {}
        snapshots: dict[tuple[str, str], ScheduleSnapshot] = {}
        for i, job in enumerate(jobs):
            record, cursor, generation, *states = values[width * i : width * (i + 1)]
            if record:
                records[job] = JobRecord.model_validate_json(record)
            for policy, state in zip(policies, states, strict=True):
                snapshots[(job, policy)] = ScheduleSnapshot(job, policy, state, cursor, generation)
        return records, snapshots

    def write_schedule(
        self, writes: list[tuple[ScheduleSnapshot, ScheduleWrite | None]]
    ) -> list[bool]:
        """Compare-and-set each job's state, cursor, generation and history, in one round trip.

        A write is applied only if its snapshot's three values are unchanged;
        the result says, per write, whether it was (a None write counts as done).
        """
        pipe = self.redis.pipeline(transaction=False)
        for snapshot, write in writes:
            if write is not None:
                self.queue_schedule_write(pipe, snapshot, write)
        results = iter(execute(self.redis, pipe) if pipe.command_stack else [])
        return [True if write is None else bool(next(results)) for _, write in writes]

    def queue_schedule_write(
        self, pipe: Any, snapshot: ScheduleSnapshot, write: ScheduleWrite
    ) -> None:
        """On ``pipe``: one job's compare-and-set. Its reply: 0 if it was not applied,
        1 if it was, 2 if it also took the job's scale lock with ``write.scale_lock``.

        It writes ``write.cursor`` as JSON to ``cursor_key(job)``: what a
        conditional ack on the same pipeline checks (``queue_ack_if``).
        """
        record, report = write.record, write.newest_report
        job = snapshot.job
        call_in(
            pipe,
            self._compare_and_set,
            keys=[
                self.job_key(job, f"policy:{snapshot.policy}"),
                self.cursor_key(job),
                self.job_key(job, "generation"),
                self.job_key(job, "decisions"),
                self.job_key(job, "last_report"),
                self.key("jobs"),
                self.inbox_key(snapshot.policy),
                self.pending_key,
                self.scale_lock_key(job),
            ],
            args=[
                snapshot.state or "",
                snapshot.cursor_raw or "",
                snapshot.generation_raw or "",
                write.state,
                write.cursor.model_dump_json(),
                "" if record is None else str(record.generation),
                "" if record is None else record.model_dump_json(),
                self.history,
                job,
                "" if report is None else report.model_dump_json(),
                "" if record is None else record.at,
                "1" if write.scales else "0",
                write.scale_lock,
                write.scale_lock_ttl_ms,
                *(r.model_dump_json() for r in write.for_cluster),
            ],
        )

    def cursor_key(self, job: str) -> str:
        return self.job_key(job, "schedule")

    def scale_lock_key(self, job: str) -> str:
        return self.key(f"lock:scale:{job}")

    def schedule_transaction(
        self,
        job: str,
        policy: str,
        *,
        compute: Callable[[str | None, ScheduleCursor, int], T],
        commit: Callable[[T], ScheduleWrite | None],
        attempts: int = 50,
        on_conflict: Callable[[T], None] = lambda _: None,
    ) -> T:
        """Read a job's policy state, cursor and generation; compute; write back atomically.

        Optimistic concurrency: ``compute(state_json, cursor, generation)`` runs
        on one read; ``commit`` turns its result into what to write (None:
        write nothing), and the write is a Lua compare-and-set that applies
        only if none of the three values changed meanwhile. Otherwise
        ``on_conflict`` undoes any side effect of ``compute`` and it all runs again.
        """
        for _ in range(attempts):
            snapshot = self.read_schedule([(job, policy)])[0]
            result = compute(snapshot.state, snapshot.cursor, snapshot.generation)
            if self.write_schedule([(snapshot, commit(result))])[0]:
                return result
            on_conflict(result)
        raise ConcurrentUpdateError(f"job {job}: gave up after {attempts} conflicting updates")

    def cursor(self, job: str) -> ScheduleCursor:
        raw = self.redis.get(self.cursor_key(job))
        return ScheduleCursor.model_validate_json(raw) if raw else ScheduleCursor()

    # --- decisions, generations, applied targets -------------------------------

    def record_autoscale_decision(self, decision: ScalingDecision, *, at: float) -> int:
        """Give an autoscale decision the job's next generation and keep it in history."""
        generation = int(self.redis.incr(self.job_key(decision.job, "generation")))
        record = DecisionRecord(generation=generation, at=at, source="autoscale", decision=decision)
        pipe = self.redis.pipeline()
        self._queue_decision(pipe, decision.job, record=record)
        pipe.execute()
        return generation

    def _queue_decision(self, pipe: Any, job: str, *, record: DecisionRecord) -> None:
        key = self.job_key(job, "decisions")
        pipe.lpush(key, record.model_dump_json())
        pipe.ltrim(key, 0, self.history - 1)
        self.mark_pending(pipe, job, at=record.at)

    def generation(self, job: str) -> int:
        return int(self.redis.get(self.job_key(job, "generation")) or 0)

    def decisions(self, job: str, *, limit: int = 50) -> list[DecisionRecord]:
        """A job's newest decisions first, each with its reason."""
        raw = self.redis.lrange(self.job_key(job, "decisions"), 0, limit - 1)
        return [DecisionRecord.model_validate_json(r) for r in raw]

    def applied(self, job: str) -> AppliedTarget | None:
        raw = self.redis.get(self.job_key(job, "applied"))
        return AppliedTarget.model_validate_json(raw) if raw else None

    def generation_and_applied(self, job: str) -> tuple[int, AppliedTarget | None]:
        """The newest decision's generation and the newest applied one, in one read."""
        generation, applied = self.redis.mget(
            self.job_key(job, "generation"), self.job_key(job, "applied")
        )
        record = AppliedTarget.model_validate_json(applied) if applied else None
        return int(generation or 0), record

    def begin_scales(self, jobs: list[tuple[str, str]], *, ttl: float) -> list[BegunScale]:
        """Take each job's scale lock with its token, if free or already held by that
        token (handed over by the schedule compare-and-set); with it, its newest and
        applied generation.

        One round trip for the batch (``jobs``: job and token), which also reads each
        job's record (the scaler's route, ``workers.adapters.parameter_server``).
        """
        keys = []
        for job, _ in jobs:
            keys += [
                self.scale_lock_key(job),
                self.job_key(job, "generation"),
                self.job_key(job, "applied"),
                self.key(f"job:{job}"),
            ]
        args: list[Any] = [max(1, int(ttl * 1000)), *(token for _, token in jobs)]
        raw = self._begin_scales(keys=keys, args=args) if jobs else []
        out = []
        for i in range(len(jobs)):
            locked, generation, applied, job_record = raw[4 * i : 4 * i + 4]
            out.append(
                BegunScale(
                    locked=bool(int(locked)),
                    newest=int(generation or 0),
                    applied=AppliedTarget.model_validate_json(applied) if applied else None,
                    record=JobRecord.model_validate_json(job_record) if job_record else None,
                )
            )
        return out

    def finish_scales(self, finished: list[tuple[str, str, AppliedTarget | None]]) -> None:
        """Record what was applied and release the locks each job's token (job,
        token, applied) still holds, at once."""
        if not finished:
            return
        keys = [self.pending_key]
        args = []
        for job, token, applied in finished:
            keys += [
                self.scale_lock_key(job),
                self.job_key(job, "applied"),
                self.job_key(job, "generation"),
            ]
            args += [token, applied.model_dump_json() if applied is not None else "", job]
        self._finish_scales(keys=keys, args=args)

    def set_applied(self, job: str, applied: AppliedTarget) -> None:
        """Record what was applied; the job leaves the pending-scale index if it
        was the newest generation."""
        self.redis.set(self.job_key(job, "applied"), applied.model_dump_json())
        self.settle_scale(job, generation=applied.generation)

    # --- metrics -----------------------------------------------------------------

    def last_report(self, job: str) -> EpochReport | None:
        raw = self.redis.get(self.job_key(job, "last_report"))
        return EpochReport.model_validate_json(raw) if raw else None

    def append_metrics(self, reports: list[EpochReport], *, keep: int) -> None:
        """Add to each job's history; a report equal to the newest entry is not added twice."""
        if not reports:
            return
        pipe = self.redis.pipeline(transaction=False)
        for report in reports:
            self._append_metric(
                keys=[self.job_key(report.job, "metrics")],
                args=[report.model_dump_json(), keep],
                client=pipe,
            )
        pipe.execute()

    def metrics(self, job: str, *, limit: int = 100) -> list[EpochReport]:
        raw = self.redis.lrange(self.job_key(job, "metrics"), 0, limit - 1)
        return [EpochReport.model_validate_json(r) for r in raw]

    # --- locks and flags ----------------------------------------------------------

    def lock(self, name: str, *, ttl: float, blocking_timeout: float | None = None) -> Lock:
        """A lock with a TTL that only its owner (token) can release."""
        lock: Lock = self.redis.lock(
            self.key(f"lock:{name}"),
            timeout=ttl,
            blocking_timeout=blocking_timeout,
            thread_local=False,
        )
        return lock

    def release_lock(self, lock: Lock) -> None:
        """Release ``lock`` if this owner still holds it; an expired lock is simply gone.

        A connection lost while the sentinels elect a new primary is retried
        (``LOCK_RELEASE_RETRIES``, backing off): the lock key was replicated, so a
        release given up on would hold every later round off for the lock's whole
        TTL. Releasing is idempotent (the owner's token is compared in Lua), so a
        retry after a release that did land only finds the lock gone.
        """
        for attempt in range(LOCK_RELEASE_RETRIES + 1):
            try:
                lock.release()
                return
            except LockError:  # not ours any more: it expired, or another owner took it
                return
            except (redis.ConnectionError, redis.TimeoutError):
                if attempt == LOCK_RELEASE_RETRIES:
                    raise
                self._sleep(min(LOCK_RELEASE_BACKOFF * 2**attempt, 2.0))

    def claim_flag(self, name: str, *, ttl: float, pipe: Any = None) -> bool:
        """Set a short-lived flag; True when it was not set yet (on ``pipe``: queued)."""
        client = pipe if pipe is not None else self.redis
        return bool(client.set(self.key(name), "1", nx=True, px=max(1, int(ttl * 1000))))

    def clear_flag(self, name: str, *, pipe: Any = None) -> None:
        """Delete a flag (on ``pipe``: queued)."""
        (pipe if pipe is not None else self.redis).delete(self.key(name))


__all__ = [
    "AppliedTarget",
    "AutoscaleRun",
    "ClusterRound",
    "ConcurrentUpdateError",
    "DecisionRecord",
    "JobRecord",
    "PlanRecord",
    "Record",
    "Reservation",
    "ScheduleCursor",
    "ScheduleSnapshot",
    "ScheduleWrite",
    "StateStore",
]
