"""Read models over the runtime's state: jobs, the planner's newest plan, the queues.

Plain functions of a ``Runtime`` (no FastAPI here), so the CLI prints the
same views the API serves. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from scheduler_core.models import ElasticJob, EpochReport, JobPhase, ScalingDecision
from workers.adapters.state_records import PlanRecord
from workers.adapters.state_store import DecisionRecord, JobRecord, StateStore
from workers.api.schemas import (
    AppliedView,
    DeadLettersView,
    DecisionView,
    EpochView,
    JobDetail,
    JobState,
    JobSummary,
    PlanView,
    QueueStatsView,
    QueueView,
)
from workers.observability.metrics import CELERY_QUEUES
from workers.targets import has_parameter_server
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


def _fulfillment(low: int | None, high: int | None, *, replicas: int | None) -> float | None:
    # EDL: fulfillment (cur - min) / (max - min), 1 when max == min.
    if low is None or high is None or replicas is None:
        return None
    return 1.0 if high == low else (replicas - low) / (high - low)


@dataclass(frozen=True)
class ClusterJobs:
    """The cluster's ElasticJobs by key, or why they could not be read."""

    jobs: Mapping[str, ElasticJob]
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.error is None


def read_cluster_jobs(rt: Runtime) -> ClusterJobs:
    try:
        return ClusterJobs({job.key: job for job in rt.cluster_reader.elastic_jobs()})
    except Exception as error:  # any adapter failure: shown on the jobs, never fatal
        return ClusterJobs({}, error=f"cluster unreadable: {error}"[:300])


def job_name(record: JobRecord | None, elastic: ElasticJob | None, *, job: str) -> str:
    """What people call the job: the ElasticJob's name, the request's function name
    (KubeML names a job by its function), else model and dataset, else its id."""
    if elastic is not None:
        return elastic.name
    request = record.request if record else None
    if request is not None and request.function_name:
        return request.function_name
    if request is not None:
        return f"{request.model_type}-{request.dataset}"
    return job.rsplit("/", 1)[-1]


def _state(
    record: JobRecord | None,
    elastic: ElasticJob | None,
    *,
    job: str,
    cluster: ClusterJobs,
    scaler: str,
    applied: bool,
) -> tuple[JobState, str | None, bool]:
    """(state, what it waits for, whether its decisions can land anywhere)."""
    if record is not None and record.finished_at is not None and elastic is None:
        return "finished", None, True
    if elastic is not None:  # its own state: an ElasticJob may be created again
        if elastic.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
            return "finished", None, True
        if elastic.started:
            return "running", None, True
        return "waiting", "its pods to be scheduled", True
    request = record.request if record else None
    if request is None:
        if not cluster.known:
            return "waiting", cluster.error, True
        return "waiting", f"its ElasticJob {job} (not in the cluster)", False
    if has_parameter_server(request) or scaler != "kubernetes":
        return ("running", None, True) if applied else ("waiting", "its first decision", True)
    if not cluster.known:
        return "waiting", cluster.error, True
    return "waiting", f"its ElasticJob {job} (the request has no ps_url)", False


def _summary(
    rt: Runtime,
    job: str,
    *,
    record: JobRecord | None,
    decisions: list[DecisionRecord],
    cluster: ClusterJobs,
    plan: PlanRecord | None,
) -> JobSummary:
    store = rt.store
    elastic = cluster.jobs.get(job)
    applied = store.applied(job)
    last = store.last_report(job)
    request = record.request if record else None
    low: int | None
    high: int | None
    replicas: int | None
    if elastic is not None:
        low, high, replicas = elastic.min_replicas, elastic.max_replicas, elastic.current_replicas
        policy: str | None = elastic.policy
        kind = "elasticjob"
    else:
        low = request.min_replicas if request else None
        high = request.max_replicas if request else None
        replicas = applied.target if applied else None
        policy = record.policy if record else None
        kind = "train-request" if request else "unknown"
    state, waiting_for, scalable = _state(
        record,
        elastic,
        job=job,
        cluster=cluster,
        scaler=rt.settings.scaler,
        applied=applied is not None,
    )
    if state == "finished":
        replicas = None  # it holds nothing any more, whatever it last had
    return JobSummary(
        job=job,
        job_id=record.job_id if record else job.rsplit("/", 1)[-1],
        name=job_name(record, elastic, job=job),
        kind=kind,
        policy=policy,
        min_replicas=low,
        max_replicas=high,
        replicas=replicas,
        desired=decisions[0].decision.target if decisions else None,
        fulfillment=_fulfillment(low, high, replicas=replicas),
        state=state,
        waiting_for=waiting_for,
        scalable=scalable,
        finished=state == "finished",
        last_epoch=last.epoch if last else None,
        last_epoch_time_s=last.epoch_time_s if last else None,
        last_reason=(
            f"{decisions[0].decision.reason.rule}: {decisions[0].decision.reason.message}"
            if decisions
            else None
        ),
        **_planned_numbers(plan, job),
    )


