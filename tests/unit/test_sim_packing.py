"""Replica placement: keep existing replicas, fewest nodes, hints, shrink order."""

from __future__ import annotations

import pytest

from sim.trace.packing import GpuNodes, grow, shrink


def nodes_with(free: list[int], per_node: int = 4) -> GpuNodes:
    nodes = GpuNodes(len(free), per_node)
    nodes.free = list(free)
    return nodes


def test_new_job_goes_to_the_fewest_nodes_best_fit() -> None:
    nodes = nodes_with([1, 4, 3, 2])
    # 3 fit on node 2 exactly (best fit), not on the empty node 1.
    assert grow({}, 3, nodes) == {2: 3}
    # 6 need two nodes: the emptiest (4), then the best fit for the other 2.
    assert grow({}, 6, nodes) == {1: 4, 3: 2}
    assert nodes.free == [1, 0, 0, 0]


def test_growing_fills_the_jobs_own_nodes_first() -> None:
    nodes = nodes_with([2, 4, 4])
    # Then the fewest new nodes; between equals, the lowest index.
    assert grow({0: 2}, 3, nodes) == {0: 4, 1: 1}


def test_a_fitting_hint_is_followed_and_a_bad_one_ignored() -> None:
    nodes = nodes_with([4, 4, 4])
    assert grow({}, 4, nodes, hint={"node-01": 2, "node-02": 2}) == {1: 2, 2: 2}
    nodes = nodes_with([4, 1, 4])
    assert grow({}, 4, nodes, hint={"node-01": 4}) == {0: 4}


def test_never_more_than_is_free() -> None:
    nodes = nodes_with([1, 0, 2])
    assert grow({}, 8, nodes) == {2: 2, 0: 1}
    assert nodes.free_total == 0


def test_shrink_leaves_the_least_used_nodes_first() -> None:
    nodes = nodes_with([0, 3, 0])
    assert shrink({0: 4, 1: 1, 2: 4}, 3, nodes) == {0: 4, 2: 2}
    assert nodes.free == [0, 4, 2]


def test_releasing_more_than_a_node_holds_is_an_error() -> None:
    nodes = nodes_with([4])
    with pytest.raises(RuntimeError):
        nodes.release({0: 1})
