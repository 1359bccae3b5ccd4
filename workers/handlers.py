"""What each task does, as plain functions over a ``Runtime`` (no Celery here).

Each handler loads state, calls the pure core, applies, and records. The
Celery tasks in ``workers.tasks`` only validate payloads, call these, and send
follow-up tasks through the ``send_scale`` callback they pass in.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.exceptions import LockError

from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    EpochReport,
    Reason,
    Resources,
    ScalingDecision,
    ScalingPlan,
    TrainRequest,
    job_key,
)
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.edl import load_cap
from scheduler_core.registry import decide, get_policy, load_state
from workers.adapters.redis_queue import QUEUES, TRAIN, WAIT, Delivery
from workers.adapters.state_store import (
    AppliedTarget,
    AutoscaleRun,
    DecisionRecord,
    JobRecord,
    PlanRecord,
    ScheduleCursor,
)
from workers.wiring import Runtime

SCHEDULE_FLAG = "schedule:triggered"


class ScaleCommand(BaseModel):
    """The payload of ``trainscaler.scale``: an absolute target with its generation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str
    target: int
    generation: int
    reason: Reason
    source: Literal["schedule", "autoscale"]
    # Retries so far (exponential backoff with jitter between them).
    attempt: int = Field(default=0, ge=0)

    def reason_text(self) -> str:
        return f"gen {self.generation} {self.reason.rule}: {self.reason.message}"


SendScale = Callable[[ScaleCommand], None]
SendScales = Callable[[list[ScaleCommand]], None]
# Commands per ``scale`` task sent by one schedule run.
SCALE_BATCH = 50


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --- submit / report_epoch --------------------------------------------------------


def accept_submission(rt: Runtime, payload: Any, *, submission_id: str) -> str:
    """KubeML ``CreateTask``: validate, assign an id, record the job, queue it to wait.

    The id derives from the submission (task) id, so a redelivered submit
    records the same job instead of a second one.
    """
    request = TrainRequest.model_validate(payload)
    job_id = uuid.uuid5(uuid.NAMESPACE_URL, f"trainscaler:{submission_id}").hex[:12]
    job = job_key(request.namespace, job_id)
    now = rt.clock.now()
    record = JobRecord(
        job=job, job_id=job_id, policy=rt.settings.job_policy, request=request, created_at=now
    )
    rt.store.save_job(record)
    rt.queue.push_entry(WAIT, job, {"job": job}, now=now)
    return job


def accept_report(rt: Runtime, payload: Any) -> EpochReport:
    """KubeML ``UpdateTask``: validate, keep as the newest observation, queue to train."""
    report = EpochReport.model_validate(payload)
    rt.store.save_last_report(report)
    rt.queue.push_entry(TRAIN, report.job, report.model_dump(mode="json"), now=rt.clock.now())
    return report


# --- schedule -------------------------------------------------------------------------


@dataclass
class _Outcome:
    kind: Literal["decided", "nothing_new", "no_room", "no_decision"]
    new_state: str = ""
    cursor: ScheduleCursor | None = None
    record: DecisionRecord | None = None
    changed: bool = False
    reserved: int = 0
    released: int = 0
    per_replica: Resources = field(default_factory=Resources)


@dataclass(frozen=True)
class ScheduleSummary:
    deliveries: int = 0
    decisions: int = 0
    scales: int = 0
    waiting: int = 0
    more: bool = False


