"""goodput: capacity, bounds, the hold rule, no starvation, learning from reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core.curves import Curve, CurvePoint, add_point
from scheduler_core.goodput_books import GoodputApp, GoodputJob
from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    EpochReport,
    JobPhase,
    NodeResources,
    Resources,
    ScalingDecision,
    ScalingPlan,
)
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.goodput import GoodputParams, GoodputState
from scheduler_core.registry import decide, load_state
from tests.unit.sim_fixtures import write_data
from trainscaler_sim.trace.engine import SimConfig, simulate
from trainscaler_sim.trace.traces import load_traces
from trainscaler_sim.trace.workload import WorkloadJob


def decision_of(plan: ScalingPlan, key: str) -> ScalingDecision:
    found = plan.for_job(key)
    assert found is not None, key
    return found


GPU = Resources(gpu=1)
PARAMS = GoodputParams(max_load_desired=1.0)


def job(
    name: str,
    *,
    current: int = 0,
    running: bool | None = None,
    max_replicas: int = 16,
    requested: int = 1,
    application: str | None = "app",
    paused: bool = False,
) -> ElasticJob:
    is_running = bool(current) if running is None else running
    return ElasticJob(
        name=name,
        min_replicas=1,
        max_replicas=max_replicas,
        current_replicas=current,
        phase=JobPhase.RUNNING if is_running else JobPhase.PENDING,
        default_parallelism=min(requested, max_replicas),
        requests=GPU,
        limits=GPU,
        application=application,
        paused=paused,
    )


def cluster(free: list[int], gpus_per_node: int = 4) -> ClusterResource:
    return ClusterResource(
        node_count=len(free),
        gpu_total=len(free) * gpus_per_node,
        nodes=NodeResources(nodes_gpu_free={f"node-{i:02d}": f for i, f in enumerate(free)}),
    )


# --- properties over arbitrary inputs ------------------------------------------------

job_specs = st.lists(
    st.tuples(
        st.integers(1, 16),  # max replicas
        st.integers(0, 16),  # current
        st.booleans(),  # running
        st.sampled_from(["x", "y", None]),
        st.integers(1, 8),  # requested
        st.booleans(),  # reports an epoch
        st.floats(0.5, 500.0),  # epoch time
        st.integers(1, 400),  # iterations
        st.integers(0, 6),  # nodes reported
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=job_specs,
    nodes=st.integers(1, 4),
    per_node=st.integers(1, 4),
    load=st.sampled_from([0.5, 0.97, 1.0]),
    rounds=st.integers(1, 3),
)
def test_never_over_capacity_and_within_bounds(specs, nodes, per_node, load, rounds) -> None:
    jobs = []
    reports = []
    for i, (
        high,
        current,
        running,
        app,
        requested,
        reports_epoch,
        seconds,
        its,
        nodes_seen,
    ) in enumerate(specs):
        current = min(current, high)
        jobs.append(
            job(
                f"j{i}",
                current=current,
                running=running and current > 0,
                max_replicas=high,
                requested=requested,
                application=app,
            )
        )
        reports.append(EpochReport(job=f"default/j{i}", replicas=0, total_epochs=10, at=0.0))
        if reports_epoch and current > 0:
            reports.append(
                EpochReport(
                    job=f"default/j{i}",
                    replicas=current,
                    epoch_time_s=seconds,
                    epoch=1,
                    total_epochs=10,
                    iterations=its,
                    nodes=nodes_seen,
                    at=seconds,
                )
            )
    params = GoodputParams(max_load_desired=load)
    state = None
    for round_ in range(rounds):
        request = PolicyInput(
            jobs=tuple(jobs),
            cluster=cluster([per_node] * nodes, per_node),
            reports=tuple(reports) if round_ == 0 else (),
            now=60.0 * (round_ + 1),
        )
        result = decide("goodput", request, state=state, params=params)
        state = result.state
        cap = int(nodes * per_node * load)
        targets = result.plan.targets()
        assert sum(targets.values()) <= cap
        for item in jobs:
            target = targets[item.key]
            assert target == 0 or item.min_replicas <= target <= item.max_replicas
        assert load_state("goodput", state.model_dump_json()) == state


def test_paused_jobs_are_untouched() -> None:
    request = PolicyInput(
        jobs=(job("p", current=3, paused=True), job("q")), cluster=cluster([1]), now=60.0
    )
    plan = decide("goodput", request, params=PARAMS).plan
    assert decision_of(plan, "default/p").target == 3
    assert decision_of(plan, "default/p").reason.rule == "goodput.paused"


# --- the hold rule -----------------------------------------------------------------------


def _state_with_curve(units_done: float) -> GoodputState:
    # t(4) = 1.0 s/unit, t(8) = 0.55 s/unit: efficiency at 8 = 4 / 4.4 = 0.91.
    points = [
        CurvePoint(replicas=4, seconds_per_unit=1.0),
        CurvePoint(replicas=8, seconds_per_unit=0.55),
    ]
    return GoodputState(
        jobs={
            "default/a": GoodputJob(
                application="app",
                arrival=0.0,
                total_epochs=10,
                epochs_done=5,
                units_done=units_done,
                last_epoch_units=100.0,
                size=4,
                measured=True,  # a clean epoch at 4 is in (rule goodput.measure)
            )
        },
        apps={"app": GoodputApp(points=points, total_units=1000.0, total_measured=True)},
        last_now=0.0,
    )


def test_no_resize_without_predicted_gain() -> None:
    # 100 units left: 100 s at 4, 55 s at 8; saving 45 s < 2 x 30 s restart.
    request = PolicyInput(jobs=(job("a", current=4),), cluster=cluster([0, 4]), now=60.0)
    plan = decide("goodput", request, state=_state_with_curve(900.0), params=PARAMS).plan
    decision = decision_of(plan, "default/a")
    assert decision.target == 4
    assert decision.reason.rule == "goodput.keep"


def test_resizes_when_the_saving_beats_the_restart() -> None:
    # 1000 units left: 1000 s at 4, 550 s at 8: worth a restart.
    request = PolicyInput(jobs=(job("a", current=4),), cluster=cluster([0, 4]), now=60.0)
    plan = decide("goodput", request, state=_state_with_curve(0.0), params=PARAMS).plan
    decision = decision_of(plan, "default/a")
    assert decision.target == 8
    assert decision.reason.rule == "goodput.grow"
    assert decision.reason.numbers["efficient_size"] == 8


def test_shortest_first_at_efficient_size() -> None:
    state = _state_with_curve(0.0)
    near_done = state.jobs["default/a"].model_copy(update={"units_done": 950.0})
    state = state.model_copy(
        update={"jobs": {"default/a": state.jobs["default/a"], "default/b": near_done}}
    )
    request = PolicyInput(jobs=(job("a"), job("b")), cluster=cluster([4, 4]), now=60.0)
    plan = decide("goodput", request, state=state, params=PARAMS).plan
    # b (50 units left) ranks first and gets its efficient size 8: nothing left for a.
    assert plan.targets() == {"default/a": 0, "default/b": 8}
    assert decision_of(plan, "default/b").reason.numbers["rank"] == 0


# --- a job that never reports ------------------------------------------------------------


def test_a_job_that_never_reports_gets_its_requested_replicas_and_never_more() -> None:
    state = None
    current = 0
    for round_index in range(12):
        free = [4 - min(current, 4), 4 - max(current - 4, 0)]
        request = PolicyInput(
            jobs=(job("n", current=current, requested=2, application=None),),
            cluster=cluster(free),
            now=60.0 * round_index,
        )
        result = decide("goodput", request, state=state, params=PARAMS)
        state = result.state
        decision = decision_of(result.plan, "default/n")
        assert decision.reason.rule == "goodput.unknown"
        assert decision.target == 2  # requested, into free GPUs; no evidence, no growth
        current = decision.target


def test_a_job_that_never_reports_waits_for_free_gpus_then_starts() -> None:
    state = _state_with_curve(0.0)
    busy = PolicyInput(
        jobs=(job("a", current=8), job("n", requested=2, application=None)),
        cluster=cluster([0, 0]),
        now=60.0,
    )
    result = decide("goodput", busy, state=state, params=PARAMS)
    # Never by preempting a job whose estimate is known.
    assert result.plan.targets() == {"default/a": 8, "default/n": 0}
    freed = PolicyInput(
        jobs=(job("n", requested=2, application=None),), cluster=cluster([4, 4]), now=120.0
    )
    later = decide("goodput", freed, state=result.state, params=PARAMS)
    assert later.plan.targets() == {"default/n": 2}


# --- learning -----------------------------------------------------------------------------


def test_learns_curve_points_from_clean_reports_only() -> None:
    first = PolicyInput(
        jobs=(job("a"),),
        cluster=cluster([4]),
        reports=(EpochReport(job="default/a", replicas=0, total_epochs=4, at=0.0),),
        now=0.0,
    )
    result = decide("goodput", first, params=PARAMS)
    assert result.plan.targets() == {"default/a": 1}  # blind: its requested size
    # The start at t=0 costs 30 s: an epoch that began at 30 s is clean.
    clean = EpochReport(
        job="default/a",
        replicas=1,
        epoch_time_s=50.0,
        epoch=1,
        total_epochs=4,
        iterations=100,
        nodes=1,
        at=80.0,
    )
    second = PolicyInput(
        jobs=(job("a", current=1),), cluster=cluster([3]), reports=(clean,), now=120.0
    )
    state = decide("goodput", second, state=result.state, params=PARAMS).state
    assert state.jobs["default/a"].points == [CurvePoint(replicas=1, seconds_per_unit=0.5)]
    assert state.apps["app"].points == [CurvePoint(replicas=1, seconds_per_unit=0.5)]
    mixed = clean.model_copy(update={"epoch_time_s": 60.0, "at": 80.0})
    mixed_state = decide(
        "goodput",
        second.model_copy(update={"reports": (mixed,)}),
        state=result.state,
        params=PARAMS,
    ).state
    assert mixed_state.jobs["default/a"].points == []
    assert mixed_state.jobs["default/a"].provisional is not None


def test_curve_interpolates_and_probes_while_scaling() -> None:
    curve = Curve.from_points([[CurvePoint(replicas=2, seconds_per_unit=1.0)]], threshold=0.8)
    assert curve.efficient_size(16) == (2, True)  # still scaling: a probe is due
    curve = Curve.from_points(
        [
            [
                CurvePoint(replicas=2, seconds_per_unit=1.0),
                CurvePoint(replicas=6, seconds_per_unit=0.5),
            ]
        ],
        threshold=0.8,
    )
    # One replica's time is bounded by the best GPU-seconds: 2 x 1.0.
    assert curve.efficiency(6) == pytest.approx(2.0 / 3.0)
    assert curve.efficient_size(16) == (2, False)
    # Between 2 and 6, GPU-seconds per unit are interpolated: 2.0 -> 3.0.
    assert curve.unit_time(4) == pytest.approx((2.0 + (3.0 - 2.0) / 2) / 4)


def test_points_stay_bounded() -> None:
    points: list[CurvePoint] = []
    for n in range(1, 30):
        points = add_point(points, n, seconds_per_unit=1.0 / n, limit=8)
    assert len(points) == 8
    assert points[-1].replicas == 29


# --- no starvation -------------------------------------------------------------------------


def _stream_run(tmp_path: Path, aging: float) -> float:
    traces = load_traces(write_data(tmp_path))
    # A short job every round keeps the only GPU busy; "long" arrives at 5 s.
    stream = [WorkloadJob(f"s{i:04d}", 60.0 * i, "short", 1, 64) for i in range(400)]
    workload = [*stream, WorkloadJob("long", 5.0, "toy", 1, 32)]
    result = simulate(
        workload,
        traces,
        policy="goodput",
        params={"aging": aging},
        config=SimConfig(nodes=1, gpus_per_node=1),
    )
    started = next(j.start_s for j in result.jobs if j.name == "long")
    assert started is not None
    return started


def test_no_starvation_on_an_adversarial_arrival_stream(tmp_path: Path) -> None:
    params = GoodputParams()
    bound = params.unknown_remaining_s / params.aging + 2 * 60.0
    assert _stream_run(tmp_path, params.aging) <= bound
    # Without aging the same stream holds it back until the stream ends.
    assert _stream_run(tmp_path / "b", 0.0) >= 400 * 60.0 - 60.0
