"""Rule goodput.queue (the size a job is given), as tables of hand-computed cases.

The size minimises t(n) x (1 + n x w), w = other jobs / cluster GPUs: the
job's own remaining time plus the delay its GPU-seconds cause the others,
over the measured counts, the node-friendly counts between them (rule
goodput.between) and the probe at 4 x the largest (rule goodput.reach).
"""

from __future__ import annotations

import pytest

from scheduler_core.curves import Curve, CurvePoint
from scheduler_core.goodput_books import GoodputApp, GoodputJob
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.goodput import GoodputParams, GoodputState
from scheduler_core.registry import decide
from tests.unit.test_goodput import cluster, decision_of, job


def _curve(points: dict[int, float], threshold: float = 0.9) -> Curve:
    return Curve.from_points(
        [[CurvePoint(replicas=n, seconds_per_unit=t) for n, t in points.items()]],
        threshold=threshold,
    )


# One replica bounded by 2 x 4.4 = 8.8: efficiency 1, 0.88, 0.6875: not still
# scaling at 8 (0.6875 < 0.9), no probe.
FLAT = {2: 4.4, 4: 2.5, 8: 1.6}
# Efficiency 1 up to 4: still scaling, the probe at 4 x 4 = 16 is predicted at
# t = 1 / (1 + 3 x 1) = 0.25.
LINEAR = {2: 2.0, 4: 1.0}
# Efficiency 4 / 6.4 = 0.625 at 16: not scaling. Between 4 and 16 GPU-seconds
# per unit are interpolated from 4 to 6.4: t(8) = 4.8 / 8 = 0.6, t(12) = 5.6 / 12.
SPARSE = {4: 1.0, 16: 0.4}


@pytest.mark.parametrize(
    ("points", "weight", "bounds", "expected"),
    [
        # Alone (w = 0): the fastest measured size.
        (FLAT, 0.0, (1, 64), (8, False)),
        # w = 1/64: 4.4 x 1.031 = 4.54, 2.5 x 1.0625 = 2.66, 1.6 x 1.125 = 1.8.
        (FLAT, 1 / 64, (1, 64), (8, False)),
        # w = 0.5: 4.4 x 2 = 8.8, 2.5 x 3 = 7.5, 1.6 x 5 = 8: 4.
        (FLAT, 0.5, (1, 64), (4, False)),
        # w = 2: 4.4 x 5 = 22, 2.5 x 9 = 22.5, 1.6 x 17 = 27.2: 2.
        (FLAT, 2.0, (1, 64), (2, False)),
        # w = 10: 4.4 x 21 = 92.4 < 2.5 x 41 = 102.5: 2 (fewest GPU-seconds).
        (FLAT, 10.0, (1, 64), (2, False)),
        # Rule goodput.single: a measured one-replica point (8 x 11 = 88 < 92.4)
        # is off the curve once 2 is measured: still 2, not 1.
        ({1: 8.0, **FLAT}, 10.0, (1, 64), (2, False)),
        # ... but it is the curve while it is the only point: 1, and the probe
        # at 4 (perfect scaling promised: 2 x 41 = 82 < 88) is due.
        ({1: 8.0}, 10.0, (1, 64), (4, True)),
        # Bounds: only measured counts within [2, 4]: w = 0 gives 4.
        (FLAT, 0.0, (2, 4), (4, False)),
        # Still scaling: the probe at 16 (0.25 x 17 = 4.25 < 1 x 5 = 5 at w = 1).
        (LINEAR, 1.0, (1, 16), (16, True)),
        # ... clamped to max_replicas 8: t(8) = 1 / (1 + 1 x 1) = 0.5, 0.5 x 9 = 4.5 < 5.
        (LINEAR, 1.0, (1, 8), (8, True)),
        # ... but never past max_replicas: 4, no probe.
        (LINEAR, 0.0, (1, 4), (4, False)),
        # Measured counts below min 3: only the probe (clamped to max 3) is a candidate.
        ({2: 2.0}, 0.0, (3, 3), (3, True)),
        # Nothing within bounds and not scaling (efficiency 0.5 at 4): no size from this rule.
        ({2: 1.0, 4: 1.0}, 0.0, (8, 16), None),
        # Rule goodput.between. w = 0.05: 1 x 1.2 = 1.2, 0.6 x 1.4 = 0.84,
        # 0.4667 x 1.6 = 0.7467, 0.4 x 1.8 = 0.72: the largest, 16.
        (SPARSE, 0.05, (1, 64), (16, False)),
        # w = 0.1: 1.4, 0.6 x 1.8 = 1.08, 0.4667 x 2.2 = 1.0267, 0.4 x 2.6 = 1.04: 12,
        # a count never measured.
        (SPARSE, 0.1, (1, 64), (12, False)),
        # w = 0.2: 1.8, 0.6 x 2.6 = 1.56, 0.4667 x 3.4 = 1.5867, 0.4 x 4.2 = 1.68: 8.
        (SPARSE, 0.2, (1, 64), (8, False)),
        # w = 1: 1 x 5 = 5 < 0.6 x 9 = 5.4: the smallest, 4.
        (SPARSE, 1.0, (1, 64), (4, False)),
    ],
)
def test_queue_size(
    points: dict[int, float],
    weight: float,
    bounds: tuple[int, int],
    expected: tuple[int, bool] | None,
) -> None:
    low, high = bounds
    got = _curve(points).queue_size(weight, min_replicas=low, max_replicas=high, gpus_per_node=4)
    assert got == expected