def schedule_once(rt: Runtime, *, send_scales: SendScales) -> ScheduleSummary:
    """Pop items (train queue first), run each job's policy, send scales, ack.

    Scale commands go out in batches (one ``scale`` task per batch) and the
    deliveries they came from are acked only after their batch was sent: a
    worker dying in between leaves the deliveries to expire and be redone.
    """
    deliveries = decisions = scales = waiting = 0
    queues: tuple[str, ...] = QUEUES
    requests = _plan_requests(rt)
    unacked: list[Delivery] = []
    commands: list[ScaleCommand] = []

    def flush() -> None:
        nonlocal scales
        if commands:
            send_scales(list(commands))
            scales += len(commands)
            commands.clear()
        if unacked:
            rt.queue.ack_deliveries(unacked)
            unacked.clear()

    more = True
    while deliveries < rt.settings.schedule_batch:
        delivery = rt.queue.pop_delivery(
            lease_seconds=rt.settings.lease_seconds, now=rt.clock.now(), queues=queues
        )
        if delivery is None:
            more = False
            break
        deliveries += 1
        rt.faults.pause("schedule", delivery.item_id)
        outcome = _schedule_delivery(rt, delivery, requests)
        if outcome.kind == "no_room":
            # KubeML: a submission waits for capacity; the rest of the wait queue waits too.
            rt.queue.nack_delivery(delivery)
            waiting += 1
            queues = (TRAIN,)
            continue
        if outcome.kind == "decided":
            decisions += 1
        if outcome.changed and outcome.record is not None:
            commands.append(_command(outcome.record))
        elif outcome.kind == "nothing_new":
            unsent = _unapplied_command(rt, delivery.item_id)
            if unsent is not None:
                commands.append(unsent)
        unacked.append(delivery)
        if len(unacked) >= SCALE_BATCH:
            flush()
    flush()
    return ScheduleSummary(deliveries, decisions, scales, waiting, more=more)


def _schedule_delivery(rt: Runtime, delivery: Delivery, requests: dict[str, Resources]) -> _Outcome:
    job = delivery.item_id
    record = rt.store.get_job(job)
    policy = record.policy if record is not None else rt.settings.job_policy
    elastic = _elastic_job(record)
    per_replica = requests.get(job, Resources())
    admission = delivery.queue == WAIT
    if admission and (record is None or record.finished_at is not None):
        return _Outcome(kind="nothing_new")

    def compute(state_raw: str | None, cursor: ScheduleCursor, generation: int) -> _Outcome:
        fresh = [e for e in delivery.entries if e.seq > cursor.last_seq]
        if not fresh:
            return _Outcome(kind="nothing_new")
        now = rt.clock.now()
        if admission:
            reports: tuple[EpochReport, ...] = (EpochReport(job=job, replicas=0, at=now),)
        else:
            reports = tuple(_reports(rt, fresh))
        result = decide(
            policy,
            PolicyInput(jobs=(elastic,) if elastic else (), reports=reports, now=now),
            state=load_state(policy, state_raw),
        )
        last_epoch = max(
            (r.epoch for r in reports if r.epoch is not None), default=cursor.last_epoch
        )
        decision = result.plan.for_job(job)
        new_state = result.state.model_dump_json()
        last_seq = max(e.seq for e in fresh)
        if decision is None:
            cursor = cursor.model_copy(update={"last_seq": last_seq, "last_epoch": last_epoch})
            return _Outcome(kind="no_decision", new_state=new_state, cursor=cursor)
        previous = cursor.last_target if cursor.last_target is not None else decision.current
        outcome = _Outcome(kind="decided", new_state=new_state, per_replica=per_replica)
        if decision.target > previous:
            decision = _clamp_to_capacity(rt, decision, previous, per_replica, outcome)
        elif decision.target < previous:
            outcome.released = previous - decision.target
        if admission and elastic is not None and decision.target < max(elastic.min_replicas, 1):
            return _undo(rt, outcome, kind="no_room")
        outcome.changed = decision.target != previous or cursor.last_target is None
        outcome.record = DecisionRecord(
            generation=generation + 1 if outcome.changed else generation,
            at=now,
            source="schedule",
            decision=decision,
        )
        outcome.cursor = ScheduleCursor(
            last_seq=last_seq, last_target=decision.target, last_epoch=last_epoch
        )
        return outcome

    def commit(outcome: _Outcome) -> tuple[str, ScheduleCursor, DecisionRecord | None] | None:
        if outcome.cursor is None:
            return None
        return outcome.new_state, outcome.cursor, outcome.record

    def undo(outcome: _Outcome) -> None:
        _undo(rt, outcome, kind=outcome.kind)

    outcome = rt.store.schedule_transaction(job, policy, compute, commit, on_conflict=undo)
    if outcome.released:
        rt.store.release(per_replica, outcome.released)
    return outcome


def _undo(rt: Runtime, outcome: _Outcome, *, kind: Any) -> _Outcome:
    if outcome.reserved:
        rt.store.release(outcome.per_replica, outcome.reserved)
    outcome.reserved = 0
    outcome.kind = kind
    return outcome


