"""One job's decision in a ``schedule`` chunk: what it is decided with, the policy
run over its fresh reports, and what its compare-and-set writes.

``workers.scheduling`` pops deliveries and settles them a chunk at a time; this
module owns what happens to one delivery's job in between:

* ``job_context``: which policy drives the job (its record's, else the
  cluster policy for a job the planner or the lookup placed under it, else the
  job policy), and whether it is an admission, a report-only job or a KubeML
  parameter-server job (answered on every decided report);
* ``compute``: the policy over the reports not applied yet, in epoch order
  (KubeML: each epoch once), growth clamped to the room the newest cluster
  plan leaves (``clamp_to_capacity``: the decision's reason says so);
* ``keep_reports``: a cluster-managed job's reports handed to the cluster
  policy's inbox, exactly once, in the same compare-and-set as its cursor;
* ``commit_write``: the ``ScheduleWrite`` of an outcome, with the scale lock
  when it sends a scale;
* ``decide_alone``: a job redone on its own after its compare-and-set lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from scheduler_core.models import ElasticJob, EpochReport, Reason, Resources, ScalingDecision
from scheduler_core.policies.base import PolicyInput
from scheduler_core.registry import decide, load_state
from workers.adapters.redis_queue import WAIT, Delivery
from workers.adapters.state_store import DecisionRecord, JobRecord, ScheduleCursor, ScheduleWrite
from workers.wiring import Runtime


@dataclass
class Outcome:
    kind: Literal["decided", "nothing_new", "no_room", "no_decision"]
    new_state: str = ""
    cursor: ScheduleCursor | None = None
    record: DecisionRecord | None = None
    changed: bool = False
    reserved: int = 0
    released: int = 0
    per_replica: Resources = field(default_factory=Resources)
    newest_report: EpochReport | None = None
    policy: str = ""
    # Reports handed to the cluster policy (in the same compare-and-set as the cursor).
    for_cluster: tuple[EpochReport, ...] = ()
    # The job's target once this delivery is decided (its senders' answer; None: none yet).
    target: int | None = None
    # The job's object as this decision read it (ScaleCommand.observed).
    observed: dict[str, Any] | None = None


@dataclass(frozen=True)
class JobContext:
    """What one delivery is decided with."""

    delivery: Delivery
    job: str
    policy: str
    elastic: ElasticJob | None
    per_replica: Resources
    admission: bool
    skip: bool
    # Reports are kept but no policy runs: the cluster policy owns this job's target.
    report_only: bool = False
    # KubeML parameter-server mode: the job blocks after each epoch until its
    # parameter server gets an answer, so every decided report is sent, keep included.
    answers_every_report: bool = False
    # The job's object as the lookup read it, handed on to its scale (None: not read).
    observed: dict[str, Any] | None = None


def job_context(
    rt: Runtime,
    delivery: Delivery,
    *,
    record: JobRecord | None,
    requests: dict[str, Resources],
    managed: bool = False,
    observed: dict[str, Any] | None = None,
) -> JobContext:
    admission = delivery.queue == WAIT
    cluster_policy = rt.settings.cluster_policy
    if record is not None:
        policy = record.policy
        report_only = policy == cluster_policy
    else:
        # No submission: an ElasticJob of the cluster policy (the planner saw it,
        # or the lookup found it) has its reports go to the cluster policy; any
        # other is a report-only job (KubeML UpdateTask without CreateTask).
        report_only = managed
        policy = cluster_policy if report_only else rt.settings.job_policy
    return JobContext(
        delivery=delivery,
        job=delivery.item_id,
        policy=policy,
        elastic=elastic_job(record),
        per_replica=requests.get(delivery.item_id, Resources()),
        admission=admission,
        # A submission whose job is gone or finished has nothing left to admit.
        skip=admission and (record is None or record.finished_at is not None),
        report_only=report_only and not admission,
        answers_every_report=record is not None
        and record.request is not None
        and bool(record.request.ps_url),
        observed=observed,
    )


def compute(
    rt: Runtime,
    context: JobContext,
    *,
    state_raw: str | None,
    cursor: ScheduleCursor,
    generation: int,
) -> Outcome:
    """Run the job's policy over the reports not applied yet (by queue seq)."""
    job, policy, elastic = context.job, context.policy, context.elastic
    fresh = [e for e in context.delivery.entries if e.seq > cursor.last_seq]
    if not fresh:
        return Outcome(kind="nothing_new", target=cursor.last_target)
    now = rt.clock.now()
    if context.report_only:
        return keep_reports(rt, context, fresh=fresh, state_raw=state_raw, cursor=cursor)
    if context.admission:
        reports: tuple[EpochReport, ...] = (EpochReport(job=job, replicas=0, at=now),)
    else:
        reports = in_epoch_order(reports_of(rt, fresh), after=cursor.last_epoch)
    result = decide(
        policy,
        PolicyInput(jobs=(elastic,) if elastic else (), reports=reports, now=now),
        state=load_state(policy, state_raw),
    )
    last_epoch = max((r.epoch for r in reports if r.epoch is not None), default=cursor.last_epoch)
    decision = result.plan.for_job(job)
    new_state = result.state.model_dump_json()
    last_seq = max(e.seq for e in fresh)
    newest = None if context.admission or not reports else reports[-1]
    if decision is None:
        cursor = cursor.model_copy(update={"last_seq": last_seq, "last_epoch": last_epoch})
        return Outcome(
            kind="no_decision",
            new_state=new_state,
            cursor=cursor,
            newest_report=newest,
            target=cursor.last_target,
        )
    previous = cursor.last_target if cursor.last_target is not None else decision.current
    outcome = Outcome(
        kind="decided",
        new_state=new_state,
        per_replica=context.per_replica,
        newest_report=newest,
        policy=policy,
        observed=context.observed,
    )
    if decision.target > previous:
        decision = clamp_to_capacity(
            rt, decision, previous=previous, per_replica=context.per_replica, outcome=outcome
        )
    elif decision.target < previous:
        outcome.released = previous - decision.target
    if context.admission and elastic is not None and decision.target < max(elastic.min_replicas, 1):
        return undo(rt, outcome, kind="no_room")
    outcome.changed = (
        decision.target != previous
        or cursor.last_target is None
        or (context.answers_every_report and not context.admission)
    )
    outcome.record = DecisionRecord(
        generation=generation + 1 if outcome.changed else generation,
        at=now,
        source="schedule",
        decision=decision,
    )
    outcome.cursor = ScheduleCursor(
        last_seq=last_seq, last_target=decision.target, last_epoch=last_epoch
    )
    outcome.target = decision.target
    return outcome


