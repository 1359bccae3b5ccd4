"""Replica placement: keep existing replicas, fewest nodes, hints, shrink order."""

from __future__ import annotations

import pytest

from trainscaler_sim.trace.packing import (
    GpuNodes,
    grow,
    grow_most_allocated,
    shrink,
    shrink_replicaset,
)


def nodes_with(free: list[int], per_node: int = 4) -> GpuNodes:
    nodes = GpuNodes(len(free), per_node)
    nodes.free = list(free)
    return nodes


def test_new_job_goes_to_the_fewest_nodes_best_fit() -> None:
    nodes = nodes_with([1, 4, 3, 2])
    # 3 fit on node 2 exactly (best fit), not on the empty node 1.
    assert grow({}, 3, nodes=nodes) == {2: 3}
    # 6 need two nodes: the emptiest (4), then the best fit for the other 2.
    assert grow({}, 6, nodes=nodes) == {1: 4, 3: 2}
    assert nodes.free == [1, 0, 0, 0]


def test_growing_fills_the_jobs_own_nodes_first() -> None:
    nodes = nodes_with([2, 4, 4])
    # Then the fewest new nodes; between equals, the lowest index.
    assert grow({0: 2}, 3, nodes=nodes) == {0: 4, 1: 1}


def test_a_fitting_hint_is_followed_and_a_bad_one_ignored() -> None:
    nodes = nodes_with([4, 4, 4])
    assert grow({}, 4, nodes=nodes, hint={"node-01": 2, "node-02": 2}) == {1: 2, 2: 2}
    nodes = nodes_with([4, 1, 4])
    assert grow({}, 4, nodes=nodes, hint={"node-01": 4}) == {0: 4}


def test_never_more_than_is_free() -> None:
    nodes = nodes_with([1, 0, 2])
    assert grow({}, 8, nodes=nodes) == {2: 2, 0: 1}
    assert nodes.free_total == 0


def test_shrink_leaves_the_least_used_nodes_first() -> None:
    nodes = nodes_with([0, 3, 0])
    assert shrink({0: 4, 1: 1, 2: 4}, 3, nodes=nodes) == {0: 4, 2: 2}
    assert nodes.free == [0, 4, 2]


def test_releasing_more_than_a_node_holds_is_an_error() -> None:
    nodes = nodes_with([4])
    with pytest.raises(RuntimeError):
        nodes.release({0: 1})


# --- the kube model: NodeResourcesFit MostAllocated, ReplicaSet scale-down ----------


def test_most_allocated_puts_each_pod_on_the_fullest_node_with_room() -> None:
    nodes = nodes_with([1, 4, 3, 2])
    # Pod by pod: node 0 (1 free), then node 3 (2 free) twice, then node 2.
    assert grow_most_allocated({}, 4, nodes=nodes) == {0: 1, 3: 2, 2: 1}
    assert nodes.free == [0, 4, 2, 0]


def test_most_allocated_ignores_the_job_and_splits_where_packing_would_not() -> None:
    nodes = nodes_with([1, 4])
    # The ideal packing puts 4 replicas on the empty node; kube-scheduler
    # fills the fuller node first and spreads the job over two nodes.
    assert grow_most_allocated({}, 4, nodes=nodes) == {0: 1, 1: 3}
    assert grow({}, 4, nodes=nodes_with([1, 4])) == {1: 4}


def test_most_allocated_stops_when_the_cluster_is_full() -> None:
    nodes = nodes_with([1, 0])
    assert grow_most_allocated({}, 3, nodes=nodes) == {0: 1}
    assert nodes.free == [0, 0]


def test_replicaset_scale_down_ranks_pods_by_the_jobs_pods_on_their_node_once() -> None:
    nodes = nodes_with([0, 1, 3])
    # kube getPodsToDelete: ranks 4, 3, 1 counted before deleting, so all
    # three victims come from node 0 (not 0, 1, 0 as re-ranking would give).
    assert shrink_replicaset({0: 4, 1: 3, 2: 1}, 3, nodes=nodes) == {0: 1, 1: 3, 2: 1}
    assert nodes.free == [3, 1, 3]


def test_replicaset_scale_down_among_equal_ranks_takes_the_newest_pods() -> None:
    nodes = nodes_with([0, 0])
    started = {0: [0.0, 0.0], 1: [100.0, 100.0]}
    # Ages 160 s and 60 s: log2 buckets 37 and 35 (ns), the younger go first.
    assert shrink_replicaset({0: 2, 1: 2}, 2, nodes=nodes, started=started, now=160.0) == {0: 2}
    assert started == {0: [0.0, 0.0]}


def test_replicaset_scale_down_breaks_upstreams_random_ties_by_highest_node() -> None:
    nodes = nodes_with([0, 0])
    # Same age bucket (upstream compares random UIDs): the highest node index first.
    started = {0: [100.0, 100.0], 1: [101.0, 101.0]}
    assert shrink_replicaset({0: 2, 1: 2}, 1, nodes=nodes, started=started, now=160.0) == {
        0: 2,
        1: 1,
    }