def _clamp_to_capacity(
    rt: Runtime, decision: ScalingDecision, previous: int, per_replica: Resources, outcome: _Outcome
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


def _reports(rt: Runtime, entries: Any) -> list[EpochReport]:
    reports = []
    for entry in entries:
        try:
            reports.append(EpochReport.model_validate(entry.data))
        except ValidationError as error:  # validated on the way in; kept for safety
            rt.dead_letters.add(
                task="trainscaler.schedule", payload=entry.data, error=str(error), at=rt.clock.now()
            )
    return reports


def _elastic_job(record: JobRecord | None) -> ElasticJob | None:
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


def _plan_requests(rt: Runtime) -> dict[str, Resources]:
    """Per-replica requests of the jobs in the newest plan (read once per schedule run)."""
    plan = rt.store.latest_plan()
    return dict(plan.requests) if plan is not None else {}


def _command(record: DecisionRecord) -> ScaleCommand:
    decision = record.decision
    return ScaleCommand(
        job=decision.job,
        target=decision.target,
        generation=record.generation,
        reason=decision.reason,
        source=record.source,
    )


def _unapplied_command(rt: Runtime, job: str) -> ScaleCommand | None:
    """A redelivered item whose decision was recorded but maybe never sent: send it again."""
    generation = rt.store.generation(job)
    applied = rt.store.applied(job)
    if generation == 0 or (applied is not None and applied.generation >= generation):
        return None
    decisions = rt.store.decisions(job, limit=20)
    newest = next((d for d in decisions if d.generation == generation), None)
    return _command(newest) if newest is not None else None


# --- scale ------------------------------------------------------------------------------


class ScaleLockBusy(Exception):
    """Another worker holds the job's scale lock past the wait limit."""


def apply_scale(rt: Runtime, command: ScaleCommand) -> str:
    """Apply an absolute target; idempotent, and never older than the newest decision.

    Raises ``TransientScaleError`` / ``PermanentScaleError`` from the scaler.
    """
    ttl = rt.settings.scale_lock_ttl
    lock = rt.store.lock(f"scale:{command.job}", ttl=ttl, blocking_timeout=ttl)
    if not lock.acquire():
        raise ScaleLockBusy(f"scale lock of {command.job} busy for {ttl}s")
    try:
        newest, applied = rt.store.generation_and_applied(command.job)
        if command.generation < newest:
            return f"superseded by generation {newest}"
        if applied is not None and applied.generation >= command.generation:
            return f"already applied (generation {applied.generation})"
        current = rt.scaler.current_replicas(command.job)
        if current == command.target:
            outcome = "already at target"
        else:
            rt.scaler.scale(command.job, command.target, reason=command.reason_text())
            outcome = f"scaled {current} -> {command.target}"
        rt.store.set_applied(
            command.job,
            AppliedTarget(
                generation=command.generation,
                target=command.target,
                at=rt.clock.now(),
                outcome=outcome,
            ),
        )
        return outcome
    finally:
        _release(lock)


def _release(lock: Any) -> None:
    # Released only by its owner; an expired lock is simply gone.
    with contextlib.suppress(LockError):
        lock.release()


# --- autoscale --------------------------------------------------------------------------


def autoscale_once(rt: Runtime, *, send_scale: SendScale, owner: str) -> dict[str, Any]:
    """Single-flight: read the cluster, plan all elastic jobs, store the plan, send scales."""
    settings = rt.settings
    lock = rt.store.lock("autoscale", ttl=settings.autoscale_lock_ttl)
    if not lock.acquire(blocking=False):
        rt.store.count_skipped_run()
        return {"ran": False, "note": "another autoscale run holds the lock"}
    started = rt.clock.now()
    run_id = rt.store.next_run_id()
    changes: list[ScaleCommand] = []
    note = ""
    try:
        jobs = tuple(rt.cluster_reader.elastic_jobs())
        cluster = rt.cluster_reader.inquire()
        policy = settings.cluster_policy
        # Jobs driven by another policy (KubeML per-report) still count in the snapshot.
        candidates = tuple(j for j in jobs if j.policy == policy)
        result = decide(
            policy,
            PolicyInput(jobs=candidates, cluster=cluster, now=started),
            state=load_state(policy, rt.store.cluster_policy_state(policy)),
            params=_cluster_params(policy, settings.max_load_desired),
        )
        plan: ScalingPlan = result.plan
        generations: dict[str, int] = {}
        at = rt.clock.now()
        for decision in plan.changes:
            generation = rt.store.record_autoscale_decision(decision, at=at)
            generations[decision.job] = generation
            changes.append(
                ScaleCommand(
                    job=decision.job,
                    target=decision.target,
                    generation=generation,
                    reason=decision.reason,
                    source="autoscale",
                )
            )
        record = PlanRecord(
            run_id=run_id,
            at=at,
            owner=owner,
            plan=plan,
            cluster=cluster,
            generations=generations,
            requests={j.key: j.requests for j in jobs},
        )
        rt.store.save_plan(record, free=free_after(cluster, plan, jobs, settings.max_load_desired))
        rt.store.save_cluster_policy_state(policy, result.state.model_dump_json())
        for command in changes:
            send_scale(command)
    except Exception as error:
        note = f"failed: {error}"
        raise
    finally:
        rt.store.record_run(
            AutoscaleRun(
                run_id=run_id,
                owner=owner,
                started=started,
                finished=rt.clock.now(),
                changes=len(changes),
                note=note,
            )
        )
        _release(lock)
    return {"ran": True, "run_id": run_id, "changes": len(changes)}


def _cluster_params(policy: str, max_load_desired: float) -> dict[str, Any]:
    fields = get_policy(policy).params_type.model_fields
    return {"max_load_desired": max_load_desired} if "max_load_desired" in fields else {}


def free_after(
    cluster: ClusterResource,
    plan: ScalingPlan,
    jobs: tuple[ElasticJob, ...],
    max_load_desired: float,
) -> Resources:
    """What stays free under the load cap once the plan is applied."""
    by_key = {j.key: j for j in jobs}
    cpu = cluster.cpu_request_milli
    mem = cluster.memory_request_mega
    gpu = cluster.gpu_limit
    for decision in plan.changes:
        job = by_key.get(decision.job)
        if job is None:
            continue
        cpu += decision.delta * job.requests.cpu_milli
        mem += decision.delta * job.requests.memory_mega
        gpu += decision.delta * job.limits.gpu
    return Resources(
        cpu_milli=max(0, load_cap(cluster.cpu_total_milli, max_load_desired) - cpu),
        memory_mega=max(0, load_cap(cluster.memory_total_mega, max_load_desired) - mem),
        gpu=max(0, load_cap(cluster.gpu_total, max_load_desired) - gpu),
    )


# --- fetch_metrics / finish / sweep -------------------------------------------------------


def fetch_metrics_once(rt: Runtime) -> int:
    jobs = rt.store.job_names()
    reports = list(rt.metrics_source.fetch(jobs))
    rt.store.append_metrics(reports, keep=rt.settings.metrics_history)
    return len(reports)


def finish_job(rt: Runtime, job: str) -> dict[str, Any]:
    """KubeML ``taskFinished``: forget the job's policy state and queue entries."""
    record = rt.store.get_job(job)
    policy = record.policy if record is not None else rt.settings.job_policy
    forget = getattr(get_policy(policy), "forget", None)

    def forgotten(raw: str | None) -> str | None:
        if raw is None or forget is None:
            return None
        state = forget(load_state(policy, raw), job)
        # Policy state is kept per job, so a state with the job forgotten is empty.
        empty: bool = state == type(state)()
        return None if empty else str(state.model_dump_json())

    rt.store.forget_job_policy(job, policy, forgotten)
    removed = rt.queue.remove(job)
    if record is not None:
        rt.store.save_job(record.model_copy(update={"finished_at": rt.clock.now()}))
    return {"job": job, "queue_entries_removed": removed}


def sweep_leases(rt: Runtime) -> dict[str, Any]:
    returned = rt.queue.return_expired(now=rt.clock.now())
    depths = rt.queue.depths()
    return {"returned": returned, "depths": depths, "pending": any(depths.values())}


__all__ = [
    "SCHEDULE_FLAG",
    "ScaleCommand",
    "ScaleLockBusy",
    "ScheduleSummary",
    "accept_report",
    "accept_submission",
    "apply_scale",
    "autoscale_once",
    "fetch_metrics_once",
    "finish_job",
    "schedule_once",
    "sweep_leases",
]
