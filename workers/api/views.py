"""Read models over the runtime's state: jobs, the dry-run plan, the queues.

Plain functions of a ``Runtime`` (no FastAPI here), so the CLI prints the
same views the API serves. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean

from scheduler_core.models import EpochReport, ScalingDecision
from scheduler_core.policies.base import PolicyInput, in_round_order
from scheduler_core.registry import decide, load_state
from workers.adapters.state_store import DecisionRecord, JobRecord, StateStore
from workers.api.schemas import (
    AppliedView,
    DeadLettersView,
    DecisionView,
    EpochView,
    JobDetail,
    JobSummary,
    PlanPreview,
    QueueStatsView,
    QueueView,
)
from workers.observability.metrics import CELERY_QUEUES
from workers.scaling import cluster_params
from workers.wiring import Runtime

RECENT_EPOCHS = 20
RECENT_DECISIONS = 50


def resolve_job(store: StateStore, ident: str, *, namespace: str | None = None) -> str | None:
    """The job key for ``namespace/name``, or a bare id unique across namespaces."""
    names = store.job_names()
    if "/" in ident:
        return ident if ident in names else None
    if namespace is not None:
        key = f"{namespace}/{ident}"
        return key if key in names else None
    matches = [n for n in names if n.rsplit("/", 1)[-1] == ident]
    return matches[0] if len(matches) == 1 else None


def decision_view(decision: ScalingDecision, record: DecisionRecord | None = None) -> DecisionView:
    return DecisionView(
        generation=record.generation if record else None,
        at=record.at if record else None,
        source=record.source if record else None,
        job=decision.job,
        current=decision.current,
        target=decision.target,
        direction=decision.direction,
        rule=decision.reason.rule,
        message=decision.reason.message,
        numbers=dict(decision.reason.numbers),
    )


def _epoch_view(report: EpochReport, record: JobRecord | None) -> EpochView:
    epochs_per_hour = samples = None
    if report.epoch_time_s:
        epochs_per_hour = 3600.0 / report.epoch_time_s
        if record and record.request and report.iterations:
            samples = record.request.batch_size * report.iterations / report.epoch_time_s
    return EpochView(
        epoch=report.epoch,
        epoch_time_s=report.epoch_time_s,
        replicas=report.replicas,
        at=report.at,
        epochs_per_hour=epochs_per_hour,
        samples_per_s=samples,
    )


def _fulfillment(record: JobRecord | None, replicas: int | None) -> float | None:
    # EDL: fulfillment (cur - min) / (max - min), 1 when max == min.
    if record is None or record.request is None or replicas is None:
        return None
    low, high = record.request.min_replicas, record.request.max_replicas
    return 1.0 if high == low else (replicas - low) / (high - low)


def job_summary(store: StateStore, job: str) -> JobSummary:
    return _summary(store, job, store.get_job(job), store.decisions(job, limit=1))


def _summary(
    store: StateStore, job: str, record: JobRecord | None, decisions: list[DecisionRecord]
) -> JobSummary:
    applied = store.applied(job)
    last = store.last_report(job)
    replicas = applied.target if applied else None
    request = record.request if record else None
    return JobSummary(
        job=job,
        job_id=record.job_id if record else job.rsplit("/", 1)[-1],
        policy=record.policy if record else None,
        min_replicas=request.min_replicas if request else None,
        max_replicas=request.max_replicas if request else None,
        replicas=replicas,
        desired=decisions[0].decision.target if decisions else None,
        fulfillment=_fulfillment(record, replicas),
        finished=bool(record and record.finished_at is not None),
        last_epoch_time_s=last.epoch_time_s if last else None,
        last_reason=(
            f"{decisions[0].decision.reason.rule}: {decisions[0].decision.reason.message}"
            if decisions
            else None
        ),
    )


def list_jobs(store: StateStore) -> list[JobSummary]:
    return [job_summary(store, job) for job in store.job_names()]


def job_detail(store: StateStore, job: str) -> JobDetail:
    record = store.get_job(job)
    decisions = store.decisions(job, limit=RECENT_DECISIONS)
    summary = _summary(store, job, record, decisions)
    reports = store.metrics(job, limit=RECENT_EPOCHS)
    last = store.last_report(job)
    if last is not None and last not in reports:
        reports = [last, *reports][:RECENT_EPOCHS]
    epochs = [_epoch_view(r, record) for r in reports]
    times = [e.epoch_time_s for e in epochs if e.epoch_time_s]
    mean_time = fmean(times) if times else None
    applied = store.applied(job)
    plan = store.latest_plan()
    planned = plan.plan.for_job(job) if plan is not None else None
    return JobDetail(
        **summary.model_dump(),
        planned=decision_view(planned) if planned is not None else None,
        created_at=record.created_at if record else None,
        finished_at=record.finished_at if record else None,
        request=record.request if record else None,
        generation=store.generation(job),
        applied=AppliedView(**applied.model_dump()) if applied else None,
        recent_epochs=epochs,
        mean_epoch_time_s=mean_time,
        throughput_epochs_per_hour=3600.0 / mean_time if mean_time else None,
        decisions=[decision_view(d.decision, d) for d in decisions],
    )


def preview_plan(rt: Runtime, *, policy: str | None = None) -> PlanPreview:
    """Run the cluster planner over the cluster reader now, applying nothing."""
    name = policy or rt.settings.cluster_policy
    jobs = tuple(rt.cluster_reader.elastic_jobs())
    cluster = rt.cluster_reader.inquire()
    candidates = tuple(j for j in jobs if j.policy == name)
    now = rt.clock.now()
    # What the next round will see: the stored state and the reports waiting for it.
    inbox = rt.store.read_cluster_round(name, limit=rt.settings.queue_max_length)
    result = decide(
        name,
        PolicyInput(
            jobs=candidates, cluster=cluster, reports=in_round_order(inbox.reports), now=now
        ),
        state=load_state(name, inbox.state),
        params=cluster_params(name, rt.settings),
    )
    return PlanPreview(
        policy=name,
        at=now,
        jobs_considered=len(candidates),
        changes=len(result.plan.changes),
        cluster=cluster,
        decisions=[decision_view(d) for d in result.plan.decisions],
    )


def queue_view(rt: Runtime, *, dead_letters: int = 10) -> QueueView:
    stats = rt.queue.stats(now=rt.clock.now())
    celery: Mapping[str, int] = {name: int(rt.redis.llen(name)) for name in CELERY_QUEUES}
    return QueueView(
        queues={
            name: QueueStatsView(depth=s.depth, in_flight=s.in_flight, oldest_age_s=s.oldest_age_s)
            for name, s in stats.items()
        },
        celery=dict(celery),
        dead_letters=DeadLettersView(
            count=rt.dead_letters.count(),
            newest=[d.model_dump(mode="json") for d in rt.dead_letters.list(limit=dead_letters)]
            if dead_letters > 0
            else [],
        ),
    )
