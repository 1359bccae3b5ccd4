"""The planner benchmark's own checks run (identical plans, no timing asserted)."""

from __future__ import annotations

import pytest

from bench.edl_reference import literal_plan
from bench.planner import fast_plan, main, make_instance


def test_quick_benchmark_finds_identical_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    assert "identical plans on 20 random instances: True" in capsys.readouterr().out


@pytest.mark.parametrize("busy", [False, True])
def test_benchmark_instances_plan_identically_at_size(busy: bool) -> None:
    jobs, cluster = make_instance(200, 120, seed=7, busy=busy)
    fast = fast_plan(jobs, cluster, max_load_desired=0.97)
    assert fast == literal_plan(jobs, cluster, max_load_desired=0.97)
    assert any(target != job.current_replicas for job in jobs for target, _ in [fast[job.key]])