def test_between_counts_are_node_friendly() -> None:
    # Eight GPUs per node: 12 is not node-friendly (it would leave half a node),
    # so at w = 0.1 the candidates are 4, 8 and 16, and 16 (1.04) beats 8 (1.08).
    curve = _curve(SPARSE)
    assert curve.queue_size(0.1, min_replicas=1, max_replicas=64, gpus_per_node=8) == (16, False)


@pytest.mark.parametrize(("factor", "reach"), [(4.0, 16), (2.0, 8), (3.0, 12), (1.1, 5)])
def test_probe_reach(factor: float, reach: int) -> None:
    # Rule goodput.reach: floor(probe_factor x largest), at least one more than it.
    curve = Curve.from_points(
        [[CurvePoint(replicas=4, seconds_per_unit=1.0)]], threshold=0.9, probe_factor=factor
    )
    assert curve.probe_reach == reach


def test_probe_factor_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="probe_factor"):
        Curve.from_points(
            [[CurvePoint(replicas=4, seconds_per_unit=1.0)]], threshold=0.9, probe_factor=1.0
        )


def test_ties_go_to_the_smaller_size() -> None:
    # w = 0.5: t(2) x 2 = 4 x 2 = 8, t(4) x 3 = (8/3) x 3 = 8: a tie, 2 wins.
    curve = _curve({2: 4.0, 4: 8 / 3}, threshold=0.9)
    assert curve.queue_size(0.5, min_replicas=1, max_replicas=4, gpus_per_node=4) == (2, False)


def _state(points: dict[int, float]) -> GoodputState:
    book = GoodputJob(application="app", total_epochs=10, epochs_done=5)
    app = GoodputApp(
        points=[CurvePoint(replicas=n, seconds_per_unit=t) for n, t in points.items()],
        total_units=1000.0,
        total_measured=True,
    )
    return GoodputState(jobs={"default/a": book}, apps={"app": app}, last_now=0.0)


@pytest.mark.parametrize(
    ("others", "target", "weight"),
    [
        # 16 GPUs, alone (w = 0): 8 (the fastest), although efficiency(8) = 0.625 < 0.9.
        (0, 8, 0.0),
        # 8 blind jobs besides it (each takes 1 free GPU): w = 8/16 = 0.5: 4 (table above).
        (8, 4, 0.5),
    ],
)
def test_a_start_is_sized_by_the_queue(others: int, target: int, weight: float) -> None:
    blind = tuple(job(f"b{i}", application=None) for i in range(others))
    request = PolicyInput(
        jobs=(job("a", max_replicas=16), *blind),
        cluster=cluster([4, 4, 4, 4]),
        now=60.0,
    )
    params = GoodputParams(max_load_desired=1.0)
    plan = decide("goodput", request, state=_state(FLAT), params=params).plan
    decision = decision_of(plan, "default/a")
    assert (decision.target, decision.reason.rule) == (target, "goodput.start")
    assert decision.reason.numbers["gpu_weight"] == weight
    assert "goodput.queue" in decision.reason.message


@pytest.mark.parametrize(
    ("points", "nodes", "others", "target", "rule_text"),
    [
        # Alone on 16 GPUs, a curve still scaling at 4: the probe at 4 x 4 = 16.
        (LINEAR, 4, 0, 16, "goodput.reach: probes 16 (4 x the largest measured count 4)"),
        # 40 GPUs, 8 blind jobs besides it: w = 8/40 = 0.2, and 8 (never measured)
        # is the size (SPARSE table above).
        (SPARSE, 10, 8, 8, "goodput.between: 8 interpolated between measured counts 4, 16"),
    ],
)
def test_a_start_names_reach_and_between(
    points: dict[int, float], nodes: int, others: int, target: int, rule_text: str
) -> None:
    blind = tuple(job(f"b{i}", application=None) for i in range(others))
    request = PolicyInput(
        jobs=(job("a", max_replicas=64), *blind),
        cluster=cluster([4] * nodes),
        now=60.0,
    )
    params = GoodputParams(max_load_desired=1.0)
    plan = decide("goodput", request, state=_state(points), params=params).plan
    decision = decision_of(plan, "default/a")
    assert (decision.target, decision.reason.rule) == (target, "goodput.start")
    assert rule_text in decision.reason.message
