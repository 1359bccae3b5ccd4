"""Rule goodput.probe (what a probe beyond the largest measured count promises),
as a table of hand-computed cases.

Speedup over the top count m at n (m < n <= probe_factor x m, rule
goodput.reach) is 1 + (n / m - 1) x e, with e the efficiency measured at m:
perfect scaling only while nothing was lost.
"""

from __future__ import annotations

import pytest

from scheduler_core.curves import Curve, CurvePoint


def _curve(points: dict[int, float], threshold: float, probe_factor: float = 4.0) -> Curve:
    return Curve.from_points(
        [[CurvePoint(replicas=n, seconds_per_unit=t) for n, t in points.items()]],
        threshold=threshold,
        probe_factor=probe_factor,
    )


@pytest.mark.parametrize(
    ("points", "threshold", "replicas", "expected"),
    [
        # Efficiency 1 at 4 (t2 = 2, t4 = 1): perfect scaling, t(8) = 1 / 2 = 0.5.
        ({2: 2.0, 4: 1.0}, 0.9, 8, 0.5),
        # ... and t(6) = 1 / (1 + 0.5 x 1) = 0.6667.
        ({2: 2.0, 4: 1.0}, 0.9, 6, 1 / 1.5),
        # Efficiency 0.8 at 4 (one replica bounded by 2 x t2 = 4, t4 = 1.25):
        # t(8) = 1.25 / (1 + 1 x 0.8) = 0.6944 (perfect scaling promised 0.625).
        ({2: 2.0, 4: 1.25}, 0.7, 8, 1.25 / 1.8),
        # Efficiency 0.7 at 8 (one replica 2 x 2.8 = 5.6, t8 = 1): t(16) = 1 / 1.7 =
        # 0.5882, t(32) = 1 / (1 + 3 x 0.7) = 0.3226, and past the reach (4 x 8 =
        # 32, rule goodput.reach) nothing more: t(64) = t(32).
        ({2: 2.8, 8: 1.0}, 0.675, 16, 1 / 1.7),
        ({2: 2.8, 8: 1.0}, 0.675, 32, 1 / 3.1),
        ({2: 2.8, 8: 1.0}, 0.675, 64, 1 / 3.1),
        # The same curve below the threshold (0.7 < 0.9) is not still scaling: no
        # probe is predicted, the top's time holds beyond it.
        ({2: 2.8, 8: 1.0}, 0.9, 16, 1.0),
    ],
)
def test_probe_prediction(
    points: dict[int, float], threshold: float, replicas: int, expected: float
) -> None:
    assert _curve(points, threshold).unit_time(replicas) == pytest.approx(expected)


def test_the_reach_follows_probe_factor() -> None:
    # At probe_factor 2 the same curve stops at 2 x 8 = 16: t(32) = t(16) = 1 / 1.7.
    curve = _curve({2: 2.8, 8: 1.0}, 0.675, probe_factor=2.0)
    assert curve.unit_time(32) == pytest.approx(1 / 1.7)
    assert curve.unit_time(16) == pytest.approx(1 / 1.7)


def test_a_probe_never_promises_more_than_perfect_scaling() -> None:
    curve = _curve({2: 2.0, 4: 1.25}, 0.7)
    for n in range(5, 9):
        assert curve.unit_time(n) >= 1.25 * 4 / n  # perfect scaling from the top
        assert curve.unit_time(n) < curve.unit_time(n - 1)  # still a gain
