"""Expected outcomes, worked out by running the pure policy in-process."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_core.models import EpochReport
from scheduler_core.policies.base import PolicyInput, PolicyState
from scheduler_core.registry import decide


def replay_throughput(reports: Sequence[EpochReport]) -> int:
    """The target the throughput policy ends at when fed one job's reports in order."""
    state: PolicyState | None = None
    target = None
    for report in reports:
        result = decide("throughput", PolicyInput(reports=(report,)), state=state)
        state = result.state
        decision = result.plan.for_job(report.job)
        assert decision is not None
        target = decision.target
    assert target is not None
    return target
