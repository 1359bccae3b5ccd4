"""The topology benchmark's verdict: exit 1 on each missed target (no timing measured here)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.topology import WorkerFigures, report

SMALL, LARGE = 100, 5000


def planner_figures(*, round_s: float = 0.2, requests: int = 0) -> dict[str, Any]:
    policy = {
        "steady_round_s": round_s,
        "steady_read_s": round_s / 2,
        "first_round_s": round_s,
        "requests_per_steady_round": requests,
    }
    return {
        "requests_at_start": {"GET": 9},
        "watches_at_server": 7,
        "rss_mb_after_sync": 100.0,
        "goodput": dict(policy),
        "edl": dict(policy),
    }


def workers(
    *, large_rss: float = 85.0, large_watches: tuple[int, ...] = (0, 0, 0)
) -> list[WorkerFigures]:
    found = []
    for concurrency, watches in zip((1, 2, 4), large_watches, strict=True):
        found.append(WorkerFigures(SMALL, concurrency, 0, (77.0, *[85.0] * concurrency)))
        found.append(WorkerFigures(LARGE, concurrency, watches, (77.0, *[large_rss] * concurrency)))
    return found


def verdict(planner: dict[tuple[int, int], dict[str, Any]], found: list[WorkerFigures]) -> int:
    return report(planner, found, big=(LARGE, 10_000), sizes=(SMALL, LARGE))


def test_all_targets_met_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    planner = {(SMALL, 100): planner_figures(), (LARGE, 10_000): planner_figures(round_s=0.9)}
    assert verdict(planner, workers()) == 0
    assert "targets met" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("planner", "found", "miss"),
    [
        ({(LARGE, 10_000): planner_figures(round_s=1.2)}, workers(), "round 1.20s > 1.0s"),
        ({(LARGE, 10_000): planner_figures(requests=1)}, workers(), "requests per steady round"),
        (
            {(LARGE, 10_000): planner_figures()},
            workers(large_rss=94.0),
            "scale-worker RSS 85 -> 94",
        ),
        ({(LARGE, 10_000): planner_figures()}, workers(large_watches=(7, 14, 28)), "watches vary"),
    ],
)
def test_each_missed_target_exits_1(
    planner: dict[tuple[int, int], dict[str, Any]],
    found: list[WorkerFigures],
    miss: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert verdict(planner, found) == 1
    out = capsys.readouterr().out
    assert "targets NOT met" in out
    assert miss in out