def keep_reports(
    rt: Runtime,
    context: JobContext,
    *,
    fresh: list[Any],
    state_raw: str | None,
    cursor: ScheduleCursor,
) -> Outcome:
    """A cluster-managed job's reports: handed to the cluster policy's next round.

    Exactly once and in epoch order: the reports go into the cluster policy's
    inbox in the same compare-and-set that moves the job's cursor past them,
    so a redelivery (a worker killed mid-schedule) finds them already taken.
    """
    reports = in_epoch_order(reports_of(rt, fresh), after=cursor.last_epoch)
    last_epoch = max((r.epoch for r in reports if r.epoch is not None), default=cursor.last_epoch)
    cursor = cursor.model_copy(
        update={"last_seq": max(e.seq for e in fresh), "last_epoch": last_epoch}
    )
    return Outcome(
        kind="no_decision",
        new_state=state_raw or "",
        cursor=cursor,
        newest_report=reports[-1] if reports else None,
        policy=context.policy,
        for_cluster=reports,
        target=cursor.last_target,
    )


def undo(rt: Runtime, outcome: Outcome, *, kind: Any) -> Outcome:
    if outcome.reserved:
        rt.store.release(outcome.per_replica, outcome.reserved)
    outcome.reserved = 0
    outcome.kind = kind
    return outcome


