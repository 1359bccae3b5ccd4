"""goodput's placement and admission rules, as tables of hand-computed cases.

goodput.spread (slowdown of a spread placement), the MostAllocated prediction
it is applied to, goodput.shape (start size from the predicted placement),
goodput.admit (no start far below the efficient size) and learning a spread
slowdown from a clean spread epoch.
"""

from __future__ import annotations

import pytest

from scheduler_core.curves import CurvePoint
from scheduler_core.goodput_books import GoodputApp, GoodputJob, SpreadPoint, spread_factor
from scheduler_core.models import EpochReport
from scheduler_core.node_packing import FreeGpus, most_allocated
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.goodput import GoodputParams, GoodputState
from scheduler_core.registry import decide
from tests.unit.test_goodput import cluster, decision_of, job

SP = SpreadPoint


@pytest.mark.parametrize(
    ("points", "replicas", "nodes", "expected"),
    [
        ([], 4, 1, 1.0),  # packed: no slowdown
        ([], 5, 2, 1.0),  # 5 replicas need 2 nodes of 4: still packed
        ([], 4, 2, 1.1),  # nothing measured: 1 + prior 0.1 per extra node
        ([], 4, 3, 1.2),
        ([SP(replicas=4, nodes=2, factor=1.75)], 4, 2, 1.75),  # measured shape
        ([SP(replicas=8, nodes=3, factor=0.8)], 8, 3, 0.8),  # a spread faster than packed
        # Unmeasured shape: the mean of the application's measured ones, at least 1.
        ([SP(replicas=4, nodes=2, factor=1.75), SP(replicas=4, nodes=3, factor=1.25)], 2, 2, 1.5),
        ([SP(replicas=8, nodes=3, factor=0.8)], 4, 2, 1.0),
    ],
)
def test_spread_factor(
    points: list[SpreadPoint], replicas: int, nodes: int, expected: float
) -> None:
    got = spread_factor(points, replicas, nodes=nodes, gpus_per_node=4, prior=0.1)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("size", "free", "expected", "left"),
    [
        # Each pod to the fullest node with room: b (1 free), c twice, then a.
        (4, {"a": 4, "b": 1, "c": 2}, {"b": 1, "c": 2, "a": 1}, {"a": 3, "b": 0, "c": 0}),
        (2, {"a": 4, "b": 4}, {"a": 2}, {"a": 2, "b": 4}),  # ties by name, then a is fuller
        (5, {"a": 2, "b": 4}, {"a": 2, "b": 3}, {"a": 0, "b": 1}),
        (3, {"a": 0, "b": 0}, {}, {"a": 0, "b": 0}),  # no room: nothing placed
    ],
)
def test_most_allocated_prediction(
    size: int, free: dict[str, int], expected: dict[str, int], left: dict[str, int]
) -> None:
    room = FreeGpus(free)
    assert most_allocated(size, room) == expected
    assert room.as_dict() == left


def _state(
    *, points: list[CurvePoint], spread: list[SpreadPoint] | None = None, waited_s: float = 0.0
) -> GoodputState:
    book = GoodputJob(application="app", total_epochs=10, epochs_done=5, waited_s=waited_s)
    app = GoodputApp(points=points, total_units=1000.0, total_measured=True, spread=spread or [])
    return GoodputState(jobs={"default/a": book}, apps={"app": app}, last_now=0.0)


# t(n) = 4/n s/unit up to 4 (efficiency 1): efficient size 4 for a job of max 4.
LINEAR = [
    CurvePoint(replicas=1, seconds_per_unit=4.0),
    CurvePoint(replicas=2, seconds_per_unit=2.0),
    CurvePoint(replicas=4, seconds_per_unit=1.0),
]


@pytest.mark.parametrize(
    ("free", "target", "why"),
    [
        # 4 free on one node: 4 packed, 1000 s.
        ([0, 0, 4, 0], 4, "packed"),
        # Free 1+1+2: 4 pods land on 3 nodes (measured 5x: 5000 s); 3 on 3 nodes
        # (mean 5x: 1000 x 4/3 x 5 = 6667 s); 2 on 2 nodes (5x: 10000 s);
        # 1 on one node: 4000 s, the fastest.
        ([1, 1, 2, 0], 1, "spread"),
    ],
)
def test_start_size_from_the_predicted_placement(free: list[int], target: int, why: str) -> None:
    state = _state(points=LINEAR, spread=[SP(replicas=4, nodes=3, factor=5.0)])
    busy = 16 - sum(free)
    request = PolicyInput(
        jobs=(job("a", max_replicas=4), job("p", current=busy, paused=True, application=None)),
        cluster=cluster(free),
        now=60.0,
    )
    params = GoodputParams(max_load_desired=1.0, start_fraction=0.0)
    decision = decision_of(decide("goodput", request, state=state, params=params).plan, "default/a")
    assert decision.target == target, why
    assert decision.reason.rule == "goodput.start"


@pytest.mark.parametrize(
    ("held_by_others", "free", "waited_s", "target", "rule"),
    [
        # Efficient size 8 (t(8) = 0.55: efficiency 0.91); 2 GPUs < 0.5 x 8: wait.
        (6, [0, 2], 0.0, 0, "goodput.admit"),
        # 4 GPUs = 0.5 x 8: starts.
        (4, [0, 4], 0.0, 4, "goodput.start"),
        # Waited past admit_patience_s (3600 s): any start, no starvation.
        (6, [0, 2], 3600.0, 2, "goodput.start"),
    ],
)
def test_admission_refuses_small_starts(
    held_by_others: int, free: list[int], waited_s: float, target: int, rule: str
) -> None:
    points = [
        CurvePoint(replicas=4, seconds_per_unit=1.0),
        CurvePoint(replicas=8, seconds_per_unit=0.55),
    ]
    state = _state(points=points, waited_s=waited_s)
    request = PolicyInput(
        jobs=(
            job("a", max_replicas=8),
            job("p", current=held_by_others, paused=True, application=None),
        ),
        cluster=cluster(free),
        now=60.0,
    )
    params = GoodputParams(max_load_desired=1.0)
    decision = decision_of(decide("goodput", request, state=state, params=params).plan, "default/a")
    assert (decision.target, decision.reason.rule) == (target, rule)


@pytest.mark.parametrize(
    ("nodes", "epoch_time_s", "spread", "point"),
    [
        # 4 replicas over 2 nodes at 1.5 s/unit, packed curve 1.0 s/unit: 1.5x.
        (2, 150.0, [SP(replicas=4, nodes=2, factor=1.5)], 1.0),
        # Packed: a curve point (mean of 1.0 and 0.8), no spread sample.
        (1, 80.0, [], 0.9),
    ],
)
def test_learns_spread_slowdown_from_clean_spread_epochs(
    nodes: int, epoch_time_s: float, spread: list[SpreadPoint], point: float
) -> None:
    state = _state(points=[CurvePoint(replicas=4, seconds_per_unit=1.0)])
    report = EpochReport(
        job="default/a",
        replicas=4,
        epoch_time_s=epoch_time_s,
        epoch=6,
        total_epochs=10,
        iterations=100,
        nodes=nodes,
        at=50.0,
    )
    request = PolicyInput(
        jobs=(job("a", current=4, max_replicas=4),),
        cluster=cluster([0, 4]),
        reports=(report,),
        now=60.0,
    )
    new = decide("goodput", request, state=state, params=GoodputParams()).state
    assert new.apps["app"].spread == spread
    assert new.apps["app"].points[0].seconds_per_unit == pytest.approx(point)
