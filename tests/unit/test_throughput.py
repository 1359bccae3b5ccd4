"""The ``throughput`` policy: KubeML's rules, clamping, forgetting, state as data."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.models import ElasticJob, EpochReport, TaskOperation
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.throughput import ThroughputParams, ThroughputPolicy, ThroughputState
from scheduler_core.registry import decide, load_state

JOB = ElasticJob(name="j", min_replicas=1, max_replicas=4, default_parallelism=2)
KEY = JOB.key
POLICY = ThroughputPolicy()


def run(
    report: EpochReport, references: dict[str, float | None], params: ThroughputParams | None = None
) -> tuple[int, TaskOperation | None, str, dict[str, float | None]]:
    result = POLICY.decide(
        PolicyInput(jobs=(JOB,), reports=(report,)),
        ThroughputState(references=references),
        params=params or ThroughputParams(),
    )
    (decision,) = result.plan.decisions
    return decision.target, decision.operation, decision.reason.rule, result.state.references


CASES = [
    (
        "first contact creates with the default parallelism",
        EpochReport(job=KEY, replicas=0),
        {},
        (2, TaskOperation.CREATE_TASK, "throughput.create"),
        None,
    ),
    (
        "no reference yet: +1 and store",
        EpochReport(job=KEY, replicas=2, epoch_time_s=10.0),
        {KEY: None},
        (3, TaskOperation.UPDATE_TASK, "throughput.first_epoch"),
        10.0,
    ),
    (
        "exactly 1.05x the reference still scales up",
        EpochReport(job=KEY, replicas=2, epoch_time_s=10.5),
        {KEY: 10.0},
        (3, TaskOperation.UPDATE_TASK, "throughput.scale_up"),
        10.5,
    ),
    (
        "just over 1.05x keeps",
        EpochReport(job=KEY, replicas=2, epoch_time_s=10.51),
        {KEY: 10.0},
        (2, TaskOperation.UPDATE_TASK, "throughput.keep"),
        10.0,
    ),
    (
        "just under 1.2x keeps",
        EpochReport(job=KEY, replicas=2, epoch_time_s=11.99),
        {KEY: 10.0},
        (2, TaskOperation.UPDATE_TASK, "throughput.keep"),
        10.0,
    ),
    (
        "exactly 1.2x scales down and stores",
        EpochReport(job=KEY, replicas=2, epoch_time_s=12.0),
        {KEY: 10.0},
        (1, TaskOperation.UPDATE_TASK, "throughput.scale_down"),
        12.0,
    ),
    (
        "faster than the reference scales up",
        EpochReport(job=KEY, replicas=3, epoch_time_s=5.0),
        {KEY: 10.0},
        (4, TaskOperation.UPDATE_TASK, "throughput.scale_up"),
        5.0,
    ),
    (
        "clamped at max",
        EpochReport(job=KEY, replicas=4, epoch_time_s=5.0),
        {KEY: 10.0},
        (4, TaskOperation.UPDATE_TASK, "throughput.scale_up"),
        5.0,
    ),
    (
        "clamped at min",
        EpochReport(job=KEY, replicas=1, epoch_time_s=50.0),
        {KEY: 10.0},
        (1, TaskOperation.UPDATE_TASK, "throughput.scale_down"),
        50.0,
    ),
]


@pytest.mark.parametrize(
    ("report", "refs", "expected", "stored"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rules(
    report: EpochReport,
    refs: dict[str, float | None],
    expected: tuple[int, TaskOperation, str],
    stored: float | None,
) -> None:
    target, operation, rule, references = run(report, refs)
    assert (target, operation, rule) == expected
    assert references[KEY] == stored


def test_thresholds_are_parameters() -> None:
    strict = ThroughputParams(scale_up_threshold=1.0, scale_down_threshold=1.01)
    assert run(EpochReport(job=KEY, replicas=2, epoch_time_s=10.05), {KEY: 10.0}, strict)[0] == 2
    assert run(EpochReport(job=KEY, replicas=2, epoch_time_s=10.2), {KEY: 10.0}, strict)[0] == 1


def test_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="scale_up_threshold"):
        ThroughputParams(scale_up_threshold=1.5, scale_down_threshold=1.2)


def test_forget_drops_only_that_job() -> None:
    state = ThroughputState(references={KEY: 1.0, "other/j": 2.0})
    assert POLICY.forget(state, KEY).references == {"other/j": 2.0}


def test_reason_carries_the_numbers() -> None:
    result = POLICY.decide(
        PolicyInput(jobs=(JOB,), reports=(EpochReport(job=KEY, replicas=2, epoch_time_s=12.5),)),
        ThroughputState(references={KEY: 10.0}),
        params=ThroughputParams(),
    )
    reason = result.plan.decisions[0].reason
    assert reason.numbers["epoch_time_s"] == 12.5
    assert reason.numbers["reference_s"] == 10.0
    assert "1.2" in reason.message


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.1, max_value=100.0), min_size=1, max_size=30))
def test_state_round_trips_through_json_and_targets_stay_in_range(times: list[float]) -> None:
    state_json = ThroughputState().model_dump_json()
    replicas = 0
    for elapsed in [None, *times]:
        state = load_state("throughput", state_json)
        report = EpochReport(job=KEY, replicas=replicas, epoch_time_s=elapsed)
        result = decide("throughput", PolicyInput(jobs=(JOB,), reports=(report,)), state=state)
        replicas = result.plan.decisions[0].target
        assert JOB.min_replicas <= replicas <= JOB.max_replicas
        state_json = result.state.model_dump_json()
    assert KEY in ThroughputState.model_validate_json(state_json).references