def clamp_to_capacity(
    rt: Runtime,
    decision: ScalingDecision,
    *,
    previous: int,
    per_replica: Resources,
    outcome: Outcome,
) -> ScalingDecision:
    wanted = decision.target - previous
    reservation = rt.store.reserve(per_replica, wanted)
    outcome.reserved = reservation.granted
    if not reservation.constrained:
        return decision
    target = previous + reservation.granted
    reason = Reason(
        rule=f"{decision.reason.rule}+capacity",
        message=(
            f"{decision.reason.message}; clamped to {target}: the newest cluster plan "
            f"leaves room for {reservation.granted} more replica(s)"
        ),
        numbers={
            **decision.reason.numbers,
            "unclamped_target": decision.target,
            "granted": reservation.granted,
        },
    )
    return decision.model_copy(update={"target": target, "reason": reason})


def reports_of(rt: Runtime, entries: Any) -> list[EpochReport]:
    reports = []
    for entry in entries:
        try:
            reports.append(EpochReport.model_validate(entry.data))
        except ValidationError as error:  # validated on the way in; kept for safety
            rt.dead_letters.add(
                task="trainscaler.schedule", payload=entry.data, error=str(error), at=rt.clock.now()
            )
    return reports


def in_epoch_order(reports: list[EpochReport], *, after: int | None) -> tuple[EpochReport, ...]:
    """Drop reports of an epoch already decided on: a redelivered ``report_epoch``
    pushes its report again, and KubeML's policy must see each epoch once."""
    kept = []
    newest = after
    for report in reports:
        if report.epoch is not None and newest is not None and report.epoch <= newest:
            continue
        kept.append(report)
        if report.epoch is not None:
            newest = report.epoch
    return tuple(kept)


def elastic_job(record: JobRecord | None) -> ElasticJob | None:
    if record is None or record.request is None:
        return None
    namespace, _, name = record.job.partition("/")
    request = record.request
    return ElasticJob(
        namespace=namespace,
        name=name,
        min_replicas=request.min_replicas,
        max_replicas=request.max_replicas,
        policy=record.policy,
        default_parallelism=request.options.default_parallelism,
    )


def commit_write(outcome: Outcome, *, lock: str = "", lock_ttl_ms: int = 0) -> ScheduleWrite | None:
    """What to write for ``outcome``; a decision that changes the target also takes
    the job's scale lock for its scale with the token ``lock`` ('': it does not)."""
    if outcome.cursor is None:
        return None
    return ScheduleWrite(
        state=outcome.new_state,
        cursor=outcome.cursor,
        record=outcome.record,
        newest_report=outcome.newest_report,
        for_cluster=outcome.for_cluster,
        scales=sends_scale(outcome),
        scale_lock=lock if sends_scale(outcome) else "",
        scale_lock_ttl_ms=lock_ttl_ms,
    )


def sends_scale(outcome: Outcome) -> bool:
    """Whether ``outcome`` sends a scale command (a new target, or a parameter
    server's answer)."""
    return outcome.changed and outcome.record is not None


def decide_alone(rt: Runtime, context: JobContext) -> Outcome:
    """``context``'s job decided on its own, in a transaction of its own (after its
    compare-and-set in the chunk's write lost to another writer)."""

    def compute_at(state_raw: str | None, cursor: ScheduleCursor, generation: int) -> Outcome:
        return compute(rt, context, state_raw=state_raw, cursor=cursor, generation=generation)

    def undo_conflict(outcome: Outcome) -> None:
        undo(rt, outcome, kind=outcome.kind)

    outcome = rt.store.schedule_transaction(
        context.job,
        context.policy,
        compute=compute_at,
        commit=commit_write,
        on_conflict=undo_conflict,
    )
    if outcome.released:
        rt.store.release(context.per_replica, outcome.released)
    return outcome