def _planned_numbers(plan: PlanRecord | None, job: str) -> dict[str, Any]:
    """goodput's estimates for ``job`` in the newest plan: remaining time, efficient size, rank."""
    decision = plan.plan.for_job(job) if plan is not None else None
    numbers = decision.reason.numbers if decision is not None else {}
    remaining, efficient, rank = (
        numbers.get("estimated_remaining_s"),
        numbers.get("efficient_size"),
        numbers.get("rank"),
    )
    return {
        "estimated_remaining_s": float(remaining) if isinstance(remaining, int | float) else None,
        "efficient_size": efficient if isinstance(efficient, int) else None,
        "rank": rank if isinstance(rank, int) else None,
    }


def job_keys(rt: Runtime, cluster: ClusterJobs) -> list[str]:
    """Every job: those the runtime recorded and every ElasticJob in the cluster."""
    return sorted(set(rt.store.job_names()) | set(cluster.jobs))


def list_jobs(rt: Runtime) -> list[JobSummary]:
    cluster = read_cluster_jobs(rt)
    keys = job_keys(rt, cluster)
    records = rt.store.get_jobs(keys)
    plan = rt.store.latest_plan()
    summaries = [
        _summary(
            rt,
            key,
            record=records.get(key),
            decisions=rt.store.decisions(key, limit=1),
            cluster=cluster,
            plan=plan,
        )
        for key in keys
    ]
    return sorted(summaries, key=lambda s: (s.name, s.job))  # as people look for them


def find_job(rt: Runtime, ident: str, *, namespace: str | None = None) -> str | None:
    """``resolve_job`` over the recorded jobs, then over the cluster's ElasticJobs."""
    found = resolve_job(rt.store, ident, namespace=namespace)
    if found is not None:
        return found
    keys = read_cluster_jobs(rt).jobs
    key = ident if "/" in ident else f"{namespace or 'default'}/{ident}"
    return key if key in keys else None


def job_detail(rt: Runtime, job: str) -> JobDetail:
    store = rt.store
    record = store.get_job(job)
    decisions = store.decisions(job, limit=RECENT_DECISIONS)
    plan = store.latest_plan()
    summary = _summary(
        rt, job, record=record, decisions=decisions, cluster=read_cluster_jobs(rt), plan=plan
    )
    reports = store.metrics(job, limit=RECENT_EPOCHS)
    last = store.last_report(job)
    if last is not None and last not in reports:
        reports = [last, *reports][:RECENT_EPOCHS]
    epochs = [_epoch_view(r, record) for r in reports]
    times = [e.epoch_time_s for e in epochs if e.epoch_time_s]
    mean_time = fmean(times) if times else None
    applied = store.applied(job)
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


def newest_plan(rt: Runtime) -> PlanView | None:
    """The planner's newest autoscale round: what it decided, why, and the cluster it saw.

    Read from the stored plan record; the API never runs a policy itself (one
    planner per deployment, issue 16). None before the first round.
    """
    record = rt.store.latest_plan()
    if record is None:
        return None
    return PlanView(
        policy=record.plan.policy,
        run_id=record.run_id,
        at=record.at,
        jobs_considered=len(record.plan.decisions),
        changes=len(record.plan.changes),
        cluster=record.cluster,
        decisions=[decision_view(d) for d in record.plan.decisions],
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
