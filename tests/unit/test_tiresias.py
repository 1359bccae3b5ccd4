"""tiresias: two queues by attained GPU-seconds, gang scheduling, preemption."""

from __future__ import annotations

from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    EpochReport,
    NodeResources,
)
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.tiresias import TiresiasJob, TiresiasParams, TiresiasState
from scheduler_core.registry import decide, load_state
from tests.unit.builders import decision_of, gpu_cluster, gpu_job

PARAMS = TiresiasParams(max_load_desired=1.0)


def job(name: str, requested: int, current: int = 0) -> ElasticJob:
    return gpu_job(name, requested, current, max_replicas=64)


cluster = gpu_cluster


def test_demotion_exactly_at_the_threshold() -> None:
    # 4 requested replicas for 60 s add 240 GPU-seconds.
    running = job("a", 4, current=4)
    for before, queue in ((57_600 - 240, 1), (57_600 - 240 - 1e-6, 0)):
        state = TiresiasState(
            jobs={"default/a": TiresiasJob(arrival=0.0, attained_gpu_s=before)}, last_now=0.0
        )
        request = PolicyInput(jobs=(running,), cluster=cluster(8, 4), now=60.0)
        result = decide("tiresias", request, state=state, params=PARAMS)
        book = result.state.jobs["default/a"]
        assert book.queue == queue, before
        assert decision_of(result.plan, "default/a").reason.numbers["queue"] == queue


def test_demoted_after_240_rounds_at_four_gpus_not_before() -> None:
    state = TiresiasState()
    running = job("a", 4, current=4)
    queues = []
    for round_ in range(242):
        request = PolicyInput(jobs=(running,), cluster=cluster(4, 0), now=60.0 * round_)
        state = decide("tiresias", request, state=state, params=PARAMS).state
        queues.append(state.jobs["default/a"].queue)
    # Service accrues from the first round on: 240 intervals x 60 s x 4 = 57,600.
    assert queues[239] == 0 and queues[240] == 1


def test_queue_zero_arrival_preempts_a_queue_one_job() -> None:
    state = TiresiasState(
        jobs={"default/old": TiresiasJob(arrival=0.0, attained_gpu_s=60_000.0, queue=1)},
        last_now=1000.0,
    )
    request = PolicyInput(
        jobs=(job("old", 4, current=4), job("new", 4)),
        cluster=cluster(4, 0),
        reports=(EpochReport(job="default/new", replicas=0, at=1010.0),),
        now=1020.0,
    )
    plan = decide("tiresias", request, state=state, params=PARAMS).plan
    assert plan.targets() == {"default/new": 4, "default/old": 0}
    assert decision_of(plan, "default/old").reason.rule == "tiresias.preempt"


def test_gang_oldest_first_and_backfill() -> None:
    state = TiresiasState(
        jobs={
            "default/first": TiresiasJob(arrival=1.0),
            "default/big": TiresiasJob(arrival=2.0),
            "default/small": TiresiasJob(arrival=3.0),
        },
        last_now=0.0,
    )
    request = PolicyInput(
        jobs=(job("small", 1), job("big", 4), job("first", 2)), cluster=cluster(4, 4), now=0.0
    )
    plan = decide("tiresias", request, state=state, params=PARAMS).plan
    # first (2) runs; big (4) does not fit beside it and waits whole; small backfills.
    assert plan.targets() == {"default/first": 2, "default/big": 0, "default/small": 1}
    assert decision_of(plan, "default/big").reason.rule == "tiresias.wait"


def test_new_replicas_go_to_the_nodes_with_most_free_gpus() -> None:
    nodes = NodeResources(nodes_gpu_free={"node-00": 1, "node-01": 3, "node-02": 2})
    request = PolicyInput(
        jobs=(job("a", 4),), cluster=ClusterResource(node_count=3, gpu_total=12, nodes=nodes)
    )
    plan = decide("tiresias", request, params=PARAMS).plan
    assert decision_of(plan, "default/a").placements == {"node-01": 3, "node-02": 1}


def test_state_round_trips_through_json() -> None:
    request = PolicyInput(jobs=(job("a", 2, current=2),), cluster=cluster(4, 2), now=60.0)
    state = decide("tiresias", request, params=PARAMS).state
    assert load_state("tiresias", state.model_dump_json()) == state


def test_finished_jobs_leave_the_state() -> None:
    state = TiresiasState(jobs={"default/gone": TiresiasJob(arrival=0.0)}, last_now=0.0)
    request = PolicyInput(jobs=(job("a", 1),), cluster=cluster(4, 4), now=60.0)
    assert set(decide("tiresias", request, state=state, params=PARAMS).state.jobs) == {"default/a"}
