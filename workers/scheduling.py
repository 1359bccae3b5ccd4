"""``schedule``: KubeML's scheduler loop over the SchedulerQueue.

Pops items (train queue first) a chunk at a time, runs each job's policy with
its state from Redis, clamps growth to the room the newest cluster plan
leaves, records each decision with its reason and generation (one
compare-and-set per job), sends the chunk's scale commands, then acks.

Only jobs a per-job policy drives are decided here: those submitted through
``submit`` (their record names a policy other than the cluster policy), and
report-only jobs of another policy than the cluster's. A job in KubeML
parameter-server mode (its request names a ``ps_url``) gets a scale command
for every decided report, keep included: its train job waits for the answer.
An ElasticJob the cluster policy manages (one with a cluster-policy record,
one without a record the newest plan names under the cluster policy, or one
the job lookup finds under it: ``workers.schedule_inputs``) has its reports
kept (newest report, for ``GET /jobs/{id}``) and
handed, exactly once and in epoch order, to the cluster policy's inbox for
its next round: ``autoscale`` owns its target, and a per-report decision
would fight it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_core.models import Resources
from workers import job_decision
from workers.adapters.redis_queue import QUEUES, TRAIN, Delivery
from workers.adapters.script_pipeline import execute
from workers.adapters.state_store import (
    JobRecord,
    ScheduleSnapshot,
    ScheduleWrite,
)
from workers.intake import REPLY_TTL_S, DecisionReply
from workers.job_decision import Outcome
from workers.scaling import (
    SCALE_BATCH,
    ScaleCommand,
    SendScales,
    command_for,
    unapplied_command,
)
from workers.schedule_inputs import first_reads, look_up, plan_policies, plan_requests
from workers.wiring import Runtime


@dataclass(frozen=True)
class ScheduleSummary:
    deliveries: int = 0
    decisions: int = 0
    scales: int = 0
    waiting: int = 0
    more: bool = False


def schedule_once(
    rt: Runtime,
    *,
    send_scales: SendScales,
    clear_flag: str | None = None,
    hint: Sequence[str] = (),
) -> ScheduleSummary:
    """Pop items (train queue first), run each job's policy, send scales, ack.

    Items are popped and decided a chunk at a time (one read and one write
    round trip per chunk). The write round trip also acks each delivery whose
    compare-and-set went through and answers every sender waiting on it on a
    reply key (``workers.intake.DecisionReply``); a delivery whose job another
    writer touched meanwhile is decided again on its own and acked after.
    Scale commands then go out in one ``scale`` task per chunk: a worker dying
    before that leaves the decisions in the pending-scale index, and
    ``sweep_leases`` sends them (``workers.adapters.pending_scales``). The first pop's round trip also reads
    the newest plan and first clears the flag ``clear_flag`` (the schedule
    trigger: a push from then on triggers another run, so nothing waits unseen),
    and reads what deciding the ``hint`` jobs needs (those whose push triggered
    the run: a lone report's chunk then needs no read of its own; a job the pop
    does not return is read with the chunk, as any other).
    """
    deliveries = decisions = scales = waiting = 0
    queues: tuple[str, ...] = QUEUES
    requests: dict[str, Resources] | None = None
    planned: dict[str, str] = {}
    policies = _chunk_policies(rt)
    hinted = list(dict.fromkeys(hint))[:SCALE_BATCH]
    known: _Known | None = None
    while deliveries < rt.settings.schedule_batch:
        chunk, replies = rt.queue.pop_deliveries_after(
            None
            if requests is not None
            else first_reads(rt, clear_flag, hint=hinted, policies=policies),
            lease_seconds=rt.settings.lease_seconds,
            now=rt.clock.now(),
            queues=queues,
            count=min(SCALE_BATCH, rt.settings.schedule_batch - deliveries),
        )
        if requests is None:
            plan = rt.store.plan_of(replies[-1])
            requests, planned = plan_requests(plan), plan_policies(rt, plan)
            if hinted:
                known = _Known(
                    set(hinted), *rt.store.chunk_of(replies[0], hinted, policies=policies)
                )
        if not chunk:
            return ScheduleSummary(deliveries, decisions, scales, waiting)
        asked = min(SCALE_BATCH, rt.settings.schedule_batch - deliveries)
        deliveries += len(chunk)
        rt.faults.pause("schedule", ",".join(d.item_id for d in chunk))
        commands: list[ScaleCommand] = []
        late: list[Delivery] = []
        answers: dict[str, str] = {}
        decided: list[tuple[str, str]] = []  # (policy, direction), counted once per chunk
        settled = _schedule_chunk(
            rt, chunk, requests=requests, planned=planned, policies=policies, known=known
        )
        known = None  # read before the first pop: only that chunk may use it
        for delivery, outcome, acked, lock in zip(
            chunk, settled.outcomes, settled.acked, settled.locks, strict=True
        ):
            if outcome.kind == "no_room":
                # KubeML: a submission waits for capacity; the rest of the wait queue waits too.
                rt.queue.nack_delivery(delivery)
                waiting += 1
                queues = (TRAIN,)
                continue
            if outcome.kind == "decided":
                decisions += 1
                if outcome.record is not None:
                    decided.append((outcome.policy, outcome.record.decision.direction))
            if job_decision.sends_scale(outcome) and outcome.record is not None:
                epoch_time = outcome.newest_report.epoch_time_s if outcome.newest_report else None
                command = command_for(
                    outcome.record,
                    policy=outcome.policy,
                    epoch_time_s=epoch_time,
                    observed=outcome.observed,
                )
                if lock is not None:
                    command = command.model_copy(
                        update={"lock": lock.token, "locked_at": lock.at, "record": lock.record}
                    )
                commands.append(command)
            elif outcome.kind == "nothing_new":
                unsent = unapplied_command(rt, delivery.item_id)
                if unsent is not None:
                    commands.append(unsent)
            if not acked:
                late.append(delivery)
                answers.update(_answers(delivery, outcome))
        rt.metrics.record_decisions(decided)
        if commands:
            send_scales(commands)
            scales += len(commands)
        requeued = settled.requeued
        if late:
            # Decided again on their own after a conflict: acked now, with their answers.
            _, more = rt.queue.ack_and_look(late, answers=answers, answer_ttl=REPLY_TTL_S)
            requeued = requeued or more
        if len(chunk) < asked and not requeued:
            # Nothing else was poppable. A report pushed since this run began claimed
            # the trigger (cleared before the first pop): it has a run of its own, and
            # the scale commands just sent are not held up behind this one. A newer
            # item of a job this run held (skipped by other pops) is this run's: it
            # pops again.
            return ScheduleSummary(deliveries, decisions, scales, waiting)
    return ScheduleSummary(deliveries, decisions, scales, waiting, more=True)


def _answers(delivery: Delivery, outcome: Outcome) -> dict[str, str]:
    """The answer to each sender of ``delivery`` waiting on a reply key."""
    answer = _answer(delivery, outcome)
    if answer is None:
        return {}
    return {e.reply_to: answer for e in delivery.entries if e.reply_to is not None}


def _answer(delivery: Delivery, outcome: Outcome) -> str | None:
    """The ``DecisionReply`` JSON for the senders of ``delivery``, or None when none waits."""
    if all(e.reply_to is None for e in delivery.entries):
        return None
    record = outcome.record
    reply = DecisionReply(
        parallelism=outcome.target,
        generation=None if record is None else record.generation,
        reason=None if record is None else record.decision.reason,
    )
    return reply.model_dump_json()


def _chunk_policies(rt: Runtime) -> tuple[str, ...]:
    """The policies whose state a chunk reads for every job, before it is known which
    drives each: the job policy and the cluster policy."""
    return tuple(dict.fromkeys((rt.settings.job_policy, rt.settings.cluster_policy)))


@dataclass(frozen=True)
class _Known:
    """What the run's first round trip read of the jobs it was hinted (``read_chunk``)."""

    jobs: set[str]
    records: dict[str, JobRecord]
    snapshots: dict[tuple[str, str], ScheduleSnapshot]


