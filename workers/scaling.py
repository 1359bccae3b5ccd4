"""Applying targets and planning the cluster: ``scale`` and ``autoscale``.

``apply_scale`` / ``apply_scales`` apply absolute targets through the
replica-scaler port, idempotently and never older than the job's newest
decision (generations); ``lost_scales`` finds the decisions whose scale was
lost (``workers.adapters.pending_scales``); ``autoscale_once`` runs the cluster planner single-
flight over the reports ``schedule`` handed to the cluster policy (consumed
with the new policy state in one compare-and-set) and stores the plan with
its reasons.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.identity import JobKey
from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    Reason,
    Resources,
    ScalingDecision,
    ScalingPlan,
)
from scheduler_core.policies.base import PolicyInput, in_round_order
from scheduler_core.policies.edl import load_cap
from scheduler_core.ports import (
    PermanentScaleError,
    ReplicaScaler,
    ScaleRequest,
    TransientScaleError,
)
from scheduler_core.registry import decide, get_policy, load_state
from workers.adapters.state_store import (
    AppliedTarget,
    AutoscaleRun,
    BegunScale,
    DecisionRecord,
    JobRecord,
    PlanRecord,
)
from workers.settings import Settings
from workers.wiring import Runtime


class ScaleCommand(BaseModel):
    """The payload of ``trainscaler.scale``: an absolute target with its generation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: JobKey
    target: int
    generation: int
    reason: Reason
    source: Literal["schedule", "autoscale"]
    # The policy that decided (the scaler records it with the rule); None from old payloads.
    policy: str | None = None
    # Retries so far (exponential backoff with jitter between them).
    attempt: int = Field(default=0, ge=0)
    # The epoch time of the report decided on (KubeML's JobState.elapsed_time,
    # echoed to a parameter server); None for decisions not made on a report.
    epoch_time_s: float | None = None
    # The decider's copy of the job's object (the ElasticJob: the planner's cache, or
    # the one ``schedule`` read to learn the job's policy), so the scale worker,
    # which holds no cache, need not read it again (ScaleRequest.observed).
    observed: dict[str, Any] | None = None
    # The job's scale lock, taken for this command (its token) by the schedule
    # compare-and-set that recorded the decision, at ``locked_at``; with the job's
    # record as that step read it (its scaler's route). Within half the lock's
    # TTL the scale applies under it without a round trip of its own: the
    # decision was the newest when the lock was taken, and every newer one
    # waits for it. Later, the scale takes the lock as any other (the token
    # still counts as its own).
    lock: str | None = None
    locked_at: float | None = None
    record: JobRecord | None = None

    def request(self) -> ScaleRequest:
        """The replica scaler's request: the target with the decision's reason."""
        return ScaleRequest(
            job=self.job,
            replicas=self.target,
            reason=self.reason,
            policy=self.policy,
            generation=self.generation,
            epoch_time_s=self.epoch_time_s,
            observed=self.observed,
        )


SendScale = Callable[[ScaleCommand], None]
SendScales = Callable[[list[ScaleCommand]], None]
# Commands per ``scale`` task sent by one schedule run.
SCALE_BATCH = 50


def command_for(
    record: DecisionRecord,
    *,
    policy: str | None = None,
    epoch_time_s: float | None = None,
    observed: dict[str, Any] | None = None,
) -> ScaleCommand:
    decision = record.decision
    return ScaleCommand(
        job=decision.job,
        target=decision.target,
        generation=record.generation,
        reason=decision.reason,
        source=record.source,
        policy=policy,
        epoch_time_s=epoch_time_s,
        observed=observed,
    )


# --- scale ------------------------------------------------------------------------------


class ScaleLockBusy(Exception):
    """Another worker holds the job's scale lock past the wait limit."""


# What a scaler call may fail with and a retry may fix (or not): reported per command.
SCALE_ERRORS = (TransientScaleError, PermanentScaleError, ScaleLockBusy, OSError)


@dataclass(frozen=True)
class ScaleResult:
    command: ScaleCommand
    outcome: str = ""
    error: Exception | None = None


@runtime_checkable
class RoutingScaler(Protocol):
    """A scaler that sends each job to one of several scalers (parameter-server mode)
    and can look up a batch's routes in one read."""

    def routed(
        self, jobs: Sequence[str], *, records: Mapping[str, JobRecord | None] | None = None
    ) -> Mapping[str, ReplicaScaler]: ...


def _scalers(
    rt: Runtime, jobs: Sequence[str], *, records: Mapping[str, JobRecord | None] | None = None
) -> Mapping[str, ReplicaScaler]:
    """Each job's scaler; looked up once per batch, not once per call (from ``records``,
    the jobs' records already read, when given)."""
    scaler = rt.scaler
    if isinstance(scaler, RoutingScaler):
        return scaler.routed(jobs, records=records)
    return dict.fromkeys(jobs, scaler)


