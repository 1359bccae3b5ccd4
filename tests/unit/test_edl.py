"""The ``edl`` planner: EDL's rules, each reference defect fixed, and properties."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.edl_reference import literal_plan
from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    JobPhase,
    NodeResources,
    Resources,
    ScalingPlan,
)
from scheduler_core.policies.base import EmptyState, PolicyInput
from scheduler_core.policies.edl import EdlParams, EdlPolicy, load_cap


def cluster(
    nodes: dict[str, tuple[int, int, int]],
    *,
    used: tuple[int, int, int] = (0, 0, 0),
    totals: tuple[int, int, int] | None = None,
) -> ClusterResource:
    """Nodes as name -> free (cpu milli, memory mega, gpus); totals default to the
    free room plus ``used`` (cpu, memory, gpu requested by existing pods)."""
    cpu_total, mem_total, gpu_total = totals or (
        sum(n[0] for n in nodes.values()) + used[0],
        sum(n[1] for n in nodes.values()) + used[1],
        sum(n[2] for n in nodes.values()) + used[2],
    )
    return ClusterResource(
        node_count=len(nodes),
        cpu_total_milli=cpu_total,
        memory_total_mega=mem_total,
        gpu_total=gpu_total,
        cpu_request_milli=used[0],
        memory_request_mega=used[1],
        gpu_request=used[2],
        gpu_limit=used[2],
        nodes=NodeResources(
            nodes_cpu_idle_milli={k: v[0] for k, v in nodes.items()},
            nodes_memory_free_mega={k: v[1] for k, v in nodes.items()},
            nodes_gpu_free={k: v[2] for k, v in nodes.items()},
        ),
    )


def job(
    name: str,
    *,
    lo: int = 1,
    hi: int = 4,
    cur: int = 1,
    cpu: int = 1000,
    mem: int = 1000,
    gpu: int = 0,
    **extra: Any,
) -> ElasticJob:
    return ElasticJob(
        name=name,
        min_replicas=lo,
        max_replicas=hi,
        current_replicas=cur,
        requests=Resources(cpu_milli=cpu, memory_mega=mem, gpu=gpu),
        limits=Resources(gpu=gpu),
        **extra,
    )


def plan(jobs: list[ElasticJob], snapshot: ClusterResource, *, load: float = 1.0) -> ScalingPlan:
    request = PolicyInput(jobs=tuple(jobs), cluster=snapshot)
    return EdlPolicy().decide(request, EmptyState(), params=EdlParams(max_load_desired=load)).plan


def targets(result: ScalingPlan) -> dict[str, int]:
    return {key.split("/", 1)[1]: target for key, target in result.targets().items()}


# --- Rules, one table row each ----------------------------------------------------

RULES: list[tuple[str, list[ElasticJob], ClusterResource, float, dict[str, int]]] = [
    (
        "least fulfilled grows first when there is room for one replica",
        [job("a", lo=0, hi=4, cur=2), job("b", lo=0, hi=4, cur=1)],
        cluster({"n1": (1000, 4000, 0)}, used=(3000, 3000, 0)),
        1.0,
        {"a": 2, "b": 2},
    ),
    (
        "fix: equal fulfillment, the smaller memory request wins the tie",
        [job("big", mem=2000, cur=1), job("small", mem=1000, cur=1)],
        cluster({"n1": (1000, 2500, 0)}, used=(2000, 3000, 0)),
        1.0,
        {"big": 1, "small": 2},
    ),
    (
        "ties by GPU limit come before CPU and memory",
        [job("g", gpu=1, cpu=500, cur=1), job("c", gpu=0, cpu=2000, cur=1)],
        cluster({"n1": (2000, 5000, 1)}, used=(2500, 2000, 1)),
        1.0,
        {"g": 1, "c": 2},
    ),
    (
        "fix: a node without a free GPU cannot host a GPU replica",
        [job("g", gpu=1, cur=1)],
        cluster({"cpu-only": (8000, 8000, 0)}, used=(1000, 1000, 1), totals=(9000, 9000, 4)),
        1.0,
        {"g": 1},
    ),
    (
        "never grows past max_replicas",
        [job("a", lo=1, hi=2, cur=1)],
        cluster({"n1": (8000, 8000, 0)}),
        1.0,
        {"a": 2},
    ),
    (
        "a job over max shrinks straight to max",
        [job("a", lo=1, hi=2, cur=5)],
        cluster({"n1": (8000, 8000, 0)}, used=(5000, 5000, 0)),
        1.0,
        {"a": 2},
    ),
    (
        "CPU requests stay within max_load_desired x total",
        [job("a", lo=1, hi=10, cur=1)],
        cluster({"n1": (9000, 90000, 0)}, used=(1000, 1000, 0)),
        0.5,
        {"a": 5},
    ),
    (
        "fix: GPU limits obey the same cap (16 GPUs x 0.97 -> 15)",
        [job("g", lo=1, hi=16, cur=1, gpu=1, cpu=100, mem=100)],
        cluster(
            {"n0": (7900, 31900, 3), **{f"n{i}": (8000, 32000, 4) for i in range(1, 4)}},
            used=(100, 100, 1),
            totals=(32000, 128000, 16),
        ),
        0.97,
        {"g": 15},
    ),
    (
        "over the cap: the most fulfilled shrinks first, never below min",
        [
            job("full", lo=1, hi=4, cur=4),
            job("half", lo=1, hi=5, cur=3),
            job("floor", lo=2, hi=4, cur=2),
        ],
        cluster({"n1": (0, 10000, 0)}, used=(9000, 9000, 0), totals=(10000, 20000, 0)),
        0.5,
        {"full": 2, "half": 1, "floor": 2},
    ),
    (
        "free memory must exceed one replica's request (EDL strict rule)",
        [job("a", lo=1, hi=4, cur=1, mem=1000)],
        cluster({"n1": (8000, 1000, 0)}, used=(1000, 1000, 0)),
        1.0,
        {"a": 1},
    ),
    (
        "fix: a CPU-only job is not shrunk for GPUs over the cap",
        [job("cpu", lo=1, hi=3, cur=3, gpu=0), job("gpu", lo=1, hi=3, cur=3, gpu=1)],
        cluster({"n1": (9000, 9000, 0)}, used=(6000, 6000, 6), totals=(15000, 15000, 6)),
        0.7,
        {"cpu": 3, "gpu": 1},
    ),
]


@pytest.mark.parametrize(
    ("jobs", "snapshot", "load", "expected"),
    [row[1:] for row in RULES],
    ids=[row[0] for row in RULES],
)
def test_rules(
    jobs: list[ElasticJob], snapshot: ClusterResource, load: float, expected: dict[str, int]
) -> None:
    assert targets(plan(jobs, snapshot, load=load)) == expected


def test_load_cap_truncates_like_edl() -> None:
    assert load_cap(16, 0.97) == 15
    assert load_cap(8000, 0.97) == 7760
    assert load_cap(10, 1.0) == 10


def test_best_fit_picks_the_tightest_node_deterministically() -> None:
    snapshot = cluster({"roomy": (8000, 8000, 4), "tight": (1000, 1000, 1), "mid": (2000, 2000, 1)})
    result = plan([job("g", lo=0, hi=1, cur=0, gpu=1)], snapshot)
    decision = result.decisions[0]
    assert decision.placements == {"tight": 1}


def test_cpu_jobs_prefer_nodes_without_free_gpus() -> None:
    snapshot = cluster({"gpu-node": (8000, 8000, 4), "cpu-node": (8000, 8000, 0)})
    decision = plan([job("c", lo=0, hi=1, cur=0)], snapshot).decisions[0]
    assert decision.placements == {"cpu-node": 1}


def test_pending_rule_makes_every_job_a_candidate() -> None:
    jobs = [
        job("running", lo=1, hi=4, cur=1),
        job("waiting", lo=1, hi=4, cur=1, phase=JobPhase.PENDING),
    ]
    snapshot = cluster({"n1": (8000, 8000, 0)}, used=(2000, 2000, 0))
    assert set(targets(plan(jobs, snapshot))) == {"running"}
    jobs.append(
        job("stuck", lo=1, hi=1, cur=1, phase=JobPhase.PENDING, all_pods_unschedulable=True)
    )
    # "stuck" is not elastic (min == max) so it is never planned, but it makes
    # the non-running "waiting" job a candidate too.
    assert set(targets(plan(jobs, snapshot))) == {"running", "waiting"}


def test_pending_pods_count_as_load_and_shrink_the_most_fulfilled() -> None:
    # 16 GPUs, cap 15: two running jobs hold 15, a new job's pending pod asks one more.
    snapshot = cluster(
        {f"n{i}": (8000, 32000, 0) for i in range(4)}, used=(0, 0, 16), totals=(32000, 128000, 16)
    )
    jobs = [
        job("old", lo=1, hi=8, cur=8, gpu=1, cpu=0, mem=0),
        job("mid", lo=1, hi=8, cur=7, gpu=1, cpu=0, mem=0),
        job(
            "new",
            lo=1,
            hi=4,
            cur=1,
            gpu=1,
            cpu=0,
            mem=0,
            phase=JobPhase.PENDING,
            all_pods_unschedulable=True,
        ),
    ]
    result = targets(plan(jobs, snapshot, load=0.97))
    assert result == {"old": 7, "mid": 7, "new": 1}


def test_paused_jobs_are_never_planned() -> None:
    jobs = [job("p", lo=1, hi=8, cur=1, paused=True)]
    assert plan(jobs, cluster({"n1": (8000, 8000, 0)})).decisions == ()


def test_every_decision_names_its_rule_and_numbers() -> None:
    snapshot = cluster({"n1": (2000, 8000, 0)}, used=(0, 0, 0), totals=(8000, 8000, 0))
    result = plan([job("a", lo=1, hi=8, cur=1)], snapshot, load=1.0)
    decision = result.decisions[0]
    assert decision.reason.rule == "edl.scale_up"
    assert decision.target == 3
    assert decision.reason.numbers["limited_by"] == "no_node_fits"
    assert "cannot grow" in decision.reason.message


def test_the_reference_gpu_cap_oscillation_is_gone() -> None:
    # Reference: scale-up let GPU limits reach the whole cluster, scale-down cut
    # them back to the cap, forever. Here planning ends with GPUs at the cap.
    snapshot = cluster({f"n{i}": (8000, 32000, 4) for i in range(4)})
    jobs = [job(f"g{i}", lo=1, hi=16, cur=0, gpu=1, cpu=100, mem=100) for i in range(3)]
    result = plan(jobs, snapshot, load=0.97)
    assert sum(result.targets().values()) == 15


# --- Properties ---------------------------------------------------------------


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[ElasticJob], ClusterResource, float]:
    n_nodes = draw(st.integers(1, 6))
    nodes = {
        f"node-{i}": (
            draw(st.integers(0, 8)) * 1000,
            draw(st.integers(0, 16)) * 1000,
            draw(st.sampled_from([0, 0, 1, 2, 4])),
        )
        for i in range(n_nodes)
    }
    used = (draw(st.integers(0, 20)) * 500, draw(st.integers(0, 20)) * 500, draw(st.integers(0, 4)))
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        lo = draw(st.integers(0, 3))
        gpu = draw(st.sampled_from([0, 0, 1, 2]))
        jobs.append(
            job(
                f"job-{i}",
                lo=lo,
                hi=lo + draw(st.integers(0, 6)),
                cur=draw(st.integers(0, 10)),
                cpu=draw(st.sampled_from([0, 250, 1000, 2000])),
                mem=draw(st.sampled_from([0, 500, 1000, 4000])),
                gpu=gpu,
                phase=draw(st.sampled_from([JobPhase.RUNNING, JobPhase.RUNNING, JobPhase.PENDING])),
                all_pods_unschedulable=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    load = draw(st.sampled_from([0.5, 0.8, 0.97, 1.0]))
    return jobs, cluster(nodes, used=used), load


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _projected(
    jobs: list[ElasticJob], snapshot: ClusterResource, result: ScalingPlan
) -> tuple[list[ElasticJob], ClusterResource]:
    """The cluster as the planner left it: totals moved by every change, node room
    taken by the replicas placed (a shrink frees no known node)."""
    by_key = {j.key: j for j in jobs}
    cpu, mem, gpu = snapshot.cpu_request_milli, snapshot.memory_request_mega, snapshot.gpu_limit
    room = {
        name: [
            snapshot.nodes.nodes_cpu_idle_milli[name],
            snapshot.nodes.nodes_memory_free_mega[name],
            snapshot.nodes.nodes_gpu_free[name],
        ]
        for name in snapshot.nodes.nodes_cpu_idle_milli
    }
    for decision in result.decisions:
        j = by_key[decision.job]
        cpu += j.requests.cpu_milli * decision.delta
        mem += j.requests.memory_mega * decision.delta
        gpu += j.limits.gpu * decision.delta
        for name, count in decision.placements.items():
            room[name][0] -= j.requests.cpu_milli * count
            room[name][1] -= j.requests.memory_mega * count
            room[name][2] -= j.requests.gpu * count
    after = snapshot.model_copy(
        update={
            "cpu_request_milli": cpu,
            "memory_request_mega": mem,
            "gpu_limit": gpu,
            "nodes": NodeResources(
                nodes_cpu_idle_milli={k: v[0] for k, v in room.items()},
                nodes_memory_free_mega={k: v[1] for k, v in room.items()},
                nodes_gpu_free={k: v[2] for k, v in room.items()},
            ),
        }
    )
    targets_by_key = result.targets()
    moved = [
        j.model_copy(update={"current_replicas": targets_by_key.get(j.key, j.current_replicas)})
        for j in jobs
    ]
    return moved, after


@PROPERTY
@given(instances())
def test_growth_respects_caps_and_node_room(
    instance: tuple[list[ElasticJob], ClusterResource, float],
) -> None:
    jobs, snapshot, load = instance
    result = plan(jobs, snapshot, load=load)
    by_key = {j.key: j for j in jobs}
    _, after = _projected(jobs, snapshot, result)
    grew = [by_key[d.job] for d in result.decisions if d.target > d.current]
    if any(j.requests.cpu_milli > 0 for j in grew):
        assert after.cpu_request_milli <= load_cap(snapshot.cpu_total_milli, load)
    if any(j.limits.gpu > 0 for j in grew):
        assert after.gpu_limit <= load_cap(snapshot.gpu_total, load)
    for name in after.nodes.nodes_cpu_idle_milli:
        placed = any(name in d.placements for d in result.decisions)
        if placed:
            assert after.nodes.nodes_cpu_idle_milli[name] >= 0
            assert after.nodes.nodes_memory_free_mega[name] >= 0
            assert after.nodes.nodes_gpu_free[name] >= 0


@PROPERTY
@given(instances())
def test_targets_stay_in_range_or_move_toward_it(
    instance: tuple[list[ElasticJob], ClusterResource, float],
) -> None:
    jobs, snapshot, load = instance
    by_key = {j.key: j for j in jobs}
    for decision in plan(jobs, snapshot, load=load).decisions:
        j = by_key[decision.job]
        if j.min_replicas <= decision.current <= j.max_replicas:
            assert j.min_replicas <= decision.target <= j.max_replicas
        elif decision.current > j.max_replicas:
            # Straight to max, then possibly further for an over-cap cluster.
            assert j.min_replicas <= decision.target <= j.max_replicas
        else:
            assert decision.current <= decision.target <= j.max_replicas


@PROPERTY
@given(instances())
def test_planning_again_after_applying_changes_nothing(
    instance: tuple[list[ElasticJob], ClusterResource, float],
) -> None:
    jobs, snapshot, load = instance
    first = plan(jobs, snapshot, load=load)
    moved, after = _projected(jobs, snapshot, first)
    assert plan(moved, after, load=load).changes == ()


@PROPERTY
@given(instances(), st.randoms(use_true_random=False))
def test_input_order_never_changes_the_plan(
    instance: tuple[list[ElasticJob], ClusterResource, float], rng: random.Random
) -> None:
    jobs, snapshot, load = instance
    shuffled_jobs = list(jobs)
    rng.shuffle(shuffled_jobs)
    names = list(snapshot.nodes.nodes_cpu_idle_milli)
    rng.shuffle(names)
    shuffled_nodes = NodeResources(
        nodes_cpu_idle_milli={n: snapshot.nodes.nodes_cpu_idle_milli[n] for n in names},
        nodes_memory_free_mega={
            n: snapshot.nodes.nodes_memory_free_mega[n] for n in reversed(names)
        },
        nodes_gpu_free={n: snapshot.nodes.nodes_gpu_free[n] for n in names},
    )
    shuffled = snapshot.model_copy(update={"nodes": shuffled_nodes})
    assert plan(shuffled_jobs, shuffled, load=load) == plan(jobs, snapshot, load=load)


@PROPERTY
@given(instances())
def test_same_plans_as_the_literal_port_of_the_reference_loop(
    instance: tuple[list[ElasticJob], ClusterResource, float],
) -> None:
    jobs, snapshot, load = instance
    fast = {
        d.job: (d.target, dict(d.placements)) for d in plan(jobs, snapshot, load=load).decisions
    }
    assert fast == literal_plan(tuple(jobs), snapshot, max_load_desired=load)
