"""The loopback server's kube-scheduler scoring and ReplicaSet victim order, pure.

Expected values are worked out by hand from upstream's formulas
(``resourceAllocationScorer``, ``ActivePodsWithRanks``), not from the code.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from trainscaler_sim.apiserver.controllers.pod_ranking import RankedPod, deletion_order
from trainscaler_sim.apiserver.controllers.scoring import FitScoring, profiles_from_config

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
NODE = {"cpu": Fraction(32), "memory": Fraction(256 * 10**9), "nvidia.com/gpu": Fraction(4)}
REPLICA = {"cpu": Fraction(8), "memory": Fraction(64 * 10**9), "nvidia.com/gpu": Fraction(1)}


def _used(replicas: int) -> dict[str, Fraction]:
    return {name: amount * replicas for name, amount in REPLICA.items()}


def test_the_shipped_profile_scores_most_allocated_gpus_weighing_most() -> None:
    profiles = profiles_from_config(CONFIG)
    assert list(profiles) == ["trainscaler-packing"]
    packing = profiles["trainscaler-packing"]
    assert packing.strategy == "MostAllocated"
    # One more replica on a node with k replicas: every resource at (k+1)/4,
    # so (gpu 100 + cpu 1 + memory 1) x 25(k+1) / 102 = 25(k+1).
    scores = [packing.score(allocatable=NODE, used=_used(k), requests=REPLICA) for k in range(4)]
    assert scores == [25, 50, 75, 100]


def test_least_allocated_prefers_the_emptier_node() -> None:
    spreading = FitScoring()  # kube's default: LeastAllocated over cpu and memory
    empty = spreading.score(allocatable=NODE, used={}, requests=REPLICA)
    busy = spreading.score(allocatable=NODE, used=_used(2), requests=REPLICA)
    assert (empty, busy) == (75, 25)


def test_a_gpu_the_pod_does_not_request_is_left_out_of_the_score() -> None:
    packing = profiles_from_config(CONFIG)["trainscaler-packing"]
    cpu_only = {"cpu": Fraction(16), "memory": Fraction(128 * 10**9)}
    # cpu and memory at half: 50. Counting the GPU (0 of 4, weight 100) would give 0.
    assert packing.score(allocatable=NODE, used={}, requests=cpu_only) == 50


def test_unsupported_strategies_are_refused() -> None:
    with pytest.raises(ValueError, match="RequestedToCapacityRatio"):
        FitScoring(strategy="RequestedToCapacityRatio")


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _pod(
    name: str, node: str, *, rank: int, age_s: float, order: int, **extra: object
) -> RankedPod:
    fields: dict[str, object] = {
        "name": name,
        "node": node,
        "phase": "Running",
        "ready": True,
        "deletion_cost": 0,
        "related_on_node": rank,
        "ready_since": NOW - timedelta(seconds=age_s),
        "restarts": 0,
        "created": NOW - timedelta(seconds=age_s),
        "created_order": order,
    }
    fields.update(extra)
    return RankedPod(**fields)  # type: ignore[arg-type]


def _names(pods: list[RankedPod]) -> list[str]:
    return [p.name for p in deletion_order(pods, now=NOW)]


def test_unassigned_pending_and_unready_pods_go_first() -> None:
    running = _pod("running", "node-a", rank=1, age_s=10, order=1)
    unready = _pod("unready", "node-a", rank=1, age_s=10, order=2, ready=False)
    pending = _pod("pending", "node-a", rank=1, age_s=10, order=3, phase="Pending", ready=False)
    unassigned = _pod("unassigned", "", rank=1, age_s=10, order=4, phase="Pending", ready=False)
    assert _names([running, unready, pending, unassigned]) == [
        "unassigned",
        "pending",
        "unready",
        "running",
    ]


def test_deletion_cost_then_doubled_up_nodes_then_youngest() -> None:
    lonely_new = _pod("lonely-new", "node-b", rank=1, age_s=5, order=4)
    doubled_old = _pod("doubled-old", "node-a", rank=2, age_s=1000, order=1)
    doubled_new = _pod("doubled-new", "node-a", rank=2, age_s=5, order=3)
    costly = _pod("costly", "node-a", rank=2, age_s=5, order=5, deletion_cost=10)
    # Rank beats age: both node-a pods go before the younger lonely one;
    # among them the younger first (age buckets log2(5e9)=32 < log2(1e12)=39).
    assert _names([lonely_new, doubled_old, costly, doubled_new]) == [
        "doubled-new",
        "doubled-old",
        "lonely-new",
        "costly",
    ]


def test_same_age_bucket_is_upstreams_random_tie_broken_by_highest_node() -> None:
    # 60 s and 61 s: both in bucket 35 (2^35 ns = 34.4 s, 2^36 ns = 68.7 s).
    on_a = _pod("on-a", "node-a", rank=2, age_s=60, order=9)
    on_b = _pod("on-b", "node-b", rank=2, age_s=61, order=1)
    assert _names([on_a, on_b]) == ["on-b", "on-a"]