def apply_scale(rt: Runtime, command: ScaleCommand) -> str:
    """Apply an absolute target; idempotent, and never older than the newest decision.

    Waits for the job's scale lock (up to its TTL). Raises
    ``TransientScaleError`` / ``PermanentScaleError`` from the scaler.
    """
    ttl = rt.settings.scale_lock_ttl
    scaler = _scalers(rt, [command.job])[command.job]
    lock = rt.store.lock(f"scale:{command.job}", ttl=ttl, blocking_timeout=ttl)
    if not lock.acquire():
        raise ScaleLockBusy(f"scale lock of {command.job} busy for {ttl}s")
    try:
        newest, applied = rt.store.generation_and_applied(command.job)
        outcome, record = _apply_locked(rt, scaler, command=command, newest=newest, applied=applied)
        if record is not None:
            rt.store.set_applied(command.job, record)
        return outcome
    finally:
        rt.store.release_lock(lock)


def apply_scales(rt: Runtime, commands: list[ScaleCommand]) -> list[ScaleResult]:
    """``apply_scale`` for a batch: the locks and bookkeeping of all in two round trips,
    one when every command comes with its lock (``ScaleCommand.lock``).

    A command whose job lock is held elsewhere (or by an earlier command of the
    same batch) waits for it on its own once the batch's locks are released.
    Scaler errors come back per command, never raised.
    """
    results: dict[int, ScaleResult] = {}
    ttl = rt.settings.scale_lock_ttl
    now = rt.clock.now()
    token = uuid.uuid4().hex
    tokens = [c.lock or token for c in commands]
    held = [_holds_lock(c, now=now, ttl=ttl) for c in commands]
    taking = [i for i, ok in enumerate(held) if not ok]
    # The locks' round trip also reads the records the routes come from.
    taken = rt.store.begin_scales([(commands[i].job, tokens[i]) for i in taking], ttl=ttl)
    begun = dict(zip(taking, taken, strict=True))
    for i, command in enumerate(commands):
        if held[i]:
            # Its decision was the newest when the lock was taken for it.
            begun[i] = BegunScale(
                locked=True, newest=command.generation, applied=None, record=command.record
            )
    jobs = [c.job for c in commands]
    try:
        scalers = _scalers(
            rt, jobs, records={c.job: begun[i].record for i, c in enumerate(commands)}
        )
    except Exception:
        # Nothing applied: the locks just taken go back at once.
        rt.store.finish_scales(
            [(c.job, tokens[i], None) for i, c in enumerate(commands) if begun[i].locked]
        )
        raise
    finished: list[tuple[str, str, AppliedTarget | None]] = []
    deferred: list[int] = []
    try:
        for index, command in enumerate(commands):
            begin = begun[index]
            if not begin.locked:
                deferred.append(index)
                continue
            record = None
            try:
                outcome, record = _apply_locked(
                    rt,
                    scalers[command.job],
                    command=command,
                    newest=begin.newest,
                    applied=begin.applied,
                )
                results[index] = ScaleResult(command, outcome=outcome)
            except SCALE_ERRORS as error:
                results[index] = ScaleResult(command, error=error)
            finished.append((command.job, tokens[index], record))
    finally:
        rt.store.finish_scales(finished)
    for index in deferred:
        try:
            results[index] = ScaleResult(commands[index], outcome=apply_scale(rt, commands[index]))
        except SCALE_ERRORS as error:
            results[index] = ScaleResult(commands[index], error=error)
    return [results[i] for i in range(len(commands))]


def _holds_lock(command: ScaleCommand, *, now: float, ttl: float) -> bool:
    """Whether ``command`` may apply under the lock taken for it, without taking it:
    within half the lock's TTL, so the apply ends well before it could expire."""
    return (
        command.lock is not None
        and command.locked_at is not None
        and now - command.locked_at < ttl / 2
    )


def _apply_locked(
    rt: Runtime,
    scaler: ReplicaScaler,
    *,
    command: ScaleCommand,
    newest: int,
    applied: AppliedTarget | None,
) -> tuple[str, AppliedTarget | None]:
    """The scale itself, under the job's lock: (outcome, what to record as applied)."""
    if command.generation < newest:
        return f"superseded by generation {newest}", None
    if applied is not None and applied.generation >= command.generation:
        return f"already applied (generation {applied.generation})", None
    rt.faults.pause("scaler_call", command.job)  # test-only: kill -9 before the write
    # Called even when the target is already in force: a retry after a write that
    # half-failed (Kubernetes: the Scale PUT went through, the ElasticJob /status
    # PUT did not) must still repair what the scaler records. The port makes a
    # call with the count in force a confirmation, not a second change; a
    # parameter server gets one answer per generation (KubeML's job waits for it).
    result = scaler.scale(command.request())
    rt.faults.pause("scaler_called", command.job)  # test-only: ... and after it
    if result.before == command.target:
        outcome = "already at target"
    else:
        outcome = f"scaled {result.before} -> {command.target}"
    record = AppliedTarget(
        generation=command.generation, target=command.target, at=rt.clock.now(), outcome=outcome
    )
    return outcome, record


