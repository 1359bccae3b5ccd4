"""The simulator's accounting, pinned on small hand-computed cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler_core.policies.base import PolicyInput, PolicyResult
from tests.unit.sim_fixtures import write_data, write_workload
from trainscaler_sim.trace.engine import SimConfig, simulate
from trainscaler_sim.trace.results import SimResult
from trainscaler_sim.trace.traces import ApplicationTrace, load_traces
from trainscaler_sim.trace.workload import WorkloadJob, load_workload


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, ApplicationTrace]:
    return load_traces(write_data(tmp_path))


def job(name: str, at: float, app: str = "toy", replicas: int = 1, batch: int = 64) -> WorkloadJob:
    return WorkloadJob(name, at, app, replicas, batch)


def one_gpu() -> SimConfig:
    return SimConfig(nodes=1, gpus_per_node=1)


def by_name(result: SimResult) -> dict[str, float]:
    return {j.name: j.completion_s for j in result.jobs if j.completion_s is not None}


def test_single_job_on_one_gpu_finishes_when_its_trace_says(traces) -> None:
    # Starts at the round at t=0, 30 s startup, then 200 iterations x 1 s.
    result = simulate([job("a", 0)], traces, policy="static", config=one_gpu())
    assert by_name(result) == {"a": 230.0}
    assert result.jobs[0].jct_s == 230.0
    assert result.jobs[0].rescales == 0
    assert result.jobs[0].gpu_seconds == 230.0


def test_a_job_waits_for_the_next_round(traces) -> None:
    # Arrives at 10 s: first seen by the round at 60 s.
    result = simulate([job("a", 10)], traces, policy="static", config=one_gpu())
    assert by_name(result) == {"a": 290.0}
    assert result.jobs[0].jct_s == 280.0


@pytest.mark.parametrize("restart", [10.0, 30.0])
def test_a_rescale_costs_exactly_the_restart_time(traces, restart: float) -> None:
    # Two GPUs on one node. "a" asks for 2 (0.6 s per iteration, 120 s of
    # training) and is demoted by tiresias at the round at 120 (240 >= 200
    # GPU-seconds); "b" (1 GPU, arrives at 100) then preempts it. "a" trained
    # 120 - r seconds after its start-up; "b" ends at 120 + r + 200; "a"
    # resumes at the round at 360 and needs r more seconds after its restart:
    # it ends at 360 + 2r. Each placement change cost exactly r.
    params = {"queue_threshold_gpu_s": 200.0}
    workload = [job("a", 0, replicas=2), job("b", 100)]
    config = SimConfig(nodes=1, gpus_per_node=2, restart_s=restart)
    result = simulate(workload, traces, policy="tiresias", params=params, config=config)
    done = by_name(result)
    assert done["a"] == pytest.approx(360 + 2 * restart)
    assert done["b"] == pytest.approx(120 + restart + 200)
    assert {j.name: j.rescales for j in result.jobs} == {"a": 1, "b": 0}


def test_reports_carry_epoch_progress_and_training_time(traces) -> None:
    seen: list[PolicyInput] = []

    def observe(now: float, request: PolicyInput, result: PolicyResult[Any]) -> None:
        seen.append(request)

    # "z" arrives later so that a round delivers a's last report.
    workload = [job("a", 0), job("z", 250, app="short")]
    simulate(workload, traces, policy="static", config=one_gpu(), observer=observe)
    reports = [r for request in seen for r in request.reports if r.job == "sim/a"]
    first, epoch_one, epoch_two = reports
    assert first.epoch_time_s is None and first.total_epochs == 2 and first.at == 0.0
    # Epoch 1: iterations 0-100 at 1 s each, from 30 s to 130 s.
    assert (epoch_one.epoch, epoch_one.iterations, epoch_one.replicas) == (1, 100, 1)
    assert epoch_one.epoch_time_s == 100.0 and epoch_one.at == 130.0
    assert (epoch_two.epoch, epoch_two.at) == (2, 230.0)


def test_a_job_never_holds_more_gpus_than_exist(traces) -> None:
    # throughput ignores the cluster and keeps adding replicas; the simulator
    # leaves what does not fit pending.
    workload = [job(f"j{i}", 30.0 * i, batch=64) for i in range(6)]
    config = SimConfig(nodes=2, gpus_per_node=2)
    result = simulate(workload, traces, policy="throughput", config=config)
    held: dict[str, int] = {}
    for _, name, gpus in sorted(result.timeline, key=lambda e: e[0]):
        held[name] = gpus
        assert sum(held.values()) <= 4
    assert all(j.max_gpus <= 4 for j in result.jobs)
    assert sum(j.gpu_seconds for j in result.jobs) <= 4 * (result.makespan_s + 60)


def test_same_seed_same_result(traces) -> None:
    workload = [job("a", 0, replicas=2), job("b", 20), job("c", 50, app="short")]
    config = SimConfig(nodes=1, gpus_per_node=2, noise=0.2, seed=7)
    first = simulate(workload, traces, policy="goodput", config=config)
    again = simulate(workload, traces, policy="goodput", config=config)
    other = simulate(
        workload,
        traces,
        policy="goodput",
        config=SimConfig(nodes=1, gpus_per_node=2, noise=0.2, seed=8),
    )
    assert by_name(first) == by_name(again)
    assert by_name(first) != by_name(other)


def test_workload_csv_round_trip(tmp_path: Path) -> None:
    write_data(tmp_path)
    path = write_workload(
        tmp_path, "workload-9.csv", [("b", 5, "toy", 2, 64), ("a", 1, "toy", 1, 32)]
    )
    jobs = load_workload(path)
    assert [j.name for j in jobs] == ["a", "b"]
    assert jobs[1] == WorkloadJob("b", 5.0, "toy", 2, 64)