def _schedule_chunk(
    rt: Runtime,
    chunk: list[Delivery],
    *,
    requests: dict[str, Resources],
    planned: dict[str, str],
    policies: tuple[str, ...],
    known: _Known | None = None,
) -> _Settled:
    # The job and cluster policies' states are read with the records, before it is
    # known which drives each job: one round trip, not two (another policy, named by
    # an older record, is read on its own below), and none for the jobs read already
    # (``known``, read for the same ``policies``; a value changed since makes their
    # compare-and-set fail and redo).
    unread_jobs = [d.item_id for d in chunk if known is None or d.item_id not in known.jobs]
    records, prefetched = rt.store.read_chunk(unread_jobs, policies=policies)
    if known is not None:
        records.update(known.records)
        prefetched.update(known.snapshots)
    unknown = [d.item_id for d in chunk if d.item_id not in records and d.item_id not in planned]
    found = look_up(rt, unknown) if unknown else {}
    # Which policy drives a job without a record: the newest plan's word, else the lookup's.
    driven_by = {**planned, **{job: seen.policy for job, seen in found.items()}}
    contexts = [
        job_decision.job_context(
            rt,
            d,
            record=records.get(d.item_id),
            requests=requests,
            managed=driven_by.get(d.item_id) == rt.settings.cluster_policy,
            observed=found[d.item_id].observed if d.item_id in found else None,
        )
        for d in chunk
    ]
    active = [c for c in contexts if not c.skip]
    unread = [(c.job, c.policy) for c in active if (c.job, c.policy) not in prefetched]
    prefetched.update({(snap.job, snap.policy): snap for snap in rt.store.read_schedule(unread)})
    snapshot_of = {id(c): prefetched[(c.job, c.policy)] for c in active}
    computed = {
        id(c): job_decision.compute(
            rt, c, state_raw=snap.state, cursor=snap.cursor, generation=snap.generation
        )
        for c in active
        for snap in (snapshot_of[id(c)],)
    }
    # One round trip: every write, and the ack (with its answers) of every delivery
    # whose outcome stands once its write went through (acked only if it did).
    # A new target's write also takes the job's scale lock for its scale (ScaleCommand.lock).
    lock, locked_at = uuid.uuid4().hex, rt.clock.now()
    lock_ttl_ms = max(1, int(rt.settings.scale_lock_ttl * 1000))
    pipe = rt.store.redis.pipeline(transaction=False)
    writes: dict[int, ScheduleWrite] = {}
    acking: list[int] = []
    for index, context in enumerate(contexts):
        outcome = Outcome(kind="nothing_new") if context.skip else computed[id(context)]
        if outcome.kind == "no_room":
            continue  # nacked by the caller
        write = (
            None
            if context.skip
            else job_decision.commit_write(outcome, lock=lock, lock_ttl_ms=lock_ttl_ms)
        )
        cursor = None
        if write is not None:
            writes[index] = write
            rt.store.queue_schedule_write(pipe, snapshot_of[id(context)], write)
            cursor = (rt.store.cursor_key(context.job), write.cursor.model_dump_json())
        rt.queue.queue_ack_if(
            pipe,
            context.delivery,
            answer=_answer(context.delivery, outcome),
            answer_ttl=REPLY_TTL_S,
            cursor=cursor,
        )
        acking.append(index)
    replies = iter(execute(rt.store.redis, pipe) if pipe.command_stack else [])
    written: dict[int, bool] = {}
    handed: dict[int, ScaleLock] = {}
    acked = [False] * len(contexts)
    requeued = False
    for index in acking:
        if index in writes:
            reply = int(next(replies))
            written[index] = bool(reply)
            if reply == 2:  # the scale lock is taken for this job's scale
                handed[index] = ScaleLock(lock, locked_at, records.get(contexts[index].job))
        acked[index] = True  # tried: a lost lease is not acked again
        next(replies)  # acked: 0 for a lease lost meanwhile (redone elsewhere) or a conflict
        requeued = requeued or int(next(replies)) > 0
    outcomes = []
    for index, context in enumerate(contexts):
        if context.skip:
            outcomes.append(Outcome(kind="nothing_new"))
            continue
        outcome = computed[id(context)]
        if not written.get(index, True):
            # Another writer touched this job meanwhile (its ack did not go either):
            # undo and decide it on its own.
            job_decision.undo(rt, outcome, kind=outcome.kind)
            outcome = job_decision.decide_alone(rt, context)
            acked[index] = False
        elif outcome.released:
            rt.store.release(context.per_replica, outcome.released)
        outcomes.append(outcome)
    return _Settled(outcomes, acked, requeued, [handed.get(i) for i in range(len(contexts))])


@dataclass(frozen=True)
class ScaleLock:
    """A job's scale lock taken for its scale by the write (``ScaleCommand.lock``)."""

    token: str
    at: float
    record: JobRecord | None


@dataclass(frozen=True)
class _Settled:
    """A chunk's outcomes, which deliveries the write round trip acked (or tried
    to: a lease lost meanwhile is not acked again), whether any acked job has a
    newer item queued, and the scale locks the writes took."""

    outcomes: list[Outcome]
    acked: list[bool]
    requeued: bool
    locks: list[ScaleLock | None]