def unapplied_command(rt: Runtime, job: str) -> ScaleCommand | None:
    """The job's newest decision as a scale command, if no scale applied it yet
    (recorded, but its scale maybe never sent, or lost with a worker)."""
    generation = rt.store.generation(job)
    applied = rt.store.applied(job)
    if generation == 0 or (applied is not None and applied.generation >= generation):
        return None
    decisions = rt.store.decisions(job, limit=20)
    newest = next((d for d in decisions if d.generation == generation), None)
    if newest is None:
        return None
    record = rt.store.get_job(job) if newest.source == "schedule" else None
    if newest.source == "autoscale":
        policy = rt.settings.cluster_policy
    else:
        policy = record.policy if record is not None else rt.settings.job_policy
    report = rt.store.last_report(job) if newest.source == "schedule" else None
    return command_for(
        newest, policy=policy, epoch_time_s=report.epoch_time_s if report is not None else None
    )


def lost_scales(rt: Runtime, *, now: float) -> list[ScaleCommand]:
    """The scales to send again: every job whose newest decision has waited for one
    longer than ``TRAINSCALER_SCALE_RESEND_AFTER`` (``workers.adapters.pending_scales``;
    a ``scale`` message is not recorded for redelivery, so a worker killed with
    one loses it). Each is marked under way from ``now``; a job with nothing left
    to apply leaves the index."""
    commands = []
    due = rt.store.due_scales(before=now - rt.settings.scale_resend_after, limit=SCALE_BATCH)
    for job in due:
        generation = rt.store.generation(job)
        command = unapplied_command(rt, job)
        if command is None:
            rt.store.settle_scale(job, generation=generation)
            continue
        rt.store.postpone_scale(job, until=now)
        commands.append(command)
    return commands


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
        # Defence in depth: the Kubernetes reader watches only the scope already.
        # The planner's cache (only this round builds it: workers hold none).
        jobs = tuple(
            j for j in rt.cluster_view.elastic_jobs() if settings.namespace_allowed(j.namespace)
        )
        cluster = rt.cluster_view.inquire()
        policy = settings.cluster_policy
        # Jobs driven by another policy (KubeML per-report) still count in the snapshot.
        candidates = tuple(j for j in jobs if j.policy == policy)
        # The reports ``schedule`` handed over since the last round (none is
        # seen twice: the commit below removes exactly these with the new state).
        inbox = rt.store.read_cluster_round(policy, limit=settings.queue_max_length)
        result = decide(
            policy,
            PolicyInput(
                jobs=candidates,
                cluster=cluster,
                reports=in_round_order(inbox.reports),
                now=started,
            ),
            state=load_state(policy, inbox.state),
            params=cluster_params(policy, settings),
        )
        rt.faults.pause("autoscale", str(run_id))
        if not rt.store.commit_cluster_round(inbox, result.state.model_dump_json()):
            # Another round (this one's lock expired meanwhile) consumed these reports.
            note = "superseded: another round committed the policy state first"
            return {"ran": False, "run_id": run_id, "note": note}
        plan: ScalingPlan = result.plan
        rt.metrics.record_plan(plan)
        generations: dict[str, int] = {}
        at = rt.clock.now()
        for decision in apply_order(plan.changes):
            generation = rt.store.record_autoscale_decision(decision, at=at)
            generations[decision.job] = generation
            changes.append(
                ScaleCommand(
                    job=decision.job,
                    target=decision.target,
                    generation=generation,
                    reason=decision.reason,
                    source="autoscale",
                    policy=policy,
                    # Handed on so the scale worker reads only the target's /scale.
                    observed=rt.observed_job(decision.job),
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
            policies={j.key: j.policy for j in jobs},
        )
        rt.store.save_plan(
            record,
            free=free_after(cluster, plan, jobs=jobs, max_load_desired=settings.max_load_desired),
        )
        for command in changes:
            send_scale(command)
    except Exception as error:
        note = f"failed: {error}"
        raise
    finally:
        try:
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
            rt.metrics.record_autoscale_round(rt.clock.now() - started)
        finally:
            # Even when recording fails (Redis lost mid-round): a lock left held
            # would hold every later round off for autoscale_lock_ttl.
            rt.store.release_lock(lock)
    return {"ran": True, "run_id": run_id, "changes": len(changes)}


def apply_order(changes: Sequence[ScalingDecision]) -> list[ScalingDecision]:
    """Shrinks first, so the GPUs they free are there for the grows; then the
    largest grows first (best-fit decreasing: small ones fill the gaps); ties
    by job key. Commands are sent in this order; one worker applies them in
    it, and the scheduler places the new pods in creation order (the
    simulator's ``kube`` placement assumes exactly this)."""
    return sorted(changes, key=lambda d: (d.delta > 0, -d.delta, d.job))


def cluster_params(policy: str, settings: Settings) -> dict[str, Any]:
    """The cluster policy's parameters: its settings entry, plus the load cap if it takes one."""
    params: dict[str, Any] = dict(settings.cluster_policy_params.get(policy, {}))
    if "max_load_desired" in get_policy(policy).params_type.model_fields:
        params.setdefault("max_load_desired", settings.max_load_desired)
    return params


def free_after(
    cluster: ClusterResource,
    plan: ScalingPlan,
    *,
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
