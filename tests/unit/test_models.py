"""Core models: validation at the edges, JSON round trips, registry lookups."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from scheduler_core.models import (
    ElasticJob,
    EpochReport,
    Reason,
    ScalingDecision,
    ScalingPlan,
    TaskOperation,
    TrainRequest,
    TrainTask,
)
from scheduler_core.policies.base import PolicyInput
from scheduler_core.registry import UnknownPolicyError, decide, get_policy, load_state, policy_names


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"name": "j", "min_replicas": 3, "max_replicas": 2},
            "min_replicas (3) must be <= max_replicas (2)",
        ),
        ({"name": "", "min_replicas": 1, "max_replicas": 2}, "at least 1 character"),
        ({"name": "j", "min_replicas": -1, "max_replicas": 2}, "greater than or equal to 0"),
        ({"name": "j", "unknown": 1}, "Extra inputs are not permitted"),
    ],
)
def test_elastic_job_rejects_bad_input(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ElasticJob.model_validate(fields)


@pytest.mark.parametrize(
    ("cur", "lo", "hi", "expected"),
    [(0, 0, 4, 0.0), (2, 0, 4, 0.5), (4, 0, 4, 1.0), (3, 3, 3, 1.0), (1, 2, 6, -0.25)],
)
def test_fulfillment(cur: int, lo: int, hi: int, expected: float) -> None:
    job = ElasticJob(name="j", min_replicas=lo, max_replicas=hi, current_replicas=cur)
    assert job.fulfillment == expected


def test_task_operation_values_match_kubeml() -> None:
    assert [int(op) for op in TaskOperation] == [0, 1]
    assert [op.name for op in TaskOperation] == ["CREATE_TASK", "UPDATE_TASK"]


def test_train_task_round_trips_through_json() -> None:
    task = TrainTask(
        job_id="abc",
        parameters=TrainRequest(model_type="resnet", batch_size=64, epochs=3, dataset="cifar10"),
    )
    assert TrainTask.model_validate_json(task.model_dump_json()) == task


def test_train_request_bounds_are_checked() -> None:
    with pytest.raises(ValidationError, match="min_replicas"):
        TrainRequest(
            model_type="m", batch_size=1, epochs=1, dataset="d", min_replicas=5, max_replicas=2
        )


def test_epoch_report_rejects_non_positive_times() -> None:
    with pytest.raises(ValidationError):
        EpochReport(job="a/b", replicas=1, epoch_time_s=0)


def test_plan_changes_and_directions() -> None:
    reason = Reason(rule="r", message="m")
    plan = ScalingPlan(
        policy="p",
        decisions=(
            ScalingDecision(job="a", current=1, target=2, reason=reason),
            ScalingDecision(job="b", current=2, target=2, reason=reason),
            ScalingDecision(
                job="c", current=0, target=0, reason=reason, operation=TaskOperation.CREATE_TASK
            ),
        ),
    )
    assert [d.job for d in plan.changes] == ["a", "c"]
    assert plan.decisions[0].direction == "up"
    assert plan.for_job("b") is not None and plan.for_job("b").direction == "none"  # type: ignore[union-attr]


def test_registry_knows_the_core_policies_and_rejects_unknown_names() -> None:
    assert {"edl", "throughput"} <= set(policy_names())
    with pytest.raises(UnknownPolicyError, match="unknown policy 'nope'"):
        get_policy("nope")


def test_registry_rejects_corrupt_state() -> None:
    with pytest.raises(ValueError, match="stored state of policy 'throughput'"):
        load_state("throughput", '{"references": "not a dict"}')


def test_registry_validates_params() -> None:
    with pytest.raises(ValidationError, match="max_load_desired"):
        decide("edl", PolicyInput(), params={"max_load_desired": 2.0})


def test_train_request_accepts_kubemls_lr_and_writes_learning_rate() -> None:
    kubeml = {"model_type": "lenet", "batch_size": 64, "epochs": 5, "dataset": "mnist"}
    request = TrainRequest.model_validate({**kubeml, "lr": 0.05})
    assert request.learning_rate == 0.05
    assert TrainRequest.model_validate({**kubeml, "learning_rate": 0.2}).learning_rate == 0.2
    assert TrainRequest(**kubeml, learning_rate=0.3).learning_rate == 0.3
    dumped = request.model_dump(mode="json")
    assert dumped["learning_rate"] == 0.05 and "lr" not in dumped
    assert TrainRequest.model_validate(dumped) == request
