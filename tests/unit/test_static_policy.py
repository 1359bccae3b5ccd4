"""static: requested replicas all at once, never resized, backfill in arrival order."""

from __future__ import annotations

from scheduler_core.models import (
    ElasticJob,
    EpochReport,
)
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.static import StaticParams, StaticState
from scheduler_core.registry import decide
from tests.unit.builders import decision_of, gpu_cluster, gpu_job

PARAMS = StaticParams(max_load_desired=1.0)


def job(name: str, requested: int, current: int = 0) -> ElasticJob:
    return gpu_job(name, requested, current, max_replicas=16)


cluster = gpu_cluster


def arrivals(*pairs: tuple[str, float]) -> tuple[EpochReport, ...]:
    return tuple(EpochReport(job=f"default/{n}", replicas=0, at=t) for n, t in pairs)


def test_starts_in_arrival_order_with_backfill() -> None:
    request = PolicyInput(
        jobs=(job("c", 1), job("a", 3), job("b", 4)),
        cluster=cluster(4, 4),
        reports=arrivals(("a", 1.0), ("b", 2.0), ("c", 3.0)),
    )
    plan = decide("static", request, params=PARAMS).plan
    # a (3) starts; b (4) does not fit and waits; c (1) backfills.
    assert plan.targets() == {"default/a": 3, "default/b": 0, "default/c": 1}
    assert decision_of(plan, "default/b").reason.rule == "static.wait"


def test_running_jobs_are_never_resized() -> None:
    # Even with the whole cluster free and more asked for, a started job keeps its size.
    request = PolicyInput(jobs=(job("a", 8, current=2),), cluster=cluster(16, 14))
    plan = decide("static", request, params=PARAMS).plan
    assert plan.targets() == {"default/a": 2}
    assert decision_of(plan, "default/a").reason.rule == "static.keep"


def test_arrival_is_remembered_across_rounds() -> None:
    first = PolicyInput(
        jobs=(job("late", 4), job("early", 4)),
        cluster=cluster(4, 0),
        reports=arrivals(("early", 1.0), ("late", 9.0)),
        now=10.0,
    )
    state = decide("static", first, params=PARAMS).state
    assert state.arrivals == {"default/early": 1.0, "default/late": 9.0}
    second = PolicyInput(jobs=(job("late", 4), job("early", 4)), cluster=cluster(4, 4), now=70.0)
    plan = decide("static", second, state=state, params=PARAMS).plan
    assert plan.targets() == {"default/early": 4, "default/late": 0}
    assert isinstance(state, StaticState)


def test_load_cap_limits_starts() -> None:
    request = PolicyInput(jobs=(job("a", 4),), cluster=cluster(4, 4))
    plan = decide("static", request, params=StaticParams(max_load_desired=0.5)).plan
    assert plan.targets() == {"default/a": 0}
