"""Response bodies of the API (and of the CLI, which prints the same views)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from scheduler_core.models import ClusterResource, Reason, TrainRequest


class View(BaseModel):
    model_config = ConfigDict(frozen=True)


class TrainAnswer(View):
    """``POST /train``: the job's key (``namespace/job_id``), its id and where to look."""

    job: str
    job_id: str
    task_id: str
    recorded: bool
    poll: str


class ReportAnswer(View):
    """``POST /job``: the parallelism to use next, once the runtime decided it."""

    job: str
    decided: bool
    parallelism: int | None = None
    reason: Reason | None = None
    generation: int | None = None
    poll: str


class FinishAnswer(View):
    job: str
    finished: bool
    finished_at: float | None = None
    task_id: str | None = None


class DecisionView(View):
    generation: int | None = None
    at: float | None = None
    source: str | None = None
    job: str
    current: int
    target: int
    direction: str
    rule: str
    message: str
    numbers: dict[str, float | int | str | None] = {}


class EpochView(View):
    epoch: int | None = None
    epoch_time_s: float | None = None
    replicas: int
    at: float
    epochs_per_hour: float | None = None
    samples_per_s: float | None = None


class AppliedView(View):
    generation: int
    target: int
    at: float
    outcome: str


JobState = Literal["running", "waiting", "finished"]


class JobSummary(View):
    """One job, as the live table, ``trainscaler jobs`` and ``GET /jobs`` show it."""

    job: str  # the key, namespace/name
    job_id: str
    name: str
    kind: Literal["elasticjob", "train-request", "unknown"] = "unknown"
    policy: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    replicas: int | None = None  # current
    desired: int | None = None  # the newest decision's target
    fulfillment: float | None = None
    state: JobState = "waiting"
    waiting_for: str | None = None
    # False when no decision of this job can ever be applied (no ps_url, no ElasticJob).
    scalable: bool = True
    finished: bool = False
    last_epoch: int | None = None
    last_epoch_time_s: float | None = None
    last_reason: str | None = None
    # goodput's numbers for the job in the newest cluster plan (None under other policies).
    estimated_remaining_s: float | None = None
    efficient_size: int | None = None
    rank: int | None = None


class JobDetail(JobSummary):
    created_at: float | None = None
    finished_at: float | None = None
    request: TrainRequest | None = None
    generation: int = 0
    applied: AppliedView | None = None
    recent_epochs: list[EpochView] = []
    mean_epoch_time_s: float | None = None
    throughput_epochs_per_hour: float | None = None
    decisions: list[DecisionView] = []
    # This job's decision in the newest cluster plan (kept ones too, with their numbers).
    planned: DecisionView | None = None


class PlanView(View):
    """The planner's newest autoscale round: each decision with its reason."""

    policy: str
    run_id: int
    at: float
    jobs_considered: int
    changes: int
    cluster: ClusterResource
    decisions: list[DecisionView]


class QueueStatsView(View):
    depth: int
    in_flight: int
    oldest_age_s: float | None = None


class DeadLettersView(View):
    count: int
    newest: list[dict[str, Any]]


class QueueView(View):
    queues: dict[str, QueueStatsView]
    celery: dict[str, int]
    dead_letters: DeadLettersView


class HealthView(View):
    status: str
    checks: dict[str, str]
    failing: list[str] = []
