"""Policy ``throughput``: KubeML's throughput-based parallelism policy.

After each epoch a job reports how long the epoch took. Compared with the
reference time stored for the job (state passed in and out, never kept here):

* first contact -> ``CREATE_TASK`` with the job's default parallelism;
* no reference yet -> +1 and store the time;
* epoch time <= ``scale_up_threshold`` x reference -> +1 and store;
* epoch time >= ``scale_down_threshold`` x reference -> -1 and store;
* otherwise keep the parallelism.

Beyond KubeML: targets are clamped to the job's [min, max], and ``forget``
drops a finished job's entry (KubeML ``taskFinished``).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from scheduler_core.models import (
    ElasticJob,
    EpochReport,
    Reason,
    ScalingDecision,
    ScalingPlan,
    TaskOperation,
)
from scheduler_core.policies.base import PolicyInput, PolicyParams, PolicyResult, PolicyState


class ThroughputParams(PolicyParams):
    # KubeML ThroughputScaleUpThreshold / ThroughPutScaleDownThreshold.
    scale_up_threshold: float = Field(default=1.05, gt=0)
    scale_down_threshold: float = Field(default=1.2, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> ThroughputParams:
        if self.scale_up_threshold > self.scale_down_threshold:
            raise ValueError("scale_up_threshold must be <= scale_down_threshold")
        return self


class ThroughputState(PolicyState):
    """Per job: the reference epoch time, or None when seen but not yet timed."""

    references: dict[str, float | None] = Field(default_factory=dict)


class ThroughputPolicy:
    name: ClassVar[str] = "throughput"
    params_type = ThroughputParams
    state_type = ThroughputState

    def decide(
        self, request: PolicyInput, state: ThroughputState, *, params: ThroughputParams
    ) -> PolicyResult[ThroughputState]:
        jobs = {job.key: job for job in request.jobs}
        references = dict(state.references)
        decisions: dict[str, ScalingDecision] = {}
        # Reports are applied in the order given: that order is the job's epoch order.
        for report in request.reports:
            decision, references = _decide_one(
                report, jobs.get(report.job), references=references, params=params
            )
            if (
                report.job in decisions
                and decisions[report.job].operation == TaskOperation.CREATE_TASK
            ):
                # A create followed by updates in one batch is still a create for the caller.
                decision = decision.model_copy(update={"operation": TaskOperation.CREATE_TASK})
            decisions[report.job] = decision
        plan = ScalingPlan(policy=self.name, decisions=tuple(decisions.values()))
        return PolicyResult(plan=plan, state=ThroughputState(references=references))

    def forget(self, state: ThroughputState, job: str) -> ThroughputState:
        """KubeML ``taskFinished``: drop the job's reference time."""
        return ThroughputState(references={k: v for k, v in state.references.items() if k != job})


def _decide_one(
    report: EpochReport,
    job: ElasticJob | None,
    *,
    references: dict[str, float | None],
    params: ThroughputParams,
) -> tuple[ScalingDecision, dict[str, float | None]]:
    current = report.replicas
    if report.job not in references:
        # KubeML: first contact creates the task with its default parallelism.
        default = job.default_parallelism if job is not None else max(current, 1)
        target = _clamp(job, default)
        references = {**references, report.job: report.epoch_time_s}
        reason = Reason(
            rule="throughput.create",
            message=f"first contact: create with default parallelism {default}",
            numbers={"default_parallelism": default, "target": target},
        )
        return _decision(
            report, target, reason=reason, operation=TaskOperation.CREATE_TASK
        ), references

    reference = references[report.job]
    epoch_time = report.epoch_time_s
    if epoch_time is None:
        reason = Reason(rule="throughput.no_time", message="report without an epoch time: keep")
        return _decision(report, _clamp(job, current), reason=reason), references

    numbers: dict[str, float | int | str | None] = {
        "epoch_time_s": epoch_time,
        "reference_s": reference,
        "scale_up_threshold": params.scale_up_threshold,
        "scale_down_threshold": params.scale_down_threshold,
    }
    if reference is None:
        # KubeML: no reference yet -> probe one more replica and remember this time.
        target, rule = current + 1, "throughput.first_epoch"
        message = f"first epoch time {epoch_time:.3f}s stored as reference: +1"
        references = {**references, report.job: epoch_time}
    elif epoch_time <= params.scale_up_threshold * reference:
        target, rule = current + 1, "throughput.scale_up"
        message = (
            f"epoch {epoch_time:.3f}s <= {params.scale_up_threshold} x reference "
            f"{reference:.3f}s: +1"
        )
        references = {**references, report.job: epoch_time}
    elif epoch_time >= params.scale_down_threshold * reference:
        target, rule = current - 1, "throughput.scale_down"
        message = (
            f"epoch {epoch_time:.3f}s >= {params.scale_down_threshold} x reference "
            f"{reference:.3f}s: -1"
        )
        references = {**references, report.job: epoch_time}
    else:
        target, rule = current, "throughput.keep"
        message = f"epoch {epoch_time:.3f}s within thresholds of reference {reference:.3f}s: keep"
    clamped = _clamp(job, target)
    if clamped != target:
        message += f" (clamped to [{_bounds(job)}] -> {clamped})"
        numbers["unclamped_target"] = target
    return _decision(
        report, clamped, reason=Reason(rule=rule, message=message, numbers=numbers)
    ), references


def _clamp(job: ElasticJob | None, replicas: int) -> int:
    # Beyond KubeML: never outside the job's [min, max]; never below one replica.
    if job is None:
        return max(1, replicas)
    return max(1, job.clamp(replicas)) if job.max_replicas >= 1 else 0


def _bounds(job: ElasticJob | None) -> str:
    return "1, inf" if job is None else f"{job.min_replicas}, {job.max_replicas}"


def _decision(
    report: EpochReport,
    target: int,
    *,
    reason: Reason,
    operation: TaskOperation = TaskOperation.UPDATE_TASK,
) -> ScalingDecision:
    return ScalingDecision(
        job=report.job, current=report.replicas, target=target, reason=reason, operation=operation
    )
