"""Generated workload variants (``trainscaler_sim.trace.variants``), on the hand-made traces.

``toy`` at batch 64 on one replica: 200 iterations x 1 s = 200 s alone;
``short``: 100 x 0.25 s = 25 s. With a 100 s threshold, toy jobs are long.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.sim_fixtures import write_data
from trainscaler_sim.trace.traces import ApplicationTrace, load_traces
from trainscaler_sim.trace.variants import standalone_s, variant_family
from trainscaler_sim.trace.workload import WorkloadJob


def _base() -> dict[str, tuple[WorkloadJob, ...]]:
    apps = ["toy", "toy"] + ["short"] * 6
    jobs = tuple(
        WorkloadJob(
            name=f"j{i}", arrival_s=100.0 * i, application=a, requested_replicas=1, batch_size=64
        )
        for i, a in enumerate(apps)
    )
    return {"1": jobs}


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, ApplicationTrace]:
    return load_traces(write_data(tmp_path), {"toy", "short"})


def test_standalone_seconds(traces: dict[str, ApplicationTrace]) -> None:
    toy, short = _base()["1"][0], _base()["1"][2]
    assert standalone_s(toy, traces["toy"]) == pytest.approx(200.0)
    assert standalone_s(short, traces["short"]) == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("family", "arrivals"),
    [
        ("arrivals-0.75x", [75.0 * i for i in range(8)]),
        ("arrivals-1.5x", [150.0 * i for i in range(8)]),
        ("resampled", [100.0 * i for i in range(8)]),
        ("long-2x", [100.0 * i for i in range(8)]),
        ("arrivals-0.6x", [60.0 * i for i in range(8)]),
        ("arrivals-2x", [200.0 * i for i in range(8)]),
        ("resampled-b", [100.0 * i for i in range(8)]),
        ("long-2x-b", [100.0 * i for i in range(8)]),
        ("resampled-arrivals-1.5x", [150.0 * i for i in range(8)]),
    ],
)
def test_variants_keep_the_job_count_and_scale_only_what_they_say(
    traces: dict[str, ApplicationTrace], family: str, arrivals: list[float]
) -> None:
    out = variant_family(family, _base(), traces=traces, long_job_s=100.0)
    assert list(out) == [f"{family}/w1"]
    jobs = out[f"{family}/w1"]
    assert [j.arrival_s for j in jobs] == arrivals
    assert len({j.name for j in jobs}) == len(jobs)
    if family.startswith("long-2x"):
        # 2 long jobs of 8 in the base: twice that share is 4 of 8.
        assert sum(j.application == "toy" for j in jobs) == 4
    # Deterministic: the same variant every time.
    assert variant_family(family, _base(), traces=traces, long_job_s=100.0) == out


def test_unknown_family_is_an_error(traces: dict[str, ApplicationTrace]) -> None:
    with pytest.raises(ValueError, match="unknown variant family"):
        variant_family("nope", _base(), traces=traces)


def test_held_out_families_draw_other_jobs(traces: dict[str, ApplicationTrace]) -> None:
    # Same base, other seeds: the held-out resample is not the bench's resample.
    base = {str(k): _base()["1"] * 3 for k in range(1, 5)}
    mixes = {
        family: [
            (j.application, j.requested_replicas)
            for jobs in variant_family(family, base, traces=traces).values()
            for j in jobs
        ]
        for family in ("resampled", "resampled-b")
    }
    assert mixes["resampled"] != mixes["resampled-b"]
